// bulkbloom bench: this machine's memory limits, then each implementation's bulk rates at a few
// filter sizes beside them.
#include <bulkbloom/bulkbloom.hpp>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include "cli/args.hpp"
#include "cli/commands.hpp"
#include "cli/filter_options.hpp"
#include "cli/progress.hpp"
#include "probe/memory_probe.hpp"
#include "splitmix64.hpp"

namespace bulkbloom::cli {
namespace {

using probe::HardwareLimits;

struct Row {
  std::string implementation;
  std::uint64_t filter_bytes;
  HardwareLimits limits;
  double insert_per_s, contains_per_s, insert_if_absent_per_s;
};

std::vector<std::uint64_t> random_keys(std::uint64_t n, std::uint64_t seed) {
  std::vector<std::uint64_t> keys(n);
  detail::SplitMix64 rng(seed);
  for (auto& k : keys) k = rng.next();
  return keys;
}

constexpr int kRepetitions = 3;

// The median over kRepetitions runs of `prepare()` (untimed) then `call()` (timed), as keys/s.
template <typename Prepare, typename F>
double keys_per_second(std::uint64_t keys, Prepare&& prepare, F&& call) {
  std::array<double, kRepetitions> rates{};
  for (double& rate : rates) {
    prepare();
    const auto start = std::chrono::steady_clock::now();
    call();
    rate = static_cast<double>(keys) /
           std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  }
  std::sort(rates.begin(), rates.end());
  return rates[kRepetitions / 2];
}

// Each limit is the median of kRepetitions measurements.
HardwareLimits median_limits(std::uint64_t bytes, unsigned threads) {
  std::array<HardwareLimits, kRepetitions> runs;
  for (auto& run : runs) run = probe::measure_hardware_limits(bytes, threads);
  const auto median = [&](double HardwareLimits::*field) {
    std::array<double, kRepetitions> v;
    for (int i = 0; i < kRepetitions; ++i) v[i] = runs[i].*field;
    std::sort(v.begin(), v.end());
    return v[kRepetitions / 2];
  };
  return {median(&HardwareLimits::random_read_lines_per_s),
          median(&HardwareLimits::random_rmw_lines_per_s),
          median(&HardwareLimits::seq_read_bytes_per_s)};
}

std::string percent(double rate, double limit) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "%.0f%%", 100.0 * rate / limit);
  return buf;
}

}  // namespace

int run_bench(const Arguments& args) {
  ArgParser parser(
      "bench [options]",
      "Measures this machine's random 64-byte read and read-modify-write rates and "
      "sequential bandwidth over\nbuffers of each filter size, then each "
      "implementation's insert, contains and insert_if_absent keys/s,\nas medians of "
      "3 runs and as a percentage of those limits (insert and insert_if_absent against the "
      "RMW rate,\ncontains against the read rate).");
  parser.value("sizes", "LIST", "filter sizes in MiB, comma-separated (default 16,256,1024)")
      .value("keys", "N", "keys per measurement (default 16M)")
      .flag("json", "print one JSON object per row instead of a table");
  add_backend_options(parser);
  if (!parser.parse(args)) return 0;
  std::vector<std::uint64_t> sizes_mib;
  {
    std::string list = parser.get_or("sizes", "16,256,1024");
    std::size_t pos = 0;
    while (pos <= list.size()) {
      const std::size_t comma = std::min(list.find(',', pos), list.size());
      sizes_mib.push_back(parse_count(list.substr(pos, comma - pos), "--sizes"));
      if (sizes_mib.back() == 0) throw UsageError("--sizes: a size must be at least 1 MiB");
      pos = comma + 1;
    }
  }
  const std::uint64_t key_count = parser.get_count("keys").value_or(16'000'000);
  if (key_count == 0) throw UsageError("--keys must be at least 1");
  Options base = backend_options(parser);
  const unsigned threads =
      base.threads != 0 ? base.threads : std::max(1u, std::thread::hardware_concurrency());

  std::vector<Implementation> measured;
  for (const Implementation& impl : implementations()) {
    if (base.backend != Backend::automatic && impl.backend != base.backend) continue;
    if (impl.usable) {
      measured.push_back(impl);
    } else {
      std::fprintf(stderr, "bench: %s is not measured: %s\n", impl.name.c_str(),
                   impl.unusable_reason.c_str());
    }
  }
  if (measured.empty()) {
    throw BackendUnavailable("no implementation of the requested backend runs on this machine");
  }

  const std::vector<std::uint64_t> keys = random_keys(key_count, 1);
  const std::vector<std::uint64_t> probes = random_keys(key_count, 2);
  std::vector<std::uint8_t> flags(key_count);
  const bool json = parser.has("json");
  if (!json) {
    std::printf("%-16s %9s | %10s %10s %8s | %10s %5s | %10s %5s | %10s %5s\n", "implementation",
                "filter", "rand read", "rand RMW", "seq GB/s", "insert", "%RMW", "contains",
                "%read", "ins_if_abs", "%RMW");
  }
  for (const std::uint64_t mib : sizes_mib) {
    const std::uint64_t bytes = mib << 20;
    // The limits are measured in this run, over a buffer of the filter's size, with the
    // filter's thread count, right before the filter runs.
    const HardwareLimits limits = median_limits(bytes, threads);
    for (const Implementation& impl : measured) {
      Options options = base;
      options.backend = impl.backend;
      options.implementation = impl.name;
      Filter filter(Layout{Shape::sb512, std::max<std::uint64_t>(bytes / 64, 1)}, options);
      Row row{impl.name, filter.layout().size_bytes(), limits, 0, 0, 0};
      const auto nothing = [] {};
      const auto clear = [&] { filter.clear(); };
      row.insert_per_s = keys_per_second(key_count, clear, [&] { filter.insert(keys); });
      row.contains_per_s =
          keys_per_second(key_count, nothing, [&] { filter.contains(probes, flags); });
      row.insert_if_absent_per_s =
          keys_per_second(key_count, clear, [&] { filter.insert_if_absent(keys, flags); });
      if (json) {
        Summary s;
        s.text("implementation", "", row.implementation);
        s.number("threads", "", filter.threads());
        s.number("filter_bytes", "", static_cast<double>(row.filter_bytes));
        s.number("keys", "", static_cast<double>(key_count));
        s.number("random_reads_per_s", "", limits.random_read_lines_per_s);
        s.number("random_rmw_per_s", "", limits.random_rmw_lines_per_s);
        s.number("sequential_bytes_per_s", "", limits.seq_read_bytes_per_s);
        s.number("insert_per_s", "", row.insert_per_s);
        s.number("contains_per_s", "", row.contains_per_s);
        s.number("insert_if_absent_per_s", "", row.insert_if_absent_per_s);
        s.print(true, stdout);
      } else {
        std::printf("%-16s %5llu MiB | %9s/s %9s/s %8.1f | %8s/s %5s | %8s/s %5s | %8s/s %5s\n",
                    impl.name.c_str(), static_cast<unsigned long long>(mib),
                    si(limits.random_read_lines_per_s).c_str(),
                    si(limits.random_rmw_lines_per_s).c_str(), limits.seq_read_bytes_per_s / 1e9,
                    si(row.insert_per_s).c_str(),
                    percent(row.insert_per_s, limits.random_rmw_lines_per_s).c_str(),
                    si(row.contains_per_s).c_str(),
                    percent(row.contains_per_s, limits.random_read_lines_per_s).c_str(),
                    si(row.insert_if_absent_per_s).c_str(),
                    percent(row.insert_if_absent_per_s, limits.random_rmw_lines_per_s).c_str());
      }
      std::fflush(stdout);
    }
  }
  return 0;
}

}  // namespace bulkbloom::cli
