// Exact insert_if_absent for many threads (DESIGN §3): the flags of the sequential loop
// `for k in keys: new = !contains(k); insert(k)`, whatever the order threads run in.
//
// Keys of different blocks never interact. Within one block's keys, taken in input order, a key
// is new exactly when one of its bits is missing from the OR of the block's bits before the batch
// and the patterns of the block's keys before it. That OR is a segmented exclusive OR-scan of the
// patterns, one segment per block, which is associative and so runs in parallel:
//   1. read only, one thread per key: a key whose bits were all set before the batch is a repeat
//      wherever it stands (bits are only ever added): its flag is 0 and it leaves the batch. Every
//      flag starts at 0 here, written in input order;
//   2. the other keys are compacted, then stably sorted by block, carrying positions (on the GPU
//      a radix sort of only the bits a block index of the layout can have): each block's keys
//      become a run, in input order. Their hashes are gathered once, in sorted order, into the
//      scratch the sort no longer needs;
//   3. the sorted keys are cut into tiles of `tile` keys, and the scan is done in two levels, so
//      that no pattern is stored per key:
//      a. one thread per tile ORs the patterns of its last block's keys (the tile's tail);
//      b. an inclusive OR-scan by block over the tails gives each tile the OR of its last block's
//         keys from the start of their run to the tile's end: the carry into the next tile, when
//         that tile starts in the same run;
//      c. read only, one thread per key: its prefix is the patterns of its run before it in its
//         tile (at most a tile's worth, walked back) and, when the run reaches back to the tile's
//         start, the carry; the flags of the new keys only are set to 1;
//      d. after every key has read: the last key of each run's part in a tile ORs that part's
//         bits into the block.
//      A run over many tiles (a hot key, an all-equal batch) is split like any other: each of
//      its tiles takes the run's earlier keys from step b, not by walking them.
//
// Written with Thrust and `__host__ __device__` functors so that the same source runs on the GPU
// (the CUDA backend passes a CUDA execution policy) and on the host (the tests pass Thrust's
// sequential CPP policy and check it against the scalar oracle).
#pragma once

#include <thrust/for_each.h>
#include <thrust/functional.h>
#include <thrust/iterator/counting_iterator.h>
#include <thrust/iterator/zip_iterator.h>
#include <thrust/remove.h>
#include <thrust/scan.h>
#include <thrust/sort.h>
#include <thrust/tuple.h>

#if defined(__CUDACC__)
#include <cooperative_groups.h>
#endif

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "bulkbloom/detail/block_math.hpp"
#include "bulkbloom/filter_ref.hpp"
#include "bulkbloom/layout.hpp"
#include "cuda/key_placement.hpp"
#include "registry/engine.hpp"

namespace bulkbloom::detail::exact {

/// Block of a key whose answer step 1 settled: above every block index (num_blocks < 2^32).
inline constexpr std::uint32_t kSettled = 0xffffffffu;

/// Keys of a tile on the GPU: a tile scan 1/16 the size of the batch, and at most 15 patterns
/// walked back per key, which is what a hot key's copies pay (bench/DECISIONS.md, GPU).
inline constexpr std::uint32_t kDeviceTileKeys = 16;

/// Scratch in memory the policy's threads can reach: two regions of `n` block indices then `n`
/// positions each, and per tile of `tile` (at least 1) keys its last block, tail and carry. Step 2
/// sorts in `blocks`/`positions`, which may use the spare region and swap it in; the region left
/// spare then holds the `n` hashes, so that sorting and hashing share 16 bytes a key.
struct Scratch {
  std::uint32_t* blocks;
  std::uint32_t* positions;  // blocks + n
  std::uint32_t* spare_blocks;
  std::uint32_t* spare_positions;  // spare_blocks + n
  std::uint64_t* hashes;           // spare_blocks, once the sort is done
  std::uint32_t* tile_blocks;
  std::byte* tile_tails;
  std::byte* tile_carries;
  std::uint32_t tile;
};

/// Tiles of `tile` keys that `n` keys make.
BULKBLOOM_HOST_DEVICE inline std::uint32_t tiles_of(std::uint32_t n, std::uint32_t tile) {
  return n / tile + (n % tile != 0 ? 1 : 0);
}

/// Bytes of one Scratch for `n` keys in tiles of `tile` keys with blocks of `block_bytes`.
inline std::size_t scratch_bytes(std::uint32_t n, std::uint32_t tile, int block_bytes) {
  return std::size_t{n} * 4 * sizeof(std::uint32_t) +
         std::size_t{tiles_of(n, tile)} *
             (2 * static_cast<std::size_t>(block_bytes) + sizeof(std::uint32_t));
}

/// Lays a Scratch out in `bytes` (scratch_bytes(n, tile, block_bytes) of them, 8-byte aligned):
/// the two regions first (each 8n bytes, so that either can hold the hashes), then the patterns
/// (sizes multiples of 8), then the tiles' blocks.
inline Scratch carve_scratch(void* bytes, std::uint32_t n, std::uint32_t tile, int block_bytes) {
  const std::size_t pattern_bytes =
      std::size_t{tiles_of(n, tile)} * static_cast<std::size_t>(block_bytes);
  auto* blocks = static_cast<std::uint32_t*>(bytes);
  std::uint32_t* spare_blocks = blocks + 2 * std::size_t{n};
  auto* tails = reinterpret_cast<std::byte*>(spare_blocks + 2 * std::size_t{n});
  std::byte* carries = tails + pattern_bytes;
  auto* tile_blocks = reinterpret_cast<std::uint32_t*>(carries + pattern_bytes);
  return {blocks, blocks + n, spare_blocks, spare_blocks + n, nullptr, tile_blocks,
          tails,  carries,    tile};
}

/// Step 2's sort where Thrust's own serves (the host; tests): a stable sort by block, in place.
template <typename Policy>
struct ThrustSortByBlock {
  Policy policy;
  void operator()(Scratch& scratch, std::uint32_t m) const {
    thrust::stable_sort_by_key(policy, scratch.blocks, scratch.blocks + m, scratch.positions);
  }
};

template <typename G>
BULKBLOOM_HOST_DEVICE typename G::Word* block_words(std::byte* bits, std::uint32_t block) {
  return reinterpret_cast<typename G::Word*>(bits) + std::size_t{block} * G::kWords;
}

template <typename G>
BULKBLOOM_HOST_DEVICE bool covers(const typename G::Word* words,
                                  const typename G::Pattern& pattern) {
  bool all = true;
  for (int w = 0; w < G::kWords; ++w) all &= (words[w] & pattern.word[w]) == pattern.word[w];
  return all;
}

/// Atomic OR, so that bits set by concurrent work on other streams or threads are never lost.
template <typename Word>
BULKBLOOM_HOST_DEVICE void or_word(Word* word, Word bits) {
#if defined(__CUDA_ARCH__)
  using Atomic = std::conditional_t<sizeof(Word) == 8, unsigned long long, unsigned int>;
  atomicOr(reinterpret_cast<Atomic*>(word), static_cast<Atomic>(bits));
#else
  __atomic_fetch_or(word, bits, __ATOMIC_RELAXED);
#endif
}

/// Adds 1 to `*count` for each calling thread with `fresh` set. On the device the threads of a
/// warp that call together add their sum with one atomic, so that a batch of new keys does not
/// queue millions of atomics on one address.
BULKBLOOM_HOST_DEVICE inline void count_fresh(std::uint64_t* count, bool fresh) {
#if defined(__CUDA_ARCH__)
  const auto together = cooperative_groups::coalesced_threads();
  const unsigned fresh_threads = __popc(together.ballot(fresh));
  if (together.thread_rank() == 0 && fresh_threads != 0) {
    atomicAdd(reinterpret_cast<unsigned long long*>(count),
              static_cast<unsigned long long>(fresh_threads));
  }
#else
  if (fresh) __atomic_fetch_add(count, std::uint64_t{1}, __ATOMIC_RELAXED);
#endif
}

/// Step 1 for key `i`.
template <typename G>
struct SettleRepeats {
  Layout layout;
  const std::byte* bits;
  const std::uint64_t* keys;
  KeyMode mode;
  std::uint8_t* is_new;
  Scratch scratch;

  BULKBLOOM_HOST_DEVICE void operator()(std::uint32_t i) const {
    const std::uint64_t hash = gpu::hash_key(layout, keys[i], mode);
    const std::uint32_t block = gpu::block_index(layout, hash);
    const bool repeat =
        covers<G>(block_words<G>(const_cast<std::byte*>(bits), block), G::pattern(hash));
    is_new[i] = 0;
    scratch.blocks[i] = repeat ? kSettled : block;
    scratch.positions[i] = i;
  }
};

/// Step 2's compaction: an entry (block, position) that step 1 settled.
struct IsSettled {
  BULKBLOOM_HOST_DEVICE bool operator()(
      const thrust::tuple<std::uint32_t, std::uint32_t>& entry) const {
    return thrust::get<0>(entry) == kSettled;
  }
};

/// Step 2's gather, for sorted entry `j`: the key's hash, in sorted order.
struct GatherHash {
  Layout layout;
  const std::uint64_t* keys;
  KeyMode mode;
  Scratch scratch;

  BULKBLOOM_HOST_DEVICE void operator()(std::uint32_t j) const {
    scratch.hashes[j] = gpu::hash_key(layout, keys[scratch.positions[j]], mode);
  }
};

/// Bitwise OR of two patterns: the tile scan's operator.
template <typename G>
struct OrPatterns {
  BULKBLOOM_HOST_DEVICE typename G::Pattern operator()(const typename G::Pattern& a,
                                                       const typename G::Pattern& b) const {
    typename G::Pattern out;
    for (int w = 0; w < G::kWords; ++w) out.word[w] = a.word[w] | b.word[w];
    return out;
  }
};

template <typename G>
BULKBLOOM_HOST_DEVICE void or_into(typename G::Pattern& into, const typename G::Pattern& bits) {
  for (int w = 0; w < G::kWords; ++w) into.word[w] |= bits.word[w];
}

/// ORs into `into` the patterns of the sorted entries of `block` just before entry `j`, walking
/// back no further than entry `first`; returns the first entry it reached.
template <typename G>
BULKBLOOM_HOST_DEVICE std::uint32_t or_back_in_block(const Scratch& scratch, std::uint32_t j,
                                                     std::uint32_t first, std::uint32_t block,
                                                     typename G::Pattern& into) {
  for (; j > first && scratch.blocks[j - 1] == block; --j) {
    or_into<G>(into, G::pattern(scratch.hashes[j - 1]));
  }
  return j;
}

/// Step 3a, for tile `t` of `m` sorted entries: its last block and the OR of that block's
/// patterns within the tile.
template <typename G>
struct TileTail {
  Scratch scratch;
  std::uint32_t m;

  BULKBLOOM_HOST_DEVICE void operator()(std::uint32_t t) const {
    const std::uint32_t first = t * scratch.tile;
    const std::uint32_t end = m - first < scratch.tile ? m : first + scratch.tile;
    const std::uint32_t block = scratch.blocks[end - 1];
    typename G::Pattern tail{};
    or_back_in_block<G>(scratch, end, first, block, tail);
    scratch.tile_blocks[t] = block;
    reinterpret_cast<typename G::Pattern*>(scratch.tile_tails)[t] = tail;
  }
};

/// The OR of the patterns that tile `t`'s first run holds in the tiles before it: step 3b's
/// output for tile t - 1 when that tile ends in the same run, else nothing.
template <typename G>
BULKBLOOM_HOST_DEVICE typename G::Pattern carry_into(const Scratch& scratch, std::uint32_t t,
                                                     std::uint32_t first_block) {
  if (t == 0 || scratch.tile_blocks[t - 1] != first_block) return typename G::Pattern{};
  return reinterpret_cast<const typename G::Pattern*>(scratch.tile_carries)[t - 1];
}

/// The OR of the patterns before sorted entry `j` in its run: the entries of its tile before it in
/// the same block, walked back (at most a tile's worth), and, if the run reaches back to the
/// tile's start, the carry from the tiles before.
template <typename G>
BULKBLOOM_HOST_DEVICE typename G::Pattern prefix_of(const Scratch& scratch, std::uint32_t j) {
  const std::uint32_t t = j / scratch.tile;
  const std::uint32_t first = t * scratch.tile;
  const std::uint32_t block = scratch.blocks[j];
  typename G::Pattern prefix{};
  if (or_back_in_block<G>(scratch, j, first, block, prefix) == first) {
    or_into<G>(prefix, carry_into<G>(scratch, t, block));
  }
  return prefix;
}

/// Step 3c, for sorted entry `j`: reads the block, never writes it.
template <typename G>
struct FlagNewKeys {
  const std::byte* bits;
  std::uint8_t* is_new;
  std::uint64_t* new_count;
  Scratch scratch;

  BULKBLOOM_HOST_DEVICE void operator()(std::uint32_t j) const {
    const auto pattern = G::pattern(scratch.hashes[j]);
    const auto prefix = prefix_of<G>(scratch, j);
    const typename G::Word* words = block_words<G>(const_cast<std::byte*>(bits), scratch.blocks[j]);
    bool fresh = false;
    for (int w = 0; w < G::kWords; ++w)
      fresh |= (pattern.word[w] & ~(words[w] | prefix.word[w])) != 0;
    if (fresh) is_new[scratch.positions[j]] = 1;
    if (new_count != nullptr) count_fresh(new_count, fresh);
  }
};

/// Step 3d, for sorted entry `j` of `m`: the last entry of its run within its tile ORs the bits of
/// that part of the run into the block (the parts in other tiles do the same).
template <typename G>
struct ApplyRun {
  std::byte* bits;
  Scratch scratch;
  std::uint32_t m;

  BULKBLOOM_HOST_DEVICE void operator()(std::uint32_t j) const {
    const std::uint32_t block = scratch.blocks[j];
    if (j + 1 < m && (j + 1) % scratch.tile != 0 && scratch.blocks[j + 1] == block) return;
    typename G::Pattern run = G::pattern(scratch.hashes[j]);
    or_back_in_block<G>(scratch, j, j - j % scratch.tile, block, run);
    typename G::Word* words = block_words<G>(bits, block);
    for (int w = 0; w < G::kWords; ++w) {
      if ((words[w] & run.word[w]) != run.word[w]) or_word(words + w, run.word[w]);
    }
  }
};

/// Runs the three steps on `policy` over keys[0, n): writes is_new[0, n) and, if `new_count` is
/// not null, adds the number of new keys to it. `sort_by_block(scratch, m)` is step 2's sort: a
/// stable sort of blocks[0, m) carrying positions, which may leave its output in the spare region
/// and swap the two regions' pointers, together. Keys, flags, count, scratch and bits must be
/// reachable by the policy's threads (device memory for a CUDA policy). Returns to the host once,
/// after the compaction, for the number of keys left to sort.
template <typename G, typename Policy, typename SortByBlock>
void insert_if_absent(Policy&& policy, const Layout& layout, std::byte* bits,
                      const std::uint64_t* keys, std::uint32_t n, KeyMode mode,
                      std::uint8_t* is_new, std::uint64_t* new_count, Scratch scratch,
                      const SortByBlock& sort_by_block) {
  if (n == 0) return;
  const thrust::counting_iterator<std::uint32_t> index(0);
  thrust::for_each(policy, index, index + n,
                   SettleRepeats<G>{layout, bits, keys, mode, is_new, scratch});

  const auto entries = thrust::make_zip_iterator(scratch.blocks, scratch.positions);
  const auto m = static_cast<std::uint32_t>(
      thrust::remove_if(policy, entries, entries + n, IsSettled{}) - entries);
  if (m == 0) return;
  sort_by_block(scratch, m);
  scratch.hashes = reinterpret_cast<std::uint64_t*>(scratch.spare_blocks);
  thrust::for_each(policy, index, index + m, GatherHash{layout, keys, mode, scratch});

  const std::uint32_t tiles = tiles_of(m, scratch.tile);
  auto* tails = reinterpret_cast<typename G::Pattern*>(scratch.tile_tails);
  thrust::for_each(policy, index, index + tiles, TileTail<G>{scratch, m});
  thrust::inclusive_scan_by_key(policy, scratch.tile_blocks, scratch.tile_blocks + tiles, tails,
                                reinterpret_cast<typename G::Pattern*>(scratch.tile_carries),
                                thrust::equal_to<std::uint32_t>{}, OrPatterns<G>{});
  thrust::for_each(policy, index, index + m, FlagNewKeys<G>{bits, is_new, new_count, scratch});
  thrust::for_each(policy, index, index + m, ApplyRun<G>{bits, scratch, m});
}

}  // namespace bulkbloom::detail::exact
