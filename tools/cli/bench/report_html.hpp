// The bench report drawn as a self-contained HTML page: SVG plots, tables and the notes.
#pragma once

#include <string>

#include "cli/bench/report.hpp"

namespace bulkbloom::cli::bench_report {

/// The report as a self-contained HTML page (inline SVG and CSS, no scripts, nothing fetched).
std::string to_html(const Report& report, const Comparison* comparison);

}  // namespace bulkbloom::cli::bench_report
