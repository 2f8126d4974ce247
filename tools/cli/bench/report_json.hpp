// The bench report as JSON (docs/BENCH_REPORT.md describes the fields).
#pragma once

#include "cli/bench/json.hpp"
#include "cli/bench/report.hpp"

namespace bulkbloom::cli::bench_report {

/// Bumped whenever a field changes meaning or goes away; readers refuse other versions but
/// kOldestReadableVersion and later. Version 4 added "gpu" (the GPU section); a version 3 report
/// loads with the section absent, saying so.
inline constexpr int kSchemaVersion = 4;
inline constexpr int kOldestReadableVersion = 3;

/// The report, and the comparison when there is one, as a JSON document.
Json to_json(const Report& report, const Comparison* comparison);
/// Reads a report written by to_json. Throws std::runtime_error naming what is wrong.
Report from_json(const Json& json);

}  // namespace bulkbloom::cli::bench_report
