// The grown filter's generations: the growth rule, the union over generations, the model of the
// false drops a run expects. Its file codec is src/persist/grown_file.cpp.
#include "bulkbloom/grown_filter.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <stdexcept>
#include <string_view>
#include <type_traits>
#include <utility>

#include "core/filter_access.hpp"
#include "core/host_kernels.hpp"
#include "core/key_hash.hpp"
#include "core/key_mode.hpp"
#include "core/span_checks.hpp"
#include "grown/grown_access.hpp"
#include "persist/incremental_detail.hpp"
#include "registry/backend.hpp"

namespace bulkbloom {
namespace {

// The span checks Filter makes, made before a generation could be added for a malformed batch.
using detail::check_size;

// Steps of the midpoint rule per batch when integrating the newest generation's model over the
// batch's fill: the curve is smooth over one batch.
constexpr int kFprSteps = 4;

// 1 − Π(1 − p) over `rates`, as −expm1(Σ log1p(−p)): formed directly, a rate below 1e-16 would
// vanish in 1 − p and print as 0.
double any_claims(const std::vector<double>& rates) {
  double log_none_claims = 0.0;
  for (const double p : rates) log_none_claims += std::log1p(-p);
  return -std::expm1(log_none_claims);
}

// Appends to `log` (bulkbloom/incremental.hpp) the hashes with which `filter` placed the keys
// whose flags are 1, those new to it: the others set no bits.
template <typename Key>
void log_new_keys(const Filter& filter, std::span<const Key> keys,
                  std::span<const std::uint8_t> flags, std::vector<std::uint64_t>& log) {
  const Layout& layout = filter.layout();
  if constexpr (std::is_same_v<Key, std::string_view>) {
    for (std::size_t i = 0; i < keys.size(); ++i) {
      if (flags[i] != 0) log.push_back(detail::xxh64_bytes(keys[i], layout.seed));
    }
  } else {
    std::vector<std::uint64_t> fresh;
    for (std::size_t i = 0; i < keys.size(); ++i) {
      if (flags[i] != 0) fresh.push_back(keys[i]);
    }
    const std::size_t at = log.size();
    log.resize(at + fresh.size());
    detail::FilterAccess::engine(filter).host().kernels->hash(
        layout, fresh.data(), fresh.size(), detail::KeyMode::hash_with_layout, log.data() + at);
  }
}

}  // namespace

namespace detail {

std::uint64_t capacity_at(const Layout& layout, double fpr) {
  std::uint64_t low = 1, high = layout.size_bytes() * 8;
  if (layout.expected_fpr(high) <= fpr) return high;
  while (high - low > 1) {
    const std::uint64_t mid = low + (high - low) / 2;
    (layout.expected_fpr(mid) <= fpr ? low : high) = mid;
  }
  return low;
}

}  // namespace detail

double GrownFilter::generation_target(double promise, std::size_t index) {
  return promise * 0.75 * std::pow(0.25, static_cast<double>(index));
}

Layout GrownFilter::first_layout(std::uint64_t capacity, double fpr) {
  // Checked here: three quarters of a rate above 1 could pass for a rate.
  if (!(fpr > 0.0 && fpr < 1.0)) {
    throw std::invalid_argument("false-positive rate must be in (0, 1), got " +
                                std::to_string(fpr));
  }
  return Layout::for_capacity(capacity, generation_target(fpr, 0));
}

GrownFilter GrownFilter::for_capacity(std::uint64_t capacity, double fpr, std::string key_format,
                                      const Options& options) {
  return GrownFilter(first_layout(capacity, fpr), capacity, fpr, std::move(key_format), options);
}

GrownFilter::GrownFilter(const Layout& layout, std::uint64_t capacity, double fpr,
                         std::string key_format, const Options& options)
    : promise_(fpr), key_format_(std::move(key_format)), options_(options) {
  generations_.push_back({Filter(layout, options), capacity, generation_target(fpr, 0), 0});
}

GrownFilter::GrownFilter(std::vector<Generation> generations, double promise,
                         std::string key_format, const Options& options)
    : generations_(std::move(generations)),
      promise_(promise),
      key_format_(std::move(key_format)),
      options_(options) {
  refresh_older_fpr();
}

void GrownFilter::expect_keys(std::uint64_t expected_keys, std::uint64_t keys_done) {
  expected_keys_ = expected_keys;
  keys_seen_ = keys_done;
}

void GrownFilter::set_growth_check(GrowthCheck check) {
  growth_check_ = std::move(check);
}

void GrownFilter::merge(const GrownFilter& other) {
  if (generations_.size() != 1 || other.generations_.size() != 1) {
    throw std::logic_error("GrownFilter::merge takes filters of one generation");
  }
  Generation& mine = generations_.front();
  const Generation& theirs = other.generations_.front();
  mine.filter.merge(theirs.filter);
  if (logging_) {  // the union's bits are not the logged hashes' OR
    change_log_.clear();
    log_rewritten_ = true;
  }
  // The saved count of a union is not the sum of the parts' counts; the bits estimate it. A
  // saturated union estimates to infinity: its count is then at least every part's.
  mine.keys = std::max(mine.keys, theirs.keys);
  const double estimate = mine.filter.estimated_count();
  if (std::isfinite(estimate))
    mine.keys = std::max(mine.keys, static_cast<std::uint64_t>(estimate));
  if (other.promise_ < promise_) {
    promise_ = other.promise_;
    mine.target = generation_target(promise_, 0);
    mine.capacity = detail::capacity_at(mine.filter.layout(), mine.target);
  }
  if (key_format_.empty()) key_format_ = other.key_format_;
}

std::uint64_t GrownFilter::keys() const {
  std::uint64_t total = 0;
  for (const Generation& g : generations_) total += g.keys;
  return total;
}

double GrownFilter::current_fpr() const {
  std::vector<double> rates;
  for (const Generation& g : generations_) rates.push_back(g.filter.current_fpr());
  return any_claims(rates);
}

void GrownFilter::refresh_older_fpr() {
  std::vector<double> rates;
  for (std::size_t i = 0; i + 1 < generations_.size(); ++i) {
    rates.push_back(generations_[i].filter.current_fpr());
  }
  older_fpr_ = any_claims(rates);
}

// Before a batch of `batch_keys` keys: if the newest generation's model could pass its target
// with the batch's new keys, add a generation sized for the rest of the expected load (or let
// the growth check refuse).
void GrownFilter::make_room(std::uint64_t batch_keys,
                            const std::function<std::uint64_t()>& count_absent,
                            const std::function<std::uint64_t()>& count_new) {
  const Generation& newest = generations_.back();
  if (newest.filter.expected_fpr(newest.keys + batch_keys) <= newest.target) return;
  // Near the target, a batch is counted before growing for it: a dump carried into the next run
  // is mostly repeats, and growing for all its records would add a generation (or have the check
  // refuse the batch) for keys the filter already holds. Those the filter does not hold bound
  // the batch's new keys.
  batch_keys = count_absent();
  if (newest.filter.expected_fpr(newest.keys + batch_keys) <= newest.target) return;
  // That bound counts a new key again at each repeat within the batch, and a key that an earlier
  // key of the batch makes look held: the exact count, from the batch run on a copy, grows only
  // when the keys would pass the target. So whether a run grows at all does not depend on
  // where its batches begin (a filter that takes a run as one batch, like bulkbloom.spark's
  // shards, decides it exactly as this does), and the copy is only made at the batch that
  // grows the filter or at one that comes within a repeat count of it.
  const std::uint64_t new_keys = count_new();
  if (newest.filter.expected_fpr(newest.keys + new_keys) <= newest.target) return;
  const bool replace = newest.keys == 0;  // an empty generation holds nothing: resize it
  const bool at_limit = !replace && generations_.size() == kMaxGenerations;
  if (growth_check_) growth_check_(*this, new_keys, at_limit);
  if (at_limit) {
    throw std::length_error("the grown filter has " + std::to_string(kMaxGenerations) +
                            " generations, the most it may have");
  }
  const std::uint64_t rest = expected_keys_ > keys_seen_ ? expected_keys_ - keys_seen_ : 0;
  // Sized for the batch's records not held, the bound, as before the exact count was taken.
  const std::uint64_t capacity = std::max({2 * newest.capacity, batch_keys, rest});
  const double target = replace ? newest.target : newest.target / 4;
  const Layout& first = generations_.front().filter.layout();
  Generation next{Filter(Layout::for_capacity(capacity, target, first.hash, first.seed), options_),
                  capacity, target, 0};
  ++growths_;
  if (logging_) {    // the newest generation starts empty: what was logged went into another
    if (!replace) {  // which stays, sealed: its final log is handed over at the next take
      // A rewritten log is empty already (merge(), drop_log_past()).
      closed_logs_.push_back({{static_cast<std::int64_t>(generations_.size() - 1), 0,
                               newest.filter.layout().num_blocks},
                              detail::log_change(log_from_empty_, log_rewritten_),
                              std::move(change_log_)});
    }
    change_log_.clear();
    log_from_empty_ = true;
    log_rewritten_ = false;
  }
  if (replace) {
    generations_.back() = std::move(next);
  } else {
    generations_.push_back(std::move(next));
    refresh_older_fpr();
  }
}

template <typename Key>
void GrownFilter::contains_older(std::span<const Key> keys, std::span<std::uint8_t> out) const {
  std::fill(out.begin(), out.end(), std::uint8_t{0});
  std::vector<std::uint8_t> found(keys.size());
  for (std::size_t i = 0; i + 1 < generations_.size(); ++i) {
    generations_[i].filter.contains(keys, found);
    for (std::size_t k = 0; k < keys.size(); ++k) out[k] |= found[k];
  }
}

template <typename Key>
void GrownFilter::contains_all(std::span<const Key> keys, std::span<std::uint8_t> out) const {
  contains_older(keys, out);
  std::vector<std::uint8_t> found(keys.size());
  newest().contains(keys, found);
  for (std::size_t k = 0; k < keys.size(); ++k) out[k] |= found[k];
}

template <typename Key>
std::uint64_t GrownFilter::insert_new(Filter& newest, std::span<const Key> keys,
                                      std::span<std::uint8_t> is_new) const {
  if (generations_.size() == 1) return newest.insert_if_absent(keys, is_new);
  // A key an older generation may hold is not new; the others go into the newest.
  contains_older(keys, is_new);
  std::vector<Key> pending;
  std::vector<std::size_t> where;
  for (std::size_t i = 0; i < keys.size(); ++i) {
    if (is_new[i] == 0) {
      pending.push_back(keys[i]);
      where.push_back(i);
    }
  }
  std::vector<std::uint8_t> flags(pending.size());
  const std::uint64_t fresh = newest.insert_if_absent(std::span<const Key>(pending), flags);
  std::fill(is_new.begin(), is_new.end(), std::uint8_t{0});
  for (std::size_t j = 0; j < where.size(); ++j) is_new[where[j]] = flags[j];
  return fresh;
}

template <typename Key>
std::uint64_t GrownFilter::dedup(std::span<const Key> keys, std::span<std::uint8_t> is_new) {
  check_size(keys.size(), is_new.size(), "insert_if_absent: is_new span");
  make_room(
      keys.size(),
      [&] {
        contains_all(keys, is_new);  // is_new as scratch: written again below
        return static_cast<std::uint64_t>(
            std::count(is_new.begin(), is_new.end(), std::uint8_t{0}));
      },
      [&] {
        // The copy as a union with empty bits: no host buffer beside it (on CUDA, on the device).
        const Filter& newest = generations_.back().filter;
        Filter trial(newest.layout(), options_);
        trial.merge(newest);
        return insert_new(trial, keys, is_new);
      });
  Generation& newest = generations_.back();
  const std::uint64_t fresh = insert_new(newest.filter, keys, is_new);
  if (logging_ && !log_rewritten_) log_new_keys(newest.filter, keys, is_new, change_log_);
  if (logging_ && !log_rewritten_) {
    log_rewritten_ =
        detail::drop_log_past(change_log_, newest.filter.layout().size_bytes(), closed_logs_);
  }
  // A never-seen key is wrongly dropped when the newest generation (its model over this batch's
  // fill) or an older one (its rate from the bits) claims it.
  double newest_claims = 0.0;
  for (int s = 0; s < kFprSteps; ++s) {
    const double n =
        static_cast<double>(newest.keys) + static_cast<double>(fresh) * (s + 0.5) / kFprSteps;
    newest_claims += newest.filter.expected_fpr(static_cast<std::uint64_t>(n));
  }
  expected_false_drops_ += newest_claims * static_cast<double>(fresh) / kFprSteps;
  if (older_fpr_ > 0.0) {
    const double older = std::min(older_fpr_, 1.0 - 1e-9);
    expected_false_drops_ += static_cast<double>(fresh) * older / (1.0 - older);
  }
  newest.keys += fresh;
  keys_seen_ += keys.size();
  return fresh;
}

std::uint64_t GrownFilter::insert_if_absent(std::span<const std::uint64_t> keys,
                                            std::span<std::uint8_t> is_new) {
  return dedup(keys, is_new);
}

std::uint64_t GrownFilter::insert_if_absent(std::span<const std::string_view> keys,
                                            std::span<std::uint8_t> is_new) {
  return dedup(keys, is_new);
}

void GrownFilter::contains(std::span<const std::uint64_t> keys, std::span<std::uint8_t> out) const {
  check_size(keys.size(), out.size(), "contains: output span");
  contains_all(keys, out);
}

void GrownFilter::contains(std::span<const std::string_view> keys,
                           std::span<std::uint8_t> out) const {
  check_size(keys.size(), out.size(), "contains: output span");
  contains_all(keys, out);
}

std::string GrownFilter::describe_generations() const {
  std::string text;
  for (std::size_t i = 0; i < generations_.size(); ++i) {
    const Generation& g = generations_[i];
    char line[320];
    std::snprintf(line, sizeof line,
                  "%sgeneration %zu: %s, sized for %llu keys at %.3g, holds %llu keys, FPR %.3g",
                  i == 0 ? "" : "\n", i, g.filter.layout().describe().c_str(),
                  static_cast<unsigned long long>(g.capacity), g.target,
                  static_cast<unsigned long long>(g.keys), g.filter.current_fpr());
    text += line;
  }
  return text;
}

}  // namespace bulkbloom
