// The other insert_if_absent scheme the issue asks to measure: sort the batch by block (a stable
// radix sort of block ids with the keys' positions), then one thread per block walks its keys in
// batch order, testing and setting in registers, and writes the block back once. It needs no
// atomics or locks and gives exactly the CPU's sequential answer, but it sorts every batch and one
// thread serialises all copies of a hot key. Benchmark-only: the library uses the lock scheme.
#pragma once

#include <cub/device/device_radix_sort.cuh>

#include <bit>
#include <cstdint>

#include "cuda/kernels.cuh"

namespace bulkbloom::bench {

namespace gpu = detail::gpu;

__global__ void block_ids_kernel(Layout layout, const std::uint64_t* keys, std::uint32_t n,
                                 std::uint32_t* block_ids, std::uint32_t* positions) {
  const std::uint32_t i = blockIdx.x * gpu::kThreadsPerBlock + threadIdx.x;
  if (i >= n) return;
  const std::uint64_t hash = gpu::hash_key(layout, keys[i], detail::KeyMode::hash_with_layout);
  block_ids[i] = gpu::block_index(layout, hash);
  positions[i] = i;
}

// Thread t handles the run of sorted entries that starts at t (if one does).
template <typename G>
__global__ void sorted_runs_kernel(Layout layout, std::byte* bits, const std::uint64_t* keys,
                                   const std::uint32_t* block_ids, const std::uint32_t* positions,
                                   std::uint32_t n, std::uint8_t* is_new) {
  const std::uint32_t t = blockIdx.x * gpu::kThreadsPerBlock + threadIdx.x;
  if (t >= n) return;
  const std::uint32_t block = block_ids[t];
  if (t > 0 && block_ids[t - 1] == block) return;
  unsigned long long* lanes = gpu::block_lanes<G>(bits, block);
  gpu::Lanes<G> now = gpu::load_block<G>(lanes);
  const gpu::Lanes<G> before = now;
  for (std::uint32_t s = t; s < n && block_ids[s] == block; ++s) {
    const std::uint32_t i = positions[s];
    const auto pattern =
        gpu::pattern_lanes<G>(gpu::hash_key(layout, keys[i], detail::KeyMode::hash_with_layout));
    is_new[i] = gpu::covers<G>(now, pattern) ? 0 : 1;
    for (int l = 0; l < gpu::Lanes<G>::kCount; ++l) now.lane[l] |= pattern.lane[l];
  }
  // This thread is the only one touching the block in this kernel: plain stores suffice.
  for (int l = 0; l < gpu::Lanes<G>::kCount; ++l) {
    if (now.lane[l] != before.lane[l]) lanes[l] = now.lane[l];
  }
}

// Buffers for batches of up to `capacity` keys, and the three steps on the default stream.
class SortedInsertIfAbsent {
 public:
  explicit SortedInsertIfAbsent(std::uint32_t capacity) {
    for (std::uint32_t** p : {&block_ids_, &block_ids_sorted_, &positions_, &positions_sorted_}) {
      check(cudaMalloc(p, std::size_t{capacity} * sizeof(std::uint32_t)));
    }
    check(cub::DeviceRadixSort::SortPairs(nullptr, temp_bytes_, block_ids_, block_ids_sorted_,
                                          positions_, positions_sorted_, capacity));
    check(cudaMalloc(&temp_, temp_bytes_));
  }
  SortedInsertIfAbsent(const SortedInsertIfAbsent&) = delete;
  SortedInsertIfAbsent& operator=(const SortedInsertIfAbsent&) = delete;
  ~SortedInsertIfAbsent() {
    for (std::uint32_t* p : {block_ids_, block_ids_sorted_, positions_, positions_sorted_}) {
      cudaFree(p);
    }
    cudaFree(temp_);
  }

  template <typename G>
  void run(const Layout& layout, std::byte* bits, const std::uint64_t* keys, std::uint32_t n,
           std::uint8_t* is_new) {
    block_ids_kernel<<<gpu::grid_for(n), gpu::kThreadsPerBlock>>>(layout, keys, n, block_ids_,
                                                                  positions_);
    // Only the bits a block id can have take part in the sort.
    const int end_bit = std::max(1, int(std::bit_width(layout.num_blocks - 1)));
    std::size_t temp_bytes = temp_bytes_;
    check(cub::DeviceRadixSort::SortPairs(temp_, temp_bytes, block_ids_, block_ids_sorted_,
                                          positions_, positions_sorted_, n, 0, end_bit));
    sorted_runs_kernel<G><<<gpu::grid_for(n), gpu::kThreadsPerBlock>>>(
        layout, bits, keys, block_ids_sorted_, positions_sorted_, n, is_new);
  }

 private:
  static void check(cudaError_t err) {
    if (err != cudaSuccess) throw std::runtime_error(cudaGetErrorString(err));
  }

  std::uint32_t* block_ids_ = nullptr;
  std::uint32_t* block_ids_sorted_ = nullptr;
  std::uint32_t* positions_ = nullptr;
  std::uint32_t* positions_sorted_ = nullptr;
  void* temp_ = nullptr;
  std::size_t temp_bytes_ = 0;
};

}  // namespace bulkbloom::bench
