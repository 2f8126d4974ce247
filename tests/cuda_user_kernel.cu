#include "cuda_user_kernel.hpp"

#include <cuda_runtime.h>

#include <stdexcept>
#include <string>

namespace bulkbloom::test {
namespace {

__global__ void insert_with_view(FilterRef view, const std::uint64_t* keys, std::uint32_t n) {
  const std::uint32_t i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) view.insert(keys[i]);
}

__global__ void contains_with_view(FilterRef view, const std::uint64_t* keys, std::uint32_t n,
                                   std::uint8_t* out) {
  const std::uint32_t i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = view.contains(keys[i]) ? 1 : 0;
}

void wait(const char* what) {
  const cudaError_t err = cudaDeviceSynchronize();
  if (err != cudaSuccess)
    throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(err));
}

}  // namespace

void user_kernel_insert(FilterRef view, const std::uint64_t* keys, std::uint32_t n) {
  insert_with_view<<<(n + 255) / 256, 256>>>(view, keys, n);
  wait("user insert kernel");
}

void user_kernel_contains(FilterRef view, const std::uint64_t* keys, std::uint32_t n,
                          std::uint8_t* out) {
  contains_with_view<<<(n + 255) / 256, 256>>>(view, keys, n, out);
  wait("user contains kernel");
}

}  // namespace bulkbloom::test
