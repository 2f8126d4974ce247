// The streaming core shared by dedup, build and query: chunks of records go through the filter,
// and each record is written to the "kept" or the "dropped" output by its flag.
#pragma once

#include <bulkbloom/filter.hpp>
#include <bulkbloom/window.hpp>

#include <cstdint>
#include <functional>

#include "cli/carried_filter.hpp"
#include "cli/chunk_reader.hpp"
#include "cli/dedup_state.hpp"
#include "cli/output_file.hpp"
#include "cli/record_format.hpp"

namespace bulkbloom::cli {

/// What the filter does with each key, and so what a record's flag means.
enum class ScanAction {
  insert_if_absent,  ///< Flag = first sighting (dedup, build).
  contains,          ///< Flag = the filter has seen it (query); the filter is unchanged.
};

/// Running totals of a scan.
struct ScanCounters {
  std::uint64_t records = 0;      ///< Good records read.
  std::uint64_t flagged = 0;      ///< Records whose flag was set (new, or seen).
  std::uint64_t skipped_bad = 0;  ///< Malformed records skipped under --skip-bad.
  /// Records set aside undecided for their event time (dedup --refused), by TimeRefusal; they
  /// count in `records`.
  std::uint64_t refused_missing_time = 0;
  std::uint64_t refused_future = 0;
  std::uint64_t refused_late = 0;
  std::uint64_t bytes = 0;  ///< Input bytes consumed.
};

/// Where a scan stands between two chunks: enough to resume it.
struct ScanState {
  InputPosition position;       ///< Next unread input byte.
  std::uint64_t next_line = 1;  ///< Line number of that byte in its input (text formats).
  ScanCounters counters;
};

/// How to run a scan.
struct ScanSettings {
  RecordFormat format;
  ScanAction action = ScanAction::insert_if_absent;
  bool skip_bad = false;
  OutputFile* flagged_out = nullptr;    ///< Records with the flag set, or null.
  OutputFile* unflagged_out = nullptr;  ///< The other records, or null.
  /// Records the stage refused (a flag of refused_flag()), or null when it refuses none.
  OutputFile* refused_out = nullptr;
  bool show_progress = false;  ///< A live progress line on stderr.
  /// Every this many records (at the next chunk end) outputs are synced and on_checkpoint runs.
  std::uint64_t checkpoint_every = 0;
  std::function<void(const ScanState&)> on_checkpoint;
  ScanState start;  ///< Counters and line number to continue from (the reader holds position).
};

/// Runs every record of `reader` through `filter`. Returns the final state. Throws what the
/// reader, the parser, the filter or the writes throw.
ScanState run_scan(CarriedFilter& filter, ChunkReader& reader, const ScanSettings& settings);

/// run_scan() through a dedup state (a filter or a window; insert_if_absent only): with an
/// event-time window the format must have a time column, whose values are the records' times.
ScanState run_scan(DedupState& state, ChunkReader& reader, const ScanSettings& settings);

}  // namespace bulkbloom::cli
