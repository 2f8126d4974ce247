// The CUDA backend against the CPU scalar oracle (DESIGN §3, §6). Every test needs a device and
// skips, saying why, without one; the last one checks the no-device behaviour instead.
#include <cuda_runtime.h>
#include <gtest/gtest.h>
#include <bulkbloom/cuda.hpp>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <numeric>
#include <random>

#include "cuda/cuda_engine.hpp"
#include "cuda_user_kernel.hpp"
#include "test_support.hpp"

namespace bulkbloom {
// Names shapes in test listings (found by argument-dependent lookup).
void PrintTo(Shape shape, std::ostream* os) {
  *os << to_string(shape);
}
}  // namespace bulkbloom

namespace bulkbloom::test {
namespace {

// Why no device can be used here, or "" when one can.
std::string no_device_reason() {
  int count = 0;
  const cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess)
    return std::string(cudaGetErrorName(err)) + ": " + cudaGetErrorString(err);
  if (count == 0) return "the driver reports 0 devices";
  return "";
}

// BULKBLOOM_REQUIRE_GPU=1 (bench/gpu_check.sh sets it) turns the skips for want of a device
// into failures, so that a device check that measured nothing cannot pass.
bool gpu_required() {
  const char* value = std::getenv("BULKBLOOM_REQUIRE_GPU");
  return value != nullptr && std::string(value) == "1";
}

// Skips (or, with BULKBLOOM_REQUIRE_GPU=1, fails) the test when no device can be used.
#define SKIP_WITHOUT_DEVICE()                                                             \
  if (const std::string why = no_device_reason(); !why.empty()) {                         \
    if (gpu_required()) FAIL() << "no CUDA device, and BULKBLOOM_REQUIRE_GPU=1: " << why; \
    GTEST_SKIP() << "no CUDA device: " << why;                                            \
  }

Options on_cuda() {
  Options o;
  o.backend = Backend::cuda;
  return o;
}
Options on_scalar() {
  Options o;
  o.implementation = "cpu/scalar";
  return o;
}

// Device memory holding a copy of a host vector (or `n` zeroed elements).
template <typename T>
class DeviceArray {
 public:
  explicit DeviceArray(std::size_t n) : n_(n) {
    if (cudaMalloc(&ptr_, std::max<std::size_t>(n, 1) * sizeof(T)) != cudaSuccess) {
      throw std::runtime_error("test cudaMalloc failed");
    }
    cudaMemset(ptr_, 0, std::max<std::size_t>(n, 1) * sizeof(T));
  }
  explicit DeviceArray(const std::vector<T>& host) : DeviceArray(host.size()) {
    cudaMemcpy(ptr_, host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice);
  }
  DeviceArray(const DeviceArray&) = delete;
  DeviceArray& operator=(const DeviceArray&) = delete;
  ~DeviceArray() { cudaFree(ptr_); }
  T* get() const { return ptr_; }
  std::vector<T> to_host() const {
    std::vector<T> out(n_);
    cudaMemcpy(out.data(), ptr_, n_ * sizeof(T), cudaMemcpyDeviceToHost);
    return out;
  }

 private:
  T* ptr_ = nullptr;
  std::size_t n_;
};

// Adversarial and random batches of DESIGN §6.
std::vector<std::pair<std::string, std::vector<std::uint64_t>>> key_sets() {
  std::vector<std::pair<std::string, std::vector<std::uint64_t>>> sets;
  sets.emplace_back("random", random_keys(200000, 1));
  sets.emplace_back("all_equal", std::vector<std::uint64_t>(100000, 0x1234567890abcdefull));
  std::vector<std::uint64_t> sequential(100000);
  std::iota(sequential.begin(), sequential.end(), 0);
  sets.emplace_back("sequential", sequential);
  sets.emplace_back("extremes",
                    std::vector<std::uint64_t>{0, std::numeric_limits<std::uint64_t>::max(), 0});
  sets.emplace_back("empty", std::vector<std::uint64_t>{});
  return sets;
}

class Cuda : public testing::TestWithParam<Shape> {
 protected:
  void SetUp() override { SKIP_WITHOUT_DEVICE(); }
  Layout layout(std::uint64_t num_blocks = 4099, KeyHash hash = KeyHash::xxh64) const {
    return Layout{GetParam(), num_blocks, hash, 7};
  }
};

TEST_P(Cuda, InsertGivesTheOracleBytes) {
  for (KeyHash hash : {KeyHash::xxh64, KeyHash::identity}) {
    for (const auto& [name, keys] : key_sets()) {
      Filter gpu(layout(4099, hash), on_cuda()), cpu(layout(4099, hash), on_scalar());
      ASSERT_TRUE(gpu.implementation().starts_with("cuda/sm_")) << gpu.implementation();
      gpu.insert(keys);
      cpu.insert(keys);
      EXPECT_EQ(bytes_of(gpu), bytes_of(cpu)) << name;
      EXPECT_EQ(gpu.popcount(), cpu.popcount()) << name;
      // Summed in another order on the GPU: equal up to rounding.
      EXPECT_NEAR(gpu.current_fpr(), cpu.current_fpr(), 1e-12 + 1e-12 * cpu.current_fpr()) << name;
    }
  }
  // Byte-string keys reach the GPU as hashes.
  std::vector<std::string> texts;
  for (int i = 0; i < 5000; ++i) texts.push_back("event-" + std::to_string(i));
  const std::vector<std::string_view> views(texts.begin(), texts.end());
  Filter gpu(layout(), on_cuda()), cpu(layout(), on_scalar());
  gpu.insert(views);
  cpu.insert(views);
  EXPECT_EQ(bytes_of(gpu), bytes_of(cpu));
}

TEST_P(Cuda, ContainsGivesTheOracleFlags) {
  // A small filter, so that false positives occur and must be the same ones.
  const auto inserted = random_keys(20000, 2);
  auto probes = random_keys(50000, 3);
  probes.insert(probes.end(), inserted.begin(), inserted.end());
  Filter gpu(layout(257), on_cuda()), cpu(layout(257), on_scalar());
  gpu.insert(inserted);
  cpu.insert(inserted);
  std::vector<std::uint8_t> gpu_flags(probes.size()), cpu_flags(probes.size());
  gpu.contains(probes, gpu_flags);
  cpu.contains(probes, cpu_flags);
  EXPECT_EQ(gpu_flags, cpu_flags);
  const auto positives = std::count(gpu_flags.begin(), gpu_flags.begin() + 50000, 1);
  EXPECT_GT(positives, 0) << "the test needs false positives to compare";
  EXPECT_EQ(std::count(gpu_flags.begin() + 50000, gpu_flags.end(), 1), 20000);
}

TEST_P(Cuda, InsertIfAbsentGivesTheSequentialLoopsFlagsOnHotKeys) {
  // 64 hot keys, 2000 copies each (in many warps at once), among 100000 cold keys; the filter
  // starts with 20000 keys. Every flag is the sequential loop's (DESIGN §3: exact everywhere).
  const auto batch = hot_key_batch(64, 2000, 100000, 4);
  const auto preload = random_keys(20000, 5);
  Filter gpu(layout(8191), on_cuda()), cpu(layout(8191), on_scalar());
  gpu.insert(preload);
  cpu.insert(preload);
  std::vector<std::uint8_t> gpu_new(batch.size()), cpu_new(batch.size());
  EXPECT_EQ(gpu.insert_if_absent(batch, gpu_new), cpu.insert_if_absent(batch, cpu_new));
  EXPECT_EQ(gpu_new, cpu_new);
  EXPECT_EQ(bytes_of(gpu), bytes_of(cpu));
  // The same keys again, in a second batch: none is new.
  EXPECT_EQ(gpu.insert_if_absent(batch, gpu_new), 0u);
}

TEST_P(Cuda, InsertIfAbsentInOneBlockGivesTheOraclesFalsePositives) {
  // One block: later keys find their bits set by earlier ones; the GPU must agree on which.
  const auto batch = hot_key_batch(4, 50, 400, 17);
  Filter gpu(layout(1), on_cuda()), cpu(layout(1), on_scalar());
  std::vector<std::uint8_t> gpu_new(batch.size()), cpu_new(batch.size());
  EXPECT_EQ(gpu.insert_if_absent(batch, gpu_new), cpu.insert_if_absent(batch, cpu_new));
  EXPECT_EQ(gpu_new, cpu_new);
}

TEST_P(Cuda, InsertIfAbsentGivesTheOraclesFlagsWhateverTheBlockIndexBits) {
  // Block indices of 1 to 23 bits: CUB's radix sort takes a pass per few bits and may end in its
  // input or in the spare region, which the exact pass must then read from (and whose other half
  // holds the hashes).
  const auto batch = hot_key_batch(16, 500, 120000, 23);
  for (const std::uint64_t blocks : {1ull, 2ull, 255ull, 257ull, 65537ull, (1ull << 22) + 1}) {
    Filter gpu(layout(blocks), on_cuda()), cpu(layout(blocks), on_scalar());
    std::vector<std::uint8_t> gpu_new(batch.size()), cpu_new(batch.size());
    EXPECT_EQ(gpu.insert_if_absent(batch, gpu_new), cpu.insert_if_absent(batch, cpu_new))
        << blocks << " blocks";
    EXPECT_EQ(gpu_new, cpu_new) << blocks << " blocks";
    EXPECT_EQ(bytes_of(gpu), bytes_of(cpu)) << blocks << " blocks";
  }
}

TEST_P(Cuda, WindowMatchesTheCpuWindow) {
  // A records window rotating every 100 records, fed in batches of 1000: flags and the
  // generations' bytes equal the CPU's.
  WindowConfig config;
  config.window = 300;
  config.generations = 4;
  config.generation = layout(4099);
  WindowedFilter gpu(config, on_cuda()), cpu(config, on_scalar());
  ASSERT_TRUE(gpu.implementation().starts_with("cuda/sm_")) << gpu.implementation();
  const auto stream = hot_key_batch(64, 300, 60000, 8);
  for (std::size_t at = 0; at < stream.size(); at += 1000) {
    const auto batch =
        std::span(stream).subspan(at, std::min<std::size_t>(1000, stream.size() - at));
    std::vector<std::uint8_t> gpu_new(batch.size()), cpu_new(batch.size());
    gpu.insert_if_absent(batch, gpu_new);
    cpu.insert_if_absent(batch, cpu_new);
    ASSERT_EQ(gpu_new, cpu_new) << "batch at " << at;
  }
  for (std::uint32_t age = 0; age < config.generations; ++age) {
    EXPECT_EQ(bytes_of(gpu.generation(age)), bytes_of(cpu.generation(age))) << "age " << age;
  }
}

TEST_P(Cuda, CopiesWithinOneWarpResolveInKeyOrder) {
  // 32 keys (one warp) drawn from 9 distinct ones, in a large filter (no false positives): the
  // first copy of each key is the one reported new, as on the CPU.
  const auto distinct = random_keys(9, 15);
  std::vector<std::uint64_t> batch = {7, 42, 7, 99, 42};
  std::mt19937_64 rng(16);
  while (batch.size() < 32) batch.push_back(distinct[rng() % distinct.size()]);
  Filter gpu(layout(1 << 16), on_cuda()), cpu(layout(1 << 16), on_scalar());
  std::vector<std::uint8_t> gpu_new(batch.size()), cpu_new(batch.size());
  EXPECT_EQ(gpu.insert_if_absent(batch, gpu_new), cpu.insert_if_absent(batch, cpu_new));
  EXPECT_EQ(gpu_new, cpu_new);
}

TEST_P(Cuda, CallsOnTwoStreamsAnswerInIssueOrder) {
  const auto batch = hot_key_batch(32, 4000, 50000, 6);
  Filter gpu(layout(8191), on_cuda());
  DeviceArray<std::uint64_t> keys(batch);
  DeviceArray<std::uint8_t> first(batch.size()), second(batch.size());
  DeviceArray<std::uint64_t> count(1);
  cudaStream_t streams[2];
  for (auto& s : streams)
    ASSERT_EQ(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), cudaSuccess);
  cuda::insert_if_absent_async(gpu, keys.get(), batch.size(), first.get(), count.get(), streams[0]);
  cuda::insert_if_absent_async(gpu, keys.get(), batch.size(), second.get(), count.get(),
                               streams[1]);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  for (auto& s : streams) cudaStreamDestroy(s);

  Filter cpu(layout(8191), on_scalar());
  std::vector<std::uint8_t> cpu_first(batch.size()), cpu_second(batch.size());
  const std::uint64_t cpu_count =
      cpu.insert_if_absent(batch, cpu_first) + cpu.insert_if_absent(batch, cpu_second);
  EXPECT_EQ(first.to_host(), cpu_first);
  EXPECT_EQ(second.to_host(), cpu_second);
  EXPECT_EQ(count.to_host()[0], cpu_count);
  EXPECT_EQ(bytes_of(gpu), bytes_of(cpu));
}

TEST_P(Cuda, DevicePointersMatchHostSpans) {
  const auto inserted = random_keys(30000, 7);
  const auto probes = random_keys(30000, 8);
  Filter gpu(layout(), on_cuda()), cpu(layout(), on_scalar());
  DeviceArray<std::uint64_t> d_inserted(inserted), d_probes(probes);
  DeviceArray<std::uint8_t> d_flags(probes.size());
  cuda::insert(gpu, d_inserted.get(), inserted.size());
  cuda::contains(gpu, d_probes.get(), probes.size(), d_flags.get());
  cpu.insert(inserted);
  std::vector<std::uint8_t> cpu_flags(probes.size());
  cpu.contains(probes, cpu_flags);
  EXPECT_EQ(bytes_of(gpu), bytes_of(cpu));
  EXPECT_EQ(d_flags.to_host(), cpu_flags);
}

TEST_P(Cuda, StreamsBatchesLargerThanOneChunkFromPageableAndPinnedMemory) {
  // More keys than one pipeline chunk (2^23), so both streams and slot reuse are exercised.
  const std::size_t chunk = std::size_t{1} << 23;
  const std::size_t n = chunk * 2 + 12345;
  auto keys = random_keys(n, 9);
  // Every third key of the later chunks repeats one a chunk earlier, so the flags tell whether
  // each chunk's flags came back to its own place.
  for (std::size_t i = chunk + 1; i < n; i += 3) keys[i] = keys[i - chunk - 1];
  Filter gpu(layout(1 << 20), on_cuda()), cpu(layout(1 << 20), on_scalar());
  std::vector<std::uint8_t> gpu_new(n), cpu_new(n);
  EXPECT_EQ(gpu.insert_if_absent(keys, gpu_new), cpu.insert_if_absent(keys, cpu_new));
  EXPECT_EQ(gpu_new, cpu_new);
  EXPECT_EQ(bytes_of(gpu), bytes_of(cpu));

  std::uint64_t* pinned = nullptr;
  ASSERT_EQ(cudaMallocHost(&pinned, n * sizeof(std::uint64_t)), cudaSuccess);
  const auto probes = random_keys(n, 10);
  std::copy(probes.begin(), probes.end(), pinned);
  std::vector<std::uint8_t> from_pinned(n), expected(n);
  gpu.contains(std::span<const std::uint64_t>(pinned, n), from_pinned);
  cudaFreeHost(pinned);
  cpu.contains(probes, expected);
  EXPECT_EQ(from_pinned, expected);
}

TEST_P(Cuda, UserKernelsThroughTheView) {
  const auto keys = random_keys(40000, 11);
  Filter gpu(layout(), on_cuda()), cpu(layout(), on_scalar());
  DeviceArray<std::uint64_t> d_keys(keys);
  user_kernel_insert(gpu.view(), d_keys.get(), static_cast<std::uint32_t>(keys.size()));
  cpu.insert(keys);
  EXPECT_EQ(bytes_of(gpu), bytes_of(cpu));

  const auto probes = random_keys(40000, 12);
  DeviceArray<std::uint64_t> d_probes(probes);
  DeviceArray<std::uint8_t> d_flags(probes.size());
  user_kernel_contains(gpu.view(), d_probes.get(), static_cast<std::uint32_t>(probes.size()),
                       d_flags.get());
  std::vector<std::uint8_t> expected(probes.size());
  cpu.contains(probes, expected);
  EXPECT_EQ(d_flags.to_host(), expected);
}

TEST_P(Cuda, CopiesBetweenCpuAndGpuKeepTheBytes) {
  const auto keys = random_keys(50000, 13);
  Filter cpu(layout(), on_scalar());
  cpu.insert(keys);
  Filter gpu(layout(), on_cuda());
  gpu.copy_bytes_from(bytes_of(cpu));
  EXPECT_EQ(bytes_of(gpu), bytes_of(cpu));
  std::vector<std::uint8_t> flags(keys.size());
  gpu.contains(keys, flags);
  EXPECT_EQ(std::count(flags.begin(), flags.end(), 1), std::ptrdiff_t(keys.size()));

  // Set operations across backends, both ways.
  const auto more = random_keys(50000, 14);
  Filter gpu_more(layout(), on_cuda()), cpu_more(layout(), on_scalar());
  gpu_more.insert(more);
  cpu_more.insert(more);
  Filter gpu_union(layout(), on_cuda());
  gpu_union.merge(gpu);
  gpu_union.merge(cpu_more);
  Filter cpu_union(layout(), on_scalar());
  cpu_union.merge(cpu);
  cpu_union.merge(gpu_more);
  EXPECT_EQ(bytes_of(gpu_union), bytes_of(cpu_union));
  gpu_union.intersect(cpu_more);
  cpu_union.intersect(gpu_more);
  EXPECT_EQ(bytes_of(gpu_union), bytes_of(cpu_union));
  gpu_union.clear();
  EXPECT_EQ(gpu_union.popcount(), 0u);
}

TEST_P(Cuda, BadDeviceCallsAreClearErrors) {
  Filter gpu(layout(), on_cuda());
  const std::vector<std::uint64_t> host_keys(100, 1);
  DeviceArray<std::uint64_t> keys(100);
  DeviceArray<std::uint8_t> flags(100);
  const auto expect_invalid = [](auto&& call, const char* fragment) {
    try {
      call();
      ADD_FAILURE() << "no exception; expected one mentioning '" << fragment << "'";
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << e.what();
    }
  };
  expect_invalid([&] { cuda::insert(gpu, nullptr, 100); }, "null");
  expect_invalid([&] { cuda::insert(gpu, host_keys.data(), 100); }, "not device memory");
  std::vector<std::uint8_t> host_flags(100);
  expect_invalid([&] { cuda::contains(gpu, keys.get(), 100, host_flags.data()); },
                 "not device memory");
  expect_invalid([&] { cuda::insert_if_absent(gpu, keys.get(), 100, nullptr); }, "null");
  const auto* misaligned =
      reinterpret_cast<const std::uint64_t*>(reinterpret_cast<const std::byte*>(keys.get()) + 4);
  expect_invalid([&] { cuda::insert(gpu, misaligned, 10); }, "aligned");
  expect_invalid([&] { cuda::insert(gpu, keys.get(), cuda::kMaxDeviceBatch + 1); }, "4294967295");
  expect_invalid(
      [&] { cuda::insert_if_absent(gpu, keys.get(), std::uint64_t{1} << 33, flags.get()); },
      "split it");
  Filter cpu(layout(), on_scalar());
  expect_invalid([&] { cuda::insert(cpu, keys.get(), 100); }, "CUDA backend");
  // Nothing above reached the device, so it still works.
  cuda::insert(gpu, keys.get(), 100);
  EXPECT_TRUE(gpu.contains(0));
}

TEST_P(Cuda, AFilterLargerThanTheDeviceIsAnAllocationError) {
  size_t free_bytes = 0, total_bytes = 0;
  ASSERT_EQ(cudaMemGetInfo(&free_bytes, &total_bytes), cudaSuccess);
  const std::uint64_t blocks =
      std::min<std::uint64_t>(Layout::kMaxBlocks, total_bytes / block_bytes(GetParam()) + 1024);
  if (blocks * block_bytes(GetParam()) <= total_bytes) {
    GTEST_SKIP() << "the largest layout fits in this device's " << total_bytes << " bytes";
  }
  try {
    Filter huge(Layout{GetParam(), blocks}, on_cuda());
    ADD_FAILURE() << "allocated " << huge.layout().describe();
  } catch (const AllocationError& e) {
    EXPECT_NE(std::string(e.what()).find("GPU memory"), std::string::npos) << e.what();
  }
  // The failed allocation leaves the device usable.
  Filter small(layout(), on_cuda());
  small.insert(1);
  EXPECT_TRUE(small.contains(1));
}

TEST_P(Cuda, Full64IndexGivesTheOraclesBytesAndFlags) {
  // The full64 block index (which also weighs a hash's low half) on every path: host spans,
  // device pointers with a count, and the exact insert_if_absent on hot keys.
  const Layout full{GetParam(), 5003, KeyHash::xxh64, 7, BlockIndex::full64};
  const auto inserted = random_keys(60000, 21);
  Filter gpu(full, on_cuda()), cpu(full, on_scalar());
  gpu.insert(inserted);
  cpu.insert(inserted);
  EXPECT_EQ(bytes_of(gpu), bytes_of(cpu));

  const auto probes = random_keys(60000, 22);
  std::vector<std::uint8_t> gpu_has(probes.size()), cpu_has(probes.size());
  gpu.contains(probes, gpu_has);
  cpu.contains(probes, cpu_has);
  EXPECT_EQ(gpu_has, cpu_has);

  const auto batch = hot_key_batch(32, 500, 40000, 23);
  DeviceArray<std::uint64_t> d_batch(batch);
  DeviceArray<std::uint8_t> d_new(batch.size());
  DeviceArray<std::uint64_t> d_count(1);
  cuda::insert_if_absent(gpu, d_batch.get(), batch.size(), d_new.get(), d_count.get());
  std::vector<std::uint8_t> cpu_new(batch.size());
  EXPECT_EQ(d_count.to_host()[0], cpu.insert_if_absent(batch, cpu_new));
  EXPECT_EQ(d_new.to_host(), cpu_new);
  EXPECT_EQ(bytes_of(gpu), bytes_of(cpu));
}

INSTANTIATE_TEST_SUITE_P(Shapes, Cuda, testing::ValuesIn(kAllShapes),
                         [](const testing::TestParamInfo<Shape>& info) {
                           return shape_name(info.param);
                         });

// BULKBLOOM_IMPL, read once per process, is checked by test_backend.cpp's ForcedImplementation.
TEST(CudaBackend, AutomaticKeepsFiltersUnderOneMiBOnTheCpu) {
  // Decided before any device is asked, so it holds (and is checked) with or without one.
  std::string why;
  EXPECT_EQ(detail::make_cuda_engine_if_usable(Layout{Shape::sb512, 16383}, &why), nullptr);
  EXPECT_EQ(why,
            "a filter of 1048512 bytes is under the 1 MiB that Backend::automatic puts on a GPU");
  EXPECT_TRUE(Filter(Layout{Shape::sb512, 64}).implementation().starts_with("cpu/"));
}

TEST(CudaBackend, AutomaticPicksTheDevice) {
  SKIP_WITHOUT_DEVICE();
  const Layout layout{Shape::sb512, 16384};  // 1 MiB
  EXPECT_TRUE(Filter(layout).implementation().starts_with("cuda/sm_"));
  Options wrong_arch;
  wrong_arch.implementation = "cuda/sm_10";
  EXPECT_THROW(Filter(layout, wrong_arch), BackendUnavailable);
}

TEST(CudaBackend, AFilterPastFourGiBPlacesBitsAsTheCpu) {
  // 5 GiB: blocks whose byte offsets pass 2^32, where 32-bit offset arithmetic would wrap. The
  // CPU side uses all its threads.
  SKIP_WITHOUT_DEVICE();
  const std::uint64_t bytes = std::uint64_t{5} << 30;
  std::size_t free_bytes = 0, total_bytes = 0;
  ASSERT_EQ(cudaMemGetInfo(&free_bytes, &total_bytes), cudaSuccess);
  if (free_bytes < bytes + (std::uint64_t{2} << 30)) {
    GTEST_SKIP() << "the device has " << (free_bytes >> 20) << " MiB free; the test needs 7 GiB";
  }
  for (const auto& [shape, index] :
       {std::pair{Shape::sb256, BlockIndex::high32}, std::pair{Shape::sb512, BlockIndex::full64}}) {
    const Layout layout{shape, bytes / block_bytes(shape), KeyHash::xxh64, 3, index};
    Filter gpu(layout, on_cuda()), cpu(layout, Options{.backend = Backend::cpu});
    const auto keys = random_keys(2000000, 31);
    gpu.insert(keys);
    cpu.insert(keys);
    const auto gpu_bytes = bytes_of(gpu);
    EXPECT_TRUE(gpu_bytes == bytes_of(cpu)) << layout.describe();
    EXPECT_TRUE(std::any_of(gpu_bytes.begin() + (std::int64_t{1} << 32), gpu_bytes.end(),
                            [](std::byte b) { return b != std::byte{0}; }))
        << "no bit set past 4 GiB";
    const auto batch = hot_key_batch(16, 1000, 500000, 32);
    std::vector<std::uint8_t> gpu_new(batch.size()), cpu_new(batch.size());
    EXPECT_EQ(gpu.insert_if_absent(batch, gpu_new), cpu.insert_if_absent(batch, cpu_new));
    EXPECT_EQ(gpu_new, cpu_new) << layout.describe();
  }
}

TEST(CudaBackend, WithoutADeviceCudaIsUnavailableAndAutomaticUsesTheCpu) {
  const std::string why = no_device_reason();
  if (why.empty()) GTEST_SKIP() << "a CUDA device is present; this checks the no-device path";
  const Layout layout{Shape::sb512, 64};
  try {
    Filter filter(layout, on_cuda());
    ADD_FAILURE() << "got " << filter.implementation() << " without a device";
  } catch (const BackendUnavailable& e) {
    EXPECT_NE(std::string(e.what()).find("no CUDA device"), std::string::npos) << e.what();
  }
  Filter automatic(layout);
  EXPECT_TRUE(automatic.implementation().starts_with("cpu/")) << automatic.implementation();
  const std::vector<std::uint64_t> keys(10, 3);
  EXPECT_THROW(cuda::insert(automatic, keys.data(), keys.size()), std::invalid_argument);
}

}  // namespace
}  // namespace bulkbloom::test
