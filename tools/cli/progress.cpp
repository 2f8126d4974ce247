#include "cli/progress.hpp"

#include <unistd.h>

#include <cmath>
#include <cstdio>

namespace bulkbloom::cli {
namespace {

constexpr auto kProgressInterval = std::chrono::milliseconds(250);

double seconds_between(std::chrono::steady_clock::time_point a,
                       std::chrono::steady_clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

std::string json_escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", c);
      out += buf;
    } else {
      out += c;
    }
  }
  return out;
}

}  // namespace

bool stderr_is_terminal() {
  return isatty(STDERR_FILENO) == 1;
}

std::string si(double value) {
  const char* units[] = {"", " k", " M", " G", " T"};
  int u = 0;
  while (std::fabs(value) >= 1000.0 && u < 4) {
    value /= 1000.0;
    ++u;
  }
  char buf[32];
  std::snprintf(buf, sizeof buf, u == 0 ? "%.0f%s" : "%.1f%s", value, units[u]);
  return buf;
}

ProgressLine::ProgressLine(bool enabled, std::uint64_t total_bytes)
    : enabled_(enabled),
      total_bytes_(total_bytes),
      start_(std::chrono::steady_clock::now()),
      last_(start_) {}

void ProgressLine::update(std::uint64_t records, std::uint64_t bytes) {
  if (!enabled_) return;
  const auto now = std::chrono::steady_clock::now();
  if (now - last_ < kProgressInterval) return;
  last_ = now;
  const double elapsed = std::max(1e-9, seconds_between(start_, now));
  char line[160];
  int n = std::snprintf(line, sizeof line, "\r%s records  %s records/s  %.0f MB/s",
                        si(static_cast<double>(records)).c_str(),
                        si(static_cast<double>(records) / elapsed).c_str(),
                        static_cast<double>(bytes) / elapsed / 1e6);
  if (total_bytes_ > 0 && n > 0 && n < static_cast<int>(sizeof line)) {
    const double fraction = std::min(1.0, static_cast<double>(bytes) / total_bytes_);
    const double eta = fraction > 0 ? elapsed * (1.0 - fraction) / fraction : 0.0;
    std::snprintf(line + n, sizeof line - n, "  %5.1f%%  ETA %.0f s", 100.0 * fraction, eta);
  }
  std::fprintf(stderr, "%s\033[K", line);
  std::fflush(stderr);
  shown_ = true;
}

void ProgressLine::finish() {
  if (shown_) std::fprintf(stderr, "\r\033[K");
  shown_ = false;
}

void Summary::number(std::string key, std::string label, double value, std::string text) {
  if (text.empty()) {
    char buf[40];
    std::snprintf(buf, sizeof buf, "%.15g", value);
    text = buf;
  }
  entries_.push_back({std::move(key), std::move(label), std::move(text), true, value, {}});
}

void Summary::integer(std::string key, std::string label, std::uint64_t value) {
  std::string digits = std::to_string(value);
  entries_.push_back(
      {std::move(key), std::move(label), digits, true, static_cast<double>(value), digits});
}

void Summary::list(std::string key, const std::vector<std::string>& items) {
  std::string array = "[";
  for (const std::string& item : items) {
    if (array.size() > 1) array += ", ";
    array += '"' + json_escape(item) + '"';
  }
  array += ']';
  entries_.push_back({std::move(key), {}, {}, false, 0.0, std::move(array)});
}

void Summary::text(std::string key, std::string label, std::string value) {
  entries_.push_back({std::move(key), std::move(label), std::move(value), false, 0.0, {}});
}

void Summary::print(bool json, std::FILE* to) const {
  if (json) {
    std::string out = "{";
    for (const Entry& e : entries_) {
      if (e.key.empty()) continue;
      if (out.size() > 1) out += ", ";
      out += '"';
      out += e.key;
      out += "\": ";
      if (!e.exact.empty()) {
        out += e.exact;
      } else if (e.is_number) {
        char buf[40];
        std::snprintf(buf, sizeof buf, "%.15g", std::isfinite(e.value) ? e.value : -1.0);
        out += buf;
      } else {
        out += '"';
        out += json_escape(e.text);
        out += '"';
      }
    }
    std::fprintf(to, "%s}\n", out.c_str());
    return;
  }
  std::size_t width = 0;
  for (const Entry& e : entries_) width = std::max(width, e.label.size());
  for (const Entry& e : entries_) {
    if (e.label.empty()) continue;
    std::fprintf(to, "%-*s  %s\n", static_cast<int>(width + 1), (e.label + ":").c_str(),
                 e.text.c_str());
  }
}

void describe_filter(Summary& summary, const Filter& filter) {
  const Layout& layout = filter.layout();
  summary.text("filter", "filter", layout.describe());
  summary.text("shape", "", std::string(to_string(layout.shape)));
  summary.number("num_blocks", "", static_cast<double>(layout.num_blocks));
  summary.number("filter_bytes", "", static_cast<double>(layout.size_bytes()));
  summary.text("implementation", "", filter.implementation());
  summary.number("threads", "", filter.threads());
  summary.text("", "running on",
               filter.implementation() + ", " + std::to_string(filter.threads()) + " threads");
}

}  // namespace bulkbloom::cli
