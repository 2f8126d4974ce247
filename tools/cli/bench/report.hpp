// The bench command's report as a data model: its figures, a comparison with an earlier report,
// and the notes read from the figures. report_json.hpp writes and reads it, report_html.hpp draws
// it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "cli/bench/json.hpp"
#include "registry/device_bench.hpp"

namespace bulkbloom::cli::bench_report {

/// The operations a case measures, in the order they run.
inline constexpr const char* kOperations[] = {"insert", "contains", "insert_if_absent"};

/// The first and third quartiles of a probe's round rates.
struct Spread {
  double low = 0, high = 0;
};

/// One measured case: an operation of one implementation at one filter size and thread count.
struct Case {
  std::string implementation;  ///< As Filter::implementation() names it.
  /// What the implementation stands for in the sweep, so reports of machines with different
  /// SIMD targets can be compared: "best" (the best CPU target), "reference" (cpu/scalar) or "gpu".
  std::string role;
  std::string operation;  ///< One of kOperations.
  unsigned threads = 1;
  bool all_threads = false;  ///< The sweep's "all threads" count rather than one thread.
  std::uint64_t filter_bytes = 0;
  std::uint64_t keys_per_call = 0;
  std::vector<double> runs;  ///< keys/s of each repetition, in the order they ran.
  double keys_per_s = 0;     ///< The median of `runs`.
  /// Half the range of `runs` over their median; NaN (unknown) with fewer than two runs.
  double noise = 0;
  /// The limit the case is read against, measured in each round of the sweep right before the
  /// round's cases of this size and thread count, over a buffer of the filter's size, timed as the
  /// case is: "random_read" for contains, "random_rmw" for the writes; empty (and no figures)
  /// where no host probe applies (the GPU).
  std::string limit;
  /// 64-byte lines/s of the probe timed in each run's round, one per run: run i is read against
  /// run_limits[i], so a change of the machine's speed between rounds moves both.
  std::vector<double> run_limits;
  /// The lowest first quartile and the highest third quartile of those probes' timed rounds.
  Spread limit_spread;
  /// The case ran above its limit and was measured again, probes and runs (these are the second
  /// measurement's figures).
  bool remeasured = false;
  /// Measured again and still above its limit: the probe, not the case, is wrong here.
  bool probe_failure = false;
  /// The fraction of the filter's bytes on transparent huge pages when it was measured; negative
  /// when unknown (a GPU's memory, or a system that does not say).
  double huge_pages = -1;
  /// The median of run_limits; 0 without them.
  double limit_per_s() const;
};

/// This machine's limits over a buffer of one size with one thread count, measured once before the
/// size's cases (with the sequential bandwidth, which no case is paired with). The plots' limit
/// curves are the medians of the cases' paired probes instead: many probes rather than one.
struct Limits {
  std::uint64_t filter_bytes = 0;
  unsigned threads = 1;
  bool all_threads = false;
  double random_read_lines_per_s = 0;
  double random_rmw_lines_per_s = 0;
  double seq_read_bytes_per_s = 0;
  double huge_pages = -1;  ///< Of the probe's buffer, as Case::huge_pages.
};

/// How long one key waits at one filter size, one thread: a filter's single-key contains beside
/// the memory's dependent-load latency over a buffer of the same size.
struct Latency {
  std::uint64_t filter_bytes = 0;
  /// One 64-byte load that waits for the one before, ns (a pointer chase in one random cycle
  /// through every line of the buffer: the latency of the level the buffer lives in).
  double dependent_load_ns = 0;
  std::string implementation;  ///< The filter's, as Filter::implementation() names it.
  /// One Filter::contains(key) call of a loop over random keys (half present), ns: the median of
  /// the calls' rounds. The calls are independent, so out-of-order execution may overlap
  /// neighbours, as it does in a user's loop.
  double one_key_contains_ns = 0;
};

/// The GPU section: at each of its filter sizes, a GPU filter's calls with the keys in device
/// memory (timed by CUDA events) beside the device's random block-read rate over the filter, and
/// the same calls with the keys in pinned host memory, end to end through PCIe. Apart from the
/// sweep's GPU cases, which call with host-resident batches of keys_per_call keys.
struct GpuSection {
  /// Why nothing was measured, "" when something was: no CUDA backend in this build, no usable
  /// device (the driver's reason), the CPU backend asked for, or a report older than the section.
  std::string absent;
  std::vector<detail::DeviceBench> cases;
  /// Sizes not measured, each with why: not enough device memory, answers unlike the CPU's.
  std::vector<std::string> failures;
};

/// A whole report.
struct Report {
  std::string date;                  ///< UTC, ISO 8601.
  std::vector<std::string> command;  ///< The command line that produced it.
  Json machine;                      ///< The machine and build, as an object of named fields.
  Json settings;                     ///< Sweep parameters, as an object.
  /// The machine's load during the run (load averages before and after, steal and busy shares),
  /// as an object; null in a report that does not say.
  Json conditions;
  /// What makes the figures less than this machine's (threads beyond the CPUs, a loaded machine):
  /// shown first, not explained away.
  std::vector<std::string> warnings;
  std::vector<Limits> limits;
  std::vector<Latency> latency;  ///< Per size, measured once with the limits.
  std::vector<Case> cases;
  std::vector<std::string> notes;  ///< Oddities in the figures, explained.
  GpuSection gpu;
};

/// When a case counts as changed: each side has at least kMinRunsToCompare runs, the two sets
/// of runs do not overlap (every run of one faster than every run of the other), and the medians
/// differ by more than kCompareFloor; and where both sides have a limit per run, the same holds
/// of the runs read against their rounds' limits (run / limit), in the same direction. A case
/// that moved only with its limit (the machine, not the code, changed speed) is reported as such,
/// not flagged. Of two reports of one distribution with 5 runs a case, 2 in 252 cases (0.8 %) have
/// run sets apart by chance, and fewer still medians 5 % apart. Noise does not hide a change: a
/// noisy case whose runs all moved past each other is flagged.
inline constexpr std::size_t kMinRunsToCompare = 5;
inline constexpr double kCompareFloor = 0.05;

/// One case set against the same case of an earlier report.
struct Difference {
  std::string role, operation;
  bool all_threads = false;
  std::uint64_t filter_bytes = 0;
  double ratio = 0;        ///< keys/s now over keys/s before (the medians').
  double limit_ratio = 0;  ///< The paired limit now over before (0 where there is none).
  /// The median of run / limit now over before (0 where a side has no limit per run).
  double ratio_to_limit = 0;
  /// "faster" or "slower" (flagged); "same"; "moved with its limit" (the runs moved, their ratio
  /// to their rounds' limits not beyond kCompareFloor: the machine changed speed); "unsure" (the
  /// runs moved, and so did their ratio to the limits, but in overlapping sets: the machine
  /// changed, maybe the code too); "too few runs" (a side has fewer than kMinRunsToCompare);
  /// "unlike implementations" (the role ran different code on each side).
  std::string verdict = "same";
  bool flagged = false;
};

/// The earlier report a comparison is against, and what differs.
struct Comparison {
  std::string against;  ///< Where the earlier report came from (its path).
  std::string against_date, against_cpu;
  /// What makes the two reports unlike (CPU, implementations, settings): each a sentence, said
  /// loudly wherever the comparison is shown.
  std::vector<std::string> warnings;
  std::vector<Difference> differences;
  std::size_t count(const std::string& verdict) const;
  std::size_t flagged() const;
};

/// What makes two reports unlike, each a sentence naming the reports `now_name` and
/// `before_name` ("now", "before"): their machines' identities, memory, builds (compiler and
/// flags) and settings. A comparison across them measures that difference too.
std::vector<std::string> unlike(const Report& now, const Report& before,
                                const std::string& now_name, const std::string& before_name);

/// The cases of `now` that `before` also has (same role, operation, thread count kind and size),
/// judged by the rule above, and what makes the two reports unlike.
Comparison compare(const Report& now, const Report& before, std::string against);

/// A data or unified cache of the machine a report describes: "L1d", "L2", "L3".
struct CacheSize {
  std::string name;
  std::uint64_t bytes = 0;
};
/// The data and unified caches of a report's machine, by level.
std::vector<CacheSize> data_caches(const Json& machine);

/// What a reader looks for first, read from a report's figures.
struct Headline {
  std::uint64_t largest_bytes = 0;     ///< The largest size measured.
  std::uint64_t last_level_cache = 0;  ///< The largest cache; 0 when the report does not say.
  /// Random 64-byte lines/s at the largest size, per thread count: DRAM's limits when that size
  /// is at least twice the last-level cache.
  struct Memory {
    unsigned threads = 1;
    double read = 0, rmw = 0;
  };
  std::vector<Memory> memory;
  /// Random reads with one thread at the largest size inside each cache (and above the one
  /// before): the cache's plateau.
  struct Plateau {
    CacheSize cache;
    std::uint64_t at_bytes = 0;
    double read = 0;
  };
  std::vector<Plateau> plateaus;
  /// The best implementation's insert and contains cases at the largest size.
  std::vector<const Case*> best;
};
Headline headline(const Report& report);

/// "48 cases compared: 2 changed (...), 0 with too few runs to compare, 0 ...": the counts by
/// verdict, with the rule.
std::string summary(const Comparison& comparison);

/// Notes that explain what a reader would stop at in the figures (a write above a read, a noisy
/// case), computed from the figures. A case above its limit is not explained: it is marked a
/// probe failure in the data.
std::vector<std::string> explain(const Report& report);

/// The median of the paired probes of kind `limit` ("random_read" or "random_rmw") taken beside
/// the cases at one size and thread count, of every implementation: the machine's limit there,
/// less exposed to a passing load than any single probe. 0 when no case has that probe.
double paired_limit(const Report& report, const std::string& limit, unsigned threads,
                    std::uint64_t filter_bytes);

/// The widest spread of those probes: the lowest first quartile and the highest third quartile of
/// their rounds' rates; {0, 0} when no case has that probe.
Spread paired_limit_spread(const Report& report, const std::string& limit, unsigned threads,
                           std::uint64_t filter_bytes);

/// The median of `values`; 0 when there are none.
double median(std::vector<double> values);

/// `value` printed by the printf format `fmt` (one double conversion).
std::string format(const char* fmt, double value);
/// A size in people's binary units: "16 KiB", "4 GiB".
std::string size_label(std::uint64_t bytes);
/// A series' label: "insert, 1 thread".
std::string series_label(const std::string& operation, unsigned threads);

}  // namespace bulkbloom::cli::bench_report
