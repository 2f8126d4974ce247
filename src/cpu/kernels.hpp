// Single-threaded bulk kernels of one CPU target over a contiguous run of keys. The CPU engine
// splits work between threads and calls these; the scalar set is the oracle for all others.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "bulkbloom/layout.hpp"
#include "engine.hpp"

namespace bulkbloom::detail {

/// The blocks [begin, end) a writing kernel call owns. Keys of other blocks are skipped and their
/// flags left untouched, so that threads can share one batch by block range.
struct BlockRange {
  std::uint32_t begin;
  std::uint32_t end;
};

/// Every block of `layout`.
inline BlockRange all_blocks(const Layout& layout) {
  return {0, static_cast<std::uint32_t>(layout.num_blocks)};
}

struct CpuKernels {
  /// Target name as shown after "cpu/": "scalar", "AVX2", "AVX3_ZEN4", ...
  const char* target;
  /// Writes each key's 64-bit hash (the layout's H, or the key itself when prehashed) to `out`.
  void (*hash)(const Layout& layout, const std::uint64_t* keys, std::size_t n, KeyMode mode,
               std::uint64_t* out);
  void (*insert)(const Layout& layout, std::byte* bits, const std::uint64_t* keys, std::size_t n,
                 KeyMode mode, BlockRange range);
  void (*contains)(const Layout& layout, const std::byte* bits, const std::uint64_t* keys,
                   std::size_t n, KeyMode mode, std::uint8_t* out);
  std::uint64_t (*insert_if_absent)(const Layout& layout, std::byte* bits,
                                    const std::uint64_t* keys, std::size_t n, KeyMode mode,
                                    BlockRange range, std::uint8_t* is_new);
  /// Moves the entries j < count of `index` and `hashes` whose `found[j]` is 0 to the front of
  /// both arrays, in order, and returns how many there are: a window's keys that one generation
  /// did not hold, still to be looked up in the next.
  std::size_t (*keep_not_found)(const std::uint8_t* found, std::uint32_t* index,
                                std::uint64_t* hashes, std::size_t count);
};

/// The scalar reference: one key at a time, exactly as DESIGN §1 reads.
const CpuKernels& scalar_kernels();

/// The Highway kernel sets compiled into this build that this CPU runs, best first.
std::vector<const CpuKernels*> highway_kernel_sets();

/// The first of highway_kernel_sets(): for host-side steps outside any engine (hashing a
/// window's keys, compacting its lookups), which need no forced implementation.
const CpuKernels& best_highway_kernels();

}  // namespace bulkbloom::detail
