#include "cpu/plan_chooser.hpp"

#include <algorithm>

namespace bulkbloom::detail {

double PlanChooser::recent_best(unsigned plan) const {
  const unsigned held = std::min(runs_[plan], kFirstRuns);
  return *std::min_element(recent_[plan].begin(), recent_[plan].begin() + held);
}

unsigned PlanChooser::next() {
  std::lock_guard lock(mutex_);
  // First each plan in turn, the size-chosen one first.
  if (!settled_) return runs_[0] <= runs_[1] ? 0u : 1u;
  if (recheck_calls_left_ > 0) return 1 - preferred_;
  if (++since_recheck_ < recheck_interval_) return preferred_;
  since_recheck_ = 0;
  recheck_calls_left_ = kFirstRuns;
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
  if (plan == preferred_) {
    // Slower now than the other plan was at its last recheck: recheck it on the next call.
    if (recheck_calls_left_ == 0 && recent_best(plan) > recent_best(1 - plan)) {
      since_recheck_ = recheck_interval_ - 1;
    }
    return;
  }
  // A call of a recheck (or, with calls from several threads, a straggler after one).
  if (recheck_calls_left_ == 0 || --recheck_calls_left_ > 0) return;
  if (recent_best(plan) < recent_best(preferred_)) {
    preferred_ = plan;
    recheck_interval_ = kFirstRecheckInterval;
  } else {
    recheck_interval_ = std::min(2 * recheck_interval_, kMaxRecheckInterval);
  }
}

}  // namespace bulkbloom::detail
