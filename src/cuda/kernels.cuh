// The CUDA kernels for bulk insert and contains, one thread per key (insert_if_absent is in
// exact_insert_if_absent.hpp).
//
// Every bit position comes from include/bulkbloom/detail/block_math.hpp (Layout::block_of for the
// layout's block index, the salted patterns) and every key hash from FilterRef::hash, the same code
// the CPU oracle runs, so the GPU cannot place a bit differently. Kernels differ from the scalar
// reference only in how they touch memory: whole-block vector loads, and 64-bit atomicOr that
// covers two 32-bit words at once (OR is bitwise, so the bytes are the same).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "bulkbloom/detail/block_math.hpp"
#include "bulkbloom/filter_ref.hpp"
#include "bulkbloom/layout.hpp"
#include "cuda/key_placement.hpp"
#include "registry/engine.hpp"

namespace bulkbloom::detail::gpu {

/// Threads per CUDA block for the per-key kernels.
inline constexpr int kThreadsPerBlock = 256;

/// A block seen as 64-bit lanes: the unit of the vector loads and of the atomics.
template <typename G>
struct Lanes {
  static constexpr int kCount = G::kBlockBytes / 8;
  unsigned long long lane[kCount];
};

/// The block's bit pattern for `hash`, packed into 64-bit lanes (little-endian, as in memory).
template <typename G>
__device__ __forceinline__ Lanes<G> pattern_lanes(std::uint64_t hash) {
  const auto pattern = G::pattern(hash);
  Lanes<G> out;
  static_assert(sizeof(pattern) == sizeof(out));
  std::memcpy(&out, &pattern, sizeof(out));
  return out;
}

template <typename G>
__device__ __forceinline__ unsigned long long* block_lanes(std::byte* bits, std::uint32_t block) {
  return reinterpret_cast<unsigned long long*>(bits + std::size_t{block} * G::kBlockBytes);
}

/// The whole block with 16-byte vector loads (the widest a thread issues on sm_90): one 32-byte
/// sector for 256-bit blocks, two for 512-bit blocks.
template <typename G>
__device__ __forceinline__ Lanes<G> load_block(const unsigned long long* lanes) {
  Lanes<G> out;
  const auto* vectors = reinterpret_cast<const ulonglong2*>(lanes);
#pragma unroll
  for (int v = 0; v < Lanes<G>::kCount / 2; ++v) {
    const ulonglong2 pair = vectors[v];
    out.lane[2 * v] = pair.x;
    out.lane[2 * v + 1] = pair.y;
  }
  return out;
}

template <typename G>
__device__ __forceinline__ bool covers(const Lanes<G>& block, const Lanes<G>& pattern) {
  bool all = true;
#pragma unroll
  for (int i = 0; i < Lanes<G>::kCount; ++i)
    all &= (block.lane[i] & pattern.lane[i]) == pattern.lane[i];
  return all;
}

/// Sets the pattern with one atomicOr per 64-bit lane; with `skip` given, lanes whose bits are
/// already all set in `seen` are not written (no atomic, no L2 write traffic).
template <typename G>
__device__ __forceinline__ void set_lanes(unsigned long long* lanes, const Lanes<G>& pattern,
                                          const Lanes<G>* skip) {
#pragma unroll
  for (int i = 0; i < Lanes<G>::kCount; ++i) {
    if (skip != nullptr && (skip->lane[i] & pattern.lane[i]) == pattern.lane[i]) continue;
    atomicOr(lanes + i, pattern.lane[i]);
  }
}

/// insert: each key ORs its pattern into its block. With kSkipSetLanes the block is read first
/// and only lanes missing a bit are written.
template <typename G, bool kSkipSetLanes>
__global__ void __launch_bounds__(kThreadsPerBlock)
    insert_kernel(Layout layout, std::byte* bits, const std::uint64_t* keys, std::uint32_t n,
                  KeyMode mode) {
  const std::uint32_t i = blockIdx.x * kThreadsPerBlock + threadIdx.x;
  if (i >= n) return;
  const std::uint64_t hash = hash_key(layout, keys[i], mode);
  unsigned long long* lanes = block_lanes<G>(bits, block_index(layout, hash));
  const Lanes<G> pattern = pattern_lanes<G>(hash);
  if constexpr (kSkipSetLanes) {
    const Lanes<G> seen = load_block<G>(lanes);
    set_lanes<G>(lanes, pattern, &seen);
  } else {
    set_lanes<G>(lanes, pattern, nullptr);
  }
}

/// contains: one block load per key, flag 1 when every lane covers the pattern.
template <typename G>
__global__ void __launch_bounds__(kThreadsPerBlock)
    contains_kernel(Layout layout, const std::byte* bits, const std::uint64_t* keys,
                    std::uint32_t n, KeyMode mode, std::uint8_t* out) {
  const std::uint32_t i = blockIdx.x * kThreadsPerBlock + threadIdx.x;
  if (i >= n) return;
  const std::uint64_t hash = hash_key(layout, keys[i], mode);
  const auto* lanes = block_lanes<G>(const_cast<std::byte*>(bits), block_index(layout, hash));
  out[i] = covers<G>(load_block<G>(lanes), pattern_lanes<G>(hash)) ? 1 : 0;
}

/// The device-side half of the random-read probe: thread i loads the whole block at a random
/// index (a hash of i) with the same vector loads as contains_kernel; no keys are read or hashed.
/// The probe's rate over a filter's bits is what contains could reach there if the memory were
/// its only cost.
template <typename G>
__global__ void __launch_bounds__(kThreadsPerBlock)
    random_block_read_kernel(const std::byte* bits, std::uint32_t num_blocks, std::uint32_t n,
                             unsigned long long* sink) {
  const std::uint32_t i = blockIdx.x * kThreadsPerBlock + threadIdx.x;
  if (i >= n) return;
  const std::uint32_t block = block_of(xxh64_u64(i, 0x5eed), num_blocks);
  const Lanes<G> lanes = load_block<G>(block_lanes<G>(const_cast<std::byte*>(bits), block));
  unsigned long long x = 0;
#pragma unroll
  for (int l = 0; l < Lanes<G>::kCount; ++l) x ^= lanes.lane[l];
  if (x == 0x123456789abcdefull) *sink = x;  // keeps the loads; practically never true
}

/// Grid size for one thread per key.
inline unsigned grid_for(std::uint32_t n) {
  return static_cast<unsigned>((std::uint64_t{n} + kThreadsPerBlock - 1) / kThreadsPerBlock);
}

}  // namespace bulkbloom::detail::gpu
