// GPU throughput of insert, contains and insert_if_absent beside the device's own limits, measured
// in the same process: random block reads, random atomicOr on blocks, device-to-device copy and
// host-to-device copy bandwidth. Prints every measurement, then the summary table last.
//
// Timing: CUDA events around each kernel on the default stream; each figure is the median of
// several repetitions after one warm-up. Keys live in device memory unless the row says "host".
#include <cuda_runtime.h>
#include <thrust/system/cuda/execution_policy.h>
#include <bulkbloom/bulkbloom.hpp>
#include <bulkbloom/cuda.hpp>

#include <algorithm>
#include <bit>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "cuda/exact_insert_if_absent.hpp"
#include "cuda/kernels.cuh"

namespace bulkbloom::bench {
namespace {

namespace gpu = detail::gpu;
using detail::GeometrySb256;
using detail::KeyMode;

void check(cudaError_t err, const char* what) {
  if (err != cudaSuccess) {
    std::fprintf(stderr, "gpu_bench: %s failed: %s\n", what, cudaGetErrorString(err));
    std::exit(1);
  }
}

template <typename T>
T* device_alloc(std::size_t n) {
  T* p = nullptr;
  check(cudaMalloc(&p, n * sizeof(T)), "cudaMalloc");
  return p;
}

// SplitMix64 of the index: distinct, uniform keys without a host round trip.
__global__ void fill_keys(std::uint64_t* keys, std::uint64_t n, std::uint64_t seed) {
  const std::uint64_t stride = std::uint64_t{gridDim.x} * blockDim.x;
  for (std::uint64_t i = std::uint64_t{blockIdx.x} * blockDim.x + threadIdx.x; i < n; i += stride) {
    std::uint64_t z = seed + (i + 1) * 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    keys[i] = z ^ (z >> 31);
  }
}

__device__ __forceinline__ std::uint64_t mix(std::uint64_t i) {
  return detail::xxh64_u64(i, 0x5eed);
}

// The random-read limit: each thread loads one random aligned block (the filter's block size,
// with the same 16-byte vector loads as contains) from the buffer; no keys, no hashing of keys.
template <typename G>
__global__ void random_read_limit(const std::byte* buffer, std::uint32_t num_blocks,
                                  std::uint32_t n, unsigned long long* sink) {
  const std::uint32_t i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const std::uint32_t block = detail::block_of(mix(i), num_blocks);
  const auto lanes = gpu::load_block<G>(gpu::block_lanes<G>(const_cast<std::byte*>(buffer), block));
  unsigned long long x = 0;
  for (auto v : lanes.lane) x ^= v;
  if (x == 0x123456789abcdefull) *sink = x;  // keeps the loads alive; practically never true
}

// The random-atomic limit: each thread ORs one bit into every 64-bit lane of one random block,
// the same atomics per block as insert without its read.
template <typename G>
__global__ void random_atomic_limit(std::byte* buffer, std::uint32_t num_blocks, std::uint32_t n) {
  const std::uint32_t i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const std::uint64_t h = mix(i);
  unsigned long long* lanes = gpu::block_lanes<G>(buffer, detail::block_of(h, num_blocks));
  for (int l = 0; l < gpu::Lanes<G>::kCount; ++l)
    atomicOr(lanes + l, 1ull << ((h >> (6 * l)) & 63));
}

// Median milliseconds of `reps` runs of `body` (after one warm-up), `before` run untimed first.
double median_ms(
    int reps, const std::function<void()>& body, const std::function<void()>& before = [] {}) {
  cudaEvent_t start, stop;
  check(cudaEventCreate(&start), "cudaEventCreate");
  check(cudaEventCreate(&stop), "cudaEventCreate");
  std::vector<float> times;
  for (int r = 0; r <= reps; ++r) {
    before();
    check(cudaEventRecord(start), "cudaEventRecord");
    body();
    check(cudaEventRecord(stop), "cudaEventRecord");
    check(cudaEventSynchronize(stop), "cudaEventSynchronize");
    check(cudaGetLastError(), "kernel");
    float ms = 0;
    cudaEventElapsedTime(&ms, start, stop);
    if (r > 0) times.push_back(ms);
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  std::sort(times.begin(), times.end());
  return times[times.size() / 2];
}

struct Row {
  std::string filter, op;
  double rate;  // keys/s (or bytes/s for bandwidth rows)
  std::string limit_name;
  double limit;
};
std::vector<Row> table;

void report(const std::string& filter, const std::string& op, double rate,
            const std::string& limit_name, double limit) {
  std::printf("  %-8s %-34s %9.2f G/s   %-26s %9.2f G/s  %6.1f %%\n", filter.c_str(), op.c_str(),
              rate / 1e9, limit_name.c_str(), limit / 1e9, 100.0 * rate / limit);
  std::fflush(stdout);
  table.push_back({filter, op, rate, limit_name, limit});
}

template <typename G>
void bench_filter(const char* name, std::uint64_t filter_bytes, const std::uint64_t* keys,
                  std::uint32_t probe_keys, std::uint8_t* flags, int reps) {
  const Layout layout{Shape::sb256, filter_bytes / G::kBlockBytes};
  Options options;
  options.backend = Backend::cuda;
  Filter filter(layout, options);
  std::byte* bits = filter.view().data();
  const auto num_blocks = static_cast<std::uint32_t>(layout.num_blocks);
  // Insert at about 32 bits of filter per key (a 1e-5 FPR load for sb256), at most the probes.
  const auto fill_keys_n =
      static_cast<std::uint32_t>(std::min<std::uint64_t>(probe_keys, filter_bytes * 8 / 32));
  std::printf("%s: %s, %u keys inserted, %u probed\n", name, layout.describe().c_str(), fill_keys_n,
              probe_keys);
  unsigned long long* sink = device_alloc<unsigned long long>(1);
  const auto clear = [&] { check(cudaMemset(bits, 0, filter_bytes), "cudaMemset"); };

  const double read_ms = median_ms(reps, [&] {
    random_read_limit<G>
        <<<gpu::grid_for(probe_keys), gpu::kThreadsPerBlock>>>(bits, num_blocks, probe_keys, sink);
  });
  const double read_limit = probe_keys / (read_ms * 1e-3);
  const double atomic_ms = median_ms(
      reps,
      [&] {
        random_atomic_limit<G>
            <<<gpu::grid_for(fill_keys_n), gpu::kThreadsPerBlock>>>(bits, num_blocks, fill_keys_n);
      },
      clear);
  const double atomic_limit = fill_keys_n / (atomic_ms * 1e-3);
  std::printf(
      "  limits: random %d-byte block reads %.2f G/s (%.0f GB/s of sectors), random "
      "atomicOr blocks (%d x 64-bit) %.2f G/s\n",
      G::kBlockBytes, read_limit / 1e9, read_limit * G::kBlockBytes / 1e9, gpu::Lanes<G>::kCount,
      atomic_limit / 1e9);

  const auto time_insert = [&](auto skip) {
    return median_ms(
        reps,
        [&] {
          gpu::insert_kernel<G, decltype(skip)::value>
              <<<gpu::grid_for(fill_keys_n), gpu::kThreadsPerBlock>>>(
                  layout, bits, keys, fill_keys_n, KeyMode::hash_with_layout);
        },
        clear);
  };
  const double insert_skip = fill_keys_n / (time_insert(std::true_type{}) * 1e-3);
  const double insert_always = fill_keys_n / (time_insert(std::false_type{}) * 1e-3);
  report(name, "insert (skip set lanes) [default]", insert_skip, "random atomicOr limit",
         atomic_limit);
  report(name, "insert (atomicOr every lane)", insert_always, "random atomicOr limit",
         atomic_limit);

  // contains over a filter holding the first fill_keys_n keys.
  clear();
  gpu::insert_kernel<G, true><<<gpu::grid_for(fill_keys_n), gpu::kThreadsPerBlock>>>(
      layout, bits, keys, fill_keys_n, KeyMode::hash_with_layout);
  const double contains =
      probe_keys /
      (median_ms(reps,
                 [&] {
                   gpu::contains_kernel<G><<<gpu::grid_for(probe_keys), gpu::kThreadsPerBlock>>>(
                       layout, bits, keys, probe_keys, KeyMode::hash_with_layout, flags);
                 }) *
       1e-3);
  report(name, "contains", contains, "random block read limit", read_limit);

  // Exact insert_if_absent (the library's algorithm), scratch allocated once outside the timing.
  std::uint32_t* scratch = device_alloc<std::uint32_t>(2 * std::size_t{fill_keys_n});
  const detail::exact::Scratch arrays{scratch, scratch + fill_keys_n};
  const auto time_if_absent = [&](bool repeats) {
    return median_ms(
        reps,
        [&] {
          detail::exact::insert_if_absent<G>(thrust::cuda::par_nosync.on(nullptr), layout, bits,
                                             keys, fill_keys_n, KeyMode::hash_with_layout, flags,
                                             nullptr, arrays);
        },
        [&] {
          clear();
          if (repeats) {
            gpu::insert_kernel<G, true><<<gpu::grid_for(fill_keys_n), gpu::kThreadsPerBlock>>>(
                layout, bits, keys, fill_keys_n, KeyMode::hash_with_layout);
          }
        });
  };
  report(name, "insert_if_absent new (exact)", fill_keys_n / (time_if_absent(false) * 1e-3),
         "contains", contains);
  report(name, "insert_if_absent repeats (exact)", fill_keys_n / (time_if_absent(true) * 1e-3),
         "contains", contains);
  cudaFree(scratch);
  cudaFree(sink);
}

double copy_bandwidth(void* dst, const void* src, std::size_t bytes, cudaMemcpyKind kind,
                      int reps) {
  return bytes /
         (median_ms(reps, [&] { check(cudaMemcpy(dst, src, bytes, kind), "cudaMemcpy"); }) * 1e-3);
}

// Host-resident keys through the Filter API (pinned staging on two streams), against the measured
// host-to-device bandwidth; keys/s x 8 bytes is the link rate the pipeline achieves.
void bench_host_streaming(std::uint64_t host_keys_n, double h2d_pinned) {
  const Layout layout{Shape::sb256, (std::uint64_t{4} << 30) / 32};
  Options options;
  options.backend = Backend::cuda;
  Filter filter(layout, options);
  std::vector<std::uint64_t> pageable(host_keys_n);
  for (std::uint64_t i = 0; i < host_keys_n; ++i) pageable[i] = detail::xxh64_u64(i, 99);
  std::vector<std::uint8_t> flags(host_keys_n);
  std::uint64_t* pinned = nullptr;
  check(cudaMallocHost(&pinned, host_keys_n * 8), "cudaMallocHost");
  std::copy(pageable.begin(), pageable.end(), pinned);
  const std::span<const std::uint64_t> from_pinned(pinned, host_keys_n);
  std::printf("host-resident keys: %llu keys (%.1f GiB) into %s\n",
              static_cast<unsigned long long>(host_keys_n), host_keys_n * 8.0 / (1 << 30),
              layout.describe().c_str());
  const auto key_bytes_rate = [&](const std::function<void()>& call) {
    return host_keys_n * 8.0 / (median_ms(3, call) * 1e-3);
  };
  report("host", "insert, pageable keys (bytes/s)",
         key_bytes_rate([&] { filter.insert(pageable); }), "H2D pinned bandwidth", h2d_pinned);
  report("host", "insert, pinned keys (bytes/s)",
         key_bytes_rate([&] { filter.insert(from_pinned); }), "H2D pinned bandwidth", h2d_pinned);
  report("host", "contains, pageable keys (bytes/s)",
         key_bytes_rate([&] { filter.contains(pageable, flags); }), "H2D pinned bandwidth",
         h2d_pinned);
  report("host", "insert_if_absent, pinned (bytes/s)",
         key_bytes_rate([&] { filter.insert_if_absent(from_pinned, flags); }),
         "H2D pinned bandwidth", h2d_pinned);
  cudaFreeHost(pinned);
}

int run(int argc, char** argv) {
  // --quick: small sizes, to check that the program works (not for figures).
  const bool quick = argc > 1 && std::string(argv[1]) == "--quick";
  int device = 0;
  cudaDeviceProp prop{};
  check(cudaGetDevice(&device), "cudaGetDevice");
  check(cudaGetDeviceProperties(&prop, device), "cudaGetDeviceProperties");
  std::printf("device: %s, sm_%d%d, %d SMs, %.1f GiB, L2 %.0f MiB\n", prop.name, prop.major,
              prop.minor, prop.multiProcessorCount, prop.totalGlobalMem / double(1 << 30),
              prop.l2CacheSize / double(1 << 20));

  const std::uint32_t probe_keys = quick ? (1u << 24) : (1u << 30);
  std::uint64_t* keys = device_alloc<std::uint64_t>(probe_keys);
  std::uint8_t* flags = device_alloc<std::uint8_t>(probe_keys);
  fill_keys<<<4096, 256>>>(keys, probe_keys, 42);
  check(cudaDeviceSynchronize(), "fill_keys");

  // Copy bandwidths over a 1 GiB buffer (4 GiB for device-to-device, counting read + write).
  const std::size_t copy_bytes = quick ? (std::size_t{64} << 20) : (std::size_t{1} << 30);
  void *d_a = device_alloc<std::byte>(copy_bytes * 4),
       *d_b = device_alloc<std::byte>(copy_bytes * 4);
  const double d2d = 2 * copy_bandwidth(d_b, d_a, copy_bytes * 4, cudaMemcpyDeviceToDevice, 5);
  void* h_pinned = nullptr;
  check(cudaMallocHost(&h_pinned, copy_bytes), "cudaMallocHost");
  std::memset(h_pinned, 1, copy_bytes);
  const double h2d = copy_bandwidth(d_a, h_pinned, copy_bytes, cudaMemcpyHostToDevice, 5);
  std::vector<std::byte> h_pageable(copy_bytes, std::byte{1});
  const double h2d_pageable =
      copy_bandwidth(d_a, h_pageable.data(), copy_bytes, cudaMemcpyHostToDevice, 5);
  cudaFree(d_a);
  cudaFree(d_b);
  cudaFreeHost(h_pinned);
  std::printf(
      "bandwidth: device-to-device %.0f GB/s (read + write), host-to-device pinned %.1f "
      "GB/s, pageable %.1f GB/s\n",
      d2d / 1e9, h2d / 1e9, h2d_pageable / 1e9);

  const int reps = quick ? 3 : 5;
  bench_filter<GeometrySb256>("32 MiB", std::uint64_t{32} << 20, keys, probe_keys, flags, 10);
  bench_filter<GeometrySb256>(quick ? "256 MiB" : "4 GiB",
                              quick ? (std::uint64_t{256} << 20) : (std::uint64_t{4} << 30), keys,
                              probe_keys, flags, reps);
  cudaFree(keys);
  cudaFree(flags);
  bench_host_streaming(quick ? (std::uint64_t{1} << 24) : (std::uint64_t{1} << 28), h2d);

  std::printf(
      "\n== summary (sb256; keys/s unless marked bytes/s; limits measured in this run; "
      "device-to-device copy %.0f GB/s) ==\n",
      d2d / 1e9);
  std::printf("%-8s %-42s %12s  %-24s %12s  %7s\n", "filter", "operation", "rate", "limit",
              "limit rate", "% limit");
  for (const Row& r : table) {
    std::printf("%-8s %-42s %10.2f G  %-24s %10.2f G  %6.1f%%\n", r.filter.c_str(), r.op.c_str(),
                r.rate / 1e9, r.limit_name.c_str(), r.limit / 1e9, 100.0 * r.rate / r.limit);
  }
  return 0;
}

}  // namespace
}  // namespace bulkbloom::bench

int main(int argc, char** argv) {
  try {
    return bulkbloom::bench::run(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "gpu_bench: %s\n", e.what());
    return 1;
  }
}
