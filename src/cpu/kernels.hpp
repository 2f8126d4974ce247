// Single-threaded bulk kernels of one CPU target over a contiguous run of keys. The CPU engine
// splits work between threads and calls these; the scalar set is the oracle for all others.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "bulkbloom/layout.hpp"
#include "core/host_kernels.hpp"
#include "core/key_mode.hpp"

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

/// Which task owns a block when keys are routed to the tasks that own their blocks
/// (Mode::routed_key_slices): task `(block * scale) >> 32` of `tasks`, scale = floor(tasks · 2^32
/// / num_blocks), which is below `tasks` for every block and gives each task a contiguous run of
/// about num_blocks / tasks blocks. Any function of the block would keep the answers exact
/// (DESIGN §3); this one is a multiply in SIMD lanes.
struct BlockOwners {
  std::uint64_t scale;
  unsigned tasks;
  /// For t in [1, tasks) up to kHashBounds: the least hash whose block task t or a later task
  /// owns, if there is one (has_first_hash[t]; a filter of fewer blocks than tasks leaves tasks
  /// without blocks). Both block indexes take the block from the top of hash · num_blocks, and
  /// owner() never decreases with the block, so a key's owner is the number of these bounds at
  /// or below its hash: a SIMD compare a bound instead of two products (CpuKernels::route).
  static constexpr unsigned kHashBounds = 3;
  std::array<std::uint64_t, kHashBounds + 1> first_hash{};
  std::array<bool, kHashBounds + 1> has_first_hash{};

  static BlockOwners of(const Layout& layout, unsigned tasks) {
    BlockOwners owners{(std::uint64_t{tasks} << 32) / layout.num_blocks, tasks};
    for (unsigned t = 1; t < tasks && t <= kHashBounds; ++t) {
      const auto reaches = [&](std::uint64_t hash) {
        return owners.owner(layout.block_of(hash)) >= t;
      };
      owners.has_first_hash[t] = reaches(~std::uint64_t{0});
      if (!owners.has_first_hash[t]) continue;
      std::uint64_t below = 0, at = ~std::uint64_t{0};  // reaches(at), !reaches(below): hash 0
      while (at - below > 1) {                          // is block 0, task 0's
        const std::uint64_t mid = below + (at - below) / 2;
        (reaches(mid) ? at : below) = mid;
      }
      owners.first_hash[t] = at;
    }
    return owners;
  }
  unsigned owner(std::uint32_t block) const { return static_cast<unsigned>((block * scale) >> 32); }
};

/// Where CpuKernels::route appends: list t (the keys of task t's blocks) is
/// hashes[t * capacity, ...), with counts[t] entries so far. A list takes a whole SIMD vector past
/// its last entry (writes of lanes beyond it), so capacity is at least the keys routed plus
/// kRouteSlack. If `owner_of` is not null, key i's task is also written to owner_of[i]: the map
/// by which insert_if_absent's flags go back to their keys (CpuKernels::merge_flags), a byte a
/// key where a position in each list took four.
struct RouteLists {
  std::uint64_t* hashes;
  std::uint8_t* owner_of;
  std::size_t capacity;
  std::size_t* counts;
  static constexpr std::size_t kRouteSlack = 16;
  /// The most tasks a key's owner byte tells apart.
  static constexpr unsigned kMaxTasks = 256;
};

struct CpuKernels {
  /// Target name as shown after "cpu/": "scalar", "AVX2", "AVX3_DL", ...
  const char* target;
  /// Writes each key's 64-bit hash (the layout's H, or the key itself when prehashed) to `out`.
  void (*hash)(const Layout& layout, const std::uint64_t* keys, std::size_t n, KeyMode mode,
               std::uint64_t* out);
  void (*insert)(const Layout& layout, std::byte* bits, const std::uint64_t* keys, std::size_t n,
                 KeyMode mode, BlockRange range);
  /// Sets the keys' bits with relaxed atomic ORs on the block's 64-bit words (32-bit words OR'd
  /// in pairs: the same bytes), skipping a word whose bits are all set already, so that several
  /// threads may insert slices of one batch into any blocks at once. OR is idempotent and
  /// commutative: the bytes are `insert`'s, whatever the slicing and interleaving.
  void (*insert_atomic)(const Layout& layout, std::byte* bits, const std::uint64_t* keys,
                        std::size_t n, KeyMode mode);
  void (*contains)(const Layout& layout, const std::byte* bits, const std::uint64_t* keys,
                   std::size_t n, KeyMode mode, std::uint8_t* out);
  std::uint64_t (*insert_if_absent)(const Layout& layout, std::byte* bits,
                                    const std::uint64_t* keys, std::size_t n, KeyMode mode,
                                    BlockRange range, std::uint8_t* is_new);
  /// Hashes keys[0, n) (as `hash`) and appends each key's hash to the list of the task owning
  /// its block, in input order, writing that task to lists.owner_of[i] when it is set (then at
  /// most RouteLists::kMaxTasks tasks).
  void (*route)(const Layout& layout, const std::uint64_t* keys, std::size_t n, KeyMode mode,
                BlockOwners owners, RouteLists lists);
  /// Puts a routed slice's insert_if_absent flags back in input order: for each i in [0, n), in
  /// order, is_new[i] is the next unread flag of task owner_of[i]'s list, flags + owner_of[i] *
  /// list_stride, which holds that task's flags for this slice's keys in slice order (owner bytes
  /// below `tasks`, at most RouteLists::kMaxTasks). A list may be read up to kMergeReadSlack
  /// bytes past its last flag; those bytes are not used.
  void (*merge_flags)(const std::uint8_t* owner_of, std::size_t n, const std::uint8_t* flags,
                      std::size_t list_stride, unsigned tasks, std::uint8_t* is_new);
  /// Set bits of words[0, n).
  std::uint64_t (*popcount)(const std::uint64_t* words, std::size_t n);
  /// Σ over the blocks [begin, end), in block order, of the product over each block's words, in
  /// word order, of the word's share of set bits (cpu/fill_stats.hpp): every target gives the
  /// same double.
  double (*fpr_sum)(const Layout& layout, const std::byte* bits, std::uint64_t begin,
                    std::uint64_t end);
  static constexpr std::size_t kMergeReadSlack = 8;
};

/// What one CPU target compiles: its engine's kernels and the host-side steps that go with them.
struct CpuTarget {
  const CpuKernels* kernels;
  const HostKernels* host;
};

/// The scalar reference: one key at a time, exactly as DESIGN §1 reads.
const CpuTarget& scalar_target();

/// The Highway targets compiled into this build that this CPU runs, best first.
std::vector<CpuTarget> highway_targets();

}  // namespace bulkbloom::detail
