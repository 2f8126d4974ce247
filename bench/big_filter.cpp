// One large filter filled to capacity, for the top of the scale (issue #23): insert `keys` distinct
// keys (0, 1, ...; XXH64 makes them uniform), then measure the FPR on `probes` keys never inserted
// and the rates of insert, contains and insert_if_absent, beside the random read and
// read-modify-write rates of a buffer of the filter's size measured right before and after (the
// filter and the probe buffer are never held at once). Prints one line of figures and how much of
// the filter the kernel backs with huge pages.
//
//   big_filter KEYS FPR INDEX [THREADS] [PROBES]      INDEX: high32, full64 or auto
//
// `big_filter speed KEYS FPR INDEX THREADS ROUNDS [BATCH_KEYS [4k]]` measures speed alone, on the
// filter sized for KEYS: each round runs the random read probe, contains, the read-modify-write
// probe, insert and insert_if_absent, each over 2^25 keys in batches of BATCH_KEYS (2^22 unless
// given); the probes run over the filter's own bits (same pages, same page policy), so the filter's
// contents are meaningless, and only the library's calls are timed (not the making of keys),
// as the probe times only its accesses. Rates are per second of wall time, and per second of CPU
// time (the process's, divided by THREADS; the probe's threads' own), which the time slicing of a
// shared machine does not inflate. `4k` turns transparent huge pages off for the process (filter
// and probe alike). Prints the sequential read bandwidth over the filter's memory, each round, and
// the medians of rates and ratios.
#include <sys/prctl.h>
#include <bulkbloom/bulkbloom.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <fstream>
#include <numeric>
#include <optional>
#include <string>
#include <vector>

#include "bench_clock.hpp"
#include "probe/memory_probe.hpp"

using Clock = std::chrono::steady_clock;

namespace {

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// kB of this process's anonymous memory backed by transparent huge pages.
long anon_huge_kb() {
  std::ifstream in("/proc/self/smaps_rollup");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("AnonHugePages:", 0) == 0) return std::atol(line.c_str() + 14);
  }
  return -1;
}

// Calls `f(batch)` with consecutive keys [first, first + count) in batches of 2^22.
template <typename F>
void in_batches(std::uint64_t first, std::uint64_t count, std::vector<std::uint64_t>& batch,
                const F& f) {
  for (std::uint64_t done = 0; done < count;) {
    const std::uint64_t n = std::min<std::uint64_t>(batch.size(), count - done);
    std::iota(batch.begin(), batch.begin() + static_cast<std::ptrdiff_t>(n), first + done);
    f(std::span<const std::uint64_t>(batch.data(), n));
    done += n;
  }
}

using bulkbloom::bench::median;
using bulkbloom::bench::process_cpu_seconds;

// The speed mode (see the top of the file).
int speed(int argc, char** argv) {
  if (argc < 7) {
    std::fprintf(stderr,
                 "usage: %s speed KEYS FPR high32|full64|auto THREADS ROUNDS [BATCH [4k]]\n",
                 argv[0]);
    return 2;
  }
  const std::uint64_t keys = std::strtoull(argv[2], nullptr, 10);
  const double fpr = std::strtod(argv[3], nullptr);
  const std::string index_name = argv[4];
  const unsigned threads = static_cast<unsigned>(std::atoi(argv[5]));
  const int rounds = std::atoi(argv[6]);
  const std::size_t batch_keys = argc > 7 ? std::strtoull(argv[7], nullptr, 10) : 1u << 22;
  // "4k": no transparent huge pages for this process, to see what they are worth.
  if (argc > 8 && std::string(argv[8]) == "4k") prctl(PR_SET_THP_DISABLE, 1, 0, 0, 0);
  constexpr std::uint64_t kKeysPerCase = std::uint64_t{1} << 25;
  std::optional<bulkbloom::BlockIndex> index;
  if (index_name != "auto") index = bulkbloom::parse_block_index(index_name);
  const bulkbloom::Layout layout =
      bulkbloom::Layout::for_capacity(keys, fpr, bulkbloom::KeyHash::xxh64, 0, index);
  bulkbloom::Options options;
  options.threads = threads;
  bulkbloom::Filter filter(layout, options);
  filter.clear();  // faults every page in before anything is timed
  std::printf("speed: %s, %s, %u threads, %s; huge pages %.2f of %.2f GiB\n",
              layout.describe().c_str(), filter.implementation().c_str(), threads,
              index_name.c_str(), static_cast<double>(anon_huge_kb()) / (1 << 20),
              static_cast<double>(layout.size_bytes()) / (1 << 30));
  std::fflush(stdout);
  bulkbloom::probe::MemoryProbe probe(
      std::span(filter.view().data(), static_cast<std::size_t>(layout.size_bytes())));

  probe.random_rmw_lines_per_s(threads, 0.2);  // a first pass, unrecorded: it measured erratic
  // What the memory streams, beside its random-line rates: bulk calls that move keys between
  // threads (partitioning) spend sequential bytes from the same budget.
  std::printf("  sequential read %.1f GB/s\n", probe.seq_read_bytes_per_s(threads, 0.25) / 1e9);
  std::vector<std::uint64_t> batch(batch_keys);
  std::vector<std::uint8_t> flags(batch_keys);
  std::uint64_t next_key = 0, sink = 0;
  // Rates of `call(batch)` over kKeysPerCase fresh keys, timing the calls only: per second of wall
  // time, and per second of the process's CPU time divided by the threads.
  const auto timed = [&](const auto& call) {
    double busy = 0, cpu = 0;
    for (std::uint64_t done = 0; done < kKeysPerCase; done += batch_keys) {
      std::iota(batch.begin(), batch.end(), next_key);
      next_key += batch_keys;
      const double cpu_start = process_cpu_seconds();
      const auto start = Clock::now();
      call(std::span<const std::uint64_t>(batch));
      busy += seconds_since(start);
      cpu += process_cpu_seconds() - cpu_start;
      sink += flags[done % batch_keys];
    }
    return std::pair{static_cast<double>(kKeysPerCase) / busy,
                     static_cast<double>(kKeysPerCase) * threads / cpu};
  };
  const auto probe_both = [&](bool write) {
    std::pair<double, double> r;
    for (auto timing : {bulkbloom::probe::Timing::wall, bulkbloom::probe::Timing::cpu}) {
      probe.set_timing(timing);
      const double v = write ? probe.random_rmw_lines_per_s(threads, 0.6)
                             : probe.random_read_lines_per_s(threads, 0.6);
      (timing == bulkbloom::probe::Timing::wall ? r.first : r.second) = v;
    }
    return r;
  };
  // Per case: contains, insert, insert_if_absent by the wall clock, then by CPU time.
  const char* const kCases[] = {"contains", "insert", "insert_if_absent"};
  std::vector<double> rates[6], ratios[6];
  for (int r = 0; r < rounds; ++r) {
    const auto read = probe_both(false);
    const auto con = timed([&](auto b) { filter.contains(b, std::span(flags)); });
    const auto rmw = probe_both(true);
    const auto ins = timed([&](auto b) { filter.insert(b); });
    const auto iia = timed([&](auto b) { filter.insert_if_absent(b, std::span(flags)); });
    const double rate[6] = {con.first, ins.first, iia.first, con.second, ins.second, iia.second};
    const double limit[6] = {read.first, rmw.first, rmw.first, read.second, rmw.second, rmw.second};
    for (int c = 0; c < 6; ++c) {
      rates[c].push_back(rate[c]);
      ratios[c].push_back(rate[c] / limit[c]);
    }
    std::printf("  round %d: probes read %.1f rmw %.1f (wall), %.1f %.1f (cpu) M lines/s\n", r,
                read.first / 1e6, rmw.first / 1e6, read.second / 1e6, rmw.second / 1e6);
    for (int c = 0; c < 3; ++c) {
      std::printf("    %s %.1f M/s, %.0f%% of its probe (wall); %.1f M/s, %.0f%% (cpu)\n",
                  kCases[c], rate[c] / 1e6, 100 * rate[c] / limit[c], rate[c + 3] / 1e6,
                  100 * rate[c + 3] / limit[c + 3]);
    }
    std::fflush(stdout);
  }
  std::printf("median of %d rounds (contains against the read probe, writes against rmw):\n",
              rounds);
  for (int c = 0; c < 3; ++c) {
    std::printf("  %s: wall %.1f M keys/s, %.0f%% of the probe; cpu %.1f M keys/s, %.0f%%\n",
                kCases[c], median(rates[c]) / 1e6, 100 * median(ratios[c]),
                median(rates[c + 3]) / 1e6, 100 * median(ratios[c + 3]));
  }
  if (sink == 0xFFFFFFFF) std::printf(" \n");  // keeps the flags read
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc > 1 && std::string(argv[1]) == "speed") return speed(argc, argv);
  if (argc < 4) {
    std::fprintf(stderr, "usage: %s KEYS FPR high32|full64|auto [THREADS] [PROBES]\n", argv[0]);
    return 2;
  }
  const std::uint64_t keys = std::strtoull(argv[1], nullptr, 10);
  const double fpr = std::strtod(argv[2], nullptr);
  const std::string index_name = argv[3];
  const unsigned threads = argc > 4 ? static_cast<unsigned>(std::atoi(argv[4])) : 2;
  const std::uint64_t probes = argc > 5 ? std::strtoull(argv[5], nullptr, 10) : 100'000'000;
  std::optional<bulkbloom::BlockIndex> index;
  if (index_name != "auto") index = bulkbloom::parse_block_index(index_name);
  const bulkbloom::Layout layout =
      bulkbloom::Layout::for_capacity(keys, fpr, bulkbloom::KeyHash::xxh64, 0, index);
  std::printf("%s: %s, model FPR %.5f%% at %llu keys\n", index_name.c_str(),
              layout.describe().c_str(), 100 * layout.expected_fpr(keys),
              static_cast<unsigned long long>(keys));
  std::fflush(stdout);

  const auto limits = [&] {
    bulkbloom::probe::MemoryProbe probe(layout.size_bytes());
    return std::pair{probe.random_read_lines_per_s(threads, 1.0),
                     probe.random_rmw_lines_per_s(threads, 1.0)};
  };
  const auto before = limits();

  std::vector<std::uint64_t> batch(std::size_t{1} << 22);
  std::vector<std::uint8_t> flags(batch.size());
  double insert_s = 0, contains_s = 0, iia_s = 0;
  std::uint64_t hits = 0;
  long huge_kb = 0;
  {
    bulkbloom::Options options;
    options.threads = threads;
    bulkbloom::Filter filter(layout, options);
    auto start = std::chrono::steady_clock::now();
    in_batches(0, keys, batch, [&](auto b) { filter.insert(b); });
    insert_s = seconds_since(start);
    huge_kb = anon_huge_kb();

    start = std::chrono::steady_clock::now();
    in_batches(keys, probes, batch, [&](auto b) {
      filter.contains(b, std::span(flags.data(), b.size()));
      for (std::size_t i = 0; i < b.size(); ++i) hits += flags[i];
    });
    contains_s = seconds_since(start);

    // Fresh keys beyond the probes: the rate of insert_if_absent on a full filter.
    start = std::chrono::steady_clock::now();
    in_batches(keys + probes, probes, batch,
               [&](auto b) { filter.insert_if_absent(b, std::span(flags.data(), b.size())); });
    iia_s = seconds_since(start);
  }
  const auto after = limits();

  const double read_limit = std::min(before.first, after.first);
  const double rmw_limit = std::min(before.second, after.second);
  const double insert_rate = static_cast<double>(keys) / insert_s;
  const double contains_rate = static_cast<double>(probes) / contains_s;
  const double iia_rate = static_cast<double>(probes) / iia_s;
  std::printf(
      "%s: FPR %.5f%% (%llu of %llu), model %.5f%%; huge pages %.1f of %.1f GiB\n"
      "  insert %.1f M keys/s (%.1f s), contains %.1f M/s, insert_if_absent %.1f M/s\n"
      "  probe (min of before/after): read %.1f M lines/s (%.1f / %.1f), rmw %.1f M lines/s "
      "(%.1f / %.1f)\n"
      "  of the probe: insert %.0f%% of rmw, contains %.0f%% of read, insert_if_absent %.0f%% of "
      "rmw\n",
      index_name.c_str(), 100.0 * static_cast<double>(hits) / static_cast<double>(probes),
      static_cast<unsigned long long>(hits), static_cast<unsigned long long>(probes),
      100 * layout.expected_fpr(keys), static_cast<double>(huge_kb) / (1 << 20),
      static_cast<double>(layout.size_bytes()) / (1 << 30), insert_rate / 1e6, insert_s,
      contains_rate / 1e6, iia_rate / 1e6, read_limit / 1e6, before.first / 1e6, after.first / 1e6,
      rmw_limit / 1e6, before.second / 1e6, after.second / 1e6, 100 * insert_rate / rmw_limit,
      100 * contains_rate / read_limit, 100 * iia_rate / rmw_limit);
  return 0;
}
