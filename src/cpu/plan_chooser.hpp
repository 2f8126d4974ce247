// Chooses, call by call, between two plans of a bulk call that give the same answers, by the speed
// each has shown on this filter. Which of them is faster depends on the machine, not only on the
// filter's size: at 4 GiB, partitioned reads were slower than key slices on one host and nearly
// twice as fast on another (bench/DECISIONS.md, "Plans chosen by measurement").
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <mutex>

namespace bulkbloom::detail {

class PlanChooser {
 public:
  /// Which plan the next call runs: 0 (the one chosen by size) or 1 (the alternative).
  unsigned next();
  /// Records that plan `plan` took `seconds` for `keys` keys.
  void record(unsigned plan, std::size_t keys, double seconds);

  /// Calls each plan runs before either is preferred, and each recheck of the plan not preferred
  /// (consecutive calls).
  static constexpr unsigned kFirstRuns = 2;
  /// The calls between two rechecks of the plan not preferred, at first and at most. A recheck
  /// costs kFirstRuns calls of the slower plan (up to a few calls' time each where the other plan
  /// is one thread: cpu/partitioned.hpp), so the interval doubles while the preference holds and
  /// starts over when a recheck overturns it.
  static constexpr unsigned kFirstRecheckInterval = 16;
  static constexpr unsigned kMaxRecheckInterval = 256;

 private:
  // The fastest of the plan's last kFirstRuns calls: a shared machine's noise only ever slows a
  // call down.
  double recent_best(unsigned plan) const;
  // A recheck that did not overturn the preference: the next comes twice as late.
  void hold_preference();

  // The preference changes only on calls timed under the machine's present load: a recheck of
  // the other plan, then one call of the preferred plan to confirm, and the other plan must beat
  // the preferred plan's calls on both sides of the recheck. A plan's time from minutes ago is no
  // evidence against calls slowed by a neighbour now: weighed against it, a burst of load that
  // slowed every call handed the preference to the slower plan for up to kMaxRecheckInterval
  // calls (bench/DECISIONS.md #37, "The chooser's stale times"), and the confirming call keeps a
  // burst that ends during the recheck from doing so for a recheck interval. When the preferred
  // plan's recent calls fall behind the other plan's last recheck, the next recheck comes early
  // (at most one a kFirstRecheckInterval calls): that is how a real change is followed.
  std::mutex mutex_;  // contains() on a shared filter may come from several threads
  std::array<std::array<double, kFirstRuns>, 2> recent_{};  // seconds per key, newest overwritten
  std::array<std::uint64_t, 2> runs_{};                     // calls recorded per plan
  bool settled_ = false;                                    // each plan has run kFirstRuns calls
  unsigned preferred_ = 0;
  unsigned recheck_calls_to_hand_out_ = 0;  // of the recheck under way
  unsigned recheck_calls_awaited_ = 0;      // handed out, not yet recorded
  bool confirming_ = false;  // the recheck beat the calls before it; one more call decides
  unsigned since_recheck_ = 0;
  unsigned recheck_interval_ = kFirstRecheckInterval;
};

}  // namespace bulkbloom::detail
