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

double median(std::vector<double> values) {
  if (values.empty()) return 0;
  std::sort(values.begin(), values.end());
  const std::size_t n = values.size();
  return n % 2 == 1 ? values[n / 2] : (values[n / 2 - 1] + values[n / 2]) / 2;
}

double Case::limit_per_s() const {
  return median(run_limits);
}

double paired_limit(const Report& report, const std::string& limit, unsigned threads,
                    std::uint64_t filter_bytes) {
  std::vector<double> probes;
  for (const Case& c : report.cases) {
    if (c.limit == limit && c.threads == threads && c.filter_bytes == filter_bytes) {
      probes.insert(probes.end(), c.run_limits.begin(), c.run_limits.end());
    }
  }
  return median(std::move(probes));
}

Spread paired_limit_spread(const Report& report, const std::string& limit, unsigned threads,
                           std::uint64_t filter_bytes) {
  Spread widest{0, 0};
  for (const Case& c : report.cases) {
    if (c.limit != limit || c.threads != threads || c.filter_bytes != filter_bytes) continue;
    const Spread& s = c.limit_spread;
    if (s.high <= 0) continue;
    widest.low = widest.high > 0 ? std::min(widest.low, s.low) : s.low;
    widest.high = std::max(widest.high, s.high);
  }
  return widest;
}

std::vector<CacheSize> data_caches(const Json& machine) {
  std::vector<CacheSize> caches;
  const Json* listed = machine.find("caches");
  if (listed == nullptr || listed->kind() != Json::Kind::array) return caches;
  for (const Json& cache : listed->items()) {
    const std::string type = cache.at("type").string("cache type");
    if (type == "Instruction") continue;
    std::string name = "L";
    name += cache.at("level").dump(-1);
    if (type == "Data") name += 'd';
    caches.push_back({std::move(name), cache.at("size_bytes").whole("cache size_bytes")});
  }
  return caches;
}

namespace {

// The limit of kind `limit` at one size and thread count: the median of the paired probes, or
// the size's one-off measurement where no case was paired with it.
double limit_at(const Report& report, const std::string& limit, unsigned threads,
                std::uint64_t bytes) {
  if (const double paired = paired_limit(report, limit, threads, bytes); paired > 0) return paired;
  for (const Limits& l : report.limits) {
    if (l.threads == threads && l.filter_bytes == bytes) {
      return limit == "random_read" ? l.random_read_lines_per_s : l.random_rmw_lines_per_s;
    }
  }
  return 0;
}

}  // namespace

Headline headline(const Report& report) {
  Headline h;
  std::vector<std::uint64_t> sizes;
  std::vector<unsigned> threads;
  for (const Limits& l : report.limits) {
    sizes.push_back(l.filter_bytes);
    if (std::find(threads.begin(), threads.end(), l.threads) == threads.end())
      threads.push_back(l.threads);
  }
  for (const Case& c : report.cases) sizes.push_back(c.filter_bytes);
  if (sizes.empty()) return h;
  std::sort(sizes.begin(), sizes.end());
  std::sort(threads.begin(), threads.end());
  h.largest_bytes = sizes.back();
  const std::vector<CacheSize> caches = data_caches(report.machine);
  for (const CacheSize& c : caches) h.last_level_cache = std::max(h.last_level_cache, c.bytes);
  for (const unsigned t : threads) {
    h.memory.push_back({t, limit_at(report, "random_read", t, h.largest_bytes),
                        limit_at(report, "random_rmw", t, h.largest_bytes)});
  }
  // A plateau: the largest size inside a cache and above the cache before it.
  std::uint64_t below = 0;
  for (const CacheSize& cache : caches) {
    std::uint64_t inside = 0;
    for (const std::uint64_t s : sizes) {
      if (s > below && s <= cache.bytes) inside = s;
    }
    if (inside != 0 && !threads.empty()) {
      h.plateaus.push_back(
          {cache, inside, limit_at(report, "random_read", threads.front(), inside)});
    }
    below = cache.bytes;
  }
  for (const Case& c : report.cases) {
    if (c.role == "best" && c.filter_bytes == h.largest_bytes &&
        c.operation != "insert_if_absent") {
      h.best.push_back(&c);
    }
  }
  return h;
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

}  // namespace

std::vector<std::string> unlike(const Report& now, const Report& before,
                                const std::string& now_name, const std::string& before_name) {
  std::vector<std::string> warnings;
  for (const char* key : {"cpu_model", "cpu_family", "cpu_model_number", "cpu_stepping",
                          "logical_cpus", "memory_bytes", "virtual_machine"}) {
    const std::string a = machine_field(now, key), b = machine_field(before, key);
    if (a != b)
      warnings.push_back("the machines differ: " + std::string(key) + " " + a + " " + now_name +
                         ", " + b + " " + before_name);
  }
  // The same source built otherwise is other code: -march, -O and the compiler move the figures.
  for (const char* key : {"compiler", "build_flags"}) {
    const std::string a = machine_field(now, key), b = machine_field(before, key);
    if (a != b)
      warnings.push_back("the builds differ: " + std::string(key) + " '" + a + "' " + now_name +
                         ", '" + b + "' " + before_name);
  }
  for (const auto& [key, value] : now.settings.members("settings")) {
    if (key == "sizes_bytes" || key == "repetitions") continue;  // cases are matched by size
    const Json* old = before.settings.find(key);
    const std::string a = value.dump(-1), b = old ? old->dump(-1) : "absent";
    if (a != b)
      warnings.push_back("the settings differ: " + key + " " + a + " " + now_name + ", " + b + " " +
                         before_name);
  }
  for (const auto& [key, value] : before.settings.members("settings")) {
    if (now.settings.find(key) == nullptr)
      warnings.push_back("the settings differ: " + key + " absent " + now_name + ", " +
                         value.dump(-1) + " " + before_name);
  }
  return warnings;
}

namespace {

// Every run of one side faster than every run of the other.
bool apart(const std::vector<double>& a, const std::vector<double>& b) {
  const auto [a_min, a_max] = std::minmax_element(a.begin(), a.end());
  const auto [b_min, b_max] = std::minmax_element(b.begin(), b.end());
  return *a_max < *b_min || *b_max < *a_min;
}

// Each run over the limit probed in its round; empty when the case lacks a positive limit per
// run (the GPU).
std::vector<double> against_limit(const Case& c) {
  std::vector<double> ratios;
  if (c.run_limits.size() != c.runs.size()) return ratios;
  for (std::size_t i = 0; i < c.runs.size(); ++i) {
    if (c.run_limits[i] <= 0) return {};
    ratios.push_back(c.runs[i] / c.run_limits[i]);
  }
  return ratios;
}

// The two sets moved past each other, their medians more than the floor apart: the ratio of the
// medians, or 0 when the sets did not move so.
double moved(const std::vector<double>& now, const std::vector<double>& before) {
  const double ratio = median(now) / median(before);
  return apart(now, before) && std::fabs(ratio - 1) > kCompareFloor ? ratio : 0;
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
         format("%.0f", 100 * kCompareFloor) + "% apart, also against their rounds' limits), " +
         std::to_string(comparison.count("too few runs")) + " with too few runs to compare, " +
         std::to_string(comparison.count("moved with its limit")) +
         " moved only with their limits, " + std::to_string(comparison.count("unsure")) +
         " unsure (their limits moved too, not as far), " +
         std::to_string(comparison.count("unlike implementations")) + " of unlike implementations";
}

Comparison compare(const Report& now, const Report& before, std::string against) {
  Comparison comparison;
  comparison.against = std::move(against);
  comparison.against_date = before.date;
  comparison.against_cpu = machine_field(before, "cpu_model");
  comparison.warnings = unlike(now, before, "now", "before");
  using Key = std::tuple<std::string, std::string, bool, std::uint64_t>;
  std::map<Key, const Case*> earlier;
  for (const Case& c : before.cases)
    earlier[{c.role, c.operation, c.all_threads, c.filter_bytes}] = &c;
  std::size_t unlike_implementations = 0;
  for (const Case& c : now.cases) {
    const auto found = earlier.find({c.role, c.operation, c.all_threads, c.filter_bytes});
    if (found == earlier.end() || found->second->keys_per_s <= 0) continue;
    const Case& old = *found->second;
    Difference d{c.role, c.operation, c.all_threads, c.filter_bytes, c.keys_per_s / old.keys_per_s};
    if (!c.limit.empty() && old.limit == c.limit && old.limit_per_s() > 0) {
      d.limit_ratio = c.limit_per_s() / old.limit_per_s();
    }
    if (c.implementation != old.implementation) {
      d.verdict = "unlike implementations";
      ++unlike_implementations;
    } else if (c.runs.size() < kMinRunsToCompare || old.runs.size() < kMinRunsToCompare) {
      d.verdict = "too few runs";
    } else {
      // A case is judged by its runs alone only where a side has no limit to read them against.
      const std::vector<double> now_limited = against_limit(c), old_limited = against_limit(old);
      const bool limited = !now_limited.empty() && !old_limited.empty();
      if (limited) d.ratio_to_limit = median(now_limited) / median(old_limited);
      if (moved(c.runs, old.runs) > 0) {
        const double against = limited ? moved(now_limited, old_limited) : d.ratio;
        d.flagged = against > 0 && (against > 1) == (d.ratio > 1);
        if (d.flagged) {
          d.verdict = d.ratio > 1 ? "faster" : "slower";
        } else {
          // Not against the limits: either they explain the move (the machine changed speed),
          // or the runs over them still moved, in sets that overlap (maybe the code too).
          d.verdict =
              std::fabs(d.ratio_to_limit - 1) <= kCompareFloor ? "moved with its limit" : "unsure";
        }
      }
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
        "the random read limit at " +
        sizes +
        ". Each writer probes its own 1/N slice of the buffer, as a filter's writing threads own "
        "block ranges, while readers share all of it; with one thread it is noise.");
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
                    ": past the caches both wait on the same memory.");
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
        ". Writing threads each scan the whole batch for their blocks' keys, or route each key "
        "to the thread owning its block first, which in the caches costs what the split saves "
        "(so a filter writes below 1 MiB on one thread whatever its thread count); on a loaded "
        "machine a thread also waits for a CPU.");
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
        "%); --compare flags such a case only when all its runs moved past the earlier ones.");
  }
  // Limits that moved between rounds.
  std::size_t drifted = 0;
  for (const Case& c : report.cases) {
    const auto [low, high] = std::minmax_element(c.run_limits.begin(), c.run_limits.end());
    if (low != c.run_limits.end() && *low > 0 && *high / *low > 1.2) ++drifted;
  }
  if (drifted > 0) {
    notes.push_back("For " + std::to_string(drifted) +
                    " cases the probes of their rounds differ by more than 20%: the machine "
                    "changed speed over the sweep. --compare reads each run against its own "
                    "round's probe.");
  }
  return notes;
}
}  // namespace bulkbloom::cli::bench_report
