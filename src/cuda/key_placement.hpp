// Where a bulk key goes, for every CUDA kernel and for the exact insert_if_absent on the host
// and the device: its hash (unless the front end hashed it already) and its block under the
// layout's block index.
#pragma once

#include <cstdint>

#include "bulkbloom/detail/block_math.hpp"
#include "bulkbloom/filter_ref.hpp"
#include "bulkbloom/layout.hpp"
#include "registry/engine.hpp"

namespace bulkbloom::detail::gpu {

BULKBLOOM_HOST_DEVICE inline std::uint64_t hash_key(const Layout& layout, std::uint64_t key,
                                                    KeyMode mode) {
  return mode == KeyMode::prehashed ? key : FilterRef(nullptr, layout).hash(key);
}

BULKBLOOM_HOST_DEVICE inline std::uint32_t block_index(const Layout& layout, std::uint64_t hash) {
  return layout.block_of(hash);
}

}  // namespace bulkbloom::detail::gpu
