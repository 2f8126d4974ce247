// The CUDA backend: the filter's bits in device memory, host spans streamed through pinned buffers
// on two streams, and whole-filter operations as small reduction kernels.
#include "cuda/cuda_engine.hpp"

#include <cuda_runtime.h>

#include <algorithm>
#include <bit>
#include <cstring>
#include <mutex>
#include <stdexcept>
#include <thread>
#include <utility>
#include <vector>

#include "bulkbloom/error.hpp"
#include "cuda/kernels.cuh"

namespace bulkbloom::detail {
namespace {

using gpu::grid_for;
using gpu::kThreadsPerBlock;

// Keys per pipeline chunk: 64 MiB of keys per copy, large enough that a copy runs at full link
// speed, small enough that two slots of pinned and device buffers stay modest.
constexpr std::uint32_t kChunkKeys = std::uint32_t{1} << 23;
// Largest lock table of insert_if_absent (bits): 1 MiB, so it stays in L2 beside the hot blocks.
constexpr std::uint64_t kMaxLockBits = std::uint64_t{1} << 23;
// Partial sums of the whole-filter reductions, added up on the host in a fixed order so results
// do not depend on scheduling.
constexpr unsigned kReductionBlocks = 1024;
// Host copies into pinned memory smaller than this stay on the calling thread.
constexpr std::size_t kParallelCopyBytes = std::size_t{8} << 20;

std::string error_text(cudaError_t err) {
  return std::string(cudaGetErrorName(err)) + ": " + cudaGetErrorString(err);
}

void check(cudaError_t err, const char* call) {
  if (err == cudaSuccess) return;
  throw DeviceError(std::string("CUDA call ") + call + " failed (" + error_text(err) + ")");
}

std::string mib(std::uint64_t bytes) {
  return std::to_string(bytes >> 20) + " MiB";
}

// Device memory, freed on destruction.
class DeviceMemory {
 public:
  DeviceMemory() = default;
  DeviceMemory(std::uint64_t bytes, const char* what) : bytes_(bytes) {
    if (bytes == 0) return;
    const cudaError_t err = cudaMalloc(&ptr_, bytes);
    if (err == cudaErrorMemoryAllocation) {
      cudaGetLastError();  // not sticky: clear it so later calls are unaffected
      std::size_t free_bytes = 0, total_bytes = 0;
      cudaMemGetInfo(&free_bytes, &total_bytes);
      throw AllocationError("cannot allocate " + std::to_string(bytes) + " bytes (" + mib(bytes) +
                            ") of GPU memory for " + what + ": the device has " + mib(free_bytes) +
                            " free of " + mib(total_bytes));
    }
    check(err, "cudaMalloc");
  }
  DeviceMemory(DeviceMemory&& o) noexcept
      : ptr_(std::exchange(o.ptr_, nullptr)), bytes_(std::exchange(o.bytes_, 0)) {}
  DeviceMemory& operator=(DeviceMemory&& o) noexcept {
    std::swap(ptr_, o.ptr_);
    std::swap(bytes_, o.bytes_);
    return *this;
  }
  ~DeviceMemory() {
    if (ptr_ != nullptr) cudaFree(ptr_);
  }
  template <typename T = void>
  T* get() const {
    return static_cast<T*>(ptr_);
  }
  std::uint64_t bytes() const { return bytes_; }

 private:
  void* ptr_ = nullptr;
  std::uint64_t bytes_ = 0;
};

// Page-locked host memory, freed on destruction.
class PinnedMemory {
 public:
  PinnedMemory() = default;
  explicit PinnedMemory(std::size_t bytes) {
    const cudaError_t err = cudaMallocHost(&ptr_, bytes);
    if (err == cudaErrorMemoryAllocation) {
      cudaGetLastError();
      throw AllocationError("cannot allocate " + mib(bytes) + " of pinned host memory");
    }
    check(err, "cudaMallocHost");
  }
  PinnedMemory(PinnedMemory&& o) noexcept : ptr_(std::exchange(o.ptr_, nullptr)) {}
  PinnedMemory& operator=(PinnedMemory&& o) noexcept {
    std::swap(ptr_, o.ptr_);
    return *this;
  }
  ~PinnedMemory() {
    if (ptr_ != nullptr) cudaFreeHost(ptr_);
  }
  template <typename T>
  T* get() const {
    return static_cast<T*>(ptr_);
  }

 private:
  void* ptr_ = nullptr;
};

// Copies host memory with several threads: one thread's memcpy into pinned memory is slower than
// a PCIe 5 link, and the copy sits on the streaming pipeline's critical path.
void parallel_copy(void* dst, const void* src, std::size_t bytes) {
  const unsigned workers = std::min(8u, std::max(1u, std::thread::hardware_concurrency()));
  if (bytes < kParallelCopyBytes || workers == 1) {
    std::memcpy(dst, src, bytes);
    return;
  }
  const std::size_t piece = (bytes / workers + 63) & ~std::size_t{63};
  std::vector<std::jthread> threads;
  for (unsigned w = 1; w < workers && w * piece < bytes; ++w) {
    const std::size_t begin = w * piece, len = std::min(piece, bytes - begin);
    threads.emplace_back([=] {
      std::memcpy(static_cast<char*>(dst) + begin, static_cast<const char*>(src) + begin, len);
    });
  }
  std::memcpy(dst, src, std::min(piece, bytes));
}

bool is_device_accessible(const void* p) {
  cudaPointerAttributes attributes{};
  if (cudaPointerGetAttributes(&attributes, p) != cudaSuccess) {
    cudaGetLastError();
    return false;
  }
  return attributes.type == cudaMemoryTypeDevice || attributes.type == cudaMemoryTypeManaged;
}

bool is_pinned_host(const void* p) {
  cudaPointerAttributes attributes{};
  if (cudaPointerGetAttributes(&attributes, p) != cudaSuccess) {
    cudaGetLastError();
    return false;
  }
  return attributes.type == cudaMemoryTypeHost;
}

void require_device_pointer(const void* p, const char* what) {
  if (p == nullptr) {
    throw std::invalid_argument(std::string(what) + " is a null pointer; expected device memory");
  }
  if (!is_device_accessible(p)) {
    throw std::invalid_argument(std::string(what) +
                                " is not device memory (it is host memory or unknown to CUDA); "
                                "pass memory from cudaMalloc, or use the Filter calls that take "
                                "host spans");
  }
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
                                unsigned long long* partials) {
  unsigned long long count = 0;
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

// One slot of the streaming pipeline: a stream, pinned staging and device buffers for a chunk.
struct Slot {
  cudaStream_t stream = nullptr;
  cudaEvent_t done = nullptr;
  PinnedMemory host_keys;
  PinnedMemory host_flags;
  DeviceMemory keys;
  DeviceMemory flags;
};

class CudaEngineImpl final : public CudaEngine {
 public:
  CudaEngineImpl(const Layout& layout, std::string name)
      : layout_(layout),
        name_(std::move(name)),
        bits_(layout.size_bytes(), "the filter's bits"),
        lock_bits_(std::clamp<std::uint64_t>(std::bit_ceil(layout.num_blocks), 32, kMaxLockBits)),
        locks_(lock_bits_ / 8, "insert_if_absent's block locks") {
    check(cudaMemset(bits_.get(), 0, bits_.bytes()), "cudaMemset");
    check(cudaMemset(locks_.get(), 0, locks_.bytes()), "cudaMemset");
  }

  ~CudaEngineImpl() override {
    for (Slot& slot : slots_) {
      if (slot.stream != nullptr) {
        cudaStreamSynchronize(slot.stream);
        cudaStreamDestroy(slot.stream);
      }
      if (slot.done != nullptr) cudaEventDestroy(slot.done);
    }
  }

  std::string implementation() const override { return name_; }
  unsigned threads() const override { return 1; }

  void insert(std::span<const std::uint64_t> keys, KeyMode mode) override {
    stream_keys(keys, {}, [&](Slot& slot, std::uint32_t n) {
      launch_insert(slot.keys.get<std::uint64_t>(), n, mode, slot.stream);
    });
  }

  void contains(std::span<const std::uint64_t> keys, KeyMode mode,
                std::span<std::uint8_t> out) const override {
    stream_keys(keys, out, [&](Slot& slot, std::uint32_t n) {
      launch_contains(slot.keys.get<std::uint64_t>(), n, mode, slot.flags.get<std::uint8_t>(),
                      slot.stream);
    });
  }

  std::uint64_t insert_if_absent(std::span<const std::uint64_t> keys, KeyMode mode,
                                 std::span<std::uint8_t> is_new) override {
    // Counted on the host from the flags: they come back anyway, and a device counter would have
    // to be shared between the two streams.
    stream_keys(keys, is_new, [&](Slot& slot, std::uint32_t n) {
      launch_insert_if_absent(slot.keys.get<std::uint64_t>(), n, mode,
                              slot.flags.get<std::uint8_t>(), nullptr, slot.stream);
    });
    std::uint64_t total = 0;
    for (std::uint8_t flag : is_new) total += flag;
    return total;
  }

  void insert_device(const std::uint64_t* keys, std::uint32_t n, void* stream) override {
    if (n == 0) return;
    require_device_pointer(keys, "keys");
    launch_insert(keys, n, KeyMode::hash_with_layout, static_cast<cudaStream_t>(stream));
  }

  void contains_device(const std::uint64_t* keys, std::uint32_t n, std::uint8_t* out,
                       void* stream) const override {
    if (n == 0) return;
    require_device_pointer(keys, "keys");
    require_device_pointer(out, "out");
    launch_contains(keys, n, KeyMode::hash_with_layout, out, static_cast<cudaStream_t>(stream));
  }

  void insert_if_absent_device(const std::uint64_t* keys, std::uint32_t n, std::uint8_t* is_new,
                               std::uint64_t* new_count, void* stream) override {
    if (n == 0) return;
    require_device_pointer(keys, "keys");
    require_device_pointer(is_new, "is_new");
    if (new_count != nullptr) require_device_pointer(new_count, "new_count");
    launch_insert_if_absent(keys, n, KeyMode::hash_with_layout, is_new,
                            reinterpret_cast<unsigned long long*>(new_count),
                            static_cast<cudaStream_t>(stream));
  }

  void combine(std::span<const std::byte> other, CombineOp op) override {
    // Through a bounded device buffer, so combining never needs a second filter's worth of GPU
    // memory.
    const std::uint64_t chunk = std::min<std::uint64_t>(other.size(), std::uint64_t{64} << 20);
    DeviceMemory staging(chunk, "merging filters");
    for (std::uint64_t offset = 0; offset < other.size(); offset += chunk) {
      const std::uint64_t bytes = std::min(chunk, other.size() - offset);
      check(cudaMemcpy(staging.get(), other.data() + offset, bytes, cudaMemcpyHostToDevice),
            "cudaMemcpy");
      combine_kernel<<<kReductionBlocks, kThreadsPerBlock>>>(
          reinterpret_cast<unsigned long long*>(bits_.get<std::byte>() + offset),
          staging.get<unsigned long long>(), bytes / 8, op);
      check(cudaGetLastError(), "combine kernel launch");
    }
    check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
  }

  void clear() override { check(cudaMemset(bits_.get(), 0, bits_.bytes()), "cudaMemset"); }

  std::uint64_t popcount() const override {
    DeviceMemory partials(kReductionBlocks * sizeof(unsigned long long), "a popcount");
    popcount_kernel<<<kReductionBlocks, kThreadsPerBlock>>>(
        bits_.get<unsigned long long>(), bits_.bytes() / 8, partials.get<unsigned long long>());
    check(cudaGetLastError(), "popcount kernel launch");
    return sum_partials<unsigned long long>(partials);
  }

  double current_fpr() const override {
    DeviceMemory partials(kReductionBlocks * sizeof(double), "an FPR estimate");
    with_geometry(layout_.shape, [&]<typename G>(G) {
      fpr_kernel<G><<<kReductionBlocks, kThreadsPerBlock>>>(
          bits_.get<typename G::Word>(), layout_.num_blocks, partials.get<double>());
    });
    check(cudaGetLastError(), "FPR kernel launch");
    return sum_partials<double>(partials) / static_cast<double>(layout_.num_blocks);
  }

  const std::byte* host_bytes() const override { return nullptr; }
  FilterRef view() const override { return FilterRef(bits_.get<std::byte>(), layout_); }

  void copy_bytes_to(std::span<std::byte> out) const override {
    check(cudaMemcpy(out.data(), bits_.get(), bits_.bytes(), cudaMemcpyDeviceToHost), "cudaMemcpy");
  }
  void copy_bytes_from(std::span<const std::byte> in) override {
    check(cudaMemcpy(bits_.get(), in.data(), bits_.bytes(), cudaMemcpyHostToDevice), "cudaMemcpy");
  }

 private:
  void launch_insert(const std::uint64_t* keys, std::uint32_t n, KeyMode mode,
                     cudaStream_t stream) {
    with_geometry(layout_.shape, [&]<typename G>(G) {
      gpu::insert_kernel<G, true><<<grid_for(n), kThreadsPerBlock, 0, stream>>>(
          layout_, bits_.get<std::byte>(), keys, n, mode);
    });
    check(cudaGetLastError(), "insert kernel launch");
  }

  void launch_contains(const std::uint64_t* keys, std::uint32_t n, KeyMode mode, std::uint8_t* out,
                       cudaStream_t stream) const {
    with_geometry(layout_.shape, [&]<typename G>(G) {
      gpu::contains_kernel<G><<<grid_for(n), kThreadsPerBlock, 0, stream>>>(
          layout_, bits_.get<std::byte>(), keys, n, mode, out);
    });
    check(cudaGetLastError(), "contains kernel launch");
  }

  void launch_insert_if_absent(const std::uint64_t* keys, std::uint32_t n, KeyMode mode,
                               std::uint8_t* is_new, unsigned long long* new_count,
                               cudaStream_t stream) {
    const gpu::LockTable locks{locks_.get<unsigned int>(),
                               static_cast<std::uint32_t>(lock_bits_ - 1)};
    with_geometry(layout_.shape, [&]<typename G>(G) {
      gpu::insert_if_absent_kernel<G, true><<<grid_for(n), kThreadsPerBlock, 0, stream>>>(
          layout_, bits_.get<std::byte>(), locks, keys, n, mode, is_new, new_count);
    });
    check(cudaGetLastError(), "insert_if_absent kernel launch");
  }

  template <typename T>
  T sum_partials(const DeviceMemory& partials) const {
    std::vector<T> host(kReductionBlocks);
    check(cudaMemcpy(host.data(), partials.get(), partials.bytes(), cudaMemcpyDeviceToHost),
          "cudaMemcpy");
    T total{};
    for (T v : host) total += v;
    return total;
  }

  // Makes both slots able to hold min(n, kChunkKeys) keys.
  void prepare_slots(std::size_t n) const {
    const std::uint32_t want =
        static_cast<std::uint32_t>(std::min<std::size_t>(std::bit_ceil(n), kChunkKeys));
    for (Slot& slot : slots_) {
      if (slot.stream == nullptr) {
        check(cudaStreamCreateWithFlags(&slot.stream, cudaStreamNonBlocking), "cudaStreamCreate");
        check(cudaEventCreateWithFlags(&slot.done, cudaEventDisableTiming), "cudaEventCreate");
      }
      if (slot_keys_ >= want) continue;
      // Free before allocating, so the old and the new buffers are never held together.
      slot.host_keys = PinnedMemory();
      slot.host_flags = PinnedMemory();
      slot.keys = DeviceMemory();
      slot.flags = DeviceMemory();
      slot.host_keys = PinnedMemory(want * sizeof(std::uint64_t));
      slot.host_flags = PinnedMemory(want);
      slot.keys = DeviceMemory(want * sizeof(std::uint64_t), "streamed keys");
      slot.flags = DeviceMemory(want, "streamed flags");
    }
    slot_keys_ = std::max(slot_keys_, want);
  }

  // Runs `launch(slot, n)` over `keys` chunk by chunk, alternating between the two slots: while
  // one slot's keys cross the bus and its kernel runs, the host stages the next chunk in the other
  // slot. Flags (if `out` is not empty) come back the same way. Returns when all work is done.
  template <typename Launch>
  void stream_keys(std::span<const std::uint64_t> keys, std::span<std::uint8_t> out,
                   Launch&& launch) const {
    if (keys.empty()) return;
    const std::lock_guard hold(pipeline_mutex_);
    prepare_slots(keys.size());
    // Pinned (registered or cudaMallocHost) input can be copied from directly.
    const bool pinned = is_pinned_host(keys.data());
    struct Pending {
      std::size_t offset = 0;
      std::uint32_t n = 0;
    };
    Pending pending[2];
    auto finish = [&](int s) {
      if (pending[s].n == 0) return;
      check(cudaEventSynchronize(slots_[s].done), "cudaEventSynchronize");
      if (!out.empty()) {
        std::memcpy(out.data() + pending[s].offset, slots_[s].host_flags.get<std::uint8_t>(),
                    pending[s].n);
      }
      pending[s].n = 0;
    };
    std::size_t chunk_index = 0;
    for (std::size_t offset = 0; offset < keys.size(); offset += slot_keys_, ++chunk_index) {
      const int s = static_cast<int>(chunk_index % 2);
      Slot& slot = slots_[s];
      finish(s);
      const auto n =
          static_cast<std::uint32_t>(std::min<std::size_t>(slot_keys_, keys.size() - offset));
      const std::uint64_t* source = keys.data() + offset;
      if (!pinned) {
        parallel_copy(slot.host_keys.get<std::uint64_t>(), source, n * sizeof(std::uint64_t));
        source = slot.host_keys.get<std::uint64_t>();
      }
      check(cudaMemcpyAsync(slot.keys.get(), source, n * sizeof(std::uint64_t),
                            cudaMemcpyHostToDevice, slot.stream),
            "cudaMemcpyAsync");
      launch(slot, n);
      if (!out.empty()) {
        check(cudaMemcpyAsync(slot.host_flags.get<std::uint8_t>(), slot.flags.get(), n,
                              cudaMemcpyDeviceToHost, slot.stream),
              "cudaMemcpyAsync");
      }
      check(cudaEventRecord(slot.done, slot.stream), "cudaEventRecord");
      pending[s] = {offset, n};
    }
    finish(0);
    finish(1);
  }

  Layout layout_;
  std::string name_;
  DeviceMemory bits_;
  std::uint64_t lock_bits_;
  DeviceMemory locks_;
  // The pipeline is scratch space shared by all host-span calls, const ones included; the mutex
  // keeps concurrent calls on one filter from sharing a slot.
  mutable std::mutex pipeline_mutex_;
  mutable Slot slots_[2];
  mutable std::uint32_t slot_keys_ = 0;
};

}  // namespace

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
  if (cuda_device_count(why) == 0) return "";
  int device = 0;
  check(cudaGetDevice(&device), "cudaGetDevice");
  int major = 0, minor = 0;
  check(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device),
        "cudaDeviceGetAttribute");
  check(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device),
        "cudaDeviceGetAttribute");
  return "sm_" + std::to_string(major) + std::to_string(minor);
}

std::unique_ptr<CudaEngine> make_cuda_engine(const Layout& layout, const std::string& arch) {
  std::string why;
  const std::string here = cuda_device_arch(&why);
  if (here.empty()) {
    throw BackendUnavailable("the CUDA backend is built but no CUDA device was found (" + why +
                             "); use backend cpu or automatic");
  }
  if (!arch.empty() && arch != here) {
    throw BackendUnavailable("CUDA implementation 'cuda/" + arch +
                             "' is not available: the current device is cuda/" + here);
  }
  return std::make_unique<CudaEngineImpl>(layout, "cuda/" + here);
}

}  // namespace bulkbloom::detail
