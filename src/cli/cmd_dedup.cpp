// bulkbloom dedup: writes the first occurrence of each key, in input order, or with a sliding
// window (--window, --window-records) each record whose key did not arrive within the window;
// optionally keeps the filter or window across runs (--filter) and survives being killed
// (--checkpoint, --resume).
#include <sys/stat.h>

#include <bulkbloom/format.hpp>
#include <bulkbloom/window.hpp>

#include <cstdio>
#include <filesystem>
#include <optional>

#include "cli/commands.hpp"
#include "cli/dedup_checkpoint.hpp"
#include "cli/errors.hpp"
#include "cli/filter_options.hpp"
#include "cli/scan_command.hpp"
#include "cli/window_options.hpp"

namespace bulkbloom::cli {
namespace {

constexpr std::uint64_t kDefaultCheckpointEvery = 100'000'000;

// Format, inputs with their sizes, and outputs: what must not change between a run and its
// resumption.
std::string run_identity(const ScanOptions& options, const ArgParser& parser) {
  std::string id = options.format.name();
  for (const std::string& input : parser.positionals()) {
    struct stat st {};
    const long long size = stat(input.c_str(), &st) == 0 ? st.st_size : -1;
    id += " " + input + ":" + std::to_string(size);
  }
  id += " -> " + parser.get_or("output", "-") + " " + parser.get_or("dups", "");
  for (char& c : id) {
    if (c == '\n') c = ' ';
  }
  return id;
}

// Completes a run whose records were all processed before it was killed: the partial outputs
// only wait for their rename (already done if they are gone).
void finish_renames(const std::vector<std::string>& paths) {
  for (const std::string& path : paths) {
    const std::string partial = path + ".partial";
    if (std::filesystem::exists(partial)) std::filesystem::rename(partial, path);
  }
}

}  // namespace

int run_dedup(const Arguments& args) {
  ArgParser parser("dedup [options] [INPUT...]",
                   "Writes the first occurrence of each key of the inputs (files, or stdin when "
                   "none or '-'), in input order.\nA never-seen key is wrongly dropped with the "
                   "filter's false-positive rate; a repeated key is never written twice.");
  parser.value("output", "FILE", "where unique records go (default stdout)", 'o')
      .value("dups", "FILE", "also write the dropped records here")
      .value("filter", "FILE", "load this filter first if it exists, save it after (across runs)");
  add_scan_options(parser);
  add_sizing_options(parser);
  add_window_options(parser);
  add_backend_options(parser);
  parser
      .value("checkpoint", "DIR",
             "save a resumable checkpoint here periodically (file inputs "
             "and outputs only)")
      .value("checkpoint-every", "N", "records between checkpoints (default 100M)")
      .flag("resume", "continue from the checkpoint in --checkpoint DIR, if there is one");
  if (!parser.parse(args)) return 0;
  const auto start_time = std::chrono::steady_clock::now();
  ScanOptions scan = scan_options(parser);
  const std::optional<WindowRequest> window_wanted = window_request(parser, scan.format);
  if (window_wanted) scan.format.time_column = window_wanted->time_column;
  const Options backend = backend_options(parser);
  const SizingRequest sizing = sizing_request(parser);
  const std::string output_path = parser.get_or("output", "-");
  const std::optional<std::string> dups_path = parser.get("dups");
  const std::optional<std::string> filter_path = parser.get("filter");
  const std::optional<std::string> checkpoint_dir = parser.get("checkpoint");
  const std::uint64_t checkpoint_every =
      parser.get_count("checkpoint-every").value_or(kDefaultCheckpointEvery);
  if (checkpoint_every == 0) throw UsageError("--checkpoint-every must be at least 1");
  if ((parser.has("resume") || parser.has("checkpoint-every")) && !checkpoint_dir) {
    throw UsageError("--resume and --checkpoint-every need --checkpoint DIR");
  }
  if (checkpoint_dir && (output_path == "-" || dups_path == "-")) {
    throw UsageError("--checkpoint needs the outputs in files (-o FILE), not stdout");
  }

  // A resumed run starts from its checkpoint's filter, input position and output lengths.
  const std::string identity = run_identity(scan, parser);
  std::optional<Checkpoint> saved;
  std::optional<WindowCheckpoint> saved_window;
  std::optional<DedupCheckpoint> resumed;
  if (checkpoint_dir && parser.has("resume")) {
    const std::vector<std::byte>* metadata = nullptr;
    if (window_wanted) {
      saved_window = load_window_checkpoint(*checkpoint_dir, backend);
      if (saved_window) metadata = &saved_window->metadata;
    } else {
      saved = load_checkpoint(*checkpoint_dir, backend);
      if (saved) metadata = &saved->metadata;
    }
    if (metadata != nullptr) {
      resumed = decode_checkpoint(*metadata, *checkpoint_dir);
      if (resumed->run_identity != identity) {
        throw UsageError("the checkpoint in " + *checkpoint_dir + " is of another run (" +
                         resumed->run_identity + "); remove it or drop --resume");
      }
    }
  }

  ChunkReader reader(parser.positionals(), scan.format, scan.chunk_bytes,
                     resumed ? resumed->state.position : InputPosition{});
  if (checkpoint_dir && !reader.total_known()) {
    throw UsageError("--checkpoint needs file inputs: stdin cannot be re-read after a restart");
  }
  std::string capacity_note;
  std::uint64_t keys_before = 0;
  // Exactly one of the two holds the dedup state.
  std::optional<Filter> filter;
  std::optional<WindowedFilter> window;
  if (saved || saved_window) {
    if (saved) filter.emplace(std::move(saved->filter));
    if (saved_window) window.emplace(std::move(saved_window->window));
    keys_before = resumed->keys_before;
    capacity_note = "from the checkpoint";
  } else if (filter_path && std::filesystem::exists(*filter_path)) {
    FileState state;
    if (window_wanted) {
      window.emplace(load_window(*filter_path, &state, backend));
      check_window_matches(window->config(), *window_wanted, *filter_path);
    } else {
      filter.emplace(load(*filter_path, &state, backend));
    }
    keys_before = state.keys_inserted;
    capacity_note = "loaded from " + *filter_path;
  } else if (window_wanted) {
    window.emplace(window_config(*window_wanted, sizing, reader, scan.format, capacity_note),
                   backend);
  } else {
    filter.emplace(sized_layout(sizing, reader, scan.format, capacity_note), backend);
  }
  const auto save_state = [&](const std::filesystem::path& path, const FileState& state) {
    if (window) {
      save(*window, path, state);
    } else {
      save(*filter, path, state);
    }
  };

  ScanState end = resumed ? resumed->state : ScanState{};
  std::vector<std::string> output_paths = {output_path};
  if (dups_path) output_paths.push_back(*dups_path);
  const auto save_progress = [&](const ScanState& state, std::uint64_t out_bytes,
                                 std::uint64_t dups_bytes, bool complete) {
    DedupCheckpoint c{identity, state, out_bytes, dups_bytes, keys_before, complete};
    const FileState file_state{keys_before + state.counters.flagged, encode_checkpoint(c)};
    if (window) {
      save_checkpoint(*checkpoint_dir, *window, file_state);
    } else {
      save_checkpoint(*checkpoint_dir, *filter, file_state);
    }
  };
  if (resumed && resumed->complete) {
    if (filter_path) save_state(*filter_path, {keys_before + end.counters.flagged, {}});
    finish_renames(output_paths);
  } else {
    const auto staging =
        checkpoint_dir ? OutputFile::Staging::resumable : OutputFile::Staging::temporary;
    OutputFile unique_out(output_path, staging, resumed ? resumed->output_bytes : 0);
    std::optional<OutputFile> dups_out;
    if (dups_path) dups_out.emplace(*dups_path, staging, resumed ? resumed->dups_bytes : 0);

    ScanSettings settings = scan_settings(scan);
    settings.flagged_out = &unique_out;
    settings.unflagged_out = dups_out ? &*dups_out : nullptr;
    settings.start = end;
    const auto output_lengths = [&] {
      return std::pair{unique_out.bytes_written(), dups_out ? dups_out->bytes_written() : 0};
    };
    if (checkpoint_dir) {
      settings.checkpoint_every = checkpoint_every;
      settings.on_checkpoint = [&](const ScanState& state) {
        const auto [out_bytes, dups_bytes] = output_lengths();
        save_progress(state, out_bytes, dups_bytes, false);
      };
    }
    end = window ? run_scan(*window, reader, settings) : run_scan(*filter, reader, settings);
    if (checkpoint_dir) {
      unique_out.sync();
      if (dups_out) dups_out->sync();
      const auto [out_bytes, dups_bytes] = output_lengths();
      save_progress(end, out_bytes, dups_bytes, true);
    }
    if (filter_path) save_state(*filter_path, {keys_before + end.counters.flagged, {}});
    if (dups_out) dups_out->commit();
    unique_out.commit();
  }

  const ScanCounters& c = end.counters;
  // A window's false-positive rate stays near its current one (it cycles with the rotations).
  const double wrongly_dropped =
      window ? window->current_fpr() * static_cast<double>(c.flagged)
             : expected_false_drops(filter->layout(), keys_before, c.flagged);
  Summary summary;
  summary.number("records_read", "records read", static_cast<double>(c.records));
  summary.number("unique_written", "unique written", static_cast<double>(c.flagged));
  summary.number("duplicates_dropped", "duplicates dropped",
                 static_cast<double>(c.records - c.flagged));
  char line[160];
  std::snprintf(line, sizeof line, "%.1f (%s)", wrongly_dropped,
                window ? "the window's false-positive rate now"
                       : "the model's false-positive rate over the fill");
  summary.number("expected_wrongly_dropped", "expected unique wrongly dropped", wrongly_dropped,
                 line);
  summary.text("capacity_source", "", capacity_note);
  if (window) summary.text("window", "window", window->config().describe());
  print_scan_summary(summary, window ? window->generation(0) : *filter, c, start_time, scan,
                     resumed ? resumed->state.counters : ScanCounters{});
  return 0;
}

}  // namespace bulkbloom::cli
