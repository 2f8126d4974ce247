// Step 2's sort of the exact insert_if_absent on the GPU (exact_insert_if_absent.hpp): CUB's
// radix sort over only the bits a block index of the layout can have, where Thrust's sort of
// 32-bit keys takes all 32 (a pass per 8 bits: 3 in place of 4 up to 2^24 blocks).
#pragma once

#include <cuda_runtime.h>
#include <thrust/system/cuda/error.h>
#include <thrust/system_error.h>
#include <cub/device/device_radix_sort.cuh>

#include <algorithm>
#include <bit>
#include <cstddef>
#include <cstdint>

#include "cuda/exact_insert_if_absent.hpp"

namespace bulkbloom::detail::exact {

/// Bits of the block indices of a layout of `num_blocks` blocks (at least 1).
inline int block_index_bits(std::uint64_t num_blocks) {
  return std::max(1, static_cast<int>(std::bit_width(num_blocks - 1)));
}

/// Sorts on `stream`, taking its temporary storage from `allocator` (Thrust's allocator shape:
/// allocate(bytes) and deallocate(pointer, bytes)). Radix sorts are stable. The output lands in
/// whichever pair of arrays the passes end in; the scratch is pointed at it. Throws
/// thrust::system_error on a CUDA error, as Thrust's own calls do.
template <typename Allocator>
struct RadixSortByBlock {
  Allocator* allocator;
  cudaStream_t stream;
  std::uint64_t num_blocks;

  void operator()(Scratch& scratch, std::uint32_t m) const {
    cub::DoubleBuffer<std::uint32_t> blocks(scratch.blocks, scratch.spare_blocks);
    cub::DoubleBuffer<std::uint32_t> positions(scratch.positions, scratch.spare_positions);
    const int end_bit = block_index_bits(num_blocks);
    std::size_t temp_bytes = 0;
    check(cub::DeviceRadixSort::SortPairs(nullptr, temp_bytes, blocks, positions, m, 0, end_bit,
                                          stream));
    char* temp = allocator->allocate(static_cast<std::ptrdiff_t>(temp_bytes));
    const cudaError_t err =
        cub::DeviceRadixSort::SortPairs(temp, temp_bytes, blocks, positions, m, 0, end_bit, stream);
    allocator->deallocate(temp, temp_bytes);
    check(err);
    if (blocks.Current() != scratch.blocks) {
      std::swap(scratch.blocks, scratch.spare_blocks);
      std::swap(scratch.positions, scratch.spare_positions);
    }
  }

 private:
  static void check(cudaError_t err) {
    if (err != cudaSuccess) throw thrust::system_error(err, thrust::cuda_category(), "radix sort");
  }
};

}  // namespace bulkbloom::detail::exact
