// Hashing of byte-string keys (XXH64 with the layout's seed).
#pragma once

#include <cstdint>
#include <string_view>

namespace bulkbloom::detail {

/// XXH64 of `bytes` with `seed`, as libxxhash computes it.
std::uint64_t xxh64_bytes(std::string_view bytes, std::uint64_t seed);

}  // namespace bulkbloom::detail
