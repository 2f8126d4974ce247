// Exact insert_if_absent for many threads (DESIGN §3): the flags of the sequential loop
// `for k in keys: new = !contains(k); insert(k)`, whatever the order threads run in.
//
// Keys of different blocks never interact, so the batch is sorted by block and each block's keys
// are applied in input order by one thread:
//   1. read only: a key whose bits were all set before the batch is a repeat wherever it stands
//      (bits are only ever added); its answer is settled and it leaves the sort;
//   2. a stable sort of (block, position) pairs: the keys of one block become a run, in input
//      order (settled keys sort last);
//   3. one thread per run tests and sets each key's pattern in registers, in input order, then ORs
//      the new bits into memory once. Copies of a key after its first find their bits set.
//
// Written with Thrust and `__host__ __device__` functors so that the same source runs on the GPU
// (the CUDA backend passes a CUDA execution policy) and on the host (the tests pass Thrust's
// sequential CPP policy and check it against the scalar oracle).
#pragma once

#include <thrust/for_each.h>
#include <thrust/iterator/counting_iterator.h>
#include <thrust/sort.h>

#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "bulkbloom/detail/block_math.hpp"
#include "bulkbloom/filter_ref.hpp"
#include "bulkbloom/layout.hpp"
#include "cuda/key_placement.hpp"
#include "registry/engine.hpp"

namespace bulkbloom::detail::exact {

/// Sort key of a key whose answer step 1 settled: above every block index (num_blocks < 2^32).
inline constexpr std::uint32_t kSettled = 0xffffffffu;

/// Scratch arrays of `n` entries each, in memory the policy's threads can reach.
struct Scratch {
  std::uint32_t* sort_keys;
  std::uint32_t* positions;
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

BULKBLOOM_HOST_DEVICE inline void add_count(std::uint64_t* count, std::uint64_t value) {
#if defined(__CUDA_ARCH__)
  atomicAdd(reinterpret_cast<unsigned long long*>(count), static_cast<unsigned long long>(value));
#else
  __atomic_fetch_add(count, value, __ATOMIC_RELAXED);
#endif
}

/// Step 1 for key `i`.
template <typename G>
struct SettleRepeats {
  Layout layout;
  std::byte* bits;
  const std::uint64_t* keys;
  KeyMode mode;
  std::uint8_t* is_new;
  Scratch scratch;

  BULKBLOOM_HOST_DEVICE void operator()(std::uint32_t i) const {
    const std::uint64_t hash = gpu::hash_key(layout, keys[i], mode);
    const std::uint32_t block = gpu::block_index(layout, hash);
    const bool repeat = covers<G>(block_words<G>(bits, block), G::pattern(hash));
    if (repeat) is_new[i] = 0;
    scratch.sort_keys[i] = repeat ? kSettled : block;
    scratch.positions[i] = i;
  }
};

/// Step 3 for sorted entry `t`: if a run of one block starts there, applies the run.
template <typename G>
struct ApplyRun {
  Layout layout;
  std::byte* bits;
  const std::uint64_t* keys;
  std::uint32_t n;
  KeyMode mode;
  std::uint8_t* is_new;
  std::uint64_t* new_count;
  Scratch scratch;

  BULKBLOOM_HOST_DEVICE void operator()(std::uint32_t t) const {
    const std::uint32_t block = scratch.sort_keys[t];
    if (block == kSettled || (t > 0 && scratch.sort_keys[t - 1] == block)) return;
    typename G::Word* words = block_words<G>(bits, block);
    typename G::Word before[G::kWords], now[G::kWords];
    for (int w = 0; w < G::kWords; ++w) before[w] = now[w] = words[w];
    std::uint64_t fresh_keys = 0;
    for (std::uint32_t s = t; s < n && scratch.sort_keys[s] == block; ++s) {
      const std::uint32_t i = scratch.positions[s];
      const auto pattern = G::pattern(gpu::hash_key(layout, keys[i], mode));
      const bool fresh = !covers<G>(now, pattern);
      is_new[i] = fresh ? 1 : 0;
      fresh_keys += fresh ? 1 : 0;
      for (int w = 0; w < G::kWords; ++w) now[w] |= pattern.word[w];
    }
    for (int w = 0; w < G::kWords; ++w) {
      if (now[w] != before[w]) or_word(words + w, now[w]);
    }
    if (new_count != nullptr && fresh_keys != 0) add_count(new_count, fresh_keys);
  }
};

/// Runs the three steps on `policy` over keys[0, n): writes is_new[0, n) and, if `new_count` is
/// not null, adds the number of new keys to it. Keys, flags, count, scratch and bits must be
/// reachable by the policy's threads (device memory for a CUDA policy).
template <typename G, typename Policy>
void insert_if_absent(Policy&& policy, const Layout& layout, std::byte* bits,
                      const std::uint64_t* keys, std::uint32_t n, KeyMode mode,
                      std::uint8_t* is_new, std::uint64_t* new_count, Scratch scratch) {
  if (n == 0) return;
  const thrust::counting_iterator<std::uint32_t> first(0), last(n);
  thrust::for_each(policy, first, last,
                   SettleRepeats<G>{layout, bits, keys, mode, is_new, scratch});
  thrust::stable_sort_by_key(policy, scratch.sort_keys, scratch.sort_keys + n, scratch.positions);
  thrust::for_each(policy, first, last,
                   ApplyRun<G>{layout, bits, keys, n, mode, is_new, new_count, scratch});
}

}  // namespace bulkbloom::detail::exact
