// Hashing of byte-string keys (XXH64 with the layout's seed).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

#include "bulkbloom/layout.hpp"

namespace bulkbloom::detail {

/// XXH64 of `bytes` with `seed`, as libxxhash computes it.
std::uint64_t xxh64_bytes(std::string_view bytes, std::uint64_t seed);

/// Throws std::invalid_argument if `layout` cannot take byte-string keys (its hash is identity).
void check_byte_keys_allowed(const Layout& layout);

}  // namespace bulkbloom::detail
