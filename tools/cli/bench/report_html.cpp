#include "cli/bench/report_html.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <iterator>
#include <map>
#include <vector>

#include "cli/progress.hpp"

namespace bulkbloom::cli::bench_report {
namespace {

std::string escape(const std::string& text) {
  std::string out;
  for (const char c : text) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

// "±3.1%", or "unknown" for a case of one run.
std::string noise_label(double noise) {
  return std::isnan(noise) ? "unknown" : "±" + format("%.1f%%", 100 * noise);
}

// "1.72 ns", "38.5 ns", "1575 ns": three figures or whole nanoseconds, never an exponent.
std::string ns_label(double ns) {
  return format(ns < 10 ? "%.2f" : ns < 100 ? "%.1f" : "%.0f", ns) + " ns";
}

// "87%", or nothing for an unknown (negative) fraction.
std::string percent_or_blank(double fraction) {
  return fraction < 0 ? "" : format("%.0f%%", 100 * fraction);
}

// ---- Plots -------------------------------------------------------------------------------------

struct Point {
  double x, y;
  std::string tip;           // the point's tooltip
  bool marked = false;       // drawn larger and outlined (a difference beyond noise)
  double low = 0, high = 0;  // the spread drawn as a bar through the point, when high > 0
};

struct Series {
  std::string id;  // data-series attribute: what a checker matches against the JSON
  std::string label, color, dash;
  double width = 2;
  std::vector<Point> points;
};

struct Mark {
  double x;
  std::string label;
};

struct Axis {
  double min, max;  // in data units, drawn on a log scale
  std::vector<std::pair<double, std::string>> ticks;
};

constexpr double kWidth = 1000, kHeight = 500;
constexpr double kLeft = 80, kRight = 250, kTop = 56, kBottom = 56;  // margins; legend right

class Plot {
 public:
  Plot(Axis x, Axis y) : x_(std::move(x)), y_(std::move(y)) {}

  double px(double v) const {
    return kLeft + (kWidth - kLeft - kRight) * (std::log(v) - std::log(x_.min)) /
                       (std::log(x_.max) - std::log(x_.min));
  }
  double py(double v) const {
    return kHeight - kBottom -
           (kHeight - kTop - kBottom) * (std::log(v) - std::log(y_.min)) /
               (std::log(y_.max) - std::log(y_.min));
  }

  std::string svg(const std::string& title, const std::string& x_label, const std::string& y_label,
                  const std::vector<Series>& series, const std::vector<Mark>& marks,
                  double reference_line) const {
    std::string s;
    const auto add = [&](const std::string& text) { s += text; };
    const auto n = [](double v) { return format("%.1f", v); };
    const double right = kWidth - kRight, bottom = kHeight - kBottom;
    add("<svg xmlns=\"http://www.w3.org/2000/svg\" class=\"plot\" viewBox=\"0 0 " + n(kWidth) +
        " " + n(kHeight) + "\" width=\"" + n(kWidth) + "\" height=\"" + n(kHeight) +
        "\" font-family=\"sans-serif\" font-size=\"12\" role=\"img\">\n");
    add("<title>" + escape(title) + "</title>\n");
    add("<rect x=\"0\" y=\"0\" width=\"" + n(kWidth) + "\" height=\"" + n(kHeight) +
        "\" fill=\"white\"/>\n");
    add("<text x=\"" + n(kLeft) + "\" y=\"20\" font-size=\"15\" font-weight=\"bold\">" +
        escape(title) + "</text>\n");
    // Grid and tick labels.
    for (const auto& [v, label] : x_.ticks) {
      add("<line x1=\"" + n(px(v)) + "\" y1=\"" + n(kTop) + "\" x2=\"" + n(px(v)) + "\" y2=\"" +
          n(bottom) + "\" stroke=\"#e4e4e4\"/>\n");
      add("<text x=\"" + n(px(v)) + "\" y=\"" + n(bottom + 16) + "\" text-anchor=\"middle\">" +
          escape(label) + "</text>\n");
    }
    for (const auto& [v, label] : y_.ticks) {
      add("<line x1=\"" + n(kLeft) + "\" y1=\"" + n(py(v)) + "\" x2=\"" + n(right) + "\" y2=\"" +
          n(py(v)) + "\" stroke=\"#e4e4e4\"/>\n");
      add("<text x=\"" + n(kLeft - 6) + "\" y=\"" + n(py(v) + 4) + "\" text-anchor=\"end\">" +
          escape(label) + "</text>\n");
    }
    if (reference_line > 0) {
      add("<line x1=\"" + n(kLeft) + "\" y1=\"" + n(py(reference_line)) + "\" x2=\"" + n(right) +
          "\" y2=\"" + n(py(reference_line)) + "\" stroke=\"#555\" stroke-width=\"1.5\"/>\n");
    }
    add("<rect x=\"" + n(kLeft) + "\" y=\"" + n(kTop) + "\" width=\"" + n(right - kLeft) +
        "\" height=\"" + n(bottom - kTop) + "\" fill=\"none\" stroke=\"#888\"/>\n");
    add("<text x=\"" + n((kLeft + right) / 2) + "\" y=\"" + n(kHeight - 12) +
        "\" text-anchor=\"middle\">" + escape(x_label) + "</text>\n");
    add("<text transform=\"translate(18," + n((kTop + bottom) / 2) +
        ") rotate(-90)\" text-anchor=\"middle\">" + escape(y_label) + "</text>\n");
    // Cache sizes: a dotted line each, labels staggered over two rows above the plot.
    for (std::size_t i = 0; i < marks.size(); ++i) {
      const double x = px(marks[i].x);
      if (x < kLeft || x > right) continue;
      add("<line class=\"cache\" x1=\"" + n(x) + "\" y1=\"" + n(kTop) + "\" x2=\"" + n(x) +
          "\" y2=\"" + n(bottom) + "\" stroke=\"#9467bd\" stroke-dasharray=\"2 3\"/>\n");
      add("<text x=\"" + n(x) + "\" y=\"" + n(kTop - 6 - 14 * static_cast<double>(i % 2)) +
          "\" text-anchor=\"middle\" fill=\"#6a3d9a\">" + escape(marks[i].label) + "</text>\n");
    }
    // One polyline per series, its points as circles with their figures as tooltips.
    for (const Series& line : series) {
      std::string points;
      for (const Point& p : line.points) points += n(px(p.x)) + "," + n(py(p.y)) + " ";
      if (!points.empty()) points.pop_back();
      add("<polyline data-series=\"" + escape(line.id) + "\" points=\"" + points +
          "\" fill=\"none\" stroke=\"" + line.color + "\" stroke-width=\"" + n(line.width) + "\"" +
          (line.dash.empty() ? "" : " stroke-dasharray=\"" + line.dash + "\"") + "/>\n");
      for (const Point& p : line.points) {
        if (p.high > 0) {
          add("<line class=\"spread\" x1=\"" + n(px(p.x)) + "\" y1=\"" + n(py(p.low)) + "\" x2=\"" +
              n(px(p.x)) + "\" y2=\"" + n(py(p.high)) + "\" stroke=\"" + line.color +
              "\" stroke-width=\"1.2\"/>\n");
        }
        add("<circle cx=\"" + n(px(p.x)) + "\" cy=\"" + n(py(p.y)) + "\" r=\"" +
            (p.marked ? "6" : "2.5") + "\" fill=\"" + line.color + "\"" +
            (p.marked ? " stroke=\"black\" stroke-width=\"2\"" : "") + "><title>" +
            escape(line.label + ": " + p.tip) + "</title></circle>\n");
      }
    }
    // Legend, right of the plot.
    double y = kTop + 8;
    for (const Series& line : series) {
      const double x = right + 16;
      add("<line x1=\"" + n(x) + "\" y1=\"" + n(y) + "\" x2=\"" + n(x + 30) + "\" y2=\"" + n(y) +
          "\" stroke=\"" + line.color + "\" stroke-width=\"" + n(line.width) + "\"" +
          (line.dash.empty() ? "" : " stroke-dasharray=\"" + line.dash + "\"") + "/>\n");
      add("<text x=\"" + n(x + 38) + "\" y=\"" + n(y + 4) + "\">" + escape(line.label) +
          "</text>\n");
      y += 20;
    }
    add("</svg>\n");
    return s;
  }

 private:
  Axis x_, y_;
};

// Filter sizes: the sweep's sizes, labelled at each power of 4 (at most about 12 labels).
Axis size_axis(std::uint64_t smallest, std::uint64_t largest) {
  Axis axis{static_cast<double>(smallest) / 1.5, static_cast<double>(largest) * 1.5, {}};
  unsigned step = 2;
  while (std::log2(static_cast<double>(largest) / smallest) / step > 12) step += 2;
  for (std::uint64_t v = std::uint64_t{1} << 10; v <= largest * 2; v <<= step) {
    if (v >= axis.min && v <= axis.max)
      axis.ticks.emplace_back(static_cast<double>(v), size_label(v));
  }
  return axis;
}

// "20 M", "500 k", "1 G": a round rate for an axis.
std::string tick_label(double value) {
  if (value < 1) return format("%.2g", value);
  const char* units[] = {"", " k", " M", " G", " T"};
  int unit = 0;
  while (value >= 999.5 && unit < 4) {
    value /= 1000;
    ++unit;
  }
  return format("%.0f", value) + units[unit];
}

// Rates on a log scale: ticks at 1, 2 and 5 times each power of ten in range.
Axis rate_axis(double low, double high) {
  Axis axis{low / 1.4, high * 1.4, {}};
  for (double decade = std::pow(10, std::floor(std::log10(axis.min))); decade < axis.max;
       decade *= 10) {
    for (double m : {1.0, 2.0, 5.0}) {
      const double v = decade * m;
      if (v >= axis.min && v <= axis.max) axis.ticks.emplace_back(v, tick_label(v));
    }
  }
  return axis;
}

// Ratios on a log scale around 1.
Axis ratio_axis(double low, double high) {
  Axis axis{std::min(low, 0.8) / 1.1, std::max(high, 1.25) * 1.1, {}};
  for (double v : {0.1, 0.2, 0.33, 0.5, 0.67, 0.8, 0.9, 1.0, 1.1, 1.25, 1.5, 2.0, 3.0, 5.0, 10.0}) {
    if (v >= axis.min && v <= axis.max) axis.ticks.emplace_back(v, format("%.2g", v) + "x");
  }
  return axis;
}

const char* operation_color(const std::string& operation) {
  if (operation == "insert") return "#1f77b4";
  if (operation == "contains") return "#2ca02c";
  return "#d62728";
}

const char* role_title(const std::string& role) {
  if (role == "best") return "best implementation";
  if (role == "reference") return "scalar reference";
  return "GPU, batches from host memory (end to end through PCIe)";
}

std::vector<std::string> roles_of(const Report& report) {
  std::vector<std::string> roles;
  for (const Case& c : report.cases) {
    if (std::find(roles.begin(), roles.end(), c.role) == roles.end()) roles.push_back(c.role);
  }
  return roles;
}

// The thread counts of a role's series, one thread first.
std::vector<std::pair<bool, unsigned>> thread_kinds(const Report& report, const std::string& role) {
  std::vector<std::pair<bool, unsigned>> kinds;
  for (const Case& c : report.cases) {
    if (c.role != role) continue;
    const std::pair kind(c.all_threads, c.threads);
    if (std::find(kinds.begin(), kinds.end(), kind) == kinds.end()) kinds.push_back(kind);
  }
  std::sort(kinds.begin(), kinds.end());
  return kinds;
}

std::vector<Mark> cache_marks(const Json& machine) {
  std::vector<Mark> marks;
  for (const CacheSize& c : data_caches(machine)) {
    marks.push_back({static_cast<double>(c.bytes), c.name + " " + size_label(c.bytes)});
  }
  return marks;
}

std::string series_id(const std::string& role, const std::string& operation, unsigned threads) {
  return role + "/" + operation + "/" + std::to_string(threads);
}

// keys/s of each operation and thread count of one role against filter size, with the paired
// limits' curves (random reads and RMWs, per thread count) beside them.
std::string role_plot(const Report& report, const std::string& role) {
  std::vector<Series> series;
  std::uint64_t smallest = UINT64_MAX, largest = 0;
  double low = 1e300, high = 0;
  const auto extend = [&](std::uint64_t x, double y) {
    smallest = std::min(smallest, x);
    largest = std::max(largest, x);
    if (y > 0) {
      low = std::min(low, y);
      high = std::max(high, y);
    }
  };
  const auto kinds = thread_kinds(report, role);
  for (const auto& [all, threads] : kinds) {
    for (const char* operation : kOperations) {
      Series line{series_id(role, operation, threads),
                  series_label(operation, threads),
                  operation_color(operation),
                  all ? "" : "7 4",
                  all ? 2.5 : 1.8,
                  {}};
      for (const Case& c : report.cases) {
        if (c.role != role || c.operation != operation || c.threads != threads) continue;
        const auto [slowest, fastest] = std::minmax_element(c.runs.begin(), c.runs.end());
        const double low = c.runs.empty() ? 0 : *slowest, high = c.runs.empty() ? 0 : *fastest;
        extend(c.filter_bytes, c.keys_per_s);
        extend(c.filter_bytes, low);
        extend(c.filter_bytes, high);
        line.points.push_back({static_cast<double>(c.filter_bytes), c.keys_per_s,
                               size_label(c.filter_bytes) + ", " + si(c.keys_per_s) +
                                   "keys/s, noise " + noise_label(c.noise) +
                                   (c.probe_failure ? ", probe failure" : ""),
                               false, low, high});
      }
      if (!line.points.empty()) series.push_back(std::move(line));
    }
  }
  // The limit curves: only for roles measured against the host probes.
  const bool host = std::any_of(report.cases.begin(), report.cases.end(),
                                [&](const Case& c) { return c.role == role && !c.limit.empty(); });
  if (host) {
    for (const auto& [all, threads] : kinds) {
      for (const bool rmw : {false, true}) {
        const std::string name = rmw ? "random RMW" : "random read";
        // The same dashes as the cases (solid: all threads), in grey and brown.
        Series line{"limit/" + std::string(rmw ? "random_rmw" : "random_read") + "/" +
                        std::to_string(threads),
                    "limit: " + name + ", " + std::to_string(threads) +
                        (threads == 1 ? " thread" : " threads"),
                    rmw ? "#b07a5a" : "#a0a0a0",
                    all ? "" : "7 4",
                    all ? 2.5 : 1.8,
                    {}};
        for (const Limits& l : report.limits) {
          if (l.threads != threads) continue;
          const double v =
              paired_limit(report, rmw ? "random_rmw" : "random_read", threads, l.filter_bytes);
          if (v <= 0) continue;
          const Spread spread = paired_limit_spread(report, rmw ? "random_rmw" : "random_read",
                                                    threads, l.filter_bytes);
          extend(l.filter_bytes, v);
          extend(l.filter_bytes, spread.low);
          extend(l.filter_bytes, spread.high);
          line.points.push_back(
              {static_cast<double>(l.filter_bytes), v,
               size_label(l.filter_bytes) + ", " + si(v) +
                   "lines/s (median of the probes beside the cases; bar: their rounds' quartiles)",
               false, spread.low, spread.high});
        }
        if (!line.points.empty()) series.push_back(std::move(line));
      }
    }
  }
  if (series.empty()) return {};
  const auto first = std::find_if(report.cases.begin(), report.cases.end(),
                                  [&](const Case& c) { return c.role == role; });
  const Plot plot(size_axis(smallest, largest), rate_axis(low, high));
  return plot.svg("Keys/s against filter size: " + std::string(role_title(role)) + " (" +
                      first->implementation + ")",
                  "filter size (bytes, log scale)", "keys/s (log scale); limits in 64-byte lines/s",
                  series, host ? cache_marks(report.machine) : std::vector<Mark>{}, 0);
}

// Nanoseconds per key against filter size, one thread: the memory's dependent-load latency, the
// filter's single-key contains, and the batch contains' time per key (its keys/s inverted).
std::string latency_plot(const Report& report) {
  if (report.latency.empty()) return {};
  Series load{"latency/dependent_load", "dependent 64-byte load", "#a0a0a0", "", 2, {}};
  Series one{"latency/one_key_contains", "contains(key), one call", "#2ca02c", "", 2.5, {}};
  Series batch{"latency/batch_contains", "batch contains, per key", "#2ca02c", "7 4", 1.8, {}};
  std::uint64_t smallest = UINT64_MAX, largest = 0;
  double low = 1e300, high = 0;
  const auto add = [&](Series& series, std::uint64_t bytes, double ns, const std::string& tip) {
    if (ns <= 0) return;
    smallest = std::min(smallest, bytes);
    largest = std::max(largest, bytes);
    low = std::min(low, ns);
    high = std::max(high, ns);
    series.points.push_back(
        {static_cast<double>(bytes), ns, size_label(bytes) + ", " + ns_label(ns) + tip});
  };
  for (const Latency& l : report.latency) {
    add(load, l.filter_bytes, l.dependent_load_ns, " (a pointer chase through the buffer)");
    add(one, l.filter_bytes, l.one_key_contains_ns, ", " + l.implementation);
    for (const Case& c : report.cases) {
      if (c.implementation == l.implementation && c.operation == "contains" && c.threads == 1 &&
          c.filter_bytes == l.filter_bytes && c.keys_per_s > 0) {
        add(batch, l.filter_bytes, 1e9 / c.keys_per_s, ", " + c.implementation);
      }
    }
  }
  std::vector<Series> series;
  for (Series* s : {&load, &one, &batch}) {
    if (!s->points.empty()) series.push_back(std::move(*s));
  }
  if (series.empty()) return {};
  const Plot plot(size_axis(smallest, largest), rate_axis(low, high));
  return plot.svg("Latency against filter size, 1 thread", "filter size (bytes, log scale)",
                  "nanoseconds per key or load (log scale)", series, cache_marks(report.machine),
                  0);
}

// The ratio now/before of each series against filter size; differences beyond noise marked.
std::string comparison_plot(const Report& report, const Comparison& comparison) {
  std::vector<Series> series;
  std::uint64_t smallest = UINT64_MAX, largest = 0;
  double low = 1, high = 1;
  for (const std::string& role : roles_of(report)) {
    for (const auto& [all, threads] : thread_kinds(report, role)) {
      for (const char* operation : kOperations) {
        Series line{"ratio/" + series_id(role, operation, threads),
                    std::string(role == "best"        ? "best"
                                : role == "reference" ? "scalar"
                                                      : "GPU") +
                        ": " + series_label(operation, threads),
                    operation_color(operation),
                    all ? "" : "7 4",
                    all ? 2.5 : 1.8,
                    {}};
        if (role == "reference") line.dash = all ? "2 2" : "1 3";
        for (const Difference& d : comparison.differences) {
          if (d.role != role || d.operation != operation || d.all_threads != all) continue;
          smallest = std::min(smallest, d.filter_bytes);
          largest = std::max(largest, d.filter_bytes);
          low = std::min(low, d.ratio);
          high = std::max(high, d.ratio);
          line.points.push_back({static_cast<double>(d.filter_bytes), d.ratio,
                                 size_label(d.filter_bytes) + ": " + format("%.3f", d.ratio) +
                                     "x (" + d.verdict + ")",
                                 d.flagged});
        }
        if (!line.points.empty()) series.push_back(std::move(line));
      }
    }
  }
  if (series.empty()) return {};
  const Plot plot(size_axis(smallest, largest), ratio_axis(low, high));
  return plot.svg("This run against " + comparison.against + " (large dots: changed)",
                  "filter size (bytes, log scale)", "keys/s now / before (log scale)", series, {},
                  1.0);
}

// A report's name in an overlay's legend: its CPU and date.
std::string report_name(const Report& report) {
  const Json* model = report.machine.find("cpu_model");
  const std::string cpu =
      model != nullptr && model->kind() == Json::Kind::string ? model->string() : "unknown CPU";
  return cpu + ", " + report.date.substr(0, 10);
}

// Each report's best implementation, per operation, in one plot against filter size: a colour per
// report, solid for all threads and dashed for one. What makes the reports unlike is said first.
std::string overlay_section(const Report& report, const std::vector<Overlay>& overlays) {
  static const char* const kColors[] = {"#1f77b4", "#d62728", "#2ca02c", "#9467bd",
                                        "#ff7f0e", "#8c564b", "#e377c2", "#17becf"};
  std::vector<std::pair<std::string, const Report*>> reports{{"this report", &report}};
  for (const Overlay& o : overlays) reports.emplace_back(o.path, &o.report);
  std::string s =
      "<h2>Beside other reports</h2>\n<p>The best implementation of each report, by operation: "
      "a colour per report, solid lines for all threads, dashed for one. Points are medians; bars "
      "span the runs.</p>\n<table class=\"overlays\">\n<tr><th>#</th><th>report</th><th>CPU, "
      "date</th><th>best implementation</th></tr>\n";
  for (std::size_t k = 0; k < reports.size(); ++k) {
    std::string best;
    for (const Case& c : reports[k].second->cases) {
      if (c.role == "best") best = c.implementation;
    }
    s += "<tr><td style=\"color: " + std::string(kColors[k % std::size(kColors)]) + "\">#" +
         std::to_string(k) + " &#9632;</td><td>" + escape(reports[k].first) + "</td><td>" +
         escape(report_name(*reports[k].second)) + "</td><td>" + escape(best) + "</td></tr>\n";
  }
  s += "</table>\n";
  for (std::size_t k = 1; k < reports.size(); ++k) {
    std::vector<std::string> differences = unlike(*reports[k].second, report, "there", "here");
    std::map<std::string, std::string> here, there;
    for (const Case& c : report.cases) here[c.role] = c.implementation;
    for (const Case& c : reports[k].second->cases) there[c.role] = c.implementation;
    for (const auto& [role, implementation] : there) {
      const auto found = here.find(role);
      if (found != here.end() && found->second != implementation) {
        differences.push_back("the implementations differ: " + role + " ran " + implementation +
                              " there, " + found->second + " here");
      }
    }
    for (const std::string& d : differences) {
      s += "<p class=\"warning\">" + escape(reports[k].first) +
           " against this report: " + escape(d) + "</p>\n";
    }
  }
  for (const char* operation : kOperations) {
    std::vector<Series> series;
    std::uint64_t smallest = UINT64_MAX, largest = 0;
    double low = 1e300, high = 0;
    for (std::size_t k = 0; k < reports.size(); ++k) {
      const Report& r = *reports[k].second;
      for (const auto& [all, threads] : thread_kinds(r, "best")) {
        Series line{
            "overlay/" + std::to_string(k) + "/" + operation + "/" + std::to_string(threads),
            "",
            kColors[k % std::size(kColors)],
            all ? "" : "7 4",
            all ? 2.5 : 1.8,
            {}};
        for (const Case& c : r.cases) {
          if (c.role != "best" || c.operation != operation || c.threads != threads) continue;
          // Appended, not "#" + ...: GCC 12 warns (-Wrestrict, a false positive) on a literal +
          // a temporary string.
          line.label = "#";
          line.label += std::to_string(k) + " " + c.implementation + ", " +
                        std::to_string(threads) + (threads == 1 ? " thread" : " threads");
          const auto [slowest, fastest] = std::minmax_element(c.runs.begin(), c.runs.end());
          const double lo = c.runs.empty() ? 0 : *slowest, hi = c.runs.empty() ? 0 : *fastest;
          smallest = std::min(smallest, c.filter_bytes);
          largest = std::max(largest, c.filter_bytes);
          for (const double y : {c.keys_per_s, lo, hi}) {
            if (y > 0) {
              low = std::min(low, y);
              high = std::max(high, y);
            }
          }
          line.points.push_back({static_cast<double>(c.filter_bytes), c.keys_per_s,
                                 size_label(c.filter_bytes) + ", " + si(c.keys_per_s) + "keys/s",
                                 false, lo, hi});
        }
        if (!line.points.empty()) series.push_back(std::move(line));
      }
    }
    if (series.empty() || high <= 0) continue;
    const Plot plot(size_axis(smallest, largest), rate_axis(low, high));
    s += plot.svg(std::string(operation) + " keys/s against filter size, " +
                      std::to_string(reports.size()) + " reports",
                  "filter size (bytes, log scale)", "keys/s (log scale)", series, {}, 0);
  }
  return s;
}

std::string machine_table(const Json& machine) {
  std::string s = "<table class=\"machine\">\n";
  for (const auto& [key, value] : machine.members("machine")) {
    std::string text;
    if (key == "caches") {
      for (const Json& cache : value.items()) {
        const auto bytes = cache.at("size_bytes").whole("cache size_bytes");
        text += "L";
        text += cache.at("level").dump(-1) + " " + cache.at("type").string() + " " +
                size_label(bytes) + " (×" + cache.at("instances").dump(-1) + ", each shared by " +
                cache.at("shared_by_cpus").dump(-1) + " CPUs); ";
      }
    } else if (key == "gpus") {
      for (const Json& gpu : value.items()) {
        text += gpu.at("name").string() + ", " +
                size_label(gpu.at("memory_bytes").whole("gpu memory")) + ", driver " +
                gpu.at("driver").string() + "; ";
      }
      if (text.empty()) text = "none";
    } else if (key.ends_with("_bytes") && value.kind() == Json::Kind::number) {
      text = size_label(value.whole(key));
    } else if (value.kind() == Json::Kind::string) {
      text = value.string();
    } else if (value.kind() == Json::Kind::object) {
      for (const auto& [name, reason] : value.members()) {
        text += name + ": " +
                (reason.kind() == Json::Kind::string ? reason.string() : reason.dump(-1)) + "; ";
      }
      if (text.empty()) text = "none";
    } else if (value.kind() == Json::Kind::array) {
      for (const Json& item : value.items())
        text += (item.kind() == Json::Kind::string ? item.string() : item.dump(-1)) + ", ";
      if (text.size() >= 2) text.resize(text.size() - 2);
    } else {
      text = value.dump(-1);
    }
    if (text.ends_with("; ")) text.resize(text.size() - 2);
    s += "<tr><th>" + escape(key) + "</th><td>" + escape(text) + "</td></tr>\n";
  }
  return s + "</table>\n";
}

// A machine field as text; "" when the report does not have it.
std::string field(const Json& object, std::string_view key) {
  const Json* value = object.find(key);
  if (value == nullptr || value->kind() == Json::Kind::null) return {};
  return value->kind() == Json::Kind::string ? value->string() : value->dump(-1);
}

// The figures a reader looks for first: memory's random-line rates, the caches' plateaus and the
// best implementation at the largest size.
std::string headline_block(const Report& report) {
  const Headline h = headline(report);
  if (h.largest_bytes == 0) return {};
  const bool past_caches = h.last_level_cache > 0 && h.largest_bytes >= 2 * h.last_level_cache;
  const std::string where =
      size_label(h.largest_bytes) +
      (h.last_level_cache == 0 ? ""
       : past_caches           ? " (" +
                           format("%.0f", static_cast<double>(h.largest_bytes) /
                                              static_cast<double>(h.last_level_cache)) +
                           "x the last-level cache: DRAM)"
                     : " (under twice the last-level cache: not a DRAM figure)");
  std::string s =
      "<h2>Headline</h2>\n<table class=\"headline\">\n<tr><th>at " + escape(where) + "</th>";
  for (const auto& m : h.memory) {
    s += "<th>" + std::to_string(m.threads) + (m.threads == 1 ? " thread" : " threads") + "</th>";
  }
  s += "</tr>\n<tr><th>random 64-byte reads</th>";
  for (const auto& m : h.memory) s += "<td class=\"n\">" + si(m.read) + " lines/s</td>";
  s += "</tr>\n<tr><th>random read-modify-writes</th>";
  for (const auto& m : h.memory) s += "<td class=\"n\">" + si(m.rmw) + " lines/s</td>";
  s += "</tr>\n";
  for (const char* operation : {"insert", "contains"}) {
    std::string row;
    std::string implementation;
    for (const auto& m : h.memory) {
      const Case* found = nullptr;
      for (const Case* c : h.best) {
        if (c->operation == operation && c->threads == m.threads) found = c;
      }
      if (found == nullptr) {
        row += "<td></td>";
        continue;
      }
      implementation = found->implementation;
      row +=
          "<td class=\"n\">" + si(found->keys_per_s) + "keys/s (" +
          (found->probe_failure
               ? std::string("probe failure")
               : format("%.0f%%", 100 * found->keys_per_s / found->limit_per_s()) + " of limit") +
          ")</td>";
    }
    if (!implementation.empty()) {
      s += "<tr><th>" + std::string(operation) + ", " + escape(implementation) + "</th>" + row +
           "</tr>\n";
    }
  }
  s += "</table>\n";
  for (const Latency& l : report.latency) {
    if (l.filter_bytes != h.largest_bytes) continue;
    s += "<p>Latency at " + escape(size_label(l.filter_bytes)) +
         ", 1 thread: a dependent 64-byte "
         "load " +
         ns_label(l.dependent_load_ns) + "; one <code>contains(key)</code> of " +
         escape(l.implementation) + " " + ns_label(l.one_key_contains_ns) + " a call.</p>\n";
  }
  if (!h.plateaus.empty()) {
    s += "<p>Cache plateaus (random reads, 1 thread): ";
    for (std::size_t i = 0; i < h.plateaus.size(); ++i) {
      const auto& p = h.plateaus[i];
      s += (i ? "; " : "") + escape(p.cache.name + " " + size_label(p.cache.bytes) + ": " +
                                    si(p.read) + " lines/s at " + size_label(p.at_bytes));
    }
    s += ".</p>\n";
  }
  return s;
}

// Who measured: the CPU exactly, VM or not, clock, cores, memory, build, and the load meanwhile.
std::string identity_table(const Report& report) {
  const Json& m = report.machine;
  const auto row = [](const std::string& name, const std::string& value) {
    return "<tr><th>" + escape(name) + "</th><td>" + escape(value) + "</td></tr>\n";
  };
  std::string caches;
  for (const CacheSize& c : data_caches(m)) {
    caches += (caches.empty() ? "" : ", ") + c.name + " " + size_label(c.bytes);
  }
  // Numbers as people write them, not as JSON keeps them (2596.1199999999999).
  const auto number = [](const Json& object, std::string_view key, const char* fmt) {
    const Json* v = object.find(key);
    return v != nullptr && v->kind() == Json::Kind::number ? format(fmt, v->number()) : "";
  };
  const auto averages = [](const Json& object, std::string_view key) {
    const Json* v = object.find(key);
    std::string text;
    if (v == nullptr || v->kind() != Json::Kind::array) return text;
    for (const Json& a : v->items()) text += (text.empty() ? "" : " ") + format("%.2f", a.number());
    return text;
  };
  const std::string mhz = number(m, "cpu_mhz", "%.0f"), max_mhz = number(m, "cpu_max_mhz", "%.0f");
  std::string s = "<h2>Identity</h2>\n<table class=\"identity\">\n";
  s += row("CPU", field(m, "cpu_model") + " (family " + field(m, "cpu_family") + ", model " +
                      field(m, "cpu_model_number") + ", stepping " + field(m, "cpu_stepping") +
                      ", microcode " + field(m, "microcode") + ")");
  s += row("virtual machine", field(m, "virtual_machine") == "true"    ? "yes (hypervisor flag)"
                              : field(m, "virtual_machine") == "false" ? "no"
                                                                       : "");
  s += row("clock", mhz + " MHz now" +
                        (max_mhz.empty() || max_mhz == "0" ? "" : ", " + max_mhz + " MHz max"));
  s += row("CPUs", field(m, "logical_cpus") + " logical (" + field(m, "usable_cpus") +
                       " usable), " + field(m, "physical_cores") + " cores, " +
                       field(m, "threads_per_core") + " threads per core, " + field(m, "sockets") +
                       " sockets, " + field(m, "numa_nodes") + " NUMA nodes");
  const Json* memory = m.find("memory_bytes");
  s += row("memory", (memory ? size_label(memory->whole("memory_bytes")) : "") +
                         ", transparent huge pages " + field(m, "transparent_hugepages"));
  s += row("caches", caches);
  s +=
      row("build", "bulkbloom " + field(m, "bulkbloom_version") + ", commit " +
                       field(m, "git_commit") + ", " + field(m, "compiler") + ", " +
                       field(m, "build_flags") + "; measured " + field(m, "chosen_implementation"));
  if (report.conditions.kind() == Json::Kind::object) {
    const Json& c = report.conditions;
    const auto percent = [&](std::string_view key) {
      const Json* v = c.find(key);
      return v ? format("%.1f%%", 100 * v->number(key)) : std::string();
    };
    s += row("load during the run", "load average " + averages(c, "load_average_before") +
                                        " before, " + averages(c, "load_average_after") +
                                        " after; CPUs busy " + percent("busy_fraction") +
                                        ", stolen by the hypervisor " + percent("steal_fraction"));
  }
  return s + "</table>\n";
}

// The GPU section: device-resident keys beside the device's limit, host-resident keys apart and
// labelled end to end; or why there is none.
std::string gpu_block(const GpuSection& gpu) {
  std::string s =
      "<h2>GPU</h2>\n<p>A GPU filter (sb512) at each size, its keys generated in device memory: "
      "insert, contains and exact insert_if_absent timed by CUDA events around each call, beside "
      "the device's random block reads over the filter's own bits (one whole block a read, as "
      "contains loads it: the limit). Then the same calls on the same keys in pinned host "
      "memory, timed by the wall clock: end to end through PCIe (copies both ways, launches, "
      "synchronisation), not the GPU's memory. The device's answers are checked against the CPU "
      "backend's before any figure is kept.</p>\n";
  if (!gpu.absent.empty()) {
    s += "<p><b>Not measured:</b> " + escape(gpu.absent) + "</p>\n";
  }
  for (const auto& failure : gpu.failures) {
    s += "<p class=\"warning\">A size not measured: " + escape(failure) + "</p>\n";
  }
  if (gpu.cases.empty()) return s;
  for (const detail::DeviceBench& c : gpu.cases) {
    if (!c.stand_in.empty()) {
      s += "<p class=\"warning\">" + size_label(c.filter_bytes) + " was measured on a " +
           escape(c.stand_in) + ", not a GPU: these are no GPU's figures.</p>\n";
    }
  }
  s += "<table>\n<tr><th>filter</th><th>implementation</th><th>keys</th><th>operation</th>"
       "<th>keys/s</th><th>limit: random blocks/s</th><th>% of limit</th></tr>\n";
  for (const detail::DeviceBench& c : gpu.cases) {
    const double limit = c.random_block_reads.keys_per_s;
    for (const detail::DeviceRate& r : c.device_resident) {
      s += "<tr><td class=\"n\">" + size_label(c.filter_bytes) + "</td><td>" +
           escape(c.implementation) + "</td><td>in device memory</td><td>" + escape(r.operation) +
           "</td><td class=\"n\">" + si(r.keys_per_s) + "</td><td class=\"n\">" + si(limit) + " (" +
           std::to_string(c.block_bytes) + " B)</td><td class=\"n\">" +
           format("%.0f%%", 100 * r.keys_per_s / limit) + "</td></tr>\n";
    }
    for (const detail::DeviceRate& r : c.host_resident) {
      s += "<tr><td class=\"n\">" + size_label(c.filter_bytes) + "</td><td>" +
           escape(c.implementation) +
           "</td><td>pinned host memory, end to end through PCIe</td><td>" + escape(r.operation) +
           "</td><td class=\"n\">" + si(r.keys_per_s) + "</td><td></td><td></td></tr>\n";
    }
  }
  s += "</table>\n<p>" + std::to_string(gpu.cases.front().keys) + " keys a call; answers matched " +
       "the CPU backend's on " + std::to_string(gpu.cases.front().verified_keys) +
       " keys at each size.</p>\n";
  return s;
}

}  // namespace

std::string to_html(const Report& report, const Comparison* comparison,
                    const std::vector<Overlay>& overlays) {
  std::string cpu = "this machine";
  if (const Json* model = report.machine.find("cpu_model");
      model && model->kind() == Json::Kind::string) {
    cpu = model->string();
  }
  std::string command;
  for (const auto& arg : report.command) command += (command.empty() ? "" : " ") + arg;
  std::string s =
      "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
      "<title>bulkbloom bench: " +
      escape(cpu) +
      "</title>\n<style>\n"
      "body { font-family: sans-serif; margin: 24px; color: #222; max-width: 1040px; }\n"
      "table { border-collapse: collapse; margin: 8px 0 16px; font-size: 13px; }\n"
      "th, td { border: 1px solid #ccc; padding: 3px 8px; text-align: left; }\n"
      "td.n { text-align: right; font-variant-numeric: tabular-nums; }\n"
      "tr.flagged td { background: #fde2e2; }\n"
      "p.warning { background: #fde2e2; border: 2px solid #c00; padding: 6px 10px; "
      "font-weight: bold; }\n"
      "svg.plot { display: block; margin: 12px 0 24px; border: 1px solid #ddd; }\n"
      "li { margin-bottom: 6px; }\n"
      "</style>\n</head>\n<body>\n";
  s += "<h1>bulkbloom bench: " + escape(cpu) + "</h1>\n";
  s += "<p>Measured " + escape(report.date) + " with <code>" + escape(command) + "</code>.</p>\n";
  for (const auto& warning : report.warnings) {
    s += "<p class=\"warning\">Warning: " + escape(warning) + "</p>\n";
  }
  s += headline_block(report) + identity_table(report);
  s += "<h2>Keys per second</h2>\n<p>Each key touches one random 64-byte line of the filter, so "
       "each case is drawn beside the random-line limit over a buffer of its size (reads for "
       "contains, read-modify-writes for the writes), probed with its threads in each round of the "
       "sweep right before the round's cases of that size, and timed as they are: a case's runs "
       "are taken one a round, spread over the sweep. Points are medians; bars span the runs "
       "(cases) and the probes' quartiles (limits). Inside the L1 and L2 the limit is far above "
       "what hashing "
       "a key costs, so a % of limit there measures the hashing, not the memory.</p>\n";
  for (const std::string& role : roles_of(report)) s += role_plot(report, role);
  if (!report.latency.empty()) {
    s += "<h2>Latency</h2>\n<p>How long one key waits, one thread: a load that waits for the one "
         "before it (a pointer chase in one random cycle through a buffer of the size: the latency "
         "of the level the buffer lives in), one <code>contains(key)</code> call in a loop over "
         "random keys (calls are independent, so the CPU may overlap neighbours, as in a user's "
         "loop), and a batch contains' time per key (its keys/s inverted).</p>\n" +
         latency_plot(report);
  }
  s += gpu_block(report.gpu);
  if (!report.notes.empty()) {
    s += "<h2>Reading the figures</h2>\n<ul>\n";
    for (const auto& note : report.notes) s += "<li>" + escape(note) + "</li>\n";
    s += "</ul>\n";
  }
  if (comparison != nullptr) {
    s += "<h2>Against an earlier report</h2>\n";
    for (const auto& warning : comparison->warnings) {
      s += "<p class=\"warning\">Warning: " + escape(warning) + "</p>\n";
    }
    s += "<p>" + escape(comparison->against) + " (" + escape(comparison->against_cpu) + ", " +
         escape(comparison->against_date) + "): " + escape(summary(*comparison)) + ".</p>\n";
    s += comparison_plot(report, *comparison);
    s += "<table>\n<tr><th>role</th><th>operation</th><th>threads</th><th>filter</th>"
         "<th>now / before</th><th>against the limit, now / before</th><th>verdict</th>"
         "<th>limit now / before</th></tr>\n";
    for (const auto& d : comparison->differences) {
      s += std::string("<tr") + (d.flagged ? " class=\"flagged\"" : "") + "><td>" + escape(d.role) +
           "</td><td>" + escape(d.operation) + "</td><td>" + (d.all_threads ? "all" : "1") +
           "</td><td class=\"n\">" + size_label(d.filter_bytes) + "</td><td class=\"n\">" +
           format("%.3f", d.ratio) + "</td><td class=\"n\">" +
           (d.ratio_to_limit > 0 ? format("%.3f", d.ratio_to_limit) : "") + "</td><td>" +
           escape(d.verdict) + "</td><td class=\"n\">" +
           (d.limit_ratio > 0 ? format("%.3f", d.limit_ratio) : "") + "</td></tr>\n";
    }
    s += "</table>\n";
  }
  if (!overlays.empty()) s += overlay_section(report, overlays);
  s += "<h2>All figures</h2>\n<table>\n<tr><th>filter</th><th>implementation</th><th>operation</th>"
       "<th>threads</th><th>keys/s</th><th>noise</th><th>limit (lines/s)</th><th>% of limit</th>"
       "<th>huge pages</th></tr>\n";
  for (const Case& c : report.cases) {
    s += "<tr><td class=\"n\">" + size_label(c.filter_bytes) + "</td><td>" +
         escape(c.implementation) + "</td><td>" + escape(c.operation) + "</td><td class=\"n\">" +
         std::to_string(c.threads) + "</td><td class=\"n\">" + si(c.keys_per_s) +
         "</td><td class=\"n\">" + noise_label(c.noise) + "</td><td class=\"n\">" +
         (c.limit.empty()
              ? ""
              : si(c.limit_per_s()) + " " + (c.limit == "random_read" ? "read" : "RMW")) +
         "</td><td class=\"n\">" +
         (c.probe_failure   ? "probe failure"
          : c.limit.empty() ? ""
                            : format("%.0f%%", 100 * c.keys_per_s / c.limit_per_s())) +
         "</td><td class=\"n\">" + percent_or_blank(c.huge_pages) + "</td></tr>\n";
  }
  s += "</table>\n";
  s += "<h2>Limits</h2>\n<table>\n<tr><th>buffer</th><th>threads</th><th>random read lines/s</th>"
       "<th>random RMW lines/s</th><th>sequential read bytes/s</th><th>huge pages</th></tr>\n";
  for (const Limits& l : report.limits) {
    s += "<tr><td class=\"n\">" + size_label(l.filter_bytes) + "</td><td class=\"n\">" +
         std::to_string(l.threads) + "</td><td class=\"n\">" + si(l.random_read_lines_per_s) +
         "</td><td class=\"n\">" + si(l.random_rmw_lines_per_s) + "</td><td class=\"n\">" +
         si(l.seq_read_bytes_per_s) + "B</td><td class=\"n\">" + percent_or_blank(l.huge_pages) +
         "</td></tr>\n";
  }
  s += "</table>\n";
  s += "<h2>Machine</h2>\n" + machine_table(report.machine);
  s += "</body>\n</html>\n";
  return s;
}

}  // namespace bulkbloom::cli::bench_report
