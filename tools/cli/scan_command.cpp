#include "cli/scan_command.hpp"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <filesystem>

#include "cli/errors.hpp"
#include "cli/state_lock.hpp"

namespace bulkbloom::cli {
namespace {

constexpr std::uint64_t kMinChunkBytes = 4096;
constexpr std::uint64_t kMaxChunkBytes = std::uint64_t{1} << 30;

// What makes two names the same file: device and inode if it exists, else its absolute path.
std::string file_identity(const std::string& path) {
  struct stat st {};
  if (stat(path.c_str(), &st) == 0) {
    return "inode " + std::to_string(st.st_dev) + ":" + std::to_string(st.st_ino);
  }
  std::error_code error;
  return "path " +
         std::filesystem::weakly_canonical(std::filesystem::absolute(path), error).string();
}

}  // namespace

void check_paths_distinct(const std::vector<NamedPath>& paths) {
  std::vector<std::string> ids;
  for (const NamedPath& p : paths)
    ids.push_back(p.path == "-" ? std::string() : file_identity(p.path));
  for (std::size_t i = 0; i < paths.size(); ++i) {
    for (std::size_t j = i + 1; j < paths.size(); ++j) {
      if (ids[i].empty() || ids[i] != ids[j] || !(paths[i].written || paths[j].written)) continue;
      throw UsageError(paths[j].path + " is both the " + paths[i].role + " and the " +
                       paths[j].role + ": writing one would destroy the other");
    }
  }
}

void check_filter_output(const std::string& path, const char* option) {
  if (path != "-") return;
  throw UsageError(std::string(option) +
                   " -: a filter file is committed by renaming it into place, which standard "
                   "output cannot take; name a file");
}

std::string filter_output_path(const std::string& given, const char* option) {
  check_filter_output(given, option);
  const std::string path = real_state_path(given);
  const std::string named = std::string(option) + " " + given;
  if (given.ends_with('/') || std::filesystem::is_directory(path)) {
    throw UsageError(named +
                     " is a directory: this writes a filter file (a state directory is "
                     "made by dedup --filter DIR/, or bulkbloom convert)");
  }
  std::filesystem::path parent = std::filesystem::path(path).parent_path();
  if (parent.empty()) parent = ".";
  if (access(parent.c_str(), W_OK | X_OK) != 0) {
    throw IoError(std::string("cannot write ") + named + ": its directory " + parent.string() +
                  (errno == ENOENT ? " does not exist" : " cannot be written to"));
  }
  return path;
}

void add_scan_options(ArgParser& parser) {
  parser.value("format", "FMT", "u64 (default), lines, dec, hex, csv:N, tsv:N", 'f')
      .flag("skip-bad", "skip and count malformed records, and empty inputs, instead of stopping")
      .flag("header",
            "csv/tsv: the first line of each input is a header, not a record: the first "
            "input's goes once to the top of each output")
      .value("stats", "KIND", "final summary on stderr: text (default), json or none")
      .value("buffer-size", "BYTES",
             "read chunk size (default 2M; buffers in flight take about 6x this)");
}

ScanOptions scan_options(const ArgParser& parser) {
  ScanOptions options;
  options.format = RecordFormat::parse(parser.get_or("format", "u64"));
  options.skip_bad = parser.has("skip-bad");
  if (parser.has("header")) {
    if (options.format.kind != FormatKind::csv && options.format.kind != FormatKind::tsv) {
      throw UsageError("--header applies to csv:N and tsv:N inputs, not " + options.format.name());
    }
    options.format.header = true;
  }
  const std::string stats = parser.get_or("stats", "text");
  if (stats == "text") {
    options.stats = ScanOptions::Stats::text;
  } else if (stats == "json") {
    options.stats = ScanOptions::Stats::json;
  } else if (stats == "none") {
    options.stats = ScanOptions::Stats::none;
  } else {
    throw UsageError("--stats: unknown kind '" + stats + "': expected text, json or none");
  }
  if (const auto bytes = parser.get_count("buffer-size")) {
    if (*bytes < kMinChunkBytes || *bytes > kMaxChunkBytes) {
      throw UsageError("--buffer-size: " + std::to_string(*bytes) + " is outside [" +
                       std::to_string(kMinChunkBytes) + ", " + std::to_string(kMaxChunkBytes) +
                       "]");
    }
    options.chunk_bytes = static_cast<std::size_t>(*bytes / 8 * 8);
  }
  return options;
}

ScanSettings scan_settings(const ScanOptions& options) {
  ScanSettings settings;
  settings.format = options.format;
  settings.skip_bad = options.skip_bad;
  settings.show_progress = stderr_is_terminal();
  return settings;
}

void print_scan_summary(Summary& entries, const Filter& filter, const ScanCounters& counters,
                        std::chrono::steady_clock::time_point start, const ScanOptions& options,
                        const ScanCounters& before) {
  if (options.stats == ScanOptions::Stats::none) return;
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (options.skip_bad) {
    entries.number("bad_records_skipped", "bad records skipped",
                   static_cast<double>(counters.skipped_bad));
  }
  describe_filter(entries, filter);
  const auto records = static_cast<double>(counters.records - before.records);
  const auto bytes = static_cast<double>(counters.bytes - before.bytes);
  char line[160];
  std::snprintf(line, sizeof line, "%.2f s, %s records/s, %.0f MB/s", seconds,
                si(records / seconds).c_str(), bytes / seconds / 1e6);
  entries.number("seconds", "throughput", seconds, line);
  entries.number("records_per_second", "", records / seconds);
  entries.number("input_bytes", "", static_cast<double>(counters.bytes));
  entries.print(options.stats == ScanOptions::Stats::json);
}

}  // namespace bulkbloom::cli
