// Host-side steps that run outside any engine, in the implementation chosen for the filters they
// serve: a window hashes its keys once for all its generations, and after each generation's
// lookup keeps only the keys still not found.
#pragma once

#include <cstddef>
#include <cstdint>

#include "bulkbloom/layout.hpp"
#include "core/key_mode.hpp"

namespace bulkbloom::detail {

struct HostKernels {
  /// Target name as shown after "cpu/": "scalar", "AVX2", "AVX3_DL", ...
  const char* target;
  /// Writes each key's 64-bit hash (the layout's H, or the key itself when prehashed) to `out`.
  void (*hash)(const Layout& layout, const std::uint64_t* keys, std::size_t n, KeyMode mode,
               std::uint64_t* out);
  /// Moves the entries j < count of `index` and `hashes` whose `found[j]` is 0 to the front of
  /// both arrays, in order, and returns how many there are: a window's keys that one generation
  /// did not hold, still to be looked up in the next.
  std::size_t (*keep_not_found)(const std::uint8_t* found, std::uint32_t* index,
                                std::uint64_t* hashes, std::size_t count);
};

}  // namespace bulkbloom::detail
