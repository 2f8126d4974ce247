// The bench report's cases as CSV, one row a case, for spreadsheets and plotting scripts.
#pragma once

#include <string>

#include "cli/bench/report.hpp"

namespace bulkbloom::cli::bench_report {

/// A header row, then one row per case (docs/BENCH_REPORT.md names the columns). Unknown figures
/// are empty cells; a case's runs are one cell, separated by ';'.
std::string to_csv(const Report& report);

}  // namespace bulkbloom::cli::bench_report
