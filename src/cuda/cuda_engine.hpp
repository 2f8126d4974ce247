// The CUDA backend as the rest of the library sees it: plain C++, no CUDA headers, so filter.cpp
// and the device-pointer front end compile without nvcc.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "cuda/device_runtime.hpp"
#include "registry/device_bench.hpp"
#include "registry/engine.hpp"

namespace bulkbloom::detail {

/// An engine whose bits are in GPU memory. All its device work runs on one stream of its own, in
/// the order the host issued it; every host-span call returns when its work is done. The
/// device-pointer calls also take a caller's stream: their work waits for what was queued on that
/// stream before, and work queued there afterwards waits for them. With `wait` they return when
/// their work is done, else as soon as it is queued.
class CudaEngine : public Engine {
 public:
  virtual void insert_device(const std::uint64_t* keys, std::uint32_t n, void* stream,
                             bool wait) = 0;
  virtual void contains_device(const std::uint64_t* keys, std::uint32_t n, std::uint8_t* out,
                               void* stream, bool wait) const = 0;
  virtual void insert_if_absent_device(const std::uint64_t* keys, std::uint32_t n,
                                       std::uint8_t* is_new, std::uint64_t* new_count, void* stream,
                                       bool wait) = 0;
  /// The device benchmark (registry/device_bench.hpp) on this filter, without the CPU check:
  /// fills `sample` for the registry to check. Clears the filter.
  virtual DeviceBench benchmark(const DeviceBenchSettings& settings, DeviceSample& sample) = 0;
};

/// Keys per chunk of the host-span pipeline: 64 MiB of keys per copy, large enough that a copy
/// runs at full link speed, small enough that two slots of pinned and device buffers stay modest.
inline constexpr std::uint32_t kDefaultChunkKeys = std::uint32_t{1} << 23;

/// The engine over any runtime (the real CUDA one, or the tests' fake), for the filter on
/// `device`, named `name` in implementation(), streaming host spans in chunks of `chunk_keys`
/// (rounded down to a power of two).
std::unique_ptr<CudaEngine> make_device_engine(const Layout& layout, std::string name, int device,
                                               std::unique_ptr<DeviceRuntime> runtime,
                                               std::uint32_t chunk_keys = kDefaultChunkKeys);

/// The real CUDA runtime, on whatever device is current (bench/gpu times its own kernels with it).
std::unique_ptr<DeviceRuntime> make_cuda_runtime();

/// Number of CUDA devices; 0 when there is none or no usable driver. `why` (if not null) gets
/// CUDA's explanation when the answer is 0.
int cuda_device_count(std::string* why = nullptr);

/// The current device's architecture, "sm_XY", if the CUDA backend can run there, else "" with
/// the reason in `why` (if not null): no device, older than compute capability 8.0, no kernel
/// image of this build that loads, prohibited, or taken by another process.
std::string cuda_device_arch(std::string* why = nullptr);

/// A CUDA engine on the current device. `arch` is "" or the device's "sm_XY". Throws
/// BackendUnavailable when no usable device is present (cuda_device_arch) or `arch` names another
/// one, AllocationError when the filter does not fit in device memory.
std::unique_ptr<CudaEngine> make_cuda_engine(const Layout& layout, const std::string& arch);

/// For Backend::automatic: a CUDA engine on the current device, or null with the reason in `why`
/// when the filter is under 1 MiB (it stays on the CPU), cuda_device_arch() finds no usable
/// device, or the device has too little free memory for the filter and its pipeline.
std::unique_ptr<CudaEngine> make_cuda_engine_if_usable(const Layout& layout, std::string* why);

}  // namespace bulkbloom::detail
