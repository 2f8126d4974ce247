// The GPU benchmark and the GPU's answers checked at full size, in one program that
// bench/gpu_check.sh runs on a GPU machine.
//
//   --probe   says which device this is and exits 1 at once when none is usable.
//   --check   bytes (popcount, hash of the bit array, byte-for-byte compare) and flags of insert,
//             contains and exact insert_if_absent through the device-pointer API, against the
//             multithreaded CPU backend, for sb256 and sb512 x high32 and full64 at 32 MiB, 1 GiB
//             and 8 GiB (byte offsets past 4 GiB); exits 1 on any difference.
//   (none)    throughput of insert, contains and exact insert_if_absent with keys resident in
//             device memory, at 32 MiB, 1 GiB and 8 GiB for sb256 and sb512, beside the device's
//             measured limits (random block reads, random atomicOr on blocks) and the datasheet's
//             memory bandwidth over the sectors a key touches; then host-resident keys through the
//             Filter API, end to end through PCIe, labelled as such. The summary table is last.
//   --quick   small sizes, to check that the program works (not for figures).
//
// Timing: CUDA events around each kernel on the default stream; each figure is the median of
// several repetitions after one warm-up. The timing and the random block-read probe are the
// library's (cuda/device_bench.hpp), which `bulkbloom bench`'s GPU section also measures with.
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
#include <memory>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "core/splitmix64.hpp"
#include "cuda/cuda_engine.hpp"
#include "cuda/device_bench.hpp"
#include "cuda/exact_insert_if_absent.hpp"
#include "cuda/kernels.cuh"
#include "cuda/radix_sort_by_block.cuh"

namespace bulkbloom::bench {
namespace {

namespace gpu = detail::gpu;
using detail::GeometrySb256;
using detail::GeometrySb512;
using detail::KeyMode;

// The memory bandwidth on the device's datasheet (H200: 4.8 TB/s of HBM3e); --datasheet-tbps
// sets another device's. A random key touches whole 32-byte sectors, so keys/s can be at most
// this over the block's bytes.
double datasheet_bytes_per_s = 4.8e12;

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

// Thrust's allocator shape over cudaMallocAsync on the default stream.
struct StreamOrderedAllocator {
  using value_type = char;
  char* allocate(std::ptrdiff_t bytes) {
    void* p = nullptr;
    check(cudaMallocAsync(&p, static_cast<std::size_t>(bytes), nullptr), "cudaMallocAsync");
    return static_cast<char*>(p);
  }
  // Called from Thrust's destructors, maybe while an exception unwinds: must not throw. A
  // failure here shows in the next call's error.
  void deallocate(char* p, std::size_t) { cudaFreeAsync(p, nullptr); }
};

// SplitMix64 of the index: distinct, uniform keys without a host round trip.
__global__ void fill_keys(std::uint64_t* keys, std::uint64_t n, std::uint64_t seed) {
  const std::uint64_t stride = std::uint64_t{gridDim.x} * blockDim.x;
  for (std::uint64_t i = std::uint64_t{blockIdx.x} * blockDim.x + threadIdx.x; i < n; i += stride) {
    keys[i] = detail::splitmix64_mix(seed + (i + 1) * detail::kSplitMix64Gamma);
  }
}

__device__ __forceinline__ std::uint64_t mix(std::uint64_t i) {
  return detail::xxh64_u64(i, 0x5eed);
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

// The library's CUDA runtime, on the default stream: every figure here is timed as the CLI's GPU
// section times it (cuda/device_bench.hpp).
detail::DeviceRuntime& runtime() {
  static const std::unique_ptr<detail::DeviceRuntime> rt = detail::make_cuda_runtime();
  return *rt;
}

// Items/s of `items` items: the median of `reps` runs of `body` (after one warm-up), each timed by
// CUDA events on the default stream, `before` run untimed first.
double rate(
    std::uint64_t items, int reps, const std::function<void()>& body,
    const std::function<void()>& before = [] {}) {
  const std::vector<double> ms =
      detail::time_on_stream(runtime(), nullptr, static_cast<unsigned>(reps), body, before);
  check(cudaGetLastError(), "kernel");
  return detail::rate_of("", items, ms).keys_per_s;
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
  std::printf("  %-14s %-34s %9.2f G/s   %-26s %9.2f G/s  %6.1f %%\n", filter.c_str(), op.c_str(),
              rate / 1e9, limit_name.c_str(), limit / 1e9, 100.0 * rate / limit);
  std::fflush(stdout);
  table.push_back({filter, op, rate, limit_name, limit});
}

template <typename G>
void bench_filter(const std::string& size_name, std::uint64_t filter_bytes,
                  const std::uint64_t* keys, std::uint32_t probe_keys, std::uint8_t* flags,
                  int reps) {
  const Layout layout{G::kShape, filter_bytes / G::kBlockBytes};
  const std::string name = std::string(G::kName) + " " + size_name;
  const double datasheet = datasheet_bytes_per_s / G::kBlockBytes;
  Options options;
  options.backend = Backend::cuda;
  Filter filter(layout, options);
  std::byte* bits = filter.view().data();
  const auto num_blocks = static_cast<std::uint32_t>(layout.num_blocks);
  // Insert at about 32 bits of filter per key (a 1e-5 FPR load for sb256), at most the probes.
  const auto fill_keys_n =
      static_cast<std::uint32_t>(std::min<std::uint64_t>(probe_keys, filter_bytes * 8 / 32));
  std::printf("%s: %s, %u keys inserted, %u probed\n", name.c_str(), layout.describe().c_str(),
              fill_keys_n, probe_keys);
  const auto clear = [&] { check(cudaMemset(bits, 0, filter_bytes), "cudaMemset"); };

  const double read_limit =
      detail::probe_random_block_reads(runtime(), nullptr, layout, bits, probe_keys, reps)
          .keys_per_s;
  const double atomic_limit = rate(
      fill_keys_n, reps,
      [&] {
        random_atomic_limit<G>
            <<<gpu::grid_for(fill_keys_n), gpu::kThreadsPerBlock>>>(bits, num_blocks, fill_keys_n);
      },
      clear);
  std::printf(
      "  limits: random %d-byte block reads %.2f G/s (%.0f GB/s of sectors), random "
      "atomicOr blocks (%d x 64-bit) %.2f G/s\n",
      G::kBlockBytes, read_limit / 1e9, read_limit * G::kBlockBytes / 1e9, gpu::Lanes<G>::kCount,
      atomic_limit / 1e9);

  const auto time_insert = [&](auto skip) {
    return rate(
        fill_keys_n, reps,
        [&] {
          gpu::insert_kernel<G, decltype(skip)::value>
              <<<gpu::grid_for(fill_keys_n), gpu::kThreadsPerBlock>>>(
                  layout, bits, keys, fill_keys_n, KeyMode::hash_with_layout);
        },
        clear);
  };
  const double insert_skip = time_insert(std::true_type{});
  const double insert_always = time_insert(std::false_type{});
  report(name, "insert (skip set lanes) [default]", insert_skip, "random atomicOr limit",
         atomic_limit);
  report(name, "insert (atomicOr every lane)", insert_always, "random atomicOr limit",
         atomic_limit);

  // contains over a filter holding the first fill_keys_n keys.
  clear();
  gpu::insert_kernel<G, true><<<gpu::grid_for(fill_keys_n), gpu::kThreadsPerBlock>>>(
      layout, bits, keys, fill_keys_n, KeyMode::hash_with_layout);
  const double contains = rate(probe_keys, reps, [&] {
    gpu::contains_kernel<G><<<gpu::grid_for(probe_keys), gpu::kThreadsPerBlock>>>(
        layout, bits, keys, probe_keys, KeyMode::hash_with_layout, flags);
  });
  report(name, "contains", contains, "random block read limit", read_limit);
  report(name, "contains", contains, "datasheet bandwidth", datasheet);

  // Exact insert_if_absent (the library's algorithm), scratch allocated once outside the timing.
  constexpr std::uint32_t tile = detail::exact::kDeviceTileKeys;
  auto* scratch =
      device_alloc<std::byte>(detail::exact::scratch_bytes(fill_keys_n, tile, G::kBlockBytes));
  const detail::exact::Scratch arrays =
      detail::exact::carve_scratch(scratch, fill_keys_n, tile, G::kBlockBytes);
  // Temporary storage as the library takes it: stream-ordered, on the default stream.
  StreamOrderedAllocator allocator;
  const auto exact_call = [&](const std::uint64_t* batch) {
    detail::exact::insert_if_absent<G>(thrust::cuda::par_nosync(allocator).on(nullptr), layout,
                                       bits, batch, fill_keys_n, KeyMode::hash_with_layout, flags,
                                       nullptr, arrays,
                                       detail::exact::RadixSortByBlock<StreamOrderedAllocator>{
                                           &allocator, nullptr, layout.num_blocks});
  };
  const auto time_if_absent = [&](bool repeats) {
    return rate(
        fill_keys_n, reps, [&] { exact_call(keys); },
        [&] {
          clear();
          if (repeats) {
            gpu::insert_kernel<G, true><<<gpu::grid_for(fill_keys_n), gpu::kThreadsPerBlock>>>(
                layout, bits, keys, fill_keys_n, KeyMode::hash_with_layout);
          }
        });
  };
  // New keys' bits must be written, so insert bounds them; repeats are settled by a read.
  report(name, "insert_if_absent new (exact)", time_if_absent(false), "insert [default]",
         insert_skip);
  report(name, "insert_if_absent repeats (exact)", time_if_absent(true), "contains", contains);
  // One key fill_keys_n times: a single run as long as the batch.
  std::uint64_t* same = device_alloc<std::uint64_t>(fill_keys_n);
  check(cudaMemset(same, 0x5a, std::size_t{fill_keys_n} * 8), "cudaMemset");
  const double all_equal = rate(
      fill_keys_n, reps, [&] { exact_call(same); }, clear);
  report(name, "insert_if_absent all equal (exact)", all_equal, "contains", contains);
  cudaFree(same);
  cudaFree(scratch);
}

double copy_bandwidth(void* dst, const void* src, std::size_t bytes, cudaMemcpyKind kind,
                      int reps) {
  return rate(bytes, reps, [&] { check(cudaMemcpy(dst, src, bytes, kind), "cudaMemcpy"); });
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
    return rate(host_keys_n * 8, 3, call);
  };
  const std::string host = "host->PCIe";
  report(host, "insert, pageable keys (bytes/s)", key_bytes_rate([&] { filter.insert(pageable); }),
         "H2D pinned bandwidth", h2d_pinned);
  report(host, "insert, pinned keys (bytes/s)", key_bytes_rate([&] { filter.insert(from_pinned); }),
         "H2D pinned bandwidth", h2d_pinned);
  report(host, "contains, pageable keys (bytes/s)",
         key_bytes_rate([&] { filter.contains(pageable, flags); }), "H2D pinned bandwidth",
         h2d_pinned);
  report(host, "insert_if_absent, pinned (bytes/s)",
         key_bytes_rate([&] { filter.insert_if_absent(from_pinned, flags); }),
         "H2D pinned bandwidth", h2d_pinned);
  cudaFreeHost(pinned);
}

// SplitMix64 keys on the host, as fill_keys makes them on the device.
std::vector<std::uint64_t> host_keys(std::uint64_t n, std::uint64_t seed) {
  std::vector<std::uint64_t> keys(n);
  detail::SplitMix64 stream(seed);
  for (auto& key : keys) key = stream.next();
  return keys;
}

// A hash of a bit array (XXH64 of each 8-byte word, folded in order per 1/16th, then the 16
// folded), with 16 threads: 8 GiB in about a second.
std::uint64_t bits_hash(std::span<const std::byte> bytes) {
  constexpr unsigned kParts = 16;
  const std::uint64_t words = bytes.size() / 8, per_part = (words + kParts - 1) / kParts;
  std::uint64_t part_hash[kParts] = {};
  {
    std::vector<std::jthread> threads;
    for (unsigned p = 0; p < kParts; ++p) {
      threads.emplace_back([&, p] {
        std::uint64_t h = p;
        for (std::uint64_t w = p * per_part; w < std::min(words, (p + 1) * per_part); ++w) {
          std::uint64_t word;
          std::memcpy(&word, bytes.data() + 8 * w, 8);
          h = detail::xxh64_u64(word, h);
        }
        part_hash[p] = h;
      });
    }
  }
  std::uint64_t h = 0;
  for (std::uint64_t part : part_hash) h = detail::xxh64_u64(part, h);
  return h;
}

template <typename T>
T* to_device(const std::vector<T>& host) {
  T* p = device_alloc<T>(std::max<std::size_t>(host.size(), 1));
  check(cudaMemcpy(p, host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice), "cudaMemcpy");
  return p;
}

template <typename T>
std::vector<T> to_host(const T* device, std::size_t n) {
  std::vector<T> out(n);
  check(cudaMemcpy(out.data(), device, n * sizeof(T), cudaMemcpyDeviceToHost), "cudaMemcpy");
  return out;
}

// Index of the first difference, or -1.
template <typename T>
long long first_difference(std::span<const T> a, std::span<const T> b) {
  const auto at = std::mismatch(a.begin(), a.end(), b.begin(), b.end());
  return at.first == a.end() && at.second == b.end() ? -1 : at.first - a.begin();
}

// One --check case: a GPU filter fed through the device-pointer API, then through the host-span
// calls, against the CPU backend (all its threads). Prints one line; returns whether everything
// matched.
bool check_case(Shape shape, BlockIndex index, std::uint64_t filter_bytes,
                const std::string& size_name, std::uint64_t n) {
  const Layout layout{shape, filter_bytes / static_cast<std::uint64_t>(block_bytes(shape)),
                      KeyHash::xxh64, 11, index};
  Options on_gpu, on_cpu;
  on_gpu.backend = Backend::cuda;
  on_cpu.backend = Backend::cpu;
  Filter gpu(layout, on_gpu), cpu(layout, on_cpu);
  std::string verdict;
  const auto fail = [&](const std::string& what) {
    verdict += (verdict.empty() ? "" : "; ") + what;
  };

  const auto inserted = host_keys(n, 1000 + filter_bytes);
  std::uint64_t* d_keys = to_device(inserted);
  cuda::insert(gpu, d_keys, n);
  cpu.insert(inserted);

  // Probes: half inserted keys, half fresh ones.
  auto probes = host_keys(n / 2, 2000 + filter_bytes);
  probes.insert(probes.end(), inserted.begin(), inserted.begin() + n / 2);
  std::uint64_t* d_probes = to_device(probes);
  std::uint8_t* d_flags = device_alloc<std::uint8_t>(probes.size());
  cuda::contains(gpu, d_probes, probes.size(), d_flags);
  std::vector<std::uint8_t> cpu_flags(probes.size());
  cpu.contains(probes, cpu_flags);
  if (const long long at =
          first_difference<std::uint8_t>(to_host(d_flags, probes.size()), cpu_flags);
      at >= 0) {
    fail("contains differs at key " + std::to_string(at));
  }

  // insert_if_absent: fresh keys, inserted keys, and 64 hot keys repeated through the batch.
  auto batch = host_keys(n / 2, 3000 + filter_bytes);
  batch.insert(batch.end(), inserted.begin() + n / 2, inserted.end());
  for (std::size_t i = 0; i < batch.size(); i += 7) batch[i] = batch[(i / 7) % 64];
  std::uint64_t* d_batch = to_device(batch);
  std::uint8_t* d_new = device_alloc<std::uint8_t>(batch.size());
  std::uint64_t* d_count = to_device(std::vector<std::uint64_t>{0});
  cuda::insert_if_absent(gpu, d_batch, batch.size(), d_new, d_count);
  std::vector<std::uint8_t> cpu_new(batch.size());
  const std::uint64_t cpu_count = cpu.insert_if_absent(batch, cpu_new);
  if (const long long at = first_difference<std::uint8_t>(to_host(d_new, batch.size()), cpu_new);
      at >= 0) {
    fail("insert_if_absent flags differ at key " + std::to_string(at));
  }
  const std::uint64_t gpu_count = to_host(d_count, 1)[0];
  if (gpu_count != cpu_count) {
    fail("new keys " + std::to_string(gpu_count) + " vs " + std::to_string(cpu_count));
  }

  // The same through the host-span pipeline that Filter's own calls take (pageable memory, chunk
  // by chunk: at the full size more keys than one chunk): half fresh keys, half the batch's.
  auto span_batch = host_keys(n / 2, 4000 + filter_bytes);
  span_batch.insert(span_batch.end(), batch.begin(), batch.begin() + n / 2);
  std::vector<std::uint8_t> gpu_span_new(span_batch.size()), cpu_span_new(span_batch.size());
  const std::uint64_t gpu_span_count = gpu.insert_if_absent(span_batch, gpu_span_new);
  const std::uint64_t cpu_span_count = cpu.insert_if_absent(span_batch, cpu_span_new);
  if (const long long at = first_difference<std::uint8_t>(gpu_span_new, cpu_span_new); at >= 0) {
    fail("host-span insert_if_absent flags differ at key " + std::to_string(at));
  }
  if (gpu_span_count != cpu_span_count) {
    fail("host-span new keys " + std::to_string(gpu_span_count) + " vs " +
         std::to_string(cpu_span_count));
  }
  std::vector<std::uint8_t> gpu_span_has(probes.size());
  gpu.contains(probes, gpu_span_has);
  cpu.contains(probes, cpu_flags);
  if (const long long at = first_difference<std::uint8_t>(gpu_span_has, cpu_flags); at >= 0) {
    fail("host-span contains differs at key " + std::to_string(at));
  }

  // The GPU's bytes in uninitialised host memory (zeroing 8 GiB first would double the cost);
  // the CPU filter's bytes where they are.
  const std::unique_ptr<std::byte[]> gpu_copy(new std::byte[layout.size_bytes()]);
  const std::span<std::byte> gpu_bytes(gpu_copy.get(), layout.size_bytes());
  gpu.copy_bytes_to(gpu_bytes);
  const std::span<const std::byte> cpu_bytes(cpu.view().data(), layout.size_bytes());
  const std::uint64_t gpu_hash = bits_hash(gpu_bytes), cpu_hash = bits_hash(cpu_bytes);
  const std::uint64_t gpu_pop = gpu.popcount(), cpu_pop = cpu.popcount();
  if (const long long at = first_difference<std::byte>(gpu_bytes, cpu_bytes); at >= 0) {
    fail("bytes differ from offset " + std::to_string(at));
  }
  if (gpu_pop != cpu_pop) fail("popcount differs");
  std::printf("check %-6s %-6s %-7s %-11s bits %016llx/%016llx popcount %llu/%llu new %llu: %s\n",
              std::string(to_string(shape)).c_str(), std::string(to_string(index)).c_str(),
              size_name.c_str(), gpu.implementation().c_str(),
              static_cast<unsigned long long>(gpu_hash), static_cast<unsigned long long>(cpu_hash),
              static_cast<unsigned long long>(gpu_pop), static_cast<unsigned long long>(cpu_pop),
              static_cast<unsigned long long>(cpu_count), verdict.empty() ? "ok" : verdict.c_str());
  std::fflush(stdout);
  for (void* p : std::initializer_list<void*>{d_keys, d_probes, d_flags, d_batch, d_new, d_count})
    cudaFree(p);
  return verdict.empty();
}

int run_check(bool quick) {
  const std::uint64_t n = quick ? (1u << 18) : (1u << 24);
  struct Size {
    const char* name;
    std::uint64_t bytes;
  };
  const std::vector<Size> sizes = quick ? std::vector<Size>{{"32 MiB", std::uint64_t{32} << 20},
                                                            {"256 MiB", std::uint64_t{256} << 20}}
                                        : std::vector<Size>{{"32 MiB", std::uint64_t{32} << 20},
                                                            {"1 GiB", std::uint64_t{1} << 30},
                                                            {"8 GiB", std::uint64_t{8} << 30}};
  int failed = 0, cases = 0;
  for (const Size& size : sizes) {
    for (const Shape shape : {Shape::sb256, Shape::sb512}) {
      for (const BlockIndex index : {BlockIndex::high32, BlockIndex::full64}) {
        failed += check_case(shape, index, size.bytes, size.name, n) ? 0 : 1;
        ++cases;
      }
    }
  }
  std::printf("== check: %d of %d cases match the CPU (%llu keys inserted per case)\n",
              cases - failed, cases, static_cast<unsigned long long>(n));
  return failed == 0 ? 0 : 1;
}

int run(int argc, char** argv) {
  bool quick = false, check_mode = false, probe = false;
  for (int a = 1; a < argc; ++a) {
    const std::string arg = argv[a];
    if (arg == "--quick") {
      quick = true;
    } else if (arg == "--check") {
      check_mode = true;
    } else if (arg == "--probe") {
      probe = true;
    } else if (arg == "--datasheet-tbps" && a + 1 < argc) {
      datasheet_bytes_per_s = std::stod(argv[++a]) * 1e12;
    } else {
      std::fprintf(stderr,
                   "usage: bulkbloom_gpu_bench [--probe | --check] [--quick] "
                   "[--datasheet-tbps TB/s]\n");
      return 2;
    }
  }
  int count = 0;
  if (const cudaError_t err = cudaGetDeviceCount(&count); err != cudaSuccess || count == 0) {
    std::printf("no usable CUDA device: %s\n",
                err != cudaSuccess ? cudaGetErrorString(err) : "the driver reports 0 devices");
    return 1;
  }
  int device = 0;
  cudaDeviceProp prop{};
  check(cudaGetDevice(&device), "cudaGetDevice");
  check(cudaGetDeviceProperties(&prop, device), "cudaGetDeviceProperties");
  std::printf("device: %s, sm_%d%d, %d SMs, %.1f GiB, L2 %.0f MiB\n", prop.name, prop.major,
              prop.minor, prop.multiProcessorCount, prop.totalGlobalMem / double(1 << 30),
              prop.l2CacheSize / double(1 << 20));
  if (probe) {
    // The library's own verdict: a filter on the device, or BackendUnavailable saying why not.
    Options on_gpu;
    on_gpu.backend = Backend::cuda;
    Filter filter(Layout{Shape::sb256, 64}, on_gpu);
    std::printf("bulkbloom runs %s there\n", filter.implementation().c_str());
    return 0;
  }
  if (check_mode) return run_check(quick);

  const std::uint32_t probe_keys = quick ? (1u << 24) : (1u << 28);
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
      "GB/s, pageable %.1f GB/s; datasheet %.1f TB/s\n",
      d2d / 1e9, h2d / 1e9, h2d_pageable / 1e9, datasheet_bytes_per_s / 1e12);

  const int reps = quick ? 3 : 5;
  struct Size {
    const char* name;
    std::uint64_t bytes;
    int reps;
  };
  const std::vector<Size> sizes =
      quick ? std::vector<Size>{{"32 MiB", std::uint64_t{32} << 20, reps},
                                {"256 MiB", std::uint64_t{256} << 20, reps}}
            : std::vector<Size>{{"32 MiB", std::uint64_t{32} << 20, 10},
                                {"1 GiB", std::uint64_t{1} << 30, reps},
                                {"8 GiB", std::uint64_t{8} << 30, reps}};
  for (const Size& size : sizes) {
    bench_filter<GeometrySb256>(size.name, size.bytes, keys, probe_keys, flags, size.reps);
    bench_filter<GeometrySb512>(size.name, size.bytes, keys, probe_keys, flags, size.reps);
  }
  cudaFree(keys);
  cudaFree(flags);
  bench_host_streaming(quick ? (std::uint64_t{1} << 24) : (std::uint64_t{1} << 27), h2d);

  std::printf(
      "\n== summary (keys in device memory unless the filter says host->PCIe; keys/s unless "
      "marked bytes/s; limits measured in this run but the datasheet's; device-to-device copy "
      "%.0f GB/s) ==\n",
      d2d / 1e9);
  std::printf("%-14s %-36s %10s  %-24s %10s  %7s\n", "filter", "operation", "rate", "limit",
              "limit rate", "% limit");
  for (const Row& r : table) {
    std::printf("%-14s %-36s %8.2f G  %-24s %8.2f G  %6.1f%%\n", r.filter.c_str(), r.op.c_str(),
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
