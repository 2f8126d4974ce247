// The CUDA backend as the rest of the library sees it: plain C++, no CUDA headers, so filter.cpp
// and the device-pointer front end compile without nvcc.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "engine.hpp"

namespace bulkbloom::detail {

/// An engine whose bits are in GPU memory. Besides the host-span calls of Engine it runs bulk
/// calls on keys already in device memory, queued on a caller's stream (a cudaStream_t).
class CudaEngine : public Engine {
 public:
  virtual void insert_device(const std::uint64_t* keys, std::uint32_t n, void* stream) = 0;
  virtual void contains_device(const std::uint64_t* keys, std::uint32_t n, std::uint8_t* out,
                               void* stream) const = 0;
  virtual void insert_if_absent_device(const std::uint64_t* keys, std::uint32_t n,
                                       std::uint8_t* is_new, std::uint64_t* new_count,
                                       void* stream) = 0;
};

/// Number of CUDA devices; 0 when there is none or no usable driver. `why` (if not null) gets
/// CUDA's explanation when the answer is 0.
int cuda_device_count(std::string* why = nullptr);

/// The current device's architecture, "sm_XY", or "" when there is no device (`why`, if not null,
/// then gets the reason).
std::string cuda_device_arch(std::string* why = nullptr);

/// A CUDA engine on the current device. `arch` is "" or the device's "sm_XY". Throws
/// BackendUnavailable when no device is present or `arch` names another one, AllocationError
/// when the filter does not fit in device memory.
std::unique_ptr<CudaEngine> make_cuda_engine(const Layout& layout, const std::string& arch);

}  // namespace bulkbloom::detail
