// bulkbloom bench: a hardware report. Sweeps filter sizes from the L1 to past the last-level
// cache, measures insert, contains and insert_if_absent of the best implementation and the scalar
// reference (and the GPU when there is one) with one thread and with all of them, each beside
// this machine's random-line limits probed in the same round as each of its runs, describes the
// machine, and writes the figures as JSON and as an HTML page with plots, optionally against an
// earlier report or beside other machines' reports. Its GPU section (registry/device_bench.hpp)
// times a GPU filter's calls on keys in device memory beside the device's limit, and apart, on
// keys in host memory end to end.
#include <bulkbloom/bulkbloom.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <optional>
#include <span>
#include <sstream>
#include <string>
#include <vector>

#include "cli/args.hpp"
#include "cli/bench/report_csv.hpp"
#include "cli/bench/report_html.hpp"
#include "cli/bench/report_json.hpp"
#include "cli/commands.hpp"
#include "cli/errors.hpp"
#include "cli/filter_options.hpp"
#include "cli/output_file.hpp"
#include "cli/progress.hpp"
#include "core/splitmix64.hpp"
#include "probe/machine.hpp"
#include "probe/memory_probe.hpp"
#include "registry/device_bench.hpp"

namespace bulkbloom::cli {
namespace {

using bench_report::Case;
using bench_report::Comparison;
using bench_report::Limits;
using bench_report::Report;
using bench_report::size_label;

// How much the sweep measures.
struct Plan {
  std::vector<std::uint64_t> sizes;
  unsigned all_threads = 1;
  std::vector<std::pair<std::string, std::string>> implementations;  // role, name
  // Seconds of one call of `keys` keys per implementation, on a filter in the L1: a run repeats
  // its call until run_seconds have passed, so a run lasts up to one call longer.
  std::vector<double> call_seconds;
  std::uint64_t keys = 0;     // keys per call
  unsigned repetitions = 0;   // timed runs per case
  double run_seconds = 0;     // each timed run repeats its call for at least this long
  double probe_seconds = 0;   // each paired probe
  double limits_seconds = 0;  // each of the three probes of a size's limit curves
  probe::Timing timing = probe::Timing::wall;  // of the cases' calls and the probes' rounds

  std::vector<unsigned> thread_counts(const std::string& role) const {
    if (role == "gpu" || all_threads == 1) return {all_threads};
    return {1, all_threads};
  }
  std::size_t case_count() const {
    std::size_t n = 0;
    for (const auto& [role, name] : implementations) n += thread_counts(role).size() * 3;
    return n * sizes.size();
  }
};

// A forecast of the sweep's wall time on an otherwise idle machine, from its parameters, each
// implementation's call time in the L1, and page-faulting and zeroing at about 1 GB/s for each
// probe buffer and filter (made afresh in every round).
double estimated_seconds(const Plan& plan) {
  double total = 0;
  for (const std::uint64_t bytes : plan.sizes) {
    const double fill = static_cast<double>(bytes) / 1e9;
    const double probes = static_cast<double>(plan.thread_counts("best").size());
    // The size's limits, once; the dependent-load chain (a random swap per line, about 0.1 us
    // past the caches) and its rounds; one thread's single-key calls on a filter holding the pool.
    total += 2 * fill + probes * 3 * plan.limits_seconds + static_cast<double>(bytes / 64) * 1e-7 +
             plan.limits_seconds + plan.run_seconds + 0.1;
    double round = fill + probes * 2 * plan.probe_seconds;
    for (std::size_t i = 0; i < plan.implementations.size(); ++i) {
      const double run = plan.run_seconds + 2 * plan.call_seconds[i];  // a warm call, a last one
      round += static_cast<double>(plan.thread_counts(plan.implementations[i].first).size()) *
               (fill + 3 * run);
    }
    total += plan.repetitions * round;
  }
  return total;
}

// Times one call of each implementation on `keys` keys, one thread, in a filter of the L1's size.
std::vector<double> calibrate(const Plan& plan, const Options& base,
                              std::span<const std::uint64_t> keys) {
  std::vector<double> seconds;
  for (const auto& [role, name] : plan.implementations) {
    Options options = base;
    options.implementation = name;
    options.backend = role == "gpu" ? Backend::cuda : Backend::cpu;
    options.threads = 1;
    Filter filter(Layout{Shape::sb512, 256}, options);
    filter.insert(keys);  // warm: pages, caches, a GPU's context
    const auto start = std::chrono::steady_clock::now();
    filter.insert(keys);
    seconds.push_back(
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  }
  return seconds;
}

std::string duration_label(double seconds) {
  char buf[32];
  if (seconds < 90) {
    std::snprintf(buf, sizeof buf, "%.0f s", seconds);
  } else {
    std::snprintf(buf, sizeof buf, "%.0f min %02.0f s", std::floor(seconds / 60),
                  std::fmod(seconds, 60));
  }
  return buf;
}

// "16K", "4M", "1G" (powers of 1024) or a bare number of MiB, as the option always took.
std::uint64_t parse_size(const std::string& text, std::string_view what) {
  if (text.empty()) throw UsageError(std::string(what) + ": empty size");
  std::uint64_t shift = 20;
  std::string digits = text;
  switch (text.back()) {
    case 'K':
    case 'k':
      shift = 10;
      digits.pop_back();
      break;
    case 'M':
    case 'm':
      shift = 20;
      digits.pop_back();
      break;
    case 'G':
    case 'g':
      shift = 30;
      digits.pop_back();
      break;
  }
  if (digits.empty() || digits.find_first_not_of("0123456789") != std::string::npos ||
      digits.size() > 9) {
    throw UsageError(std::string(what) + ": '" + text + "' is not a size like 16K, 4M or 1G");
  }
  const std::uint64_t bytes = std::stoull(digits) << shift;
  if (bytes < 1024) throw UsageError(std::string(what) + ": a size must be at least 1K");
  return bytes;
}

std::vector<std::uint64_t> parse_sizes(const std::string& list, std::string_view option) {
  std::vector<std::uint64_t> sizes;
  std::stringstream in(list);
  for (std::string item; std::getline(in, item, ',');) sizes.push_back(parse_size(item, option));
  if (sizes.empty()) throw UsageError(std::string(option) + ": no sizes given");
  return sizes;
}

std::vector<std::uint64_t> geometric_sizes(std::uint64_t first, std::uint64_t last, unsigned step) {
  std::vector<std::uint64_t> sizes;
  for (std::uint64_t s = first; s <= last; s <<= step) sizes.push_back(s);
  return sizes;
}

// A quick sweep's sizes, placed around this machine's data caches: half of each (inside it), then
// twice the last level and at least 256 MiB (past it, in DRAM). Without caches described, the
// sizes a sweep of x16 steps would take.
std::vector<std::uint64_t> quick_sizes(const std::vector<probe::Cache>& caches) {
  std::vector<std::uint64_t> sizes;
  std::uint64_t last_level = 0;
  for (const probe::Cache& c : caches) {
    if (c.type == "Instruction" || c.size_bytes < 2048) continue;
    sizes.push_back(c.size_bytes / 2);
    last_level = std::max(last_level, c.size_bytes);
  }
  if (sizes.empty()) return {16 << 10, 256 << 10, 4 << 20, 64 << 20, 256 << 20};
  sizes.push_back(2 * last_level);
  sizes.push_back(std::max(4 * last_level, std::uint64_t{256} << 20));
  std::sort(sizes.begin(), sizes.end());
  sizes.erase(std::unique(sizes.begin(), sizes.end()), sizes.end());
  return sizes;
}

std::vector<std::uint64_t> random_keys(std::uint64_t n, std::uint64_t seed) {
  std::vector<std::uint64_t> keys(n);
  detail::SplitMix64 rng(seed);
  for (auto& k : keys) k = rng.next();
  return keys;
}

// Distinct batches a run rotates through, so that a filter larger than the caches is not served
// from the lines the previous calls left there.
constexpr std::size_t kBatchPool = 64;

// A pool of kBatchPool batches of `keys` keys each, laid end to end.
class BatchPool {
 public:
  BatchPool(std::vector<std::uint64_t> keys, std::uint64_t per_batch)
      : keys_(std::move(keys)), per_batch_(per_batch) {}
  std::span<const std::uint64_t> batch(std::size_t i) const {
    return {keys_.data() + (i % kBatchPool) * per_batch_, per_batch_};
  }

 private:
  std::vector<std::uint64_t> keys_;
  std::uint64_t per_batch_;
};

// CPU seconds of this process's threads so far.
double process_cpu_seconds() {
  timespec t{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + 1e-9 * static_cast<double>(t.tv_nsec);
}

// keys/s of one timed run: `call(batch)` on the pool's batches in turn until `seconds` have
// passed, each call timed on its own; the rate is the batch over the median call, as a memory
// probe's rate is the median of its timed rounds. On a shared machine a call the scheduler
// interrupts also times the other processes' turn; the median call is one that ran throughout.
// By CPU time a call takes the CPU seconds the process spent in it over the filter's `threads`:
// what each thread ran for, as the probe's CPU timing takes its threads' CPU time.
template <typename Call>
double timed_run(const BatchPool& pool, std::uint64_t keys, double seconds, probe::Timing timing,
                 unsigned threads, const Call& call) {
  using Clock = std::chrono::steady_clock;
  std::vector<double> calls;
  const auto start = Clock::now();
  auto end = start;
  do {
    const auto begin = end;
    const double cpu_begin = timing == probe::Timing::cpu ? process_cpu_seconds() : 0;
    call(pool.batch(calls.size()));
    end = Clock::now();
    calls.push_back(timing == probe::Timing::cpu
                        ? (process_cpu_seconds() - cpu_begin) / threads
                        : std::chrono::duration<double>(end - begin).count());
  } while (std::chrono::duration<double>(end - start).count() < seconds);
  std::nth_element(calls.begin(), calls.begin() + calls.size() / 2, calls.end());
  return static_cast<double>(keys) / calls[calls.size() / 2];
}

void set_median_and_noise(Case& c) {
  std::vector<double> sorted = c.runs;
  std::sort(sorted.begin(), sorted.end());
  const std::size_t n = sorted.size();
  c.keys_per_s = n % 2 == 1 ? sorted[n / 2] : (sorted[n / 2 - 1] + sorted[n / 2]) / 2;
  // One run has no spread to read: its noise is unknown, not 0.
  c.noise = n < 2 ? std::nan("") : (sorted.back() - sorted.front()) / 2 / c.keys_per_s;
}

// The live line on stderr: which case runs, how many are done, and the time left.
class Progress {
 public:
  Progress(bool enabled, std::size_t total, double estimate)
      : enabled_(enabled),
        total_(total),
        estimate_(estimate),
        start_(std::chrono::steady_clock::now()) {}

  void show(std::size_t done, const std::string& what) {
    if (!enabled_) return;
    const double elapsed =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
    // The estimate, corrected by how far the run so far is off it.
    const double fraction = static_cast<double>(done) / static_cast<double>(total_);
    const double left = done == 0 ? estimate_ : elapsed / fraction - elapsed;
    std::fprintf(stderr, "\r\033[K[%zu/%zu] %s, about %s left", done + 1, total_, what.c_str(),
                 duration_label(left).c_str());
    std::fflush(stderr);
  }
  void finish() {
    if (enabled_) std::fprintf(stderr, "\r\033[K");
  }

 private:
  bool enabled_;
  std::size_t total_;
  double estimate_;
  std::chrono::steady_clock::time_point start_;
};

// Why the library picks the implementation a default filter gets.
std::string choice_reason(const std::string& chosen, const std::vector<Implementation>& all) {
  if (const char* env = std::getenv("BULKBLOOM_IMPL"); env != nullptr && *env != '\0') {
    return std::string("BULKBLOOM_IMPL=") + env + " asks for it";
  }
  if (chosen.starts_with("cuda")) return "a CUDA device is present";
  std::string list;
  for (const auto& impl : all) {
    if (impl.backend == Backend::cpu) list += (list.empty() ? "" : ", ") + impl.name;
  }
  return "the best CPU target of this build that this CPU runs (of " + list + ")";
}

Json describe(const probe::Machine& m, const std::vector<Implementation>& all) {
  Json caches = Json::array();
  for (const probe::Cache& c : m.caches) {
    caches.push(Json::object()
                    .set("level", c.level)
                    .set("type", c.type)
                    .set("size_bytes", c.size_bytes)
                    .set("shared_by_cpus", c.shared_by_cpus)
                    .set("instances", c.instances));
  }
  Json gpus = Json::array();
  for (const probe::Gpu& g : m.gpus) {
    gpus.push(Json::object()
                  .set("name", g.name)
                  .set("memory_bytes", g.memory_bytes)
                  .set("driver", g.driver));
  }
  // What a filter made with default options runs; a forced implementation that cannot run here
  // makes that fail, and the report says why.
  std::string chosen, because;
  try {
    chosen = Filter(Layout{Shape::sb512, 1}).implementation();
    because = choice_reason(chosen, all);
  } catch (const Error& e) {
    because = e.what();
  }
  Json names = Json::array();
  Json unusable = Json::object();
  for (const auto& impl : all) {
    if (impl.usable) {
      names.push(impl.name);
    } else {
      unusable.set(impl.name, impl.unusable_reason);
    }
  }
  return Json::object()
      .set("cpu_model", m.cpu_model)
      .set("cpu_family", m.cpu_family)
      .set("cpu_model_number", m.cpu_model_number)
      .set("cpu_stepping", m.cpu_stepping)
      .set("microcode", m.microcode)
      .set("virtual_machine", m.virtual_machine)
      .set("cpu_mhz", m.cpu_mhz)
      .set("cpu_max_mhz", m.cpu_max_mhz)
      .set("threads_per_core", m.threads_per_core)
      .set("logical_cpus", m.logical_cpus)
      .set("usable_cpus", m.usable_cpus)
      .set("physical_cores", m.physical_cores)
      .set("sockets", m.sockets)
      .set("caches", std::move(caches))
      .set("memory_bytes", m.memory_bytes)
      .set("memory_available_bytes", m.memory_available_bytes)
      .set("transparent_hugepages", m.transparent_hugepages)
      .set("transparent_hugepages_defrag", m.transparent_hugepages_defrag)
      .set("numa_nodes", m.numa_nodes)
      .set("kernel", m.kernel)
      .set("gpus", std::move(gpus))
      .set("implementations", std::move(names))
      .set("implementations_not_usable", std::move(unusable))
      .set("chosen_implementation", chosen)
      .set("chosen_because", because)
      .set("compiler", probe::compiler_description())
      .set("build_flags", probe::build_flags())
      .set("git_commit", probe::git_commit())
      .set("bulkbloom_version", probe::library_version());
}

std::string utc_now() {
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&now, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

// One JSON line for three cases of one implementation, size and thread count, from `cases` on:
// their keys/s beside the limits they were read against and the size's sequential bandwidth.
void print_json_row(const Report& report, const Case* cases, std::uint64_t keys) {
  const Case& insert = cases[0];
  const Case& contains = cases[1];
  const Case& insert_if_absent = cases[2];
  // A GPU case has no paired probe: its row shows the host's limits at its size, all threads.
  const Limits* host = nullptr;
  for (const Limits& l : report.limits) {
    if (l.filter_bytes == insert.filter_bytes && (host == nullptr || l.threads == insert.threads)) {
      host = &l;
    }
  }
  const double sequential = host != nullptr ? host->seq_read_bytes_per_s : 0;
  const auto limit = [&](const Case& c, double Limits::*field) {
    return c.limit.empty() && host != nullptr ? host->*field : c.limit_per_s();
  };
  Summary s;
  s.text("implementation", "", insert.implementation);
  s.number("threads", "", insert.threads);
  s.number("filter_bytes", "", static_cast<double>(insert.filter_bytes));
  s.number("keys", "", static_cast<double>(keys));
  s.number("random_reads_per_s", "", limit(contains, &Limits::random_read_lines_per_s));
  s.number("random_rmw_per_s", "", limit(insert, &Limits::random_rmw_lines_per_s));
  s.number("sequential_bytes_per_s", "", sequential);
  s.number("insert_per_s", "", insert.keys_per_s);
  s.number("contains_per_s", "", contains.keys_per_s);
  s.number("insert_if_absent_per_s", "", insert_if_absent.keys_per_s);
  s.print(true, stdout);
}

// One row of the text table: a case beside its limit.
void print_case_row(const Case& c) {
  const bool host = !c.limit.empty();
  std::string percent = "-";
  if (c.probe_failure) {
    percent = "probe failure";
  } else if (host) {
    percent = std::to_string(std::lround(100 * c.keys_per_s / c.limit_per_s())) + "%";
  }
  const std::string noise =
      std::isnan(c.noise) ? "?" : bench_report::format("%.1f%%", 100 * c.noise);
  std::printf("%9s  %-16s %-16s %7u | %8s/s %6s | %8s/s %-5s %6s\n",
              size_label(c.filter_bytes).c_str(), c.implementation.c_str(), c.operation.c_str(),
              c.threads, si(c.keys_per_s).c_str(), noise.c_str(),
              host ? si(c.limit_per_s()).c_str() : "-",
              host ? (c.operation == "contains" ? "read" : "RMW") : "", percent.c_str());
}

void print_table_header() {
  std::printf("%9s  %-16s %-16s %7s | %10s %6s | %10s %-5s %6s\n", "filter", "implementation",
              "operation", "threads", "keys/s", "noise", "limit/s", "", "%limit");
}

// Buffers a sweep shares between its cases.
struct SweepKeys {
  BatchPool inserted;  // random keys
  BatchPool mixed;     // half of those, half never inserted, at random positions
  std::vector<std::uint8_t> flags;
};

// Work added on purpose to every call of one operation (BULKBLOOM_BENCH_SLOWDOWN=OPERATION:FACTOR):
// the call is repeated on the first (FACTOR - 1) of its batch, so the operation does FACTOR
// times the work per key. It exists to check that --compare catches a real slowdown; a report
// measured with it says so in its settings and warnings.
struct Slowdown {
  std::string operation;
  double factor = 1;
};

Slowdown slowdown_from_environment() {
  const char* env = std::getenv("BULKBLOOM_BENCH_SLOWDOWN");
  if (env == nullptr || *env == '\0') return {};
  const std::string text = env;
  const auto colon = text.find(':');
  Slowdown s{text.substr(0, colon), 0};
  if (colon != std::string::npos) {
    char* end = nullptr;
    s.factor = std::strtod(text.c_str() + colon + 1, &end);
    if (*end != '\0') s.factor = 0;
  }
  if (std::find(std::begin(bench_report::kOperations), std::end(bench_report::kOperations),
                s.operation) == std::end(bench_report::kOperations) ||
      !(s.factor >= 1 && s.factor <= 10)) {
    throw UsageError("BULKBLOOM_BENCH_SLOWDOWN: '" + text +
                     "' is not OPERATION:FACTOR (insert, contains or insert_if_absent; 1 to 10)");
  }
  return s;
}

// One timed run of case `c` on `filter`, after one untimed call: the pool's threads awake, the
// code and the batch's lines in place.
double timed_case_run(const Case& c, Filter& filter, const Plan& plan, SweepKeys& keys,
                      const Slowdown& slowdown) {
  const std::string& op = c.operation;
  const std::uint64_t extra =
      op == slowdown.operation
          ? static_cast<std::uint64_t>(std::llround((slowdown.factor - 1) * double(plan.keys)))
          : 0;
  const auto call = [&](std::span<const std::uint64_t> batch) {
    for (auto part : {batch, batch.first(extra)}) {
      if (part.empty()) continue;
      if (op == "insert") {
        filter.insert(part);
      } else if (op == "contains") {
        filter.contains(part, std::span(keys.flags).first(part.size()));
      } else {
        filter.insert_if_absent(part, std::span(keys.flags).first(part.size()));
      }
    }
  };
  const BatchPool& pool = op == "insert" ? keys.inserted : keys.mixed;
  call(pool.batch(kBatchPool - 1));
  return timed_run(pool, plan.keys, plan.run_seconds, plan.timing, filter.threads(), call);
}

// Writes each 4 KiB page of [data, data + bytes) with the byte it holds: the pages are faulted
// in and the contents unchanged.
void touch_pages(std::byte* data, std::uint64_t bytes) {
  volatile std::byte* page = data;
  for (std::uint64_t i = 0; i < bytes; i += 4096) page[i] = page[i];
}

bool above_limit(const Case& c) {
  return !c.limit.empty() && c.keys_per_s > c.limit_per_s();
}

// The machine's load over the run: load averages at its start and end, and the share of CPU time
// the hypervisor gave to others (steal) and that anything at all ran (busy, this run included).
Json conditions(const probe::Load& before, const probe::Load& after) {
  const auto averages = [](const probe::Load& l) {
    return Json::array().push(l.load_1min).push(l.load_5min).push(l.load_15min);
  };
  const double ticks = static_cast<double>(after.total_ticks - before.total_ticks);
  const auto share = [&](std::uint64_t from, std::uint64_t to) {
    return ticks > 0 ? static_cast<double>(to - from) / ticks : 0.0;
  };
  return Json::object()
      .set("load_average_before", averages(before))
      .set("load_average_after", averages(after))
      .set("steal_fraction", share(before.steal_ticks, after.steal_ticks))
      .set("busy_fraction", 1 - share(before.idle_ticks, after.idle_ticks));
}

void print_notes(const Report& report) {
  if (!report.latency.empty()) std::printf("\nlatency, 1 thread:\n");
  for (const bench_report::Latency& l : report.latency) {
    std::printf("%9s: dependent 64-byte load %7.1f ns, contains(key) of %s %7.1f ns a call\n",
                size_label(l.filter_bytes).c_str(), l.dependent_load_ns, l.implementation.c_str(),
                l.one_key_contains_ns);
  }
  for (const auto& note : report.notes) std::printf("\nnote: %s\n", note.c_str());
}

// Where a case of the sweep sits: its size, implementation and thread count in the plan.
struct Slot {
  std::size_t size = 0, implementation = 0;
  unsigned threads = 1;
};

// The sweep's cases in report order (by size, implementation, thread count, operation), their
// figures still empty, and where each sits.
std::vector<Slot> lay_out(const Plan& plan, Report& report) {
  std::vector<Slot> slots;
  for (std::size_t s = 0; s < plan.sizes.size(); ++s) {
    for (std::size_t i = 0; i < plan.implementations.size(); ++i) {
      const std::string& role = plan.implementations[i].first;
      for (const unsigned threads : plan.thread_counts(role)) {
        for (const char* operation : bench_report::kOperations) {
          Case c;
          c.implementation = plan.implementations[i].second;
          c.role = role;
          c.operation = operation;
          c.threads = threads;
          c.all_threads = role != "gpu" && threads == plan.all_threads && threads > 1;
          c.filter_bytes = plan.sizes[s];
          c.keys_per_call = plan.keys;
          if (role != "gpu") c.limit = c.operation == "contains" ? "random_read" : "random_rmw";
          report.cases.push_back(std::move(c));
          slots.push_back({s, i, threads});
        }
      }
    }
  }
  return slots;
}

// Measures the cases `wanted` picks in plan.repetitions rounds: each round times every picked
// case once, size by size, so a case's runs are spread over the whole sweep and sample the
// machine at as many moments (on a shared machine its speed moves between minutes; runs taken
// back to back share one moment). Each round probes a fresh buffer of each size right before
// that size's cases, per thread count, and each run keeps its round's probe, the limit it is read
// against. Every filter is made afresh in each round, its pages faulted in before it is timed.
void measure_rounds(const Plan& plan, const Options& base, const std::vector<Slot>& slots,
                    const std::vector<bool>& wanted, SweepKeys& keys, const Slowdown& slowdown,
                    Report& report, Progress& progress, std::size_t& done) {
  for (unsigned round = 0; round < plan.repetitions; ++round) {
    for (std::size_t s = 0; s < plan.sizes.size(); ++s) {
      const auto at_size = [&](std::size_t i) { return wanted[i] && slots[i].size == s; };
      bool any = false;
      for (std::size_t i = 0; i < slots.size(); ++i) any = any || at_size(i);
      if (!any) continue;
      const std::uint64_t bytes = plan.sizes[s];
      const std::string where = "round " + std::to_string(round + 1) + "/" +
                                std::to_string(plan.repetitions) + ", " + size_label(bytes);
      progress.show(done, where + ": probing the memory");
      probe::MemoryProbe memory(bytes);
      memory.set_timing(plan.timing);
      for (const unsigned threads : plan.thread_counts("best")) {
        // This round's limits with these threads, probed only where a picked case reads them.
        std::optional<probe::ProbeRate> read, rmw;
        for (std::size_t i = 0; i < slots.size(); ++i) {
          const Case& c = report.cases[i];
          if (!at_size(i) || slots[i].threads != threads || c.limit.empty()) continue;
          std::optional<probe::ProbeRate>& probe = c.limit == "random_read" ? read : rmw;
          if (!probe) {
            probe = c.limit == "random_read" ? memory.random_read(threads, plan.probe_seconds)
                                             : memory.random_rmw(threads, plan.probe_seconds);
          }
        }
        for (std::size_t impl = 0; impl < plan.implementations.size(); ++impl) {
          std::vector<std::size_t> picked;
          for (std::size_t i = 0; i < slots.size(); ++i) {
            if (at_size(i) && slots[i].implementation == impl && slots[i].threads == threads)
              picked.push_back(i);
          }
          if (picked.empty()) continue;
          const auto& [role, name] = plan.implementations[impl];
          Options options = base;
          options.implementation = name;
          options.backend = role == "gpu" ? Backend::cuda : Backend::cpu;
          options.threads = threads;
          Filter filter(Layout{Shape::sb512, std::max<std::uint64_t>(bytes / 64, 1)}, options);
          // Every page faulted in before anything is timed: the first run of a large write case
          // measured the kernel's page faults (0.1 M keys/s at 64 MiB, 270 M/s after).
          const bool host_memory = role != "gpu";
          if (host_memory) touch_pages(filter.view().data(), filter.layout().size_bytes());
          const double huge_pages =
              host_memory
                  ? probe::huge_page_coverage(filter.view().data(), filter.layout().size_bytes())
                  : -1;
          for (const std::size_t i : picked) {
            Case& c = report.cases[i];
            progress.show(
                done, where + " " + name + " " + bench_report::series_label(c.operation, threads));
            c.implementation = filter.implementation();
            c.threads = role == "gpu" ? 1 : filter.threads();
            c.filter_bytes = filter.layout().size_bytes();
            // The lowest coverage of its rounds' filters.
            c.huge_pages = round == 0 ? huge_pages : std::min(c.huge_pages, huge_pages);
            c.runs.push_back(timed_case_run(c, filter, plan, keys, slowdown));
            if (!c.limit.empty()) {
              const probe::ProbeRate& limit = c.limit == "random_read" ? *read : *rmw;
              c.run_limits.push_back(limit.per_s);
              bench_report::Spread& spread = c.limit_spread;
              spread.low = round == 0 ? limit.low : std::min(spread.low, limit.low);
              spread.high = std::max(spread.high, limit.high);
            }
            ++done;
          }
        }
      }
    }
  }
  for (std::size_t i = 0; i < slots.size(); ++i) {
    if (wanted[i]) set_median_and_noise(report.cases[i]);
  }
}

// The implementation whose single-key calls the latency figures time: the best CPU target, else
// the scalar reference; "" when the plan measures no CPU implementation.
std::string latency_implementation(const Plan& plan) {
  std::string name;
  for (const auto& [role, implementation] : plan.implementations) {
    if (role == "best" || (role == "reference" && name.empty())) name = implementation;
  }
  return name;
}

// One thread's single-key contains at one size, in a loop over random keys of which the filter
// holds half, beside the dependent-load latency `load_ns` of a buffer of that size.
bench_report::Latency one_key_latency(const Plan& plan, const Options& base, const SweepKeys& keys,
                                      std::uint64_t bytes, const std::string& implementation,
                                      double load_ns) {
  Options options = base;
  options.implementation = implementation;
  options.backend = Backend::cpu;
  options.threads = 1;
  Filter filter(Layout{Shape::sb512, std::max<std::uint64_t>(bytes / 64, 1)}, options);
  touch_pages(filter.view().data(), filter.layout().size_bytes());
  for (std::size_t b = 0; b < kBatchPool; ++b) filter.insert(keys.inserted.batch(b));
  // Timed in short slices of calls (the first kSlice keys of each batch), as the dependent-load
  // probe times short rounds: a slice the scheduler interrupts is an outlier the median leaves
  // out, where a whole batch of calls would rarely run uninterrupted on a shared machine.
  constexpr std::size_t kSlice = 1024;
  std::uint64_t hits = 0;
  const double per_s =
      timed_run(keys.mixed, std::min<std::uint64_t>(kSlice, plan.keys), plan.run_seconds,
                plan.timing, 1, [&](std::span<const std::uint64_t> batch) {
                  for (const std::uint64_t key : batch.first(std::min(kSlice, batch.size())))
                    hits += filter.contains(key) ? 1 : 0;
                });
  const volatile std::uint64_t kept = hits;  // the calls' results are used
  static_cast<void>(kept);
  return {filter.layout().size_bytes(), load_ns, filter.implementation(), 1e9 / per_s};
}

// Measures the whole plan: the limits of each size once, then the cases in rounds; a case that
// ran above its limit is measured again (runs and probes, in rounds of its own with the others
// that did), and if still above, marked a probe failure.
void run_sweep(const Plan& plan, const Options& base, const std::vector<std::uint64_t>& keys,
               const Slowdown& slowdown, Report& report) {
  // Contains asks for keys half of which the filter holds, in no pattern a predictor could learn.
  std::vector<std::uint64_t> mixed_keys = random_keys(keys.size(), 2);
  for (std::size_t i = 0; i < mixed_keys.size(); ++i) {
    if ((mixed_keys[i] >> 63) != 0) mixed_keys[i] = keys[i];
  }
  SweepKeys pools{BatchPool(keys, plan.keys), BatchPool(std::move(mixed_keys), plan.keys),
                  std::vector<std::uint8_t>(plan.keys)};
  Progress progress(stderr_is_terminal(), plan.case_count() * plan.repetitions,
                    estimated_seconds(plan));
  std::size_t done = 0;
  for (const std::uint64_t bytes : plan.sizes) {
    progress.show(done, size_label(bytes) + ": the limits");
    probe::MemoryProbe memory(bytes);
    memory.set_timing(plan.timing);
    for (const unsigned threads : plan.thread_counts("best")) {
      const probe::HardwareLimits l = memory.measure(threads, plan.limits_seconds);
      report.limits.push_back({bytes, threads, threads == plan.all_threads && threads > 1,
                               l.random_read_lines_per_s, l.random_rmw_lines_per_s,
                               l.seq_read_bytes_per_s,
                               probe::huge_page_coverage(memory.data(), memory.bytes())});
    }
    const double load_ns = memory.dependent_load_ns(plan.limits_seconds);
    if (const std::string cpu = latency_implementation(plan); !cpu.empty()) {
      report.latency.push_back(one_key_latency(plan, base, pools, bytes, cpu, load_ns));
    }
  }
  const std::vector<Slot> slots = lay_out(plan, report);
  measure_rounds(plan, base, slots, std::vector<bool>(slots.size(), true), pools, slowdown, report,
                 progress, done);
  // Above the limit it is read against: one of the two measurements is wrong. Both are taken
  // again; a case still above is marked as the probe's failure.
  std::vector<bool> again(slots.size());
  std::size_t remeasured = 0;
  for (std::size_t i = 0; i < slots.size(); ++i) {
    Case& c = report.cases[i];
    if (!above_limit(c)) continue;
    again[i] = c.remeasured = true;
    c.runs.clear();
    c.run_limits.clear();
    c.limit_spread = {};
    ++remeasured;
  }
  if (remeasured > 0) {
    Progress second(stderr_is_terminal(), remeasured * plan.repetitions,
                    estimated_seconds(plan) * static_cast<double>(remeasured) /
                        static_cast<double>(slots.size()));
    std::size_t redone = 0;
    measure_rounds(plan, base, slots, again, pools, slowdown, report, second, redone);
    second.finish();
    for (std::size_t i = 0; i < slots.size(); ++i) {
      if (again[i]) report.cases[i].probe_failure = above_limit(report.cases[i]);
    }
  }
  progress.finish();
}

Report load_report(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw IoError(with_errno("cannot open the report " + path));
  std::stringstream text;
  text << in.rdbuf();
  try {
    return bench_report::from_json(Json::parse(text.str()));
  } catch (const std::runtime_error& e) {
    throw DataError(path + ": " + e.what());
  }
}

// Writes `text` to `dir`/`name` atomically: never half a report.
void write_file(const std::filesystem::path& dir, const std::string& name,
                const std::string& text) {
  OutputFile out((dir / name).string());
  out.write(text);
  out.sync();
  out.commit();
}

void print_comparison(const Comparison& comparison) {
  for (const auto& warning : comparison.warnings) {
    std::fprintf(stderr, "bench: WARNING: %s\n", warning.c_str());
  }
  std::printf("\nAgainst %s (%s, %s): %s\n", comparison.against.c_str(),
              comparison.against_cpu.c_str(), comparison.against_date.c_str(),
              bench_report::summary(comparison).c_str());
  std::printf("%-9s %-16s %7s %9s | %8s | %14s | %14s | %s\n", "role", "operation", "threads",
              "filter", "now/then", "limit now/then", "/limit now/then", "verdict");
  const auto times = [](double ratio) {
    return ratio > 0 ? bench_report::format("%.3fx", ratio) : std::string("-");
  };
  for (const auto& d : comparison.differences) {
    std::printf("%-9s %-16s %7s %9s | %7.3fx | %14s | %15s | %s%s\n", d.role.c_str(),
                d.operation.c_str(), d.all_threads ? "all" : "1",
                size_label(d.filter_bytes).c_str(), d.ratio, times(d.limit_ratio).c_str(),
                times(d.ratio_to_limit).c_str(), d.verdict.c_str(), d.flagged ? "  <-" : "");
  }
}

// The GPU section's settings: its sizes and keys per call.
struct GpuPlan {
  std::vector<std::uint64_t> sizes;
  detail::DeviceBenchSettings settings;
};

// The GPU section (report.hpp): each size's figures from the registry, which checks the device's
// answers against the CPU first; a size that cannot be measured is named with its reason.
bench_report::GpuSection measure_gpu(const GpuPlan& plan, const Options& base) {
  bench_report::GpuSection gpu;
  if (base.backend == Backend::cpu) {
    gpu.absent = "the CPU backend was asked for (--backend cpu)";
    return gpu;
  }
  gpu.absent = detail::device_bench_unavailable();
  if (!gpu.absent.empty()) return gpu;
  for (const std::uint64_t bytes : plan.sizes) {
    std::fprintf(stderr, "bench: GPU section, %s\n", size_label(bytes).c_str());
    try {
      Options options = base;
      options.backend = Backend::cuda;
      Filter filter(Layout{Shape::sb512, std::max<std::uint64_t>(bytes / 64, 1)}, options);
      gpu.cases.push_back(detail::bench_device(filter, plan.settings));
    } catch (const Error& e) {
      gpu.failures.push_back(size_label(bytes) + ": " + e.what());
    }
  }
  if (gpu.cases.empty()) gpu.absent = "no size could be measured (failures below)";
  return gpu;
}

// The GPU section as text: device-resident keys beside the device's limit, then host-resident
// keys end to end, apart; or why there is none.
void print_gpu_section(const bench_report::GpuSection& gpu) {
  if (!gpu.absent.empty()) std::printf("\nGPU section: not measured: %s\n", gpu.absent.c_str());
  for (const auto& failure : gpu.failures) {
    std::printf("GPU section: a size not measured: %s\n", failure.c_str());
  }
  if (gpu.cases.empty()) return;
  std::printf(
      "\nGPU, keys in device memory (CUDA events around each call), beside the device's random "
      "block reads over the filter:\n");
  std::printf("%9s  %-16s %-16s | %10s | %14s %7s\n", "filter", "implementation", "operation",
              "keys/s", "limit blocks/s", "%limit");
  for (const detail::DeviceBench& c : gpu.cases) {
    if (!c.stand_in.empty()) {
      std::printf("%9s  measured on a %s, NOT a GPU: these are no GPU's figures\n",
                  size_label(c.filter_bytes).c_str(), c.stand_in.c_str());
    }
    const double limit = c.random_block_reads.keys_per_s;
    for (const detail::DeviceRate& r : c.device_resident) {
      std::printf("%9s  %-16s %-16s | %8s/s | %12s/s %6ld%%\n", size_label(c.filter_bytes).c_str(),
                  c.implementation.c_str(), r.operation.c_str(), si(r.keys_per_s).c_str(),
                  si(limit).c_str(), std::lround(100 * r.keys_per_s / limit));
    }
  }
  std::printf(
      "\nGPU, keys in pinned host memory, end to end through PCIe (copies both ways, launches, "
      "synchronisation):\n");
  std::printf("%9s  %-16s %-16s | %10s | %s\n", "filter", "implementation", "operation", "keys/s",
              "keys per call");
  for (const detail::DeviceBench& c : gpu.cases) {
    for (const detail::DeviceRate& r : c.host_resident) {
      std::printf("%9s  %-16s %-16s | %8s/s | %u\n", size_label(c.filter_bytes).c_str(),
                  c.implementation.c_str(), r.operation.c_str(), si(r.keys_per_s).c_str(), c.keys);
    }
  }
  std::printf("GPU answers matched the CPU backend's on %u keys at each size.\n",
              gpu.cases.front().verified_keys);
}

}  // namespace

int run_bench(const Arguments& args) {
  ArgParser parser(
      "bench [options]",
      "A hardware report: insert, contains and insert_if_absent keys/s of the best implementation\n"
      "and the scalar reference (and the GPU when present) with 1 thread and all threads, over\n"
      "filter sizes from 16 KiB to 4 GiB (x4 steps, capped by free memory), each beside this\n"
      "machine's random 64-byte read or read-modify-write rate over a buffer of the filter's "
      "size,\n"
      "probed in each round of the sweep and timed as it is. A round times every case once, so\n"
      "a case's runs are spread over the sweep; figures are their medians. --compare flags a\n"
      "case when its runs and the earlier ones do not overlap and the medians differ by more\n"
      "than 5%, and the same holds of the runs over their rounds' limits. A GPU section\n"
      "follows: with a usable CUDA device, keys in device memory (CUDA events) beside the\n"
      "device's random block reads over the filter, and keys in host memory end to end through\n"
      "PCIe, answers checked against the CPU; without one, the reason it is absent.");
  parser
      .flag("quick",
            "a short sweep (about a minute): sizes around the caches, up to max(4x the last "
            "level, 256 MiB); shorter runs")
      .value("sizes", "LIST", "filter sizes, comma-separated: 16K, 4M, 1G (a bare number is MiB)")
      .value("max-size", "SIZE", "leave out sizes above SIZE (default: what free memory allows)")
      .value("keys", "N",
             "keys per call; each run rotates through 64 batches of them (default 65536)")
      .value("repeat", "N",
             "timed runs per case, for the median and the noise (default 5, the fewest --compare "
             "judges)")
      .value("timing", "wall|cpu",
             "time the cases' calls and the probes' rounds by the wall clock (default) or by the "
             "CPU time of their threads, which other work on a shared machine does not inflate")
      .value("report", "DIR", "write DIR/report.json, DIR/report.csv and DIR/report.html")
      .value("compare", "OLD.json", "judge each case against an earlier report.json")
      .value("overlay", "A.json,B.json",
             "draw these reports' (other machines', other builds') best implementation beside "
             "this one's in the page of --report, saying what makes them unlike")
      .value("gpu-sizes", "LIST",
             "the GPU section's filter sizes (default 32M,1G,8G; --quick: 32M,1G): keys in device "
             "memory beside the device's random block reads, and in host memory end to end")
      .value("gpu-keys", "N",
             "keys per call of the GPU section (default 16777216; --quick: 4194304)")
      .value("load", "REPORT.json",
             "print (and with --report redraw) a report instead of measuring")
      .flag("json",
            "print one JSON object per implementation, size and thread count instead of a table");
  add_backend_options(parser);
  if (!parser.parse(args)) return 0;
  const bool quick = parser.has("quick");
  std::vector<std::string> command{"bulkbloom", "bench"};
  for (const auto& arg : args) command.emplace_back(arg);

  std::optional<Report> before;
  if (const auto old = parser.get("compare")) before = load_report(*old);
  std::vector<bench_report::Overlay> overlays;
  if (const auto list = parser.get("overlay")) {
    if (!parser.has("report")) throw UsageError("--overlay draws into the page: give --report DIR");
    std::stringstream in(*list);
    for (std::string path; std::getline(in, path, ',');) {
      if (!path.empty()) overlays.push_back({path, load_report(path)});
    }
    if (overlays.empty()) throw UsageError("--overlay: no reports given");
  }
  // The report's directory is checked now, before a long sweep, and made only once there is a
  // report to put in it: a failed run leaves nothing behind.
  if (const auto dir = parser.get("report")) {
    const std::filesystem::path path(*dir);
    const std::filesystem::path parent =
        path.has_parent_path() ? path.parent_path() : std::filesystem::path(".");
    if (std::filesystem::exists(path) ? !std::filesystem::is_directory(path)
                                      : !std::filesystem::is_directory(parent)) {
      throw IoError(*dir + ": cannot hold the report: not a directory, nor in one");
    }
  }

  Report report;
  const std::optional<std::string> loaded = parser.get("load");
  if (loaded) {
    report = load_report(*loaded);
    // The notes are read from the figures afresh: a newer bulkbloom explains an older report.
    report.notes = bench_report::explain(report);
  }
  if (!loaded) {
    const probe::Machine machine = probe::describe_machine();
    Plan plan;
    plan.sizes = parser.has("sizes") ? parse_sizes(*parser.get("sizes"), "--sizes")
                 : quick             ? quick_sizes(machine.caches)
                         : geometric_sizes(std::uint64_t{16} << 10, std::uint64_t{4} << 30, 2);
    plan.keys = parser.get_count("keys").value_or(std::uint64_t{1} << 16);
    if (plan.keys == 0) throw UsageError("--keys must be at least 1");
    plan.repetitions = static_cast<unsigned>(parser.get_count("repeat").value_or(5));
    if (plan.repetitions == 0 || plan.repetitions > 1000) {
      throw UsageError("--repeat must be between 1 and 1000");
    }
    plan.run_seconds = quick ? 0.04 : 0.1;
    // A random probe runs four prefetch variants, each for a quarter of its time: at least 50 ms
    // each, also in a quick sweep, or a probe is a few passes and one preempted pass moves it.
    plan.probe_seconds = quick ? 0.2 : 0.4;
    plan.limits_seconds = plan.probe_seconds;
    const std::string timing = parser.get("timing").value_or("wall");
    if (timing != "wall" && timing != "cpu") {
      throw UsageError("--timing: '" + timing + "' is neither wall nor cpu");
    }
    plan.timing = timing == "cpu" ? probe::Timing::cpu : probe::Timing::wall;
    const Options base = backend_options(parser);
    GpuPlan gpu_plan;
    gpu_plan.sizes = parser.has("gpu-sizes") ? parse_sizes(*parser.get("gpu-sizes"), "--gpu-sizes")
                                             : std::vector<std::uint64_t>{std::uint64_t{32} << 20,
                                                                          std::uint64_t{1} << 30};
    if (!parser.has("gpu-sizes") && !quick) gpu_plan.sizes.push_back(std::uint64_t{8} << 30);
    const std::uint64_t gpu_keys =
        parser.get_count("gpu-keys")
            .value_or(quick ? std::uint64_t{1} << 22 : std::uint64_t{1} << 24);
    if (gpu_keys < gpu_plan.settings.verify_keys || gpu_keys > std::uint64_t{1} << 30) {
      throw UsageError("--gpu-keys must be between " +
                       std::to_string(gpu_plan.settings.verify_keys) + " and 2^30");
    }
    gpu_plan.settings.keys = static_cast<std::uint32_t>(gpu_keys);
    gpu_plan.settings.repetitions = plan.repetitions;
    const Slowdown slowdown = slowdown_from_environment();
    if (!slowdown.operation.empty()) {
      report.warnings.push_back("BULKBLOOM_BENCH_SLOWDOWN: every " + slowdown.operation +
                                " call does " + bench_report::format("%g", slowdown.factor) +
                                "x its work on purpose (a check of --compare)");
    }
    const unsigned usable = std::max(1u, machine.usable_cpus);
    plan.all_threads = base.threads != 0 ? base.threads : usable;
    if (plan.all_threads > usable) {
      report.warnings.push_back(
          std::to_string(plan.all_threads) + " threads share " + std::to_string(usable) +
          " usable CPUs: the all-threads cases and their limits time threads waiting for a CPU");
    }
    // Each size holds a probe buffer and one filter of that size at a time, beside the keys.
    const std::uint64_t key_bytes = plan.keys * (kBatchPool * 16 + 1);
    std::uint64_t max_size = UINT64_MAX;
    if (const auto cap = parser.get("max-size")) {
      max_size = parse_size(*cap, "--max-size");
    } else if (const std::uint64_t free = probe::available_memory_bytes(); free > key_bytes) {
      max_size = (free - key_bytes) * 3 / 4 / 2;
    }
    std::erase_if(plan.sizes, [&](std::uint64_t s) { return s > max_size; });
    if (plan.sizes.empty())
      throw UsageError("no filter size fits: raise --max-size or free memory");

    // From the registry: the best usable CPU target, the scalar reference and a usable CUDA
    // entry, each once; an entry that cannot run here is named with its reason.
    const std::vector<Implementation> all = implementations();
    for (const Implementation& impl : all) {
      if (base.backend != Backend::automatic && impl.backend != base.backend) continue;
      if (!impl.usable) {
        std::fprintf(stderr, "bench: %s is not measured: %s\n", impl.name.c_str(),
                     impl.unusable_reason.c_str());
        continue;
      }
      const std::string role = impl.backend == Backend::cuda ? "gpu"
                               : impl.name == "cpu/scalar"   ? "reference"
                                                             : "best";
      const bool taken = std::any_of(plan.implementations.begin(), plan.implementations.end(),
                                     [&](const auto& entry) { return entry.first == role; });
      if (!taken) plan.implementations.emplace_back(role, impl.name);
    }
    if (plan.implementations.empty()) {
      throw BackendUnavailable("no implementation of the requested backend runs on this machine");
    }
    report.date = utc_now();
    report.command = command;
    report.machine = describe(machine, all);
    Json sizes = Json::array();
    for (auto s : plan.sizes) sizes.push(s);
    report.settings =
        Json::object()
            .set("sizes_bytes", std::move(sizes))
            .set("keys_per_call", plan.keys)
            .set("repetitions", plan.repetitions)
            .set("run_seconds", plan.run_seconds)
            .set("paired_probe_seconds", plan.probe_seconds)
            .set("timing", timing)
            .set("all_threads", plan.all_threads)
            .set("shape", "sb512")
            .set("batches",
                 "each run calls in turn on 64 batches of keys_per_call keys; insert: "
                 "random keys; contains and insert_if_absent: half of those and half "
                 "never inserted, at random positions. A run's rate is a batch over "
                 "its median call");
    if (!slowdown.operation.empty()) {
      report.settings.set("slowdown",
                          slowdown.operation + bench_report::format(" x%g", slowdown.factor));
    }
    const std::vector<std::uint64_t> keys = random_keys(plan.keys * kBatchPool, 1);
    plan.call_seconds = calibrate(plan, base, std::span(keys).first(plan.keys));
    std::fprintf(stderr, "bench: %zu sizes (%s to %s), %zu cases, about %s on an idle machine\n",
                 plan.sizes.size(), size_label(plan.sizes.front()).c_str(),
                 size_label(plan.sizes.back()).c_str(), plan.case_count(),
                 duration_label(estimated_seconds(plan)).c_str());
    const probe::Load load_before = probe::read_load();
    if (load_before.load_1min > usable) {
      report.warnings.push_back(
          bench_report::format("the load average was %.1f", load_before.load_1min) + " on " +
          std::to_string(usable) + " usable CPUs when the run began: other work shared the CPUs" +
          (plan.timing == probe::Timing::wall
               ? " (a call longer than the scheduler's slice then times the CPU's share, not the "
                 "code: --timing cpu times by CPU time)"
               : ""));
    }
    for (const auto& warning : report.warnings)
      std::fprintf(stderr, "bench: WARNING: %s\n", warning.c_str());
    run_sweep(plan, base, keys, slowdown, report);
    report.gpu = measure_gpu(gpu_plan, base);
    report.conditions = conditions(load_before, probe::read_load());
    report.notes = bench_report::explain(report);
    if (parser.has("json")) {
      for (std::size_t i = 0; i + 3 <= report.cases.size(); i += 3)
        print_json_row(report, &report.cases[i], plan.keys);
    } else {
      print_table_header();
      for (const Case& c : report.cases) print_case_row(c);
      print_notes(report);
      print_gpu_section(report.gpu);
    }
  } else {
    print_table_header();
    for (const Case& c : report.cases) print_case_row(c);
    print_notes(report);
    print_gpu_section(report.gpu);
  }

  std::optional<Comparison> comparison;
  if (before) {
    comparison = bench_report::compare(report, *before, *parser.get("compare"));
    if (!parser.has("json")) print_comparison(*comparison);
  }
  if (const auto dir = parser.get("report")) {
    const Comparison* against = comparison ? &*comparison : nullptr;
    std::error_code error;
    std::filesystem::create_directory(*dir, error);
    if (error) throw IoError(*dir + ": cannot create the report directory: " + error.message());
    write_file(*dir, "report.json", bench_report::to_json(report, against).dump());
    write_file(*dir, "report.csv", bench_report::to_csv(report));
    write_file(*dir, "report.html", bench_report::to_html(report, against, overlays));
    std::fprintf(stderr, "bench: wrote report.json, report.csv and report.html in %s\n",
                 dir->c_str());
  }
  return 0;
}

}  // namespace bulkbloom::cli
