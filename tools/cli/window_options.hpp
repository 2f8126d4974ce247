// The sliding-window options of dedup (docs/WINDOW.md): --window with --time-field, or
// --window-records; --generations and --lateness.
#pragma once

#include <bulkbloom/window.hpp>

#include <cstdint>
#include <optional>
#include <string>

#include "cli/args.hpp"
#include "cli/chunk_reader.hpp"
#include "cli/filter_options.hpp"
#include "cli/record_format.hpp"

namespace bulkbloom::cli {

/// Declares --window, --window-records, --generations, --time-field and --lateness.
void add_window_options(ArgParser& parser);

/// A window as the command line asks for it.
struct WindowRequest {
  WindowClock clock = WindowClock::records;
  std::uint64_t length = 0;  ///< T: seconds of event time, or records.
  std::uint32_t generations = 4;
  std::uint64_t lateness = 0;  ///< Seconds (event time only).
  unsigned time_column = 0;    ///< 1-based event-time column (event time only).
  /// Event times later than the wall clock at the start plus this are bad input (event time
  /// only): one such time would move the clock past every record to come (docs/WINDOW.md).
  std::uint64_t max_future = 86'400;
  /// --max-capacity: the most keys a generation is sized for (event time only).
  std::optional<std::uint64_t> max_capacity;
};

/// The window the options ask for, or nothing without --window / --window-records.
/// Throws UsageError for a bad or inconsistent combination (`format` must be csv or tsv for an
/// event-time window, and --shape cannot be combined with a window).
std::optional<WindowRequest> window_request(const ArgParser& parser, const RecordFormat& format);

/// The sized window: each generation of an event-time window holds the keys of the capacity
/// (given, or the input's record count: a dump may lie within one period), at most
/// --max-capacity; a records window sizes itself.
WindowConfig window_config(const WindowRequest& request, const SizingRequest& sizing,
                           const ChunkReader& reader, const RecordFormat& format,
                           std::string& capacity_note);

/// How the generations this run starts are sized (docs/WINDOW.md "Sizing per period"): for the
/// keys the periods before them brought, at least the capacity (given, or the input's record
/// count when known), at most --max-capacity.
WindowSizing window_sizing(const WindowRequest& request, const SizingRequest& sizing,
                           const ChunkReader& reader, const RecordFormat& format);

/// Throws UsageError if a window read from `source` is not the one the options ask for.
void check_window_matches(const WindowConfig& loaded, const WindowRequest& request,
                          const std::string& source);

}  // namespace bulkbloom::cli
