// The bench report drawn as a self-contained HTML page: SVG plots, tables and the notes.
#pragma once

#include <string>
#include <vector>

#include "cli/bench/report.hpp"

namespace bulkbloom::cli::bench_report {

/// Another report drawn beside this one (another machine, another build), and where it came from.
struct Overlay {
  std::string path;
  Report report;
};

/// The report as a self-contained HTML page (inline SVG and CSS, no scripts, nothing fetched),
/// with the comparison when there is one and, when `overlays` has reports, plots of each
/// operation's keys/s of every report's best implementation in one, with what makes the reports
/// unlike said above them.
std::string to_html(const Report& report, const Comparison* comparison,
                    const std::vector<Overlay>& overlays = {});

}  // namespace bulkbloom::cli::bench_report
