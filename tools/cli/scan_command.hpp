// Pieces shared by the subcommands that stream records through a filter (dedup, build, query):
// their common options and their summary.
#pragma once

#include <bulkbloom/filter.hpp>

#include <chrono>
#include <cstddef>
#include <string>
#include <vector>

#include "cli/args.hpp"
#include "cli/progress.hpp"
#include "cli/record_scan.hpp"
#include "core/tuning.hpp"

namespace bulkbloom::cli {

/// A file a command names, and its role ("input", "output", "--dups file", ...).
struct NamedPath {
  std::string role;
  std::string path;
  bool written;  ///< The command writes or replaces it.
};

/// Throws UsageError when a file the command writes is also another of `paths` (the same file
/// under any name: same device and inode, or for files not yet there the same absolute path),
/// before any work starts. "-" (stdin, stdout) is skipped.
void check_paths_distinct(const std::vector<NamedPath>& paths);

/// Throws UsageError when `path`, given with `option`, is "-": filter files are committed by
/// renaming a finished file into place, which standard output cannot take.
void check_filter_output(const std::string& path, const char* option);

/// The file a new filter file given as `given` (with `option`) is written to: where its symbolic
/// links end (real_state_path(), as dedup --filter follows them), checked before any input is
/// read: not "-", not a directory, in a directory that exists and can be written. Throws
/// UsageError or Error naming `given`.
std::string filter_output_path(const std::string& given, const char* option);

/// Declares --format, --skip-bad, --stats and --buffer-size.
void add_scan_options(ArgParser& parser);

/// The checked values of add_scan_options()'s options.
struct ScanOptions {
  RecordFormat format;
  bool skip_bad = false;
  enum class Stats { text, json, none } stats = Stats::text;
  std::size_t chunk_bytes = detail::tuning::kInputChunkBytes;
};

/// Reads and checks the scan options; throws UsageError.
ScanOptions scan_options(const ArgParser& parser);

/// Scan settings for `options`: format, --skip-bad, and progress when stderr is a terminal.
ScanSettings scan_settings(const ScanOptions& options);

/// Prints the summary of a finished scan: `entries` (already holding the command's own counts)
/// plus the filter, the wall time since `start` and the throughput of this process (records
/// and bytes beyond `before`, the counters a resumed run started from).
void print_scan_summary(Summary& entries, const Filter& filter, const ScanCounters& counters,
                        std::chrono::steady_clock::time_point start, const ScanOptions& options,
                        const ScanCounters& before = {});

}  // namespace bulkbloom::cli
