#include "cpu/plan_chooser.hpp"

#include <algorithm>
#include <limits>

namespace bulkbloom::detail {

unsigned PlanChooser::preferred() const {
  const auto best = [&](unsigned plan) {
    const unsigned held = std::min(runs_[plan], kFirstRuns);
    if (held == 0) return std::numeric_limits<double>::infinity();
    return *std::min_element(recent_[plan].begin(), recent_[plan].begin() + held);
  };
  return best(1) < best(0) ? 1u : 0u;
}

bool PlanChooser::trying_both() const {
  return runs_[0] < kFirstRuns || runs_[1] < kFirstRuns;
}

unsigned PlanChooser::next() {
  std::lock_guard lock(mutex_);
  // First each plan in turn, the size-chosen one first.
  if (trying_both()) return runs_[0] <= runs_[1] ? 0u : 1u;
  const unsigned best = preferred();
  if (++since_recheck_ < recheck_interval_) return best;
  since_recheck_ = 0;
  return 1 - best;
}

void PlanChooser::record(unsigned plan, std::size_t keys, double seconds) {
  if (keys == 0) return;
  std::lock_guard lock(mutex_);
  const bool settled = !trying_both();
  const unsigned before = preferred();
  recent_[plan][runs_[plan] % kFirstRuns] = seconds / static_cast<double>(keys);
  ++runs_[plan];
  if (!settled || plan == before) return;
  // A recheck of the plan not preferred: back off while it stays slower, start over when not.
  recheck_interval_ = preferred() == before ? std::min(2 * recheck_interval_, kMaxRecheckInterval)
                                            : kFirstRecheckInterval;
}

}  // namespace bulkbloom::detail
