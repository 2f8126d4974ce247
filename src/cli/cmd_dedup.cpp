// bulkbloom dedup: writes the first occurrence of each key, in input order.
#include <chrono>
#include <cstdio>
#include <optional>

#include "cli/commands.hpp"
#include "cli/filter_options.hpp"
#include "cli/progress.hpp"
#include "cli/record_scan.hpp"

namespace bulkbloom::cli {

int run_dedup(const Arguments& args) {
  ArgParser parser("dedup [options] [INPUT...]",
                   "Writes the first occurrence of each key of the inputs (files, or stdin when "
                   "none or '-'), in input order.\nA never-seen key is wrongly dropped with the "
                   "filter's false-positive rate; a repeated key is never written twice.");
  parser.value("format", "FMT", "u64 (default), lines, dec, hex, csv:N, tsv:N", 'f')
      .value("output", "FILE", "where unique records go (default stdout)", 'o')
      .value("dups", "FILE", "also write the dropped records here");
  add_sizing_options(parser);
  add_backend_options(parser);
  parser.flag("skip-bad", "skip and count malformed records instead of stopping")
      .value("stats", "KIND", "final summary on stderr: text (default), json or none");
  if (!parser.parse(args)) {
    std::fputs(parser.usage().c_str(), stdout);
    return 0;
  }
  const auto start_time = std::chrono::steady_clock::now();
  const RecordFormat format = RecordFormat::parse(parser.get_or("format", "u64"));
  const std::string stats = parser.get_or("stats", "text");
  if (stats != "text" && stats != "json" && stats != "none") {
    throw UsageError("--stats: unknown kind '" + stats + "': expected text, json or none");
  }
  const Options options = backend_options(parser);
  const SizingRequest sizing = sizing_request(parser);

  ChunkReader reader(parser.positionals(), format, kChunkBytes);
  std::string capacity_note;
  Filter filter(sized_layout(sizing, reader, format, capacity_note), options);

  OutputFile unique_out(parser.get_or("output", "-"));
  std::optional<OutputFile> dups_out;
  if (const auto dups = parser.get("dups")) dups_out.emplace(*dups);

  ScanSettings settings;
  settings.format = format;
  settings.skip_bad = parser.has("skip-bad");
  settings.flagged_out = &unique_out;
  settings.unflagged_out = dups_out ? &*dups_out : nullptr;
  settings.show_progress = stderr_is_terminal();
  const ScanState end = run_scan(filter, reader, settings);

  if (dups_out) dups_out->commit();
  unique_out.commit();

  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start_time).count();
  const ScanCounters& c = end.counters;
  const double wrongly_dropped = expected_false_drops(filter.layout(), 0, c.flagged);
  Summary summary;
  summary.number("records_read", "records read", static_cast<double>(c.records));
  summary.number("unique_written", "unique written", static_cast<double>(c.flagged));
  summary.number("duplicates_dropped", "duplicates dropped",
                 static_cast<double>(c.records - c.flagged));
  if (settings.skip_bad) {
    summary.number("bad_records_skipped", "bad records skipped",
                   static_cast<double>(c.skipped_bad));
  }
  char line[160];
  std::snprintf(line, sizeof line, "%.1f (modelled false-positive rate, summed over the fill)",
                wrongly_dropped);
  summary.number("expected_wrongly_dropped", "expected unique records wrongly dropped",
                 wrongly_dropped, line);
  describe_filter(summary, filter);
  summary.text("capacity_source", "", capacity_note);
  std::snprintf(line, sizeof line, "%.2f s, %s records/s, %.0f MB/s", seconds,
                si(static_cast<double>(c.records) / seconds).c_str(),
                static_cast<double>(c.bytes) / seconds / 1e6);
  summary.number("seconds", "throughput", seconds, line);
  summary.number("records_per_second", "", static_cast<double>(c.records) / seconds);
  summary.number("input_bytes", "", static_cast<double>(c.bytes));
  if (stats != "none") summary.print(stats == "json");
  return 0;
}

}  // namespace bulkbloom::cli
