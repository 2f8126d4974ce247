// The CUDA kernels for bulk insert, contains and insert_if_absent, one thread per key.
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
#include <cuda/atomic>

#include "bulkbloom/detail/block_math.hpp"
#include "bulkbloom/filter_ref.hpp"
#include "bulkbloom/layout.hpp"
#include "engine.hpp"

namespace bulkbloom::detail::gpu {

/// Threads per CUDA block for the per-key kernels.
inline constexpr int kThreadsPerBlock = 256;

/// A block seen as 64-bit lanes: the unit of the vector loads and of the atomics.
template <typename G>
struct Lanes {
  static constexpr int kCount = G::kBlockBytes / 8;
  unsigned long long lane[kCount];
};

__device__ __forceinline__ std::uint64_t hash_key(const Layout& layout, std::uint64_t key,
                                                  KeyMode mode) {
  return mode == KeyMode::prehashed ? key : FilterRef(nullptr, layout).hash(key);
}

__device__ __forceinline__ std::uint32_t block_index(const Layout& layout, std::uint64_t hash) {
  return layout.block_of(hash);
}

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

/// The block read from L2 (volatile loads skip L1, which may hold a line older than the lock).
template <typename G>
__device__ __forceinline__ Lanes<G> load_block_coherent(const unsigned long long* lanes) {
  Lanes<G> out;
  const volatile unsigned long long* v = lanes;
#pragma unroll
  for (int i = 0; i < Lanes<G>::kCount; ++i) out.lane[i] = v[i];
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

/// The per-block lock bits of insert_if_absent: `mask + 1` bits (a power of two), block b uses bit
/// b & mask. Blocks sharing a bit only wait for each other; a thread holds one lock at a time, so
/// no cycle can form.
struct LockTable {
  unsigned int* words;
  std::uint32_t mask;
};

/// Lanes of this warp, below the calling one, that carry the same hash and also want the lock.
/// Called by all 32 lanes together. Keys with equal hashes set equal bits, so of such copies only
/// the lowest lane (the earliest key) can be new; the others need neither lock nor write.
__device__ __forceinline__ bool earlier_copy_in_warp(bool wants_lock, std::uint64_t hash) {
  constexpr unsigned kAllLanes = 0xffffffffu;
  const unsigned contenders = __ballot_sync(kAllLanes, wants_lock);
  if (contenders == 0) return false;
  const unsigned same = __match_any_sync(kAllLanes, hash) & contenders;
  const unsigned lower = (1u << (threadIdx.x % 32)) - 1;
  return wants_lock && (same & lower) != 0;
}

/// insert_if_absent, zero leaks (DESIGN §3). A key whose block already covers its pattern is not
/// new and needs no write (kReadFirst: the plain read that decides this skips the lock, which is
/// sound because bits are only ever set during the kernel). A copy of a key that an earlier lane
/// of the same warp also holds is not new either. Every other key takes its block's lock bit,
/// re-reads the block from L2, tests, sets and releases, so all tests-and-sets on one block are
/// serialised: of several copies of one key, only the first to hold the lock can find a bit
/// clear. Copies in one warp thus resolve in key order; copies in different warps in the order
/// they reach the lock. A key reported present although never seen had all its bits set by other
/// keys, the false positive the contract allows. Adds the number of new keys to `*new_count` if
/// not null.
template <typename G, bool kReadFirst>
__global__ void __launch_bounds__(kThreadsPerBlock)
    insert_if_absent_kernel(Layout layout, std::byte* bits, LockTable locks,
                            const std::uint64_t* keys, std::uint32_t n, KeyMode mode,
                            std::uint8_t* is_new, unsigned long long* new_count) {
  const std::uint32_t i = blockIdx.x * kThreadsPerBlock + threadIdx.x;
  std::uint64_t hash = 0;
  bool wants_lock = false;
  if (i < n) {
    hash = hash_key(layout, keys[i], mode);
    wants_lock =
        !(kReadFirst && covers<G>(load_block<G>(block_lanes<G>(bits, block_index(layout, hash))),
                                  pattern_lanes<G>(hash)));
  }
  // All lanes of every warp get here (no early exit), as the warp intrinsics require.
  if (earlier_copy_in_warp(wants_lock, hash)) wants_lock = false;
  bool fresh = false;
  if (wants_lock) {
    const std::uint32_t block = block_index(layout, hash);
    unsigned long long* lanes = block_lanes<G>(bits, block);
    const Lanes<G> pattern = pattern_lanes<G>(hash);
    const std::uint32_t lock = block & locks.mask;
    ::cuda::atomic_ref<unsigned int, ::cuda::thread_scope_device> word(locks.words[lock / 32]);
    const unsigned int bit = 1u << (lock % 32);
    // Acquire: the re-read below sees every bit set under this lock before; release: our bits
    // are visible before the lock is seen free. No full fences needed.
    while (word.fetch_or(bit, ::cuda::memory_order_acquire) & bit) __nanosleep(64);
    const Lanes<G> now = load_block_coherent<G>(lanes);
    fresh = !covers<G>(now, pattern);
    if (fresh) set_lanes<G>(lanes, pattern, &now);
    word.fetch_and(~bit, ::cuda::memory_order_release);
  }
  if (i < n) is_new[i] = fresh ? 1 : 0;
  const int fresh_in_block = __syncthreads_count(fresh);
  if (threadIdx.x == 0 && fresh_in_block != 0 && new_count != nullptr) {
    atomicAdd(new_count, static_cast<unsigned long long>(fresh_in_block));
  }
}

/// Grid size for one thread per key.
inline unsigned grid_for(std::uint32_t n) {
  return static_cast<unsigned>((std::uint64_t{n} + kThreadsPerBlock - 1) / kThreadsPerBlock);
}

}  // namespace bulkbloom::detail::gpu
