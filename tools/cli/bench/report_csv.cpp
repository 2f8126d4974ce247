#include "cli/bench/report_csv.hpp"

#include <cmath>

namespace bulkbloom::cli::bench_report {

std::string to_csv(const Report& report) {
  std::string csv =
      "filter_bytes,role,implementation,operation,threads,all_threads,keys_per_call,keys_per_s,"
      "noise,runs_keys_per_s,limit,limit_lines_per_s,fraction_of_limit,probe_failure,huge_pages,"
      "runs_limit_lines_per_s\n";
  const auto number = [](double v) { return format("%.6g", v); };
  const auto joined = [&](const std::vector<double>& values) {
    std::string text;
    for (const double v : values) {
      if (!text.empty()) text += ';';
      text += number(v);
    }
    return text;
  };
  for (const Case& c : report.cases) {
    const std::string runs = joined(c.runs);
    const bool limited = !c.limit.empty() && c.limit_per_s() > 0;
    // Names are registry names and fixed words: no commas or quotes to escape.
    csv += std::to_string(c.filter_bytes) + "," + c.role + "," + c.implementation + "," +
           c.operation + "," + std::to_string(c.threads) + "," +
           (c.all_threads ? "true" : "false") + "," + std::to_string(c.keys_per_call) + "," +
           number(c.keys_per_s) + "," + (std::isnan(c.noise) ? "" : number(c.noise)) + "," + runs +
           "," + c.limit + "," + (limited ? number(c.limit_per_s()) : "") + "," +
           (limited ? number(c.keys_per_s / c.limit_per_s()) : "") + "," +
           (c.probe_failure ? "true" : "false") + "," +
           (c.huge_pages < 0 ? "" : number(c.huge_pages)) + "," + joined(c.run_limits) + "\n";
  }
  return csv;
}

}  // namespace bulkbloom::cli::bench_report
