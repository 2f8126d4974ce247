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
//   2. the other keys are compacted, then stably sorted by block (radix sort of 32-bit block
//      indices carrying positions): each block's keys become a run, in input order. Their hashes
//      are gathered once, in sorted order;
//   3. in slices of the sorted keys, one after another: the exclusive OR-scan by block; one
//      thread per key tests its pattern against the block's bits OR its prefix and writes 1 to the
//      flags of the new keys only; then the last key of each run ORs the run's bits into the block.
//      A run that a slice boundary cuts continues in the next slice from the block's bits, which by
//      then hold the first part's keys: slicing bounds the scan's memory, not its answers.
//
// Written with Thrust and `__host__ __device__` functors so that the same source runs on the GPU
// (the CUDA backend passes a CUDA execution policy) and on the host (the tests pass Thrust's
// sequential CPP policy and check it against the scalar oracle).
#pragma once

#include <thrust/for_each.h>
#include <thrust/functional.h>
#include <thrust/iterator/counting_iterator.h>
#include <thrust/iterator/transform_iterator.h>
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

/// Scratch in memory the policy's threads can reach: `blocks`, `positions` and `hashes` of `n`
/// entries each, and `prefixes` of `slice` (at least 1) patterns: the scan's output for one slice.
struct Scratch {
  std::uint32_t* blocks;
  std::uint32_t* positions;
  std::uint64_t* hashes;
  std::byte* prefixes;
  std::uint32_t slice;
};

/// Bytes of one Scratch for `n` keys in slices of `slice` keys with blocks of `block_bytes`.
inline std::size_t scratch_bytes(std::uint32_t n, std::uint32_t slice, int block_bytes) {
  return std::size_t{n} * (2 * sizeof(std::uint32_t) + sizeof(std::uint64_t)) +
         std::size_t{slice} * static_cast<std::size_t>(block_bytes);
}

/// Lays a Scratch out in `bytes` (scratch_bytes(n, slice, block_bytes) of them, 8-byte aligned):
/// hashes first, so that every array is aligned for its type.
inline Scratch carve_scratch(void* bytes, std::uint32_t n, std::uint32_t slice) {
  auto* hashes = static_cast<std::uint64_t*>(bytes);
  auto* blocks = reinterpret_cast<std::uint32_t*>(hashes + n);
  std::uint32_t* positions = blocks + n;
  return {blocks, positions, hashes, reinterpret_cast<std::byte*>(positions + n), slice};
}

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

/// The scan's input: a sorted key's pattern.
template <typename G>
struct PatternOf {
  BULKBLOOM_HOST_DEVICE typename G::Pattern operator()(std::uint64_t hash) const {
    return G::pattern(hash);
  }
};

/// The scan's operator: bitwise OR of two patterns.
template <typename G>
struct OrPatterns {
  BULKBLOOM_HOST_DEVICE typename G::Pattern operator()(const typename G::Pattern& a,
                                                       const typename G::Pattern& b) const {
    typename G::Pattern out;
    for (int w = 0; w < G::kWords; ++w) out.word[w] = a.word[w] | b.word[w];
    return out;
  }
};

/// Step 3's test, for sorted entry `first + t` of a slice: reads the block, never writes it.
template <typename G>
struct FlagNewKeys {
  const std::byte* bits;
  std::uint8_t* is_new;
  std::uint64_t* new_count;
  Scratch scratch;
  std::uint32_t first;

  BULKBLOOM_HOST_DEVICE void operator()(std::uint32_t t) const {
    const std::uint32_t j = first + t;
    const auto pattern = G::pattern(scratch.hashes[j]);
    const auto& prefix = reinterpret_cast<const typename G::Pattern*>(scratch.prefixes)[t];
    const typename G::Word* words = block_words<G>(const_cast<std::byte*>(bits), scratch.blocks[j]);
    bool fresh = false;
    for (int w = 0; w < G::kWords; ++w)
      fresh |= (pattern.word[w] & ~(words[w] | prefix.word[w])) != 0;
    if (fresh) is_new[scratch.positions[j]] = 1;
    if (new_count != nullptr) count_fresh(new_count, fresh);
  }
};

/// Step 3's write, for sorted entry `first + t` of a slice of `size` entries: the last entry of
/// a run ORs the run's bits into the block.
template <typename G>
struct ApplyRun {
  std::byte* bits;
  Scratch scratch;
  std::uint32_t first;
  std::uint32_t size;

  BULKBLOOM_HOST_DEVICE void operator()(std::uint32_t t) const {
    const std::uint32_t j = first + t;
    const std::uint32_t block = scratch.blocks[j];
    if (t + 1 < size && scratch.blocks[j + 1] == block) return;
    const auto pattern = G::pattern(scratch.hashes[j]);
    const auto& prefix = reinterpret_cast<const typename G::Pattern*>(scratch.prefixes)[t];
    typename G::Word* words = block_words<G>(bits, block);
    for (int w = 0; w < G::kWords; ++w) {
      const typename G::Word run = pattern.word[w] | prefix.word[w];
      if ((words[w] & run) != run) or_word(words + w, run);
    }
  }
};

/// Runs the three steps on `policy` over keys[0, n): writes is_new[0, n) and, if `new_count` is
/// not null, adds the number of new keys to it. Keys, flags, count, scratch and bits must be
/// reachable by the policy's threads (device memory for a CUDA policy). Returns to the host once,
/// after the compaction, for the number of keys left to sort.
template <typename G, typename Policy>
void insert_if_absent(Policy&& policy, const Layout& layout, std::byte* bits,
                      const std::uint64_t* keys, std::uint32_t n, KeyMode mode,
                      std::uint8_t* is_new, std::uint64_t* new_count, Scratch scratch) {
  if (n == 0) return;
  const thrust::counting_iterator<std::uint32_t> index(0);
  thrust::for_each(policy, index, index + n,
                   SettleRepeats<G>{layout, bits, keys, mode, is_new, scratch});

  const auto entries = thrust::make_zip_iterator(scratch.blocks, scratch.positions);
  const auto m = static_cast<std::uint32_t>(
      thrust::remove_if(policy, entries, entries + n, IsSettled{}) - entries);
  if (m == 0) return;
  thrust::stable_sort_by_key(policy, scratch.blocks, scratch.blocks + m, scratch.positions);
  thrust::for_each(policy, index, index + m, GatherHash{layout, keys, mode, scratch});

  auto* prefixes = reinterpret_cast<typename G::Pattern*>(scratch.prefixes);
  for (std::uint32_t first = 0, size = 0; first < m; first += size) {
    size = std::min(scratch.slice, m - first);
    thrust::exclusive_scan_by_key(
        policy, scratch.blocks + first, scratch.blocks + first + size,
        thrust::make_transform_iterator(scratch.hashes + first, PatternOf<G>{}), prefixes,
        typename G::Pattern{}, thrust::equal_to<std::uint32_t>{}, OrPatterns<G>{});
    thrust::for_each(policy, index, index + size,
                     FlagNewKeys<G>{bits, is_new, new_count, scratch, first});
    thrust::for_each(policy, index, index + size, ApplyRun<G>{bits, scratch, first, size});
  }
}

}  // namespace bulkbloom::detail::exact
