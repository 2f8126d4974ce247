// Bulk filter throughput over the matrix: filter size x operation x implementation x
// threads x batch, each figure beside this machine's random-line and sequential rates measured in
// the same run over a buffer of the filter's size. Filters are ~16 bits per key (sb512).
//
// The random-line rate a case is compared with (random reads for contains, read-modify-writes
// for the writes, with the case's thread count) is measured right before and right after the
// case's timed loop, and `pct_of_limit` is against their mean; `limit_change_pct` says how far
// the machine moved during the case (after against before).
//
// Filter a subset with --benchmark_filter, e.g. 'size:2MiB/' or '/impl:AVX3/threads:1/'. Cases run
// cpu/scalar and the best target of this CPU, or the one BULKBLOOM_IMPL names (cpu/AVX2, ...).
// `median_call_ns_per_key` is the median call's time beside `ns_per_key`, the mean: on a shared
// host a whole case can run with the second core taken, or a few calls wait for it, and the
// median tells those apart.
#include <benchmark/benchmark.h>

#include <bulkbloom/bulkbloom.hpp>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "bench_clock.hpp"
#include "core/splitmix64.hpp"
#include "probe/memory_probe.hpp"

namespace {

using bulkbloom::Filter;
using bulkbloom::Layout;

struct SizeCase {
  const char* name;
  std::uint64_t bytes;
};
constexpr SizeCase kSizes[] = {{"256KiB", std::uint64_t{256} << 10},
                               {"2MiB", std::uint64_t{2} << 20},
                               {"32MiB", std::uint64_t{32} << 20},
                               {"512MiB", std::uint64_t{512} << 20},
                               {"4GiB", std::uint64_t{4} << 30}};
constexpr std::uint64_t kBitsPerKey = 16;
constexpr std::size_t kSmallBatch = std::size_t{1} << 16;
// Small batches rotate through this many distinct batches, so that a filter larger than the
// caches is not served from lines the previous iterations left there.
constexpr std::size_t kSmallBatchPool = 64;
// The "batch = capacity" case is capped here (2 GiB of keys): a 4 GiB filter's 2^31 keys would
// not fit in this machine's memory beside the filters.
constexpr std::size_t kMaxBatchKeys = std::size_t{1} << 28;
constexpr unsigned kMaxThreads = 2;
// How long each of the probes beside a case runs: about as long as a small-batch case's loop.
constexpr double kPairedProbeSeconds = 0.1;

enum class Op { insert, contains_hit, contains_miss, insert_if_absent };
constexpr Op kOps[] = {Op::insert, Op::contains_hit, Op::contains_miss, Op::insert_if_absent};
const char* op_name(Op op) {
  switch (op) {
    case Op::insert:
      return "insert";
    case Op::contains_hit:
      return "contains_hit";
    case Op::contains_miss:
      return "contains_miss";
    case Op::insert_if_absent:
      break;
  }
  return "insert_if_absent";
}

// Key `i` of stream `stream`: a bijective mix, so keys are distinct within and across streams.
// Stream 0 holds the keys a loaded filter contains, stream 1 keys it never saw.
std::uint64_t key_at(std::uint64_t stream, std::uint64_t i) {
  return bulkbloom::detail::splitmix64_mix(i + (stream << 48) +
                                           bulkbloom::detail::kSplitMix64Gamma);
}

std::vector<std::uint64_t> keys_of(std::uint64_t stream, std::uint64_t first, std::size_t n,
                                   std::uint64_t wrap) {
  std::vector<std::uint64_t> keys(n);
  for (std::size_t i = 0; i < n; ++i) keys[i] = key_at(stream, (first + i) % wrap);
  return keys;
}

// A dedup stream against a loaded filter: each key is, at random, one the filter holds (from
// stream 0, of which there are `loaded`) or a new one (stream 2). Which of the two a key is must
// be unpredictable, as in real traffic: a kernel that branched on the answer would mispredict
// here and not with batches of only new keys.
std::vector<std::uint64_t> mixed_keys(std::size_t n, std::uint64_t loaded) {
  std::vector<std::uint64_t> keys(n);
  for (std::size_t i = 0; i < n; ++i) {
    const std::uint64_t pick = key_at(3, i);
    keys[i] = (pick & 1) != 0 ? key_at(0, (pick >> 1) % loaded) : key_at(2, i);
  }
  return keys;
}

// What every benchmark of one filter size shares: the layout, the machine's limits over a buffer
// of that size, and a filter loaded to capacity. Built when the first benchmark of a size runs
// and dropped when the next size starts, so only one size's memory is held at a time.
struct SizeState {
  explicit SizeState(const SizeCase& size)
      : bytes(size.bytes),
        layout(bulkbloom::Shape::sb512, size.bytes / 64),
        capacity(size.bytes * 8 / kBitsPerKey),
        probe(size.bytes) {
    for (unsigned t = 1; t <= kMaxThreads; ++t) limits.push_back(probe.measure(t));
    // On the CPU whatever the machine: its bytes are copied from host memory (view().data()).
    bulkbloom::Options on_cpu;
    on_cpu.backend = bulkbloom::Backend::cpu;
    loaded = std::make_unique<Filter>(layout, on_cpu);
    constexpr std::size_t kChunk = std::size_t{1} << 24;
    for (std::uint64_t first = 0; first < capacity; first += kChunk) {
      const auto count =
          static_cast<std::size_t>(std::min<std::uint64_t>(kChunk, capacity - first));
      loaded->insert(keys_of(0, first, count, capacity));
    }
  }
  std::uint64_t bytes;
  Layout layout;
  std::uint64_t capacity;
  bulkbloom::probe::MemoryProbe probe;                   // kept for the probes beside each case
  std::vector<bulkbloom::probe::HardwareLimits> limits;  // [threads - 1]: sequential bandwidth
  std::unique_ptr<Filter> loaded;
};

SizeState& size_state(const SizeCase& size) {
  static std::unique_ptr<SizeState> current;
  if (!current || current->bytes != size.bytes) {
    current.reset();
    current = std::make_unique<SizeState>(size);
  }
  return *current;
}

using bulkbloom::bench::median;
using bulkbloom::bench::process_cpu_seconds;

// Iterations per benchmark, fixed so that each runs once, without the library's timing loop
// re-running the (for large filters, seconds long) setup.
constexpr benchmark::IterationCount kSmallBatchIterations = 4 * kSmallBatchPool;
constexpr std::uint64_t kKeysPerCapacityRun = std::uint64_t{1} << 24;

void run_case(benchmark::State& state, const SizeCase& size, Op op, const std::string& impl,
              unsigned threads, bool capacity_batch) {
  SizeState& shared = size_state(size);
  bulkbloom::Options options;
  options.implementation = impl;
  options.threads = threads;
  Filter filter(shared.layout, options);
  const bool inserting = op == Op::insert || op == Op::insert_if_absent;
  // The offline dump case fills an empty filter; everything else runs against a loaded one.
  const bool from_empty = capacity_batch && inserting;
  if (!from_empty) filter.copy_bytes_from({shared.loaded->view().data(), shared.bytes});
  // Hits come from the loaded keys, misses and insertions from streams the filter never saw;
  // small insert_if_absent batches are half keys the filter holds (mixed_keys), and the loaded
  // bytes come back before the new keys they add would take it 1/8 past its capacity.
  const std::uint64_t stream = op == Op::contains_hit ? 0 : op == Op::contains_miss ? 1 : 2;
  const std::size_t batch =
      capacity_batch
          ? static_cast<std::size_t>(std::min<std::uint64_t>(shared.capacity, kMaxBatchKeys))
          : kSmallBatch;
  const std::size_t key_count = capacity_batch ? batch : batch * kSmallBatchPool;
  const bool mixed = op == Op::insert_if_absent && !capacity_batch;
  const auto keys =
      mixed ? mixed_keys(key_count, shared.capacity)
            : keys_of(stream, 0, key_count, stream == 0 ? shared.capacity : ~std::uint64_t{0});
  std::vector<std::uint8_t> flags(batch);
  const auto line_rate = [&] {
    return inserting ? shared.probe.random_rmw_lines_per_s(threads, kPairedProbeSeconds)
                     : shared.probe.random_read_lines_per_s(threads, kPairedProbeSeconds);
  };
  const double line_limit_before = line_rate();

  double seconds = 0, cpu_seconds = 0;
  std::uint64_t done = 0, added = 0;
  std::vector<double> call_seconds;
  call_seconds.reserve(static_cast<std::size_t>(state.max_iterations));
  std::size_t round = 0;
  for (auto _ : state) {
    // Untimed: the benchmark uses manual time.
    if (from_empty) filter.clear();
    if (mixed && added + batch / 2 > shared.capacity / 8) {
      filter.copy_bytes_from({shared.loaded->view().data(), shared.bytes});
      added = 0;
    }
    const auto begin = std::chrono::steady_clock::now();
    const double cpu_begin = process_cpu_seconds();
    const std::span<const std::uint64_t> part =
        std::span(keys).subspan(capacity_batch ? 0 : (round++ % kSmallBatchPool) * batch, batch);
    switch (op) {
      case Op::insert:
        filter.insert(part);
        break;
      case Op::contains_hit:
      case Op::contains_miss:
        filter.contains(part, flags);
        break;
      case Op::insert_if_absent:
        added += filter.insert_if_absent(part, flags);
        break;
    }
    benchmark::ClobberMemory();
    const double elapsed =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - begin).count();
    cpu_seconds += process_cpu_seconds() - cpu_begin;
    state.SetIterationTime(elapsed);
    call_seconds.push_back(elapsed);
    seconds += elapsed;
    done += batch;
  }
  const double line_limit_after = line_rate();
  const double line_limit = (line_limit_before + line_limit_after) / 2;
  const double keys_per_s = static_cast<double>(done) / seconds;
  state.SetItemsProcessed(static_cast<std::int64_t>(done));
  state.counters["ns_per_key"] = 1e9 / keys_per_s;
  state.counters["median_call_ns_per_key"] =
      1e9 * median(std::move(call_seconds)) / static_cast<double>(batch);
  state.counters["cpu_ns_per_key"] = 1e9 * cpu_seconds / static_cast<double>(done);
  state.counters["limit_Mlines_s"] = line_limit / 1e6;
  state.counters["pct_of_limit"] = 100.0 * keys_per_s / line_limit;
  state.counters["limit_change_pct"] = 100.0 * (line_limit_after / line_limit_before - 1);
  state.counters["seq_GB_s"] = shared.limits[threads - 1].seq_read_bytes_per_s / 1e9;
  state.counters["batch"] = static_cast<double>(batch);
}

}  // namespace

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  // The target beside cpu/scalar: BULKBLOOM_IMPL's, as for any filter of the process (to measure a
  // lesser target of this CPU, e.g. cpu/AVX2 on an AVX-512 host), else the best one here.
  const std::vector<std::string> available = bulkbloom::available_implementations();
  const char* forced = std::getenv("BULKBLOOM_IMPL");
  std::vector<std::string> impls = {"cpu/scalar", available.front()};
  if (forced != nullptr && std::string_view(forced).starts_with("cpu/")) {
    if (std::find(available.begin(), available.end(), forced) == available.end()) {
      std::fprintf(stderr, "bench_filter: BULKBLOOM_IMPL=%s does not run here\n", forced);
      return 1;
    }
    impls.back() = forced;
  }
  if (impls.back() == impls.front()) impls.pop_back();
  for (const SizeCase& size : kSizes) {
    for (const bool capacity_batch : {false, true}) {
      for (const Op op : kOps) {
        for (const std::string& impl : impls) {
          for (unsigned threads = 1; threads <= kMaxThreads; ++threads) {
            const std::string name = std::string("size:") + size.name + "/" + op_name(op) +
                                     "/impl:" + impl.substr(4) +
                                     "/threads:" + std::to_string(threads) +
                                     (capacity_batch ? "/batch:capacity" : "/batch:64Ki");
            const std::uint64_t capacity = size.bytes * 8 / kBitsPerKey;
            const auto iterations =
                capacity_batch
                    ? std::max<benchmark::IterationCount>(
                          1, static_cast<benchmark::IterationCount>(kKeysPerCapacityRun / capacity))
                    : kSmallBatchIterations;
            benchmark::RegisterBenchmark(name.c_str(),
                                         [=](benchmark::State& state) {
                                           run_case(state, size, op, impl, threads, capacity_batch);
                                         })
                ->UseManualTime()
                ->Iterations(iterations)
                ->Unit(benchmark::kMillisecond);
          }
        }
      }
    }
  }
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
