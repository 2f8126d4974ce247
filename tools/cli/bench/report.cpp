#include "cli/bench/report.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <tuple>

namespace bulkbloom::cli::bench_report {

std::string format(const char* fmt, double value) {
  char buf[64];
  std::snprintf(buf, sizeof buf, fmt, value);
  return buf;
}

double paired_limit(const Report& report, const std::string& limit, unsigned threads,
                    std::uint64_t filter_bytes) {
  std::vector<double> probes;
  for (const Case& c : report.cases) {
    if (c.limit == limit && c.threads == threads && c.filter_bytes == filter_bytes) {
      probes.push_back(c.limit_before);
      probes.push_back(c.limit_after);
    }
  }
  if (probes.empty()) return 0;
  std::sort(probes.begin(), probes.end());
  const std::size_t n = probes.size();
  return n % 2 == 1 ? probes[n / 2] : (probes[n / 2 - 1] + probes[n / 2]) / 2;
}

Spread paired_limit_spread(const Report& report, const std::string& limit, unsigned threads,
                           std::uint64_t filter_bytes) {
  Spread widest{0, 0};
  for (const Case& c : report.cases) {
    if (c.limit != limit || c.threads != threads || c.filter_bytes != filter_bytes) continue;
    for (const Spread& s : {c.limit_before_spread, c.limit_after_spread}) {
      if (s.high <= 0) continue;
      widest.low = widest.high > 0 ? std::min(widest.low, s.low) : s.low;
      widest.high = std::max(widest.high, s.high);
    }
  }
  return widest;
}

std::string size_label(std::uint64_t bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int unit = 0;
  double value = static_cast<double>(bytes);
  while (value >= 1024 && unit < 4) {
    value /= 1024;
    ++unit;
  }
  return format(value == std::floor(value) ? "%.0f" : "%.1f", value) + " " + units[unit];
}

std::string series_label(const std::string& operation, unsigned threads) {
  return operation + ", " + std::to_string(threads) + (threads == 1 ? " thread" : " threads");
}
namespace {

// A machine field as text ("" when absent), for saying what differs.
std::string machine_field(const Report& report, std::string_view key) {
  const Json* value = report.machine.find(key);
  if (value == nullptr) return {};
  return value->kind() == Json::Kind::string ? value->string() : value->dump(-1);
}

// The sentences that make `now` and `before` unlike: a comparison across them measures the
// difference, not a change of the code.
std::vector<std::string> unlike(const Report& now, const Report& before) {
  std::vector<std::string> warnings;
  for (const char* key : {"cpu_model", "cpu_family", "cpu_model_number", "cpu_stepping",
                          "logical_cpus", "memory_bytes", "virtual_machine"}) {
    const std::string a = machine_field(now, key), b = machine_field(before, key);
    if (a != b)
      warnings.push_back("the machines differ: " + std::string(key) + " " + a + " now, " + b +
                         " before");
  }
  for (const auto& [key, value] : now.settings.members("settings")) {
    if (key == "sizes_bytes" || key == "repetitions") continue;  // cases are matched by size
    const Json* old = before.settings.find(key);
    const std::string a = value.dump(-1), b = old ? old->dump(-1) : "absent";
    if (a != b)
      warnings.push_back("the settings differ: " + key + " " + a + " now, " + b + " before");
  }
  return warnings;
}

// Every run of one side faster than every run of the other.
bool apart(const std::vector<double>& a, const std::vector<double>& b) {
  const auto [a_min, a_max] = std::minmax_element(a.begin(), a.end());
  const auto [b_min, b_max] = std::minmax_element(b.begin(), b.end());
  return *a_max < *b_min || *b_max < *a_min;
}

}  // namespace

std::size_t Comparison::count(const std::string& verdict) const {
  return static_cast<std::size_t>(
      std::count_if(differences.begin(), differences.end(),
                    [&](const Difference& d) { return d.verdict == verdict; }));
}

std::size_t Comparison::flagged() const {
  return static_cast<std::size_t>(std::count_if(differences.begin(), differences.end(),
                                                [](const Difference& d) { return d.flagged; }));
}

std::string summary(const Comparison& comparison) {
  return std::to_string(comparison.differences.size()) +
         " cases compared: " + std::to_string(comparison.flagged()) + " changed (at least " +
         std::to_string(kMinRunsToCompare) + " runs a side, the run sets apart, the medians over " +
         format("%.0f", 100 * kCompareFloor) + "% apart), " +
         std::to_string(comparison.count("too few runs")) + " with too few runs to compare, " +
         std::to_string(comparison.count("unlike implementations")) + " of unlike implementations";
}

Comparison compare(const Report& now, const Report& before, std::string against) {
  Comparison comparison;
  comparison.against = std::move(against);
  comparison.against_date = before.date;
  comparison.against_cpu = machine_field(before, "cpu_model");
  comparison.warnings = unlike(now, before);
  using Key = std::tuple<std::string, std::string, bool, std::uint64_t>;
  std::map<Key, const Case*> earlier;
  for (const Case& c : before.cases)
    earlier[{c.role, c.operation, c.all_threads, c.filter_bytes}] = &c;
  std::size_t unlike_implementations = 0;
  for (const Case& c : now.cases) {
    const auto found = earlier.find({c.role, c.operation, c.all_threads, c.filter_bytes});
    if (found == earlier.end() || found->second->keys_per_s <= 0) continue;
    const Case& old = *found->second;
    Difference d{c.role, c.operation, c.all_threads, c.filter_bytes, c.keys_per_s / old.keys_per_s,
                 0,      "same",      false};
    if (!c.limit.empty() && old.limit == c.limit && old.limit_per_s() > 0) {
      d.limit_ratio = c.limit_per_s() / old.limit_per_s();
    }
    if (c.implementation != old.implementation) {
      d.verdict = "unlike implementations";
      ++unlike_implementations;
    } else if (c.runs.size() < kMinRunsToCompare || old.runs.size() < kMinRunsToCompare) {
      d.verdict = "too few runs";
    } else if (apart(c.runs, old.runs) && std::fabs(d.ratio - 1) > kCompareFloor) {
      d.flagged = true;
      d.verdict = d.ratio > 1 ? "faster" : "slower";
    }
    comparison.differences.push_back(d);
  }
  if (unlike_implementations > 0) {
    comparison.warnings.push_back(
        "the implementations differ in " + std::to_string(unlike_implementations) +
        " cases (not judged): the two reports ran different code for the same role");
  }
  return comparison;
}

std::vector<std::string> explain(const Report& report) {
  std::vector<std::string> notes;
  // Random RMWs faster than random reads over the same buffer.
  std::vector<std::string> rmw_ahead;
  for (const Limits& l : report.limits) {
    const double read = paired_limit(report, "random_read", l.threads, l.filter_bytes);
    const double rmw = paired_limit(report, "random_rmw", l.threads, l.filter_bytes);
    if (read > 0 && rmw > read * 1.05) {
      rmw_ahead.push_back(size_label(l.filter_bytes) + " with " + std::to_string(l.threads) +
                          (l.threads == 1 ? " thread" : " threads") + " (" +
                          format("%.2f", rmw / read) + "x)");
    }
  }
  if (!rmw_ahead.empty()) {
    std::string sizes;
    for (const auto& s : rmw_ahead) sizes += (sizes.empty() ? "" : ", ") + s;
    notes.push_back(
        "The random read-modify-write limit (the median of the probes beside the cases) exceeds "
        "the "
        "random read limit at " +
        sizes +
        ". The two probes share the buffer out as a filter's threads do: readers all read the "
        "whole buffer, as threads answering contains() do, while each writer works in its own "
        "slice, as each writing thread of a filter owns a block range. With N threads each "
        "writer's "
        "working set is 1/N of the buffer, so where the buffer is near a cache size more of a "
        "writer's lines stay in cache than a reader's (random reads over a buffer half the size "
        "with two threads run as fast as the writes, or faster). A filter's writes gain the same, "
        "so the paired limit is the right one for them. With one thread the two probes cover the "
        "same lines; in repeated interleaved probes neither leads consistently there, so a write "
        "above a read with one thread is the machine's noise.");
  }
  // The reference beating the best implementation.
  std::map<std::tuple<std::string, unsigned, std::uint64_t>, const Case*> best;
  for (const Case& c : report.cases) {
    if (c.role == "best") best[{c.operation, c.threads, c.filter_bytes}] = &c;
  }
  std::vector<std::string> slower;
  for (const Case& c : report.cases) {
    if (c.role != "reference") continue;
    const auto b = best.find({c.operation, c.threads, c.filter_bytes});
    if (b != best.end() &&
        c.keys_per_s > b->second->keys_per_s * (1 + c.noise + b->second->noise)) {
      slower.push_back(series_label(c.operation, c.threads) + " at " + size_label(c.filter_bytes));
    }
  }
  if (!slower.empty()) {
    std::string list;
    for (const auto& s : slower) list += (list.empty() ? "" : "; ") + s;
    notes.push_back("The scalar reference beats the best implementation beyond noise for " + list +
                    ". Past the caches both wait on the same memory, and the difference is the "
                    "machine's drift between the two cases.");
  }
  // Writes on all threads slower than on one.
  std::map<std::tuple<std::string, std::string, std::uint64_t>, const Case*> one_thread;
  for (const Case& c : report.cases) {
    if (c.threads == 1 && !c.all_threads) one_thread[{c.role, c.operation, c.filter_bytes}] = &c;
  }
  std::vector<std::string> split_slower;
  for (const Case& c : report.cases) {
    if (!c.all_threads || c.operation == "contains") continue;
    const auto one = one_thread.find({c.role, c.operation, c.filter_bytes});
    if (one != one_thread.end() &&
        c.keys_per_s * (1 + c.noise + one->second->noise) < one->second->keys_per_s) {
      split_slower.push_back(c.implementation + " " + c.operation + " at " +
                             size_label(c.filter_bytes));
    }
  }
  if (!split_slower.empty()) {
    std::string list;
    for (std::size_t i = 0; i < split_slower.size() && i < 6; ++i) {
      list += (i ? "; " : "") + split_slower[i];
    }
    if (split_slower.size() > 6)
      list += "; and " + std::to_string(split_slower.size() - 6) + " more";
    notes.push_back(
        "Writes on all threads run slower than on one, beyond noise: " + list +
        ". Each writing thread owns a block range of the filter and reads the whole batch to find "
        "its keys (insert_if_absent must return the sequential loop's flags), so while the filter "
        "fits the caches that walk costs about what the split saves, and the threads' hand-off "
        "is paid on every call. This is why a filter left at the default thread count keeps writes "
        "to filters under 16 MiB on the calling thread. On a shared machine a second thread also "
        "waits for a free core.");
  }
  // Noisy cases.
  std::size_t noisy = 0;
  double worst = 0;
  for (const Case& c : report.cases) {
    if (c.noise > 0.1) ++noisy;
    worst = std::max(worst, c.noise);
  }
  if (noisy > 0) {
    notes.push_back(
        std::to_string(noisy) + " of " + std::to_string(report.cases.size()) +
        " cases vary by more than ±10% between their repetitions (up to ±" +
        format("%.0f", 100 * worst) +
        "%): other work on the machine during the run. --compare flags such a case only when "
        "all its runs moved past the earlier ones.");
  }
  // Limits that moved during a case.
  std::size_t drifted = 0;
  for (const Case& c : report.cases) {
    if (!c.limit.empty() && c.limit_before > 0 &&
        std::fabs(c.limit_after / c.limit_before - 1) > 0.2) {
      ++drifted;
    }
  }
  if (drifted > 0) {
    notes.push_back("For " + std::to_string(drifted) +
                    " cases the paired limit moved by more than 20% between the probe before the "
                    "case and the probe after it: the machine itself changed speed meanwhile.");
  }
  return notes;
}
}  // namespace bulkbloom::cli::bench_report
