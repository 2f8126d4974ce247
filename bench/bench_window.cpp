// Sliding-window dedup at the issue's size: a 36 h event-time window over 4 generations, sized for
// 10^9 records a day at p = 0.001 (4.7 GiB). Reports sustained records/s beside this machine's
// limit for the window's access pattern, measured in the same run over a buffer of the window's
// size, the cost of one rotation, and the sizing for 10^10 records a day. BM_WindowShardLookup
// measures what sized window shards add per key and filter (moving the hash into the filter's
// blocks), on a window small enough for the caches.
#include <benchmark/benchmark.h>

#include <bulkbloom/shard.hpp>
#include <bulkbloom/window.hpp>
#include <bulkbloom/window_shard.hpp>

#include <cstdint>
#include <vector>

#include "core/splitmix64.hpp"
#include "probe/memory_probe.hpp"

namespace {

using bulkbloom::WindowConfig;
using bulkbloom::WindowedFilter;
using bulkbloom::WindowShard;

constexpr double kSecondsPerDay = 86400;
constexpr double kRecordsPerDay = 1e9;
constexpr std::uint64_t kWindowSeconds = 36 * 3600;
constexpr double kFpr = 0.001;
constexpr std::uint32_t kGenerations = 4;
// Share of records that re-send a recent record's key (clients retrying).
constexpr double kResendShare = 0.12;
constexpr std::size_t kBatch = std::size_t{1} << 20;
constexpr std::size_t kRecentKeys = std::size_t{1} << 16;

WindowConfig issue_config(double records_per_day) {
  return WindowConfig::for_event_time(records_per_day / kSecondsPerDay, kWindowSeconds, kFpr,
                                      kGenerations);
}

// Records arriving at 10^9 a day: fresh keys, or (kResendShare) the key of a recent record, with
// event times that advance at the configured rate.
class RecordSource {
 public:
  explicit RecordSource(std::int64_t start_time) : start_time_(start_time), recent_(kRecentKeys) {}

  void next_batch(std::vector<std::uint64_t>& keys, std::vector<std::int64_t>& times) {
    for (std::size_t i = 0; i < keys.size(); ++i, ++count_) {
      const std::uint64_t r = mix(count_);
      const bool resend = count_ >= kRecentKeys && double(r >> 11) * 0x1p-53 < kResendShare;
      keys[i] = resend ? recent_[(r >> 3) % kRecentKeys] : mix(count_ ^ 0xA5A5A5A5A5A5A5A5ull);
      recent_[count_ % kRecentKeys] = keys[i];
      times[i] = start_time_ + std::int64_t(double(count_) * kSecondsPerDay / kRecordsPerDay);
    }
  }

 private:
  static std::uint64_t mix(std::uint64_t x) {
    return bulkbloom::detail::splitmix64_mix(x + bulkbloom::detail::kSplitMix64Gamma);
  }

  std::int64_t start_time_;
  std::uint64_t count_ = 0;
  std::vector<std::uint64_t> recent_;
};

// A window whose every page has been touched, as on a node that has run for days: a clock jump of
// G periods clears (writes) each generation once. Returns the time the clock stands at.
std::int64_t fault_in(WindowedFilter& window) {
  const auto span = std::int64_t(window.config().forget_after());
  window.advance_to(0);
  window.advance_to(span);
  return span;
}

// The window's memory, the memory the same window needs at 10^10 records a day, and a label with
// the implementation and the sizing.
void sizing_counters(benchmark::State& state, const WindowedFilter& window) {
  const WindowConfig& config = window.config();
  const WindowConfig large = issue_config(10 * kRecordsPerDay);
  state.counters["GiB"] = double(config.memory_bytes()) / double(1 << 30);
  state.counters["GiB_at_1e10_per_day"] = double(large.memory_bytes()) / double(1 << 30);
  state.SetLabel(window.implementation() + "; " + config.describe());
}

void BM_WindowSustained(benchmark::State& state) {
  const WindowConfig config = issue_config(kRecordsPerDay);
  const auto threads = static_cast<unsigned>(state.range(0));
  // The machine's limit first, over a buffer of the window's size with as many threads, before
  // the window holds the memory.
  const auto limits = bulkbloom::probe::measure_hardware_limits(config.memory_bytes(), threads);
  bulkbloom::Options options;
  options.threads = threads;
  WindowedFilter window(config, options);
  RecordSource source(fault_in(window));
  std::vector<std::uint64_t> keys(kBatch);
  std::vector<std::int64_t> times(kBatch);
  std::vector<std::uint8_t> is_new(kBatch);
  std::uint64_t records = 0, fresh = 0;
  for (auto _ : state) {
    state.PauseTiming();
    source.next_batch(keys, times);
    state.ResumeTiming();
    fresh += window.insert_if_absent(keys, times, is_new);
    records += kBatch;
  }
  // Every record costs one read-modify-write of a line in the newest generation; a record new
  // there (about the new share: resends are found in the newest) also costs one read in each
  // older generation. The limit is that mix at the probe's rates.
  const double new_share = double(fresh) / double(records);
  const double seconds_per_record = 1.0 / limits.random_rmw_lines_per_s +
                                    (kGenerations - 1) * new_share / limits.random_read_lines_per_s;
  const double limit = 1.0 / seconds_per_record;
  state.counters["records_per_s"] =
      benchmark::Counter(double(records), benchmark::Counter::kIsRate);
  state.counters["limit_records_per_s"] = limit;
  state.counters["new_share"] = new_share;
  state.counters["rmw_lines_per_s"] = limits.random_rmw_lines_per_s;
  state.counters["read_lines_per_s"] = limits.random_read_lines_per_s;
  sizing_counters(state, window);
}
BENCHMARK(BM_WindowSustained)
    ->ArgName("threads")
    ->Arg(1)
    ->Arg(2)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime()
    ->MinTime(5);

void BM_WindowRotation(benchmark::State& state) {
  const WindowConfig config = issue_config(kRecordsPerDay);
  const auto limits = bulkbloom::probe::measure_hardware_limits(config.memory_bytes(), 1);
  WindowedFilter window(config);
  std::int64_t now = fault_in(window);
  for (auto _ : state) {
    now += std::int64_t(config.period());
    window.advance_to(now);  // one rotation: one generation cleared
  }
  state.counters["generation_GB_per_s"] =
      benchmark::Counter(double(config.generation.size_bytes()) * double(state.iterations()) / 1e9,
                         benchmark::Counter::kIsRate);
  state.counters["seq_read_GB_per_s"] = limits.seq_read_bytes_per_s / 1e9;
  sizing_counters(state, window);
}
BENCHMARK(BM_WindowRotation)->Unit(benchmark::kMillisecond)->UseRealTime()->Iterations(8);

// What a rotation and the Flink operator's gauges cost the thread that calls them (thread CPU
// time, firm under load), on a window of 4 generations of 256 MiB each. BM_RotatingThread arg 0:
// a generation cleared in place, as every rotation does, on memory the window has written; 1: the
// same on memory never touched (a window younger than G periods drops a generation that never
// took a key, and clearing it faults in every page). BM_GaugeRead reads what the Flink operator's
// stats() reads: each generation's popcount and the window's current FPR.
WindowConfig gibibyte_config() {
  WindowConfig config = WindowConfig::for_event_time(1.0, 1'000'000, kFpr, kGenerations);
  config.generation.num_blocks =
      (std::uint64_t{256} << 20) / config.generation.size_bytes() * config.generation.num_blocks;
  return config;
}

void BM_RotatingThread(benchmark::State& state) {
  const auto mode = state.range(0);
  const WindowConfig config = gibibyte_config();
  for (auto _ : state) {
    state.PauseTiming();
    bulkbloom::Filter generation(config.generation);
    if (mode == 0) generation.clear();
    state.ResumeTiming();
    generation.clear();
  }
  state.counters["generation_MiB"] = double(config.generation.size_bytes()) / double(1 << 20);
  state.SetLabel(mode == 0 ? "cleared in place" : "cleared, never touched");
}
BENCHMARK(BM_RotatingThread)
    ->ArgName("mode")
    ->DenseRange(0, 1)
    ->Unit(benchmark::kMillisecond)
    ->Iterations(8);

void BM_GaugeRead(benchmark::State& state) {
  const WindowConfig config = gibibyte_config();
  WindowedFilter window(config);
  fault_in(window);
  double sink = 0;
  for (auto _ : state) {
    sink += window.current_fpr();
    for (std::uint32_t age = 0; age < config.generations; ++age) {
      sink += double(window.generation(age).popcount());
    }
  }
  benchmark::DoNotOptimize(sink);
  state.counters["window_GiB"] = double(window.memory_bytes()) / double(1 << 30);
}
BENCHMARK(BM_GaugeRead)->Unit(benchmark::kMillisecond)->Iterations(4);

// Lookups of absent keys (each checked in every generation) on a window of 4 generations small
// enough for the caches, so that the cost per key and filter shows: arg 0, the whole window;
// 1, shard 0 of 4 of a window whose shards keep the configured size; 2, of a window sized per
// period (shardable_by(4)) whose generations all have the configured size; 3, the same with 4
// generations of 4 different sizes. 2 and 3 move each hash into each filter's blocks.
void BM_WindowShardLookup(benchmark::State& state) {
  constexpr std::uint32_t kShards = 4;
  constexpr std::size_t kKeys = std::size_t{1} << 16;
  const auto mode = state.range(0);
  // Event time, one record a clock unit: 100,000 keys a generation (about 220 KiB at 0.001 / 4).
  WindowConfig config = WindowConfig::for_event_time(1.0, 300'000, kFpr, kGenerations);
  if (mode >= 2) config = config.shardable_by(kShards);
  const auto period = static_cast<std::int64_t>(config.period());
  const std::uint64_t per_generation = config.period();
  WindowShard shard(config, 0, mode == 0 ? 1 : kShards);
  // Fill every generation, in mode 3 each at its own size (the newest is still empty when the
  // sizing grows it, so it is replaced, not sealed: one filter a generation).
  std::vector<std::uint64_t> keys;
  std::uint64_t next = 1;
  std::int64_t position = 0;
  for (std::uint32_t g = 0; g < kGenerations; ++g) {
    shard.advance_to(position);
    if (mode == 3) shard.set_sizing({per_generation * (g + 2), 0});
    std::vector<std::uint64_t> all(per_generation);
    for (auto& k : all) k = next++;
    std::vector<std::uint32_t> owner(all.size());
    bulkbloom::shard_of(config.generation, all, shard.num_shards(), owner);
    keys.clear();
    std::vector<std::int64_t> clocks;
    for (std::size_t i = 0; i < all.size(); ++i) {
      if (owner[i] == shard.index()) {
        keys.push_back(all[i]);
        clocks.push_back(position + static_cast<std::int64_t>(i));
      }
    }
    std::vector<std::uint8_t> is_new(keys.size());
    shard.insert_if_absent(keys, clocks, is_new);
    position += period;
  }
  std::vector<std::uint64_t> absent;
  std::vector<std::uint64_t> candidates(kKeys * kShards);
  for (auto& k : candidates) k = next++;
  std::vector<std::uint32_t> owner(candidates.size());
  bulkbloom::shard_of(config.generation, candidates, shard.num_shards(), owner);
  for (std::size_t i = 0; i < candidates.size(); ++i) {
    if (owner[i] == shard.index()) absent.push_back(candidates[i]);
  }
  std::vector<std::uint8_t> out(absent.size());
  for (auto _ : state) {
    shard.contains(absent, out);
    benchmark::DoNotOptimize(out.data());
  }
  const std::vector<std::uint64_t> blocks = shard.filter_blocks();
  std::string sizes;
  for (const std::uint64_t b : blocks) sizes += (sizes.empty() ? "" : ",") + std::to_string(b);
  state.counters["ns_per_key_and_filter"] =
      benchmark::Counter(double(absent.size()) * double(blocks.size()) * double(state.iterations()),
                         benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
  state.counters["KiB"] = double(shard.memory_bytes()) / 1024;
  state.SetLabel(shard.implementation() + "; whole blocks per filter " + sizes);
}
BENCHMARK(BM_WindowShardLookup)->ArgName("mode")->DenseRange(0, 3)->MinTime(2);

}  // namespace

BENCHMARK_MAIN();
