// Hashing of byte-string keys (XXH64 with the layout's seed).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

#include "bulkbloom/layout.hpp"

namespace bulkbloom::detail {

/// XXH64 of `bytes` with `seed`, as libxxhash computes it.
std::uint64_t xxh64_bytes(std::string_view bytes, std::uint64_t seed);

/// Writes the layout's hash (XXH64 with its seed, or the key itself for an identity layout) of
/// each of `keys[0..n)` to `out`, with the best SIMD kernels this CPU runs.
void hash_u64_keys(const Layout& layout, const std::uint64_t* keys, std::size_t n,
                   std::uint64_t* out);

/// Throws std::invalid_argument if `layout` cannot take byte-string keys (its hash is identity).
void check_byte_keys_allowed(const Layout& layout);

}  // namespace bulkbloom::detail
