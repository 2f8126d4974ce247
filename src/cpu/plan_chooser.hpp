// Chooses, call by call, between two plans of a bulk call that give the same answers, by the speed
// each has shown on this filter. Which of them is faster depends on the machine, not only on the
// filter's size: at 4 GiB, partitioned reads were slower than key slices on one host and nearly
// twice as fast on another (bench/DECISIONS.md, "Plans chosen by measurement").
#pragma once

#include <array>
#include <cstddef>
#include <mutex>

namespace bulkbloom::detail {

class PlanChooser {
 public:
  /// Which plan the next call runs: 0 (the one chosen by size) or 1 (the alternative).
  unsigned next();
  /// Records that plan `plan` took `seconds` for `keys` keys.
  void record(unsigned plan, std::size_t keys, double seconds);

  /// Calls each plan runs before either is preferred.
  static constexpr unsigned kFirstRuns = 2;
  /// The calls between two runs of the plan not preferred, at first and at most: each run of the
  /// slower plan costs up to one call's time again, so the interval doubles while the preference
  /// holds (a loss of at most 1/kMaxRecheckInterval of the time once settled), and starts over
  /// when a recheck overturns it (the machine's load changes by the minute).
  static constexpr unsigned kFirstRecheckInterval = 16;
  static constexpr unsigned kMaxRecheckInterval = 256;

 private:
  // The faster plan so far: the one whose recent calls include the lowest seconds per key (the
  // fastest of a few calls, since a shared machine's noise only ever slows a call down).
  unsigned preferred() const;
  // Whether a plan still has fewer than kFirstRuns calls recorded.
  bool trying_both() const;

  std::mutex mutex_;  // contains() on a shared filter may come from several threads
  std::array<std::array<double, kFirstRuns>, 2> recent_{};  // seconds per key, newest overwritten
  std::array<unsigned, 2> runs_{};                          // calls recorded per plan
  unsigned since_recheck_ = 0;
  unsigned recheck_interval_ = kFirstRecheckInterval;
};

}  // namespace bulkbloom::detail
