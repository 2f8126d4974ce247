#include "cpu/plan_chooser.hpp"

#include <algorithm>

namespace bulkbloom::detail {

double PlanChooser::recent_best(unsigned plan) const {
  return *std::min_element(recent_[plan].begin(), recent_[plan].end());
}

void PlanChooser::hold_preference() {
  recheck_interval_ = std::min(2 * recheck_interval_, kMaxRecheckInterval);
}

unsigned PlanChooser::next() {
  std::lock_guard lock(mutex_);
  // First each plan in turn, the size-chosen one first.
  if (!settled_) return runs_[0] <= runs_[1] ? 0u : 1u;
  if (recheck_calls_to_hand_out_ == 0) {
    if (confirming_ || recheck_calls_awaited_ > 0 || ++since_recheck_ < recheck_interval_) {
      return preferred_;
    }
    since_recheck_ = 0;
    recheck_calls_to_hand_out_ = kFirstRuns;
  }
  --recheck_calls_to_hand_out_;
  ++recheck_calls_awaited_;
  return 1 - preferred_;
}

void PlanChooser::record(unsigned plan, std::size_t keys, double seconds) {
  if (keys == 0) return;
  std::lock_guard lock(mutex_);
  recent_[plan][runs_[plan] % kFirstRuns] = seconds / static_cast<double>(keys);
  ++runs_[plan];
  if (!settled_) {
    if (std::min(runs_[0], runs_[1]) < kFirstRuns) return;
    settled_ = true;
    preferred_ = recent_best(1) < recent_best(0) ? 1u : 0u;
    return;
  }
  const unsigned other = 1 - preferred_;
  if (plan == other) {
    // A call of the recheck (one from an earlier recheck, with calls from several threads, is
    // only kept as the other plan's latest time).
    if (recheck_calls_awaited_ == 0) return;
    if (--recheck_calls_awaited_ > 0 || recheck_calls_to_hand_out_ > 0) return;
    if (recent_best(other) < recent_best(preferred_)) {
      confirming_ = true;
    } else {
      hold_preference();
    }
    return;
  }
  if (confirming_) {
    confirming_ = false;
    if (recent_best(other) < recent_best(preferred_)) {
      preferred_ = other;
      recheck_interval_ = kFirstRecheckInterval;
    } else {
      hold_preference();
    }
    return;
  }
  // Slower now than the other plan at its last recheck: recheck it early, though not more often
  // than the shortest interval.
  if (recheck_calls_to_hand_out_ == 0 && recheck_calls_awaited_ == 0 &&
      since_recheck_ + 1 >= kFirstRecheckInterval && recent_best(plan) > recent_best(other)) {
    since_recheck_ = std::max(since_recheck_, recheck_interval_ - 1);
  }
}

}  // namespace bulkbloom::detail
