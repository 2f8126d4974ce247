// The backend registry (src/backend.*): what it lists, how a name or BULKBLOOM_IMPL picks an
// implementation, and that the pick reaches the host-side work of a window and map() too.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <string>
#include <vector>

#include "core/filter_access.hpp"
#include "cpu/kernels.hpp"
#include "registry/backend.hpp"
#include "test_support.hpp"

namespace bulkbloom::test {
namespace {

using detail::FilterAccess;

// The host-kernel target of the engine behind `filter` ("scalar", "AVX2", ...).
std::string host_target(const Filter& filter) {
  return FilterAccess::engine(filter).host().kernels->target;
}

Options with_implementation(const std::string& name) {
  Options options;
  options.implementation = name;
  return options;
}

WindowConfig small_window() {
  return WindowConfig::for_records(1000, 0.01, 4);
}

TEST(Registry, ListsTheCpuTargetsBestFirstThenCuda) {
  const auto all = implementations();
  ASSERT_FALSE(all.empty());
  const auto first_cuda = std::find_if(all.begin(), all.end(),
                                       [](const auto& i) { return i.backend == Backend::cuda; });
  ASSERT_NE(first_cuda, all.begin()) << "the CPU entries come first";
  EXPECT_EQ(std::prev(first_cuda)->name, "cpu/scalar");
  std::vector<std::string> usable;
  for (auto it = all.begin(); it != all.end(); ++it) {
    if (it < first_cuda) {
      EXPECT_EQ(it->backend, Backend::cpu) << it->name;
      EXPECT_TRUE(it->name.starts_with("cpu/")) << it->name;
      EXPECT_TRUE(it->usable) << it->name;
    } else {
      EXPECT_EQ(it->backend, Backend::cuda) << it->name;
      // With a device the entry is named by its architecture; without one it says why.
      EXPECT_EQ(it->usable, it->name.starts_with("cuda/sm_")) << it->name;
      EXPECT_EQ(it->usable, it->unusable_reason.empty()) << it->name;
    }
    if (it->usable) usable.push_back(it->name);
  }
  EXPECT_EQ(available_implementations(), usable);
}

TEST(Registry, EachNameGivesThatImplementationAndItsHostKernels) {
  for (const std::string& name : available_implementations()) {
    const Filter filter(Layout{Shape::sb512, 16}, with_implementation(name));
    EXPECT_EQ(filter.implementation(), name);
    if (name.starts_with("cpu/")) EXPECT_EQ("cpu/" + host_target(filter), name);
  }
  Options best_cpu;
  best_cpu.backend = Backend::cpu;
  EXPECT_EQ(Filter(Layout{Shape::sb512, 16}, best_cpu).implementation(),
            available_implementations().front());
  EXPECT_EQ(Filter(Layout{Shape::sb512, 16}, with_implementation("cpu")).implementation(),
            available_implementations().front());
}

TEST(Registry, RejectsUnknownAndUnavailableNames) {
  const Layout layout{Shape::sb512, 16};
  EXPECT_THROW(Filter(layout, with_implementation("gpu")), std::invalid_argument);
  EXPECT_THROW(Filter(layout, with_implementation("scalar")), std::invalid_argument);
  const std::string missing =
      message_of<BackendUnavailable>([&] { Filter(layout, with_implementation("cpu/NO_SUCH")); });
  EXPECT_NE(missing.find("cpu/scalar"), std::string::npos)
      << "lists what is available: " << missing;
  Options wrong_backend = with_implementation("cpu/scalar");
  wrong_backend.backend = Backend::cuda;
  EXPECT_THROW(Filter(layout, wrong_backend), std::invalid_argument);
  for (const auto& entry : implementations()) {
    if (entry.usable) continue;
    const std::string why =
        message_of<BackendUnavailable>([&] { Filter(layout, with_implementation(entry.name)); });
    EXPECT_NE(why.find(entry.unusable_reason), std::string::npos) << why;
  }
}

TEST(Registry, MapRunsTheNamedCpuImplementation) {
  TempDir dir;
  Filter source(Layout{Shape::sb256, 64});
  source.insert(random_keys(100, 1));
  save(source, dir.path() / "f.bbf");
  MapOptions options;
  options.options.implementation = "cpu/scalar";
  const Filter mapped = map(dir.path() / "f.bbf", nullptr, options);
  EXPECT_EQ(mapped.implementation(), "cpu/scalar");
  EXPECT_EQ(host_target(mapped), "scalar");
  EXPECT_EQ(bytes_of(mapped), bytes_of(source));
  options.options.implementation = "cuda";
  EXPECT_THROW(map(dir.path() / "f.bbf", nullptr, options), std::invalid_argument);
  // Asked for the GPU, it says it cannot rather than run on the CPU.
  options.options.implementation.clear();
  options.options.backend = Backend::cuda;
  EXPECT_THROW(map(dir.path() / "f.bbf", nullptr, options), std::invalid_argument);
  options.options.backend = Backend::automatic;
  EXPECT_EQ(map(dir.path() / "f.bbf", nullptr, options).implementation().substr(0, 4), "cpu/");
}

// Host kernels that count their calls and pass them on to the scalar ones.
int hash_calls = 0, keep_calls = 0;
const detail::HostKernels& counting_kernels() {
  static const detail::HostKernels kCounting{
      "counting",
      [](const Layout& layout, const std::uint64_t* keys, std::size_t n, detail::KeyMode mode,
         std::uint64_t* out) {
        ++hash_calls;
        detail::scalar_target().host->hash(layout, keys, n, mode, out);
      },
      [](const std::uint8_t* found, std::uint32_t* index, std::uint64_t* hashes,
         std::size_t count) {
        ++keep_calls;
        return detail::scalar_target().host->keep_not_found(found, index, hashes, count);
      }};
  return kCounting;
}

TEST(Registry, AWindowHashesAndCompactsWithItsGenerationsHostKernels) {
  WindowedFilter window(small_window(), with_implementation("cpu/scalar"));
  for (std::uint32_t age = 0; age < window.config().generations; ++age) {
    detail::Engine& engine = FilterAccess::engine(window.generation(age));
    EXPECT_EQ(host_target(window.generation(age)), "scalar");
    engine.set_host(std::make_shared<const detail::HostSide>(
        detail::HostSide{&counting_kernels(), engine.host().workers}));
  }
  const auto keys = random_keys(3000, 2);  // three periods: every generation holds keys
  std::vector<std::uint8_t> is_new(keys.size());
  window.insert_if_absent(keys, is_new);
  EXPECT_GT(hash_calls, 0);
  EXPECT_GT(keep_calls, 0);
  const int hashed = hash_calls;
  std::vector<std::uint8_t> found(keys.size());
  window.contains(keys, found);
  EXPECT_GT(hash_calls, hashed);
}

// Run by ctest a second time with BULKBLOOM_IMPL=cpu/scalar (test "forced_implementation_scalar"):
// then every filter, window and mapped file made without a name is the scalar one, host side too.
TEST(ForcedImplementation, ReachesFiltersWindowsAndMappedFiles) {
  const char* forced = std::getenv("BULKBLOOM_IMPL");
  if (forced == nullptr || std::string(forced) != "cpu/scalar") {
    GTEST_SKIP() << "runs with BULKBLOOM_IMPL=cpu/scalar";
  }
  const Filter filter(Layout{Shape::sb512, 16});
  EXPECT_EQ(filter.implementation(), "cpu/scalar");
  EXPECT_EQ(host_target(filter), "scalar");

  const WindowedFilter window(small_window());
  EXPECT_EQ(window.implementation(), "cpu/scalar");
  for (std::uint32_t age = 0; age < window.config().generations; ++age) {
    EXPECT_EQ(host_target(window.generation(age)), "scalar") << "generation " << age;
  }

  TempDir dir;
  save(filter, dir.path() / "f.bbf");
  const Filter mapped = map(dir.path() / "f.bbf");
  EXPECT_EQ(mapped.implementation(), "cpu/scalar");
  EXPECT_EQ(host_target(mapped), "scalar");

  // A name given in Options still wins over the environment.
  EXPECT_EQ(Filter(Layout{Shape::sb512, 16}, with_implementation(available_implementations()[0]))
                .implementation(),
            available_implementations()[0]);
}

}  // namespace
}  // namespace bulkbloom::test
