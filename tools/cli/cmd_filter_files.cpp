// Subcommands on saved filters: build one from a dump, query a dump against one, describe one,
// merge several.
#include <bulkbloom/format.hpp>
#include <bulkbloom/shard.hpp>
#include <bulkbloom/window.hpp>
#include <bulkbloom/window_shard.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <optional>
#include <sstream>

#include "cli/carried_filter.hpp"
#include "cli/commands.hpp"
#include "cli/filter_options.hpp"
#include "cli/output_file.hpp"
#include "cli/saved_state.hpp"
#include "cli/scan_command.hpp"
#include "cli/state_lock.hpp"
#include "persist/file_io.hpp"

namespace bulkbloom::cli {
namespace {

std::string one_line_number(double value) {
  char buf[40];
  std::snprintf(buf, sizeof buf, "%.0f", value);
  return buf;
}

}  // namespace

int run_build(const Arguments& args) {
  ArgParser parser("build [options] -o FILTER [INPUT...]",
                   "Inserts every key of the inputs into a new filter and saves it to FILTER.");
  parser.value("output", "FILTER", "the filter file to write (required)", 'o');
  parser.flag("wait-lock", "when a dedup run holds FILTER (as its --filter), wait for it");
  add_scan_options(parser);
  add_sizing_options(parser);
  add_backend_options(parser);
  if (!parser.parse(args)) return 0;
  const auto start_time = std::chrono::steady_clock::now();
  const ScanOptions scan = scan_options(parser);
  const Options backend = backend_options(parser);
  const SizingRequest sizing = sizing_request(parser);
  const auto given_path = parser.get("output");
  if (!given_path) throw UsageError("build needs -o FILTER, the file to save the filter to");
  const auto filter_path = filter_output_path(*given_path, "-o");

  std::vector<NamedPath> named = {{"output filter", filter_path, true}};
  for (const std::string& input : parser.positionals()) named.push_back({"input", input, false});
  check_paths_distinct(named);
  // As dedup --filter locks it; what a killed save left beside it is dead.
  const StateLock lock(filter_path, false, parser.has("wait-lock"));
  detail::remove_stale_saves(filter_path);
  ChunkReader reader(parser.positionals(), scan.format, scan.chunk_bytes, {}, scan.skip_bad);
  std::string capacity_note;
  const std::uint64_t capacity = sized_capacity(sizing, reader, scan.format, capacity_note, true);
  CarriedFilter filter(sized_layout(sizing, capacity), capacity, sizing.fpr, scan.format.name(),
                       backend);
  filter.set_growth(sizing.num_blocks ? OnFull::error : OnFull::grow,
                    reader.total_known() ? estimated_records(reader, scan.format) : 0, 0,
                    "filter " + filter_path,
                    "--num-blocks fixes its layout, which is full at 3/4 of --fpr (the rest is "
                    "kept for growth, docs/FORMAT.md \"Growth\"): give more blocks or a larger "
                    "--fpr, or leave out --num-blocks and the filter grows");
  ScanSettings settings = scan_settings(scan);
  const ScanState end = run_scan(filter, reader, settings);
  commit_with_signals_deferred([&] { filter.save(filter_path, {}); });

  Summary summary;
  summary.number("records_read", "records read", static_cast<double>(end.counters.records));
  // The filter counts a key new unless it may hold it already: a false positive takes a new key
  // for one it holds. The distinct keys are those it took as new plus the expected false
  // positives.
  summary.number("new_keys", "keys taken as new", static_cast<double>(end.counters.flagged));
  summary.number("distinct_keys", "distinct keys (estimated)",
                 static_cast<double>(end.counters.flagged) + filter.expected_false_drops());
  summary.text("saved_to", "saved to", filter_path);
  summary.text("capacity_source", "", capacity_note);
  print_scan_summary(summary, filter.newest(), end.counters, start_time, scan);
  return 0;
}

int run_query(const Arguments& args) {
  ArgParser parser("query [options] --filter FILTER [INPUT...]",
                   "Writes the records of the inputs whose key the saved filter has seen (with "
                   "its false-positive rate,\na never-inserted key may be reported seen; an "
                   "inserted one always is).");
  parser
      .value("filter", "FILTER",
             "the saved filter to test against (required): a file, or the state directory of "
             "a grown filter")
      .value("output", "FILE", "where seen records go (default stdout)", 'o')
      .value("unseen", "FILE", "also write the records not seen here");
  add_scan_options(parser);
  add_backend_options(parser);
  if (!parser.parse(args)) return 0;
  const auto start_time = std::chrono::steady_clock::now();
  const ScanOptions scan = scan_options(parser);
  const Options backend = backend_options(parser);
  const auto filter_path = parser.get("filter");
  if (!filter_path) throw UsageError("query needs --filter FILTER");

  std::vector<NamedPath> named = {{"--filter file", *filter_path, false},
                                  {"output", parser.get_or("output", "-"), true}};
  if (const auto unseen = parser.get("unseen")) {
    if (*unseen == "-" && parser.get_or("output", "-") == "-") {
      throw UsageError(
          "--unseen - and the seen records (-o) would both go to stdout: name a file "
          "for one of them");
    }
    named.push_back({"--unseen file", *unseen, true});
  }
  for (const std::string& input : parser.positionals()) named.push_back({"input", input, false});
  check_paths_distinct(named);
  CarriedFilter filter = CarriedFilter::load(*filter_path, kDefaultFpr, backend, nullptr);
  if (!filter.hashes_like(scan.format)) {
    std::fprintf(stderr,
                 "bulkbloom query: warning: %s was built from %s keys, which hash differently "
                 "from %s keys: matches are only false positives\n",
                 filter_path->c_str(), filter.key_format().c_str(), scan.format.name().c_str());
  }
  ChunkReader reader(parser.positionals(), scan.format, scan.chunk_bytes, {}, scan.skip_bad);
  OutputFile seen_out(parser.get_or("output", "-"));
  std::optional<OutputFile> unseen_out;
  if (const auto unseen = parser.get("unseen")) unseen_out.emplace(*unseen);
  ScanSettings settings = scan_settings(scan);
  settings.action = ScanAction::contains;
  settings.flagged_out = &seen_out;
  settings.unflagged_out = unseen_out ? &*unseen_out : nullptr;
  const ScanState end = run_scan(filter, reader, settings);
  seen_out.sync();
  if (unseen_out) unseen_out->sync();
  if (unseen_out) unseen_out->commit();
  seen_out.commit();

  // Nothing to build: the filter's rate is a pass over every bit.
  if (scan.stats == ScanOptions::Stats::none) return 0;
  Summary summary;
  summary.number("records_read", "records read", static_cast<double>(end.counters.records));
  summary.number("seen", "seen", static_cast<double>(end.counters.flagged));
  summary.number("unseen", "not seen",
                 static_cast<double>(end.counters.records - end.counters.flagged));
  summary.number("filter_fpr", "filter's false-positive rate", filter.current_fpr());
  print_scan_summary(summary, filter.newest(), end.counters, start_time, scan);
  return 0;
}

namespace {

// The header fields info prints for a filter file and a filter shard's file alike.
void add_file_fields(Summary& summary, const std::string& path, const FileInfo& info) {
  summary.text("file", "file", path);
  summary.number("version", "format version", info.version);
  summary.text("layout", "layout", info.layout.describe());
  summary.text("shape", "", std::string(to_string(info.layout.shape)));
  summary.number("num_blocks", "", static_cast<double>(info.layout.num_blocks));
  summary.integer("seed", "", info.layout.seed);
  summary.text("hash", "", info.layout.hash == KeyHash::xxh64 ? "xxh64" : "identity");
  summary.number("filter_bytes", "", static_cast<double>(info.layout.size_bytes()));
  summary.number("file_bytes", "file bytes", static_cast<double>(info.file_bytes));
  summary.number("keys_inserted", "keys inserted (saved count)",
                 static_cast<double>(info.keys_inserted));
  summary.number("metadata_bytes", "metadata bytes", static_cast<double>(info.metadata_bytes));
}

// The lines a window and a window shard share: its configuration, clock, and rates.
template <typename Window>
void add_window_lines(Summary& summary, const Window& window, const FileState& state) {
  summary.text("window", "window", window.config().describe());
  summary.integer("records_seen", "records seen", window.records_seen());
  if (const auto clock = window.clock_time()) {
    summary.number("clock_time", "clock (event time)", static_cast<double>(*clock));
  }
  summary.integer("rotations", "rotations (periods the clock moved on)", window.rotations());
  summary.integer("keys_inserted", "keys inserted (saved count)", state.keys_inserted);
  const double promised = window.config().fpr;
  const double current = window.current_fpr();  // a pass over every generation's bits
  char line[96];
  if (promised != 0.0) {
    std::snprintf(line, sizeof line, "%.3g (promised %.3g)", current, promised);
    summary.number("promised_fpr", "promised false-positive rate", promised);
  } else {
    std::snprintf(line, sizeof line, "%.3g (promise not recorded: a version 1 file)", current);
  }
  summary.number("current_fpr", "current false-positive rate", current, line);
}

// Which part of the whole filter or window a shard's file holds (DESIGN §9).
void add_shard_place(Summary& summary, std::uint32_t index, std::uint32_t num_shards,
                     BlockSpan blocks) {
  summary.integer("shard", "shard", index);
  summary.integer("num_shards", "of shards", num_shards);
  // Appended, not "[" + ...: GCC 12 warns (-Wrestrict, a false positive) on a literal + a
  // temporary string.
  std::string span = "[";
  span += std::to_string(blocks.begin);
  span += ", ";
  span += std::to_string(blocks.end);
  span += ")";
  summary.text("blocks", "blocks", span);
}

// The bytes of the files in state directory `dir` (what it takes on disk, less the blocks).
std::uint64_t directory_bytes(const std::filesystem::path& dir) {
  std::uint64_t total = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    if (entry.is_regular_file()) total += entry.file_size();
  }
  return total;
}

// info's lines for a grown filter, a window or a window shard, from its file or state directory.
void describe_saved_state(Summary& summary, const std::string& path, const SavedState& loaded) {
  if (loaded.directory) {
    summary.text("directory", "state directory", path);
    summary.number("directory_bytes", "bytes in its files",
                   static_cast<double>(directory_bytes(path)));
  } else {
    summary.text("file", "file", path);
  }
  if (const auto* filter = std::get_if<CarriedFilter>(&loaded.state)) {
    summary.text("kind", "kind", "grown filter (a key may be in any generation)");
    summary.number("generations", "generations", static_cast<double>(filter->generation_count()));
    std::vector<std::string> generation_lines;
    std::istringstream described(filter->describe_generations());
    for (std::string line; std::getline(described, line);) generation_lines.push_back(line);
    summary.list("generation_list", generation_lines);
    summary.number("keys_inserted", "keys inserted (saved count)",
                   static_cast<double>(filter->keys()));
    summary.number("promised_fpr", "promised false-positive rate", filter->promised_fpr());
    summary.number("current_fpr", "current false-positive rate", filter->current_fpr());
    summary.text("key_format", "key format", filter->key_format());
  } else if (const auto* window = std::get_if<WindowedFilter>(&loaded.state)) {
    summary.text("kind", "kind", "sliding window");
    add_window_lines(summary, *window, loaded.saved);
    summary.integer("memory_bytes", "memory of the generations", window->memory_bytes());
  } else {
    const auto& shard = std::get<WindowShard>(loaded.state);
    summary.text("kind", "kind", "sliding window shard");
    add_window_lines(summary, shard, loaded.saved);
    add_shard_place(summary, shard.index(), shard.num_shards(), shard.blocks());
  }
}

}  // namespace

int run_info(const Arguments& args) {
  ArgParser parser(
      "info [options] FILTER",
      "Describes a saved filter, grown filter, window or shard of one (a file, or a state "
      "directory of dedup --filter DIR/): format version, layout,\nsize, key count, a shard's "
      "place, and from its bits the estimated distinct keys and\ncurrent false-positive rate. "
      "The whole file is verified.");
  parser.flag("json", "print one JSON object");
  if (!parser.parse(args)) return 0;
  if (parser.positionals().size() != 1) {
    throw UsageError("info takes exactly one FILTER file or state directory");
  }
  const std::string& path = parser.positionals().front();
  const bool directory = std::filesystem::is_directory(path);
  if (directory || file_kind(path) == FileKind::grown_filter ||
      file_kind(path) == FileKind::window) {
    const SavedState loaded = load_saved_state(path);
    Summary summary;
    describe_saved_state(summary, path, loaded);
    summary.print(parser.has("json"), stdout);
    const auto* filter = std::get_if<CarriedFilter>(&loaded.state);
    if (filter != nullptr && !parser.has("json")) {
      std::printf("%s\n", filter->describe_generations().c_str());
    }
    return 0;
  }
  const FileInfo info = read_info(path);
  if (info.num_shards > 1) {
    const FilterShard shard = map_shard(path);
    Summary summary;
    add_file_fields(summary, path, info);
    summary.text("kind", "kind", "filter shard");
    add_shard_place(summary, shard.index(), shard.num_shards(), shard.blocks());
    summary.number("shard_bytes", "shard bytes", static_cast<double>(shard.size_bytes()));
    summary.number("current_fpr", "current false-positive rate", shard.current_fpr());
    summary.print(parser.has("json"), stdout);
    return 0;
  }
  // Mapped, not copied: a multi-GB filter is read once for its checksum and bit counts.
  FileState state;
  const Filter filter = map(path, &state);
  Summary summary;
  add_file_fields(summary, path, info);
  if (const auto sizing = read_sizing_record(state.metadata, path)) {
    summary.number("capacity", "sized for (keys)", static_cast<double>(sizing->capacity));
    summary.number("promised_fpr", "promised false-positive rate", sizing->promised_fpr);
    summary.text("key_format", "key format", sizing->key_format);
  }
  summary.number("estimated_keys", "estimated distinct keys", filter.estimated_count(),
                 one_line_number(filter.estimated_count()));
  summary.number("current_fpr", "current false-positive rate", filter.current_fpr());
  summary.number("expected_fpr", "modelled FPR at the saved count",
                 filter.expected_fpr(info.keys_inserted));
  summary.print(parser.has("json"), stdout);
  return 0;
}

int run_merge(const Arguments& args) {
  ArgParser parser("merge [options] A B [MORE...] -o OUT",
                   "Saves the union of saved filters of one layout (a bitwise OR) to OUT.");
  parser.value("output", "OUT", "the merged filter file (required)", 'o');
  parser.flag("wait-lock", "when a dedup run holds OUT (as its --filter), wait for it");
  if (!parser.parse(args)) return 0;
  const auto given_out = parser.get("output");
  if (!given_out) throw UsageError("merge needs -o OUT");
  if (parser.positionals().size() < 2) throw UsageError("merge needs at least two filter files");
  const std::string out = filter_output_path(*given_out, "-o");
  std::vector<NamedPath> named = {{"output filter", out, true}};
  for (const std::string& input : parser.positionals()) named.push_back({"input", input, false});
  check_paths_distinct(named);
  const StateLock lock(out, false, parser.has("wait-lock"));
  detail::remove_stale_saves(out);
  // Loaded as carried filters, so that the union keeps the sizing record (the promise a later
  // dedup --filter run holds it to) and the key format of its parts.
  const auto load_part = [](const std::string& path) {
    CarriedFilter part = CarriedFilter::load(path, kDefaultFpr, Options{}, nullptr);
    if (part.generation_count() > 1) {
      throw Error(path + " has grown to " + std::to_string(part.generation_count()) +
                  " generations: merge takes filters of one generation (bulkbloom info " + path +
                  " lists them)");
    }
    return part;
  };
  CarriedFilter merged = load_part(parser.positionals().front());
  for (std::size_t i = 1; i < parser.positionals().size(); ++i) {
    const std::string& path = parser.positionals()[i];
    try {
      merged.merge(load_part(path), path);
    } catch (const std::invalid_argument& e) {
      throw Error(path + ": " + e.what());
    }
  }
  commit_with_signals_deferred([&] { merged.save(out, {}); });
  std::fprintf(stderr, "merged %zu filters into %s: %s, about %llu distinct keys\n",
               parser.positionals().size(), out.c_str(),
               merged.newest().layout().describe().c_str(),
               static_cast<unsigned long long>(merged.keys()));
  return 0;
}

}  // namespace bulkbloom::cli

namespace bulkbloom::cli {

int run_convert(const Arguments& args) {
  ArgParser parser(
      "convert [options] SOURCE DEST",
      "Copies a carried state between its two forms (docs/FORMAT.md \"State directories\"): a "
      "file (a grown\nfilter's or window's, as dedup --filter FILE writes) into the new state "
      "directory DEST, or a\nstate directory into the new file DEST. The copy holds the same "
      "state, keys and run record:\ndedup --filter DEST goes on where SOURCE was, and a file "
      "made from a directory made from a\nfile has its bytes.");
  parser.flag("wait-lock", "when a dedup run holds SOURCE or DEST, wait for it");
  if (!parser.parse(args)) return 0;
  if (parser.positionals().size() != 2) throw UsageError("convert takes SOURCE and DEST");
  const std::string& source_name = parser.positionals()[0];
  const std::string& dest_name = parser.positionals()[1];
  check_filter_output(dest_name, "DEST");
  const StatePath source = state_path(source_name, "SOURCE");
  if (!source.holds_state()) {
    throw Error(source_name +
                (source.directory ? " holds no committed state (no MANIFEST)" : " does not exist"));
  }
  // Into the other form: DEST is a directory when SOURCE is a file, and a file otherwise.
  StatePath dest{real_state_path(dest_name.ends_with('/') && dest_name.size() > 1
                                     ? dest_name.substr(0, dest_name.find_last_not_of('/') + 1)
                                     : dest_name),
                 !source.directory};
  if (source.directory && dest_name.ends_with('/')) {
    throw UsageError("DEST " + dest_name + ": " + source_name +
                     " is a state directory, which converts into a file: name a file");
  }
  if (std::filesystem::exists(dest.path) &&
      !(dest.directory && std::filesystem::is_directory(dest.path) &&
        std::filesystem::is_empty(dest.path))) {
    throw Error(dest.path + " exists: convert writes a new " +
                (dest.directory ? "state directory (or into an empty one)" : "file") +
                "; remove it or name another");
  }
  check_paths_distinct({{"SOURCE", source.path, false}, {"DEST", dest.path, true}});
  // Locked as dedup --filter locks them: a commit into SOURCE while it is read would remove
  // files it names.
  const StateLock source_lock(source.path, false, parser.has("wait-lock"));
  const StateLock dest_lock(dest.path, false, parser.has("wait-lock"));
  SavedState loaded = load_saved_state(source.path);
  std::uint64_t written = 0;
  commit_with_signals_deferred(
      [&] { written = save_saved_state(loaded, dest.path, dest.directory); });
  std::fprintf(stderr, "converted the %s in %s into %s %s (%llu bytes written)\n",
               loaded.kind_name(), source.path.c_str(),
               dest.directory ? "the state directory" : "the file", dest.path.c_str(),
               static_cast<unsigned long long>(written));
  return 0;
}

}  // namespace bulkbloom::cli
