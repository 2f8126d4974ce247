// The real DeviceRuntime: CUDA runtime calls and the kernels, and the choice of a usable device.
#include <cuda_runtime.h>
#include <thrust/execution_policy.h>
#include <thrust/system/cuda/execution_policy.h>
#include <thrust/system_error.h>

#include <algorithm>
#include <cstddef>
#include <string>
#include <utility>

#include "bulkbloom/error.hpp"
#include "core/splitmix64.hpp"
#include "core/tuning.hpp"
#include "cuda/cuda_engine.hpp"
#include "cuda/exact_insert_if_absent.hpp"
#include "cuda/kernels.cuh"
#include "cuda/radix_sort_by_block.cuh"

namespace bulkbloom::detail {
namespace {

using gpu::grid_for;
using gpu::kThreadsPerBlock;

// Device memory beyond the filter that the pipeline and insert_if_absent may take for one chunk
// of 2^23 keys: two slots of streamed keys and flags (144 MiB), insert_if_absent's scratch (16
// bytes a key, and two patterns of at most 64 bytes and a block index a tile of 16 keys: 194
// MiB) and the sort's and the tile scan's temporary storage (a few MiB).
constexpr std::uint64_t kWorkingBytes = std::uint64_t{512} << 20;

// Index arithmetic at the largest device batch (bulkbloom::cuda::kMaxDeviceBatch, 2^32 - 1 keys,
// one thread each): the grid fits CUDA's limit, and the last thread's 32-bit index
// blockIdx.x * kThreadsPerBlock + threadIdx.x does not wrap.
constexpr std::uint64_t kMaxDeviceKeys = (std::uint64_t{1} << 32) - 1;
constexpr std::uint64_t kMaxGrid = (kMaxDeviceKeys + kThreadsPerBlock - 1) / kThreadsPerBlock;
static_assert(kMaxGrid <= 0x7fffffffu, "the largest batch needs more blocks than a grid holds");
static_assert(kMaxGrid * kThreadsPerBlock - 1 <= 0xffffffffu,
              "the last thread's index of the largest batch wraps in 32 bits");

std::string error_text(cudaError_t err) {
  return std::string(cudaGetErrorName(err)) + ": " + cudaGetErrorString(err);
}

// Errors after which the CUDA context cannot be used again in this process.
bool is_sticky(cudaError_t err) {
  switch (err) {
    case cudaErrorIllegalAddress:
    case cudaErrorLaunchFailure:
    case cudaErrorHardwareStackError:
    case cudaErrorIllegalInstruction:
    case cudaErrorMisalignedAddress:
    case cudaErrorInvalidAddressSpace:
    case cudaErrorInvalidPc:
    case cudaErrorAssert:
    case cudaErrorECCUncorrectable:
    case cudaErrorLaunchTimeout:
      return true;
    default:
      return false;
  }
}

[[noreturn]] void fail(cudaError_t err, const std::string& call) {
  std::string message = "CUDA call " + call + " failed (" + error_text(err) + ")";
  if (is_sticky(err)) {
    message += "; the CUDA context is unusable from now on: restart the process";
  } else {
    // This call's own error, not sticky: clear it so that later calls are unaffected.
    cudaGetLastError();
  }
  throw DeviceError(message);
}

void check(cudaError_t err, const char* call) {
  if (err != cudaSuccess) fail(err, call);
}

std::string mib(std::uint64_t bytes) {
  return std::to_string(bytes >> 20) + " MiB";
}

cudaStream_t as_stream(StreamHandle s) {
  return static_cast<cudaStream_t>(s);
}

// Launches `kernel` with one thread per item on `stream`, checking this launch's own status.
template <typename... Params, typename... Args>
void launch(void (*kernel)(Params...), unsigned grid, StreamHandle stream, const char* what,
            Args&&... args) {
  if (grid == 0) return;
  cudaLaunchConfig_t config{};
  config.gridDim = dim3(grid);
  config.blockDim = dim3(kThreadsPerBlock);
  config.stream = as_stream(stream);
  const cudaError_t err = cudaLaunchKernelEx(&config, kernel, std::forward<Args>(args)...);
  if (err != cudaSuccess) fail(err, std::string("launch of the ") + what + " kernel");
}

__global__ void combine_kernel(unsigned long long* bits, const unsigned long long* other,
                               std::uint64_t lanes, CombineOp op) {
  const std::uint64_t stride = std::uint64_t{gridDim.x} * blockDim.x;
  for (std::uint64_t i = std::uint64_t{blockIdx.x} * blockDim.x + threadIdx.x; i < lanes;
       i += stride) {
    bits[i] = op == CombineOp::bit_or ? bits[i] | other[i] : bits[i] & other[i];
  }
}

// Block-wide sum into one partial per CUDA block.
template <typename T>
__device__ void write_block_sum(T value, T* partials) {
  __shared__ T sums[kThreadsPerBlock];
  sums[threadIdx.x] = value;
  __syncthreads();
  for (int half = kThreadsPerBlock / 2; half > 0; half /= 2) {
    if (threadIdx.x < half) sums[threadIdx.x] += sums[threadIdx.x + half];
    __syncthreads();
  }
  if (threadIdx.x == 0) partials[blockIdx.x] = sums[0];
}

__global__ void popcount_kernel(const unsigned long long* bits, std::uint64_t lanes,
                                std::uint64_t* partials) {
  std::uint64_t count = 0;
  const std::uint64_t stride = std::uint64_t{gridDim.x} * blockDim.x;
  for (std::uint64_t i = std::uint64_t{blockIdx.x} * blockDim.x + threadIdx.x; i < lanes;
       i += stride) {
    count += __popcll(bits[i]);
  }
  write_block_sum(count, partials);
}

// Sum over blocks of the product of each word's fraction of set bits (Filter::current_fpr).
template <typename G>
__global__ void fpr_kernel(const typename G::Word* words, std::uint64_t num_blocks,
                           double* partials) {
  double sum = 0.0;
  const std::uint64_t stride = std::uint64_t{gridDim.x} * blockDim.x;
  for (std::uint64_t b = std::uint64_t{blockIdx.x} * blockDim.x + threadIdx.x; b < num_blocks;
       b += stride) {
    double p = 1.0;
    for (int i = 0; i < G::kWords; ++i) {
      const typename G::Word w = words[b * G::kWords + i];
      p *= (sizeof(w) == 8 ? __popcll(w) : __popc(static_cast<unsigned>(w))) / double(G::kWordBits);
    }
    sum += p;
  }
  write_block_sum(sum, partials);
}

// Thrust's temporary storage, allocated in stream order from the device's memory pool: no
// device-wide synchronisation, and freed memory is reused by later calls.
class StreamOrderedAllocator {
 public:
  using value_type = char;
  explicit StreamOrderedAllocator(cudaStream_t stream) : stream_(stream) {}
  char* allocate(std::ptrdiff_t bytes) {
    void* p = nullptr;
    const cudaError_t err = cudaMallocAsync(&p, static_cast<std::size_t>(bytes), stream_);
    if (err == cudaErrorMemoryAllocation) {
      cudaGetLastError();
      throw AllocationError("cannot allocate " + mib(bytes) +
                            " of GPU memory for insert_if_absent's working arrays");
    }
    check(err, "cudaMallocAsync");
    return static_cast<char*>(p);
  }
  void deallocate(char* p, std::size_t) { cudaFreeAsync(p, stream_); }

 private:
  cudaStream_t stream_;
};

// keys[i] = the i-th value of SplitMix64(seed), grid-stride (DeviceRuntime::fill_keys).
__global__ void fill_keys_kernel(std::uint64_t* keys, std::uint64_t n, std::uint64_t seed) {
  const std::uint64_t stride = std::uint64_t{gridDim.x} * blockDim.x;
  for (std::uint64_t i = std::uint64_t{blockIdx.x} * blockDim.x + threadIdx.x; i < n; i += stride) {
    keys[i] = splitmix64_mix(seed + (i + 1) * kSplitMix64Gamma);
  }
}

class CudaRuntime final : public DeviceRuntime {
 public:
  std::string stand_in() const override { return ""; }

  int current_device() override {
    int device = 0;
    check(cudaGetDevice(&device), "cudaGetDevice");
    return device;
  }
  void set_device(int device) override { check(cudaSetDevice(device), "cudaSetDevice"); }

  void* allocate_device(std::size_t bytes, const char* what) override {
    void* p = nullptr;
    const cudaError_t err = cudaMalloc(&p, bytes);
    if (err == cudaErrorMemoryAllocation) {
      cudaGetLastError();
      std::size_t free_bytes = 0, total_bytes = 0;
      cudaMemGetInfo(&free_bytes, &total_bytes);
      throw AllocationError("cannot allocate " + std::to_string(bytes) + " bytes (" + mib(bytes) +
                            ") of GPU memory for " + what + ": the device has " + mib(free_bytes) +
                            " free of " + mib(total_bytes));
    }
    check(err, "cudaMalloc");
    return p;
  }
  void free_device(void* p) noexcept override { cudaFree(p); }
  void* allocate_pinned(std::size_t bytes, const char* what) override {
    void* p = nullptr;
    const cudaError_t err = cudaMallocHost(&p, bytes);
    if (err == cudaErrorMemoryAllocation) {
      cudaGetLastError();
      throw AllocationError("cannot allocate " + mib(bytes) + " of pinned host memory for " + what);
    }
    check(err, "cudaMallocHost");
    return p;
  }
  void free_pinned(void* p) noexcept override { cudaFreeHost(p); }

  PointerKind pointer_kind(const void* p, int* device) override {
    cudaPointerAttributes attributes{};
    const cudaError_t err = cudaPointerGetAttributes(&attributes, p);
    if (err != cudaSuccess) {
      if (is_sticky(err)) fail(err, "cudaPointerGetAttributes");
      cudaGetLastError();
      return PointerKind::unknown;
    }
    switch (attributes.type) {
      case cudaMemoryTypeDevice:
        *device = attributes.device;
        return PointerKind::device;
      case cudaMemoryTypeManaged:
        *device = -1;
        return PointerKind::device;
      case cudaMemoryTypeHost:
        return attributes.devicePointer == p ? PointerKind::host_mapped
                                             : PointerKind::host_unmapped;
      default:
        return PointerKind::unknown;
    }
  }

  StreamHandle create_stream() override {
    cudaStream_t stream = nullptr;
    check(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate");
    return stream;
  }
  void destroy_stream(StreamHandle stream) noexcept override {
    cudaStreamDestroy(as_stream(stream));
  }
  EventHandle create_event() override {
    cudaEvent_t event = nullptr;
    check(cudaEventCreateWithFlags(&event, cudaEventDisableTiming), "cudaEventCreate");
    return event;
  }
  EventHandle create_timing_event() override {
    cudaEvent_t event = nullptr;
    check(cudaEventCreate(&event), "cudaEventCreate");
    return event;
  }
  void destroy_event(EventHandle event) noexcept override {
    cudaEventDestroy(static_cast<cudaEvent_t>(event));
  }
  void record(EventHandle event, StreamHandle stream) override {
    check(cudaEventRecord(static_cast<cudaEvent_t>(event), as_stream(stream)), "cudaEventRecord");
  }
  void wait(StreamHandle stream, EventHandle event) override {
    check(cudaStreamWaitEvent(as_stream(stream), static_cast<cudaEvent_t>(event), 0),
          "cudaStreamWaitEvent");
  }
  void synchronize(EventHandle event) override {
    check(cudaEventSynchronize(static_cast<cudaEvent_t>(event)), "cudaEventSynchronize");
  }
  double elapsed_ms(EventHandle start, EventHandle stop) override {
    float ms = 0;
    check(
        cudaEventElapsedTime(&ms, static_cast<cudaEvent_t>(start), static_cast<cudaEvent_t>(stop)),
        "cudaEventElapsedTime");
    return ms;
  }
  void synchronize_stream(StreamHandle stream) override {
    check(cudaStreamSynchronize(as_stream(stream)), "cudaStreamSynchronize");
  }
  void drain(StreamHandle stream) noexcept override { cudaStreamSynchronize(as_stream(stream)); }

  void copy(void* dst, const void* src, std::size_t bytes, StreamHandle stream) override {
    check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, as_stream(stream)),
          "cudaMemcpyAsync");
  }
  void zero(void* dst, std::size_t bytes, StreamHandle stream) override {
    check(cudaMemsetAsync(dst, 0, bytes, as_stream(stream)), "cudaMemsetAsync");
  }

  void insert(const Layout& layout, std::byte* bits, const std::uint64_t* keys, std::uint32_t n,
              KeyMode mode, StreamHandle stream) override {
    with_geometry(layout.shape, [&]<typename G>(G) {
      launch(gpu::insert_kernel<G, true>, grid_for(n), stream, "insert", layout, bits, keys, n,
             mode);
    });
  }
  void contains(const Layout& layout, const std::byte* bits, const std::uint64_t* keys,
                std::uint32_t n, KeyMode mode, std::uint8_t* out, StreamHandle stream) override {
    with_geometry(layout.shape, [&]<typename G>(G) {
      launch(gpu::contains_kernel<G>, grid_for(n), stream, "contains", layout, bits, keys, n, mode,
             out);
    });
  }
  void insert_if_absent(const Layout& layout, std::byte* bits, const std::uint64_t* keys,
                        std::uint32_t n, KeyMode mode, std::uint8_t* is_new,
                        std::uint64_t* new_count, StreamHandle stream) override {
    if (n == 0) return;
    StreamOrderedAllocator allocator(as_stream(stream));
    const int pattern_bytes = block_bytes(layout.shape);
    char* scratch = allocator.allocate(static_cast<std::ptrdiff_t>(
        exact::scratch_bytes(n, exact::kDeviceTileKeys, pattern_bytes)));
    const exact::Scratch arrays =
        exact::carve_scratch(scratch, n, exact::kDeviceTileKeys, pattern_bytes);
    try {
      with_geometry(layout.shape, [&]<typename G>(G) {
        exact::insert_if_absent<G>(thrust::cuda::par_nosync(allocator).on(as_stream(stream)),
                                   layout, bits, keys, n, mode, is_new, new_count, arrays,
                                   exact::RadixSortByBlock<StreamOrderedAllocator>{
                                       &allocator, as_stream(stream), layout.num_blocks});
      });
    } catch (const thrust::system_error& e) {
      allocator.deallocate(scratch, 0);
      const auto err = static_cast<cudaError_t>(e.code().value());
      fail(err == cudaSuccess ? cudaErrorUnknown : err,
           std::string("in insert_if_absent (") + e.what() + ")");
    } catch (...) {
      allocator.deallocate(scratch, 0);
      throw;
    }
    allocator.deallocate(scratch, 0);
  }
  void fill_keys(std::uint64_t* keys, std::uint64_t n, std::uint64_t seed,
                 StreamHandle stream) override {
    launch(fill_keys_kernel, kReductionPartials, stream, "key generation", keys, n, seed);
  }
  void random_block_reads(const Layout& layout, const std::byte* bits, std::uint32_t n,
                          std::uint64_t* sink, StreamHandle stream) override {
    // The probe indexes blocks in 32 bits: a filter of more blocks (over 128 GiB of sb256) is
    // probed over its first 2^32 - 1 blocks.
    const auto blocks =
        static_cast<std::uint32_t>(std::min<std::uint64_t>(layout.num_blocks, 0xffffffffu));
    with_geometry(layout.shape, [&]<typename G>(G) {
      launch(gpu::random_block_read_kernel<G>, grid_for(n), stream, "random block read", bits,
             blocks, n, reinterpret_cast<unsigned long long*>(sink));
    });
  }
  void combine(std::byte* bits, const std::byte* other, std::uint64_t bytes, CombineOp op,
               StreamHandle stream) override {
    launch(combine_kernel, kReductionPartials, stream, "combine",
           reinterpret_cast<unsigned long long*>(bits),
           reinterpret_cast<const unsigned long long*>(other), bytes / 8, op);
  }
  void popcount(const Layout& layout, const std::byte* bits, std::uint64_t* partials,
                StreamHandle stream) override {
    launch(popcount_kernel, kReductionPartials, stream, "popcount",
           reinterpret_cast<const unsigned long long*>(bits), layout.size_bytes() / 8, partials);
  }
  void fpr_sum(const Layout& layout, const std::byte* bits, double* partials,
               StreamHandle stream) override {
    with_geometry(layout.shape, [&]<typename G>(G) {
      launch(fpr_kernel<G>, kReductionPartials, stream, "FPR",
             reinterpret_cast<const typename G::Word*>(bits), std::uint64_t{layout.num_blocks},
             partials);
    });
  }
};

// The current device's "sm_XY" if the backend can run there, else "" with the reason in `why`.
// With a layout, also whether the device has the free memory that filter and its pipeline need
// (an explicit choice of CUDA finds out by allocating, with the allocation's own error).
std::string usable_device(const Layout* layout, int* device, std::string* why) {
  int count = 0;
  cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess || count == 0) {
    if (err != cudaSuccess) cudaGetLastError();
    *why = "no CUDA device (" +
           (err != cudaSuccess ? error_text(err) : std::string("the driver reports 0 devices")) +
           ")";
    return "";
  }
  check(cudaGetDevice(device), "cudaGetDevice");
  const std::string where = "CUDA device " + std::to_string(*device);
  int major = 0, minor = 0, mode = 0;
  check(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, *device),
        "cudaDeviceGetAttribute");
  check(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, *device),
        "cudaDeviceGetAttribute");
  check(cudaDeviceGetAttribute(&mode, cudaDevAttrComputeMode, *device), "cudaDeviceGetAttribute");
  const std::string arch = "sm_" + std::to_string(major) + std::to_string(minor);
  if (mode == cudaComputeModeProhibited) {
    *why = where + " is in the prohibited compute mode";
    return "";
  }
  if (major < 8) {
    *why = where + " is " + arch + "; the CUDA backend needs compute capability 8.0 or newer";
    return "";
  }
  // Loads the module: fails without a kernel image for this device, or when another process
  // holds an exclusive-mode device.
  cudaFuncAttributes attributes{};
  err = cudaFuncGetAttributes(&attributes, popcount_kernel);
  if (err != cudaSuccess) {
    if (!is_sticky(err)) cudaGetLastError();
    *why = where + " (" + arch + ") cannot run this build's kernels (" + error_text(err) + ")";
    return "";
  }
  if (layout != nullptr) {
    std::size_t free_bytes = 0, total_bytes = 0;
    check(cudaMemGetInfo(&free_bytes, &total_bytes), "cudaMemGetInfo");
    if (free_bytes < layout->size_bytes() + kWorkingBytes) {
      *why = where + " has " + mib(free_bytes) + " free; the filter needs " +
             mib(layout->size_bytes()) + " and its pipeline " + mib(kWorkingBytes);
      return "";
    }
  }
  return arch;
}

}  // namespace

std::unique_ptr<DeviceRuntime> make_cuda_runtime() {
  return std::make_unique<CudaRuntime>();
}

int cuda_device_count(std::string* why) {
  int count = 0;
  const cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess) {
    cudaGetLastError();
    if (why != nullptr) *why = error_text(err);
    return 0;
  }
  if (count == 0 && why != nullptr) *why = "the driver reports 0 devices";
  return count;
}

std::string cuda_device_arch(std::string* why) {
  int device = 0;
  std::string reason;
  const std::string arch = usable_device(nullptr, &device, &reason);
  if (arch.empty() && why != nullptr) *why = reason;
  return arch;
}

std::unique_ptr<CudaEngine> make_cuda_engine(const Layout& layout, const std::string& arch) {
  int device = 0;
  std::string why;
  const std::string here = usable_device(nullptr, &device, &why);
  if (here.empty()) {
    throw BackendUnavailable("the CUDA backend cannot be used: " + why +
                             "; use backend cpu or automatic");
  }
  if (!arch.empty() && arch != here) {
    throw BackendUnavailable("CUDA implementation 'cuda/" + arch + "' is not available: device " +
                             std::to_string(device) + " is cuda/" + here);
  }
  return make_device_engine(layout, "cuda/" + here, device, std::make_unique<CudaRuntime>());
}

std::unique_ptr<CudaEngine> make_cuda_engine_if_usable(const Layout& layout, std::string* why) {
  if (layout.size_bytes() < tuning::kAutomaticMinFilterBytes) {
    *why = "a filter of " + std::to_string(layout.size_bytes()) + " bytes is under the " +
           mib(tuning::kAutomaticMinFilterBytes) + " that Backend::automatic puts on a GPU";
    return nullptr;
  }
  int device = 0;
  const std::string arch = usable_device(&layout, &device, why);
  if (arch.empty()) return nullptr;
  try {
    return make_device_engine(layout, "cuda/" + arch, device, std::make_unique<CudaRuntime>());
  } catch (const AllocationError& e) {
    *why = e.what();
    return nullptr;
  }
}

}  // namespace bulkbloom::detail
