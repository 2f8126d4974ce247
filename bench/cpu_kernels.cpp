// The routed write plan's own kernels, one thread, on every CPU target this machine runs (#37):
// hashing, CpuKernels::route (the hashes appended to their blocks' owners' lists, with and without
// insert_if_absent's owner bytes) and CpuKernels::merge_flags (the owners' flags back in input
// order), over one task's share of a routed chunk (2^15 keys: 2^16-key calls on two threads),
// whose keys and lists are about the L2's size, as in the engine. Beside them, in the same run,
// this machine's limit for a pass that reads the keys and writes them once (a loop the compiler
// vectorizes for the build's baseline; not memcpy, which is rep movsb here and slower than route on
// some AMD hosts): route's floor, whatever the task count.
//
//   cpu_kernels [--benchmark_filter=route/impl:AVX2/] [--benchmark_repetitions=5]
//
// Figures: time_per_key (the process's CPU time over a call's keys, shown as ns on the console,
// seconds in JSON) and items_per_second. Not a test: the kernels' answers are checked against the
// scalar oracle in tests/test_partitioned.cpp.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "bulkbloom/layout.hpp"
#include "core/splitmix64.hpp"
#include "cpu/kernels.hpp"

namespace {

using namespace bulkbloom;
using detail::CpuKernels;
using detail::KeyMode;

constexpr std::size_t kKeys = std::size_t{1} << 15;
// A 32 MiB filter of 64-byte blocks: the owners' first hashes are those of bench_filter's size.
const Layout kLayout{Shape::sb512, (std::uint64_t{32} << 20) / 64};

std::vector<std::uint64_t> random_keys(std::size_t n, std::uint64_t seed) {
  std::vector<std::uint64_t> keys(n);
  detail::SplitMix64 stream(seed);
  for (auto& key : keys) key = stream.next();
  return keys;
}

void report_keys(benchmark::State& state, std::size_t keys_a_call) {
  const auto keys = static_cast<double>(state.iterations()) * static_cast<double>(keys_a_call);
  state.SetItemsProcessed(static_cast<std::int64_t>(keys));
  state.counters["time_per_key"] =
      benchmark::Counter(keys, benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
}

void copy_keys(benchmark::State& state) {
  const auto keys = random_keys(kKeys, 1);
  std::vector<std::uint64_t> out(kKeys);
  for (auto _ : state) {
    // The xor keeps GCC from making the loop a memcpy call.
    const auto salt = static_cast<std::uint64_t>(state.iterations());
    for (std::size_t i = 0; i < kKeys; ++i) out[i] = keys[i] ^ salt;
    benchmark::DoNotOptimize(out.data());
    benchmark::ClobberMemory();
  }
  report_keys(state, kKeys);
}

void hash_keys(benchmark::State& state, const CpuKernels* kernels) {
  const auto keys = random_keys(kKeys, 1);
  std::vector<std::uint64_t> out(kKeys);
  for (auto _ : state) {
    kernels->hash(kLayout, keys.data(), kKeys, KeyMode::hash_with_layout, out.data());
    benchmark::DoNotOptimize(out.data());
    benchmark::ClobberMemory();
  }
  report_keys(state, kKeys);
}

void route_keys(benchmark::State& state, const CpuKernels* kernels) {
  const auto tasks = static_cast<unsigned>(state.range(0));
  const bool with_owner_bytes = state.range(1) != 0;
  const auto keys = random_keys(kKeys, 1);
  const auto owners = detail::BlockOwners::of(kLayout, tasks);
  const std::size_t capacity = kKeys + detail::RouteLists::kRouteSlack;
  std::vector<std::uint64_t> hashes(tasks * capacity);
  std::vector<std::uint8_t> owner_of(kKeys);
  std::vector<std::size_t> counts(tasks);
  for (auto _ : state) {
    std::fill(counts.begin(), counts.end(), 0);
    kernels->route(
        kLayout, keys.data(), kKeys, KeyMode::hash_with_layout, owners,
        {hashes.data(), with_owner_bytes ? owner_of.data() : nullptr, capacity, counts.data()});
    benchmark::DoNotOptimize(hashes.data());
    benchmark::ClobberMemory();
  }
  report_keys(state, kKeys);
}

void merge_flags(benchmark::State& state, const CpuKernels* kernels) {
  const auto tasks = static_cast<unsigned>(state.range(0));
  // Owner bytes as routing random keys gives them, each list's flags 0 or 1.
  std::vector<std::uint8_t> owner_of(kKeys);
  for (std::size_t i = 0; i < kKeys; ++i) {
    owner_of[i] = static_cast<std::uint8_t>(detail::splitmix64_mix(i) % tasks);
  }
  // Lists as far apart as the engine's: each may hold every key of the slice, and the slack.
  const std::size_t stride = kKeys + detail::RouteLists::kRouteSlack;
  std::vector<std::uint8_t> flags(tasks * stride);
  for (std::size_t i = 0; i < flags.size(); ++i) {
    flags[i] = static_cast<std::uint8_t>(detail::splitmix64_mix(i ^ 0xf1a9) & 1);
  }
  std::vector<std::uint8_t> is_new(kKeys);
  for (auto _ : state) {
    kernels->merge_flags(owner_of.data(), kKeys, flags.data(), stride, tasks, is_new.data());
    benchmark::DoNotOptimize(is_new.data());
    benchmark::ClobberMemory();
  }
  report_keys(state, kKeys);
}

}  // namespace

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  std::vector<const CpuKernels*> targets = {detail::scalar_target().kernels};
  for (const auto& target : detail::highway_targets()) targets.push_back(target.kernels);
  benchmark::RegisterBenchmark("copy/limit", copy_keys);
  for (const CpuKernels* kernels : targets) {
    const std::string impl = std::string("/impl:") + kernels->target;
    benchmark::RegisterBenchmark(("hash" + impl).c_str(), hash_keys, kernels);
    benchmark::RegisterBenchmark(("route" + impl).c_str(), route_keys, kernels)
        ->ArgNames({"tasks", "owner_bytes"})
        ->ArgsProduct({{1, 2, 4, 8}, {0, 1}});
    benchmark::RegisterBenchmark(("merge_flags" + impl).c_str(), merge_flags, kernels)
        ->ArgName("tasks")
        ->Arg(2)
        ->Arg(4)
        ->Arg(8)
        ->Arg(16)
        ->Arg(32)
        ->Arg(64);
  }
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
