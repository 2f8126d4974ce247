// bulkbloom dedup: writes the first occurrence of each key, in input order, or with a sliding
// window (--window, --window-records) each record whose key did not arrive within the window;
// optionally keeps the filter or window across runs (--filter) and survives being killed
// (--checkpoint, --resume).
#include <sys/stat.h>

#include <bulkbloom/format.hpp>
#include <bulkbloom/window.hpp>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <optional>

#include "cli/carried_filter.hpp"
#include "cli/commands.hpp"
#include "cli/dedup_checkpoint.hpp"
#include "cli/dedup_state.hpp"
#include "cli/errors.hpp"
#include "cli/filter_options.hpp"
#include "cli/run_record.hpp"
#include "cli/scan_command.hpp"
#include "cli/state_lock.hpp"
#include "cli/window_options.hpp"
#include "persist/file_io.hpp"

namespace bulkbloom::cli {
namespace {

constexpr const char* kCheckpointNeedsFiles =
    "--checkpoint needs file inputs: stdin or a pipe cannot be re-read after a restart";

constexpr std::uint64_t kDefaultCheckpointEvery = 100'000'000;

// Completes a run whose records were all processed before it was killed: the partial outputs
// only wait for their rename (already done if they are gone).
void finish_renames(const std::vector<std::string>& paths) {
  for (const std::string& path : paths) {
    const std::string partial = path + ".partial";
    if (std::filesystem::exists(partial)) {
      detail::fault_point("rename");
      std::filesystem::rename(partial, path);
      detail::sync_directory(std::filesystem::path(path).parent_path());
    }
  }
}

OnFull on_full_policy(const ArgParser& parser) {
  const std::string policy = parser.get_or("on-full", "grow");
  if (policy == "grow") return OnFull::grow;
  if (policy == "error") return OnFull::error;
  throw UsageError("--on-full: unknown policy '" + policy + "': expected grow or error");
}

// A carried filter keeps the layout and promise it was made with: sizing options given for it
// change nothing, which the user should hear about rather than find out from `info`.
void warn_sizing_ignored(const ArgParser& parser, const SizingRequest& sizing,
                         const CarriedFilter& filter, const std::string& filter_path) {
  std::string ignored;
  for (const char* name : {"capacity", "shape", "seed", "index", "num-blocks"}) {
    if (parser.get(name)) ignored += std::string(ignored.empty() ? "" : ", ") + "--" + name;
  }
  if (parser.get("fpr") && sizing.fpr != filter.promised_fpr()) {
    ignored += std::string(ignored.empty() ? "" : ", ") + "--fpr";
  }
  if (ignored.empty()) return;
  std::fprintf(stderr,
               "bulkbloom dedup: warning: %s ignored: %s exists and keeps the layout and "
               "false-positive rate it was made with (see bulkbloom info %s)\n",
               ignored.c_str(), filter_path.c_str(), filter_path.c_str());
}

}  // namespace

int run_dedup(const Arguments& args) {
  ArgParser parser("dedup [options] [INPUT...]",
                   "Writes the first occurrence of each key of the inputs (files, or stdin when "
                   "none or '-'), in input order.\nA never-seen key is wrongly dropped with the "
                   "filter's false-positive rate; a repeated key is never written twice.");
  parser.value("output", "FILE", "where unique records go (default stdout)", 'o')
      .value("dups", "FILE", "also write the dropped records here")
      .value("refused", "FILE",
             "event-time window: write here, undecided, the records without an event time, "
             "past now + --max-future, or more than --lateness behind the window's clock")
      .value("filter", "FILE", "load this filter first if it exists, save it after (across runs)")
      .value("on-full", "POLICY",
             "when the keys would push the filter past its false-positive rate: grow (default; "
             "add a generation; a window warns) or error");
  add_scan_options(parser);
  add_sizing_options(parser);
  add_window_options(parser);
  add_backend_options(parser);
  parser
      .value("checkpoint", "DIR",
             "save a resumable checkpoint here periodically (file inputs "
             "and outputs only)")
      .value("checkpoint-every", "N", "records between checkpoints (default 100M)")
      .flag("resume", "continue from the checkpoint in --checkpoint DIR, if there is one")
      .flag("force",
            "run even when it would replace the outputs of the last run committed to --filter "
            "with those of other inputs")
      .flag("wait-lock",
            "when another run holds the --filter file or the checkpoint directory, wait for it "
            "(default: stop with an error)");
  if (!parser.parse(args)) return 0;
  const auto start_time = std::chrono::steady_clock::now();
  ScanOptions scan = scan_options(parser);
  const std::optional<WindowRequest> window_wanted = window_request(parser, scan.format);
  if (window_wanted) {
    scan.format.time_column = window_wanted->time_column;
    if (window_wanted->clock == WindowClock::event_time) {
      const std::int64_t now = std::chrono::duration_cast<std::chrono::seconds>(
                                   std::chrono::system_clock::now().time_since_epoch())
                                   .count();
      scan.format.latest_time = now + static_cast<std::int64_t>(window_wanted->max_future);
    }
  }
  const Options backend = backend_options(parser);
  const SizingRequest sizing = sizing_request(parser);
  const OnFull on_full = on_full_policy(parser);
  const std::string output_path = parser.get_or("output", "-");
  const std::optional<std::string> dups_path = parser.get("dups");
  const std::optional<std::string> refused_path = parser.get("refused");
  if (refused_path) {
    if (!window_wanted || window_wanted->clock != WindowClock::event_time) {
      throw UsageError("--refused needs an event-time window (--window with --time-field)");
    }
    if (parser.has("checkpoint")) {
      throw UsageError(
          "--refused cannot be combined with --checkpoint yet: a checkpoint records the lengths "
          "of -o and --dups only");
    }
    scan.format.refuse_bad_times = true;
  }
  // Where links lead: the state is replaced and locked there (state_lock.hpp).
  std::optional<std::string> filter_path = parser.get("filter");
  if (filter_path && *filter_path != "-") filter_path = real_state_path(*filter_path);
  std::optional<std::string> checkpoint_dir = parser.get("checkpoint");
  if (checkpoint_dir) checkpoint_dir = real_state_path(*checkpoint_dir);
  const std::uint64_t checkpoint_every =
      parser.get_count("checkpoint-every").value_or(kDefaultCheckpointEvery);
  if (checkpoint_every == 0) throw UsageError("--checkpoint-every must be at least 1");
  if ((parser.has("resume") || parser.has("checkpoint-every")) && !checkpoint_dir) {
    throw UsageError("--resume and --checkpoint-every need --checkpoint DIR");
  }
  if (checkpoint_dir && (output_path == "-" || dups_path == "-")) {
    throw UsageError("--checkpoint needs the outputs in files (-o FILE), not stdout");
  }
  // Checked again once the inputs are open (a named pipe); stdin is refused here, before the
  // checkpoint directory is made.
  if (checkpoint_dir &&
      (parser.positionals().empty() ||
       std::ranges::find(parser.positionals(), "-") != parser.positionals().end())) {
    throw UsageError(kCheckpointNeedsFiles);
  }
  if (int(output_path == "-") + int(dups_path == "-") + int(refused_path == "-") > 1) {
    throw UsageError(
        "-o -, --dups - and --refused - would interleave records on stdout: send all but one "
        "of them to files");
  }
  if (filter_path) check_filter_output(*filter_path, "--filter");

  std::vector<NamedPath> named;
  for (const std::string& input : parser.positionals()) named.push_back({"input", input, false});
  named.push_back({"output", output_path, true});
  if (dups_path) named.push_back({"--dups file", *dups_path, true});
  if (refused_path) named.push_back({"--refused file", *refused_path, true});
  if (filter_path) named.push_back({"--filter file", *filter_path, true});
  check_paths_distinct(named);

  // The state is locked before it is read, and until it is replaced.
  std::optional<StateLock> filter_lock;
  std::optional<StateLock> checkpoint_lock;
  if (filter_path) {
    filter_lock.emplace(*filter_path, false, parser.has("wait-lock"));
    detail::remove_stale_saves(*filter_path);  // left by a killed run: the lock shows it is dead
  }
  if (checkpoint_dir) checkpoint_lock.emplace(*checkpoint_dir, true, parser.has("wait-lock"));

  // A resumed run starts from its checkpoint's state, input position and output lengths.
  const std::string identity = run_fingerprint(args, parser.positionals());
  std::unique_ptr<DedupState> state;
  std::optional<DedupCheckpoint> resumed;
  if (checkpoint_dir && parser.has("resume")) {
    std::vector<std::byte> metadata;
    state = load_checkpoint_state(*checkpoint_dir, window_wanted.has_value(), sizing.fpr, backend,
                                  metadata);
    if (state) {
      resumed = decode_checkpoint(metadata, *checkpoint_dir);
      if (resumed->run_identity != identity) {
        throw UsageError("the checkpoint in " + *checkpoint_dir +
                         " was made by another command or from inputs that changed since (it "
                         "has: " +
                         resumed->run_identity + "; now: " + identity +
                         "); remove it or drop --resume");
      }
    }
  }

  ChunkReader reader(parser.positionals(), scan.format, scan.chunk_bytes,
                     resumed ? resumed->state.position : InputPosition{}, scan.skip_bad,
                     filter_path.has_value());
  if (checkpoint_dir && !reader.total_known()) throw UsageError(kCheckpointNeedsFiles);
  std::string capacity_note;
  std::uint64_t keys_before = 0;
  if (resumed) {
    keys_before = resumed->keys_before;
    capacity_note = "from the checkpoint";
  } else if (filter_path && std::filesystem::exists(*filter_path)) {
    std::vector<std::byte> metadata;
    if (window_wanted) {
      FileState saved;
      WindowedFilter window = load_window(*filter_path, &saved, backend);
      check_window_matches(window.config(), *window_wanted, *filter_path);
      if (sizing.capacity) {
        std::fprintf(stderr,
                     "bulkbloom dedup: --capacity %llu sizes the generations this run starts in "
                     "%s; its current generations keep their sizes\n",
                     static_cast<unsigned long long>(*sizing.capacity), filter_path->c_str());
      }
      keys_before = saved.keys_inserted;
      metadata = std::move(saved.metadata);
      state = window_state(std::move(window));
    } else {
      CarriedFilter filter = CarriedFilter::load(*filter_path, sizing.fpr, backend, &metadata);
      if (!filter.hashes_like(scan.format)) {
        // Integers and byte strings hash differently: every key already in the filter would
        // pass again as new.
        throw Error(*filter_path + " holds " + filter.key_format() +
                    " keys, which hash differently from the " + scan.format.name() +
                    " keys of this run: a repeat of a key it holds would get through; read the "
                    "input with a format of the filter's kind (-f " +
                    filter.key_format() + ") or start a new filter");
      }
      warn_sizing_ignored(parser, sizing, filter, *filter_path);
      keys_before = filter.keys();
      state = filter_state(std::move(filter));
    }
    capacity_note = "loaded from " + *filter_path;
    // The same command on inputs of the same content after this run committed (a rerun after a
    // crash between the state's rename and the end of the process): its work is done. Another
    // run must not silently replace its outputs (docs/FORMAT.md, "Reruns").
    const auto last_run = decode_run_record(metadata);
    PlannedRun planned{run_command(parser),
                       identity,
                       parser.positionals(),
                       {output_path, dups_path.value_or("-")}};
    if (refused_path) planned.outputs.push_back(*refused_path);
    if (last_run &&
        check_rerun(*last_run, planned, *filter_path, parser.has("force")) == Rerun::committed) {
      std::fprintf(stderr,
                   "bulkbloom dedup: this run was committed earlier (%s holds it); its outputs "
                   "are in place and unchanged\n",
                   filter_path->c_str());
      return 0;
    }
  } else if (window_wanted) {
    state = window_state(WindowedFilter(
        window_config(*window_wanted, sizing, reader, scan.format, capacity_note), backend));
  } else {
    const std::uint64_t capacity = sized_capacity(sizing, reader, scan.format, capacity_note, true);
    state = filter_state(CarriedFilter(sized_layout(sizing, capacity), capacity, sizing.fpr,
                                       scan.format.name(), backend));
  }
  state->start_run(
      {on_full, reader.total_known() ? estimated_records(reader, scan.format) : 0,
       resumed ? resumed->state.counters.records : 0, resumed ? resumed->expected_false_drops : 0.0,
       filter_path ? "filter " + *filter_path : std::string("the filter"),
       window_wanted ? window_sizing(*window_wanted, sizing, reader, scan.format) : WindowSizing{},
       refused_path.has_value(), checkpoint_dir.has_value()});
  std::vector<std::string> output_paths = {output_path};
  if (dups_path) output_paths.push_back(*dups_path);
  if (refused_path) output_paths.push_back(*refused_path);
  // Replaces the carried state, recording this run and the outputs it committed.
  const auto save_state = [&](std::uint64_t keys) {
    RunRecord record;
    record.command = run_command(parser);
    for (std::size_t i = 0; i < parser.positionals().size(); ++i) {
      const std::string& input = parser.positionals()[i];
      // A resumed run did not read every byte itself: the checkpoint's fingerprint showed the
      // inputs unchanged since, so their bytes now are the ones read.
      const auto content = resumed ? content_of(input) : reader.contents()[i];
      if (!content) {
        record.inputs.clear();  // one input cannot be read again: the run cannot be recognised
        break;
      }
      record.inputs.push_back({input, *content});
    }
    for (const std::string& out : output_paths) {
      if (const auto committed = record_output(out)) record.outputs.push_back(*committed);
    }
    const std::vector<std::byte> metadata = record.outputs.size() != output_paths.size()
                                                ? std::vector<std::byte>{}
                                                : encode_run_record(record);
    const SignalsDeferred deferred;
    state->save(*filter_path, metadata, keys);
    mark_run_committed();  // before `deferred` acts on a signal that came during the save
  };

  ScanState end = resumed ? resumed->state : ScanState{};
  const auto save_progress = [&](const ScanState& at, std::uint64_t out_bytes,
                                 std::uint64_t dups_bytes, bool complete) {
    const DedupCheckpoint c{identity,
                            at,
                            out_bytes,
                            dups_bytes,
                            keys_before,
                            complete,
                            state->expected_false_drops(at.counters.flagged)};
    const SignalsDeferred deferred;
    state->save_checkpoint(*checkpoint_dir, encode_checkpoint(c),
                           keys_before + at.counters.flagged);
  };
  // The commit: every output is flushed under its temporary name, then renamed into place, and
  // the carried state (filter or window) is replaced last. A crash before that last rename
  // leaves the old state, from which a rerun computes the same outputs again; a checkpointed run
  // first saves a complete checkpoint holding the final state, from which --resume finishes the
  // renames (docs/FORMAT.md, "Committing a run").
  if (resumed && resumed->complete) {
    finish_renames(output_paths);
    // A completed run's outputs must still be those it wrote: nothing can write them again.
    const std::uint64_t lengths[2] = {resumed->output_bytes, resumed->dups_bytes};
    for (std::size_t i = 0; i < output_paths.size(); ++i) {
      const auto now = record_output(output_paths[i]);
      if (!now || now->size != lengths[i]) {
        throw Error("the run in " + *checkpoint_dir + " completed earlier, but " + output_paths[i] +
                    (now ? " is not the file it wrote (" + std::to_string(now->size) +
                               " bytes, not " + std::to_string(lengths[i]) + ")"
                         : " is missing") +
                    "; remove " + *checkpoint_dir + " to run it again");
      }
    }
    if (filter_path) save_state(keys_before + end.counters.flagged);
  } else {
    const auto staging =
        checkpoint_dir ? OutputFile::Staging::resumable : OutputFile::Staging::temporary;
    OutputFile unique_out(output_path, staging, resumed ? resumed->output_bytes : 0);
    std::optional<OutputFile> dups_out;
    if (dups_path) dups_out.emplace(*dups_path, staging, resumed ? resumed->dups_bytes : 0);
    std::optional<OutputFile> refused_out;  // never with a checkpoint, so never resumed
    if (refused_path) refused_out.emplace(*refused_path, staging, 0);

    ScanSettings settings = scan_settings(scan);
    settings.flagged_out = &unique_out;
    settings.unflagged_out = dups_out ? &*dups_out : nullptr;
    settings.refused_out = refused_out ? &*refused_out : nullptr;
    settings.start = end;
    const auto output_lengths = [&] {
      return std::pair{unique_out.bytes_written(), dups_out ? dups_out->bytes_written() : 0};
    };
    if (checkpoint_dir) {
      settings.checkpoint_every = checkpoint_every;
      settings.on_checkpoint = [&](const ScanState& at) {
        const auto [out_bytes, dups_bytes] = output_lengths();
        save_progress(at, out_bytes, dups_bytes, false);
      };
    }
    end = run_scan(*state, reader, settings);
    unique_out.sync();
    if (dups_out) dups_out->sync();
    if (refused_out) refused_out->sync();
    if (checkpoint_dir) {
      const auto [out_bytes, dups_bytes] = output_lengths();
      save_progress(end, out_bytes, dups_bytes, true);
    }
    if (refused_out) refused_out->commit();
    if (dups_out) dups_out->commit();
    unique_out.commit();
    if (filter_path) save_state(keys_before + end.counters.flagged);
  }

  mark_run_committed();
  const ScanCounters& c = end.counters;
  Summary summary;
  summary.number("records_read", "records read", static_cast<double>(c.records));
  summary.number("unique_written", "unique written", static_cast<double>(c.flagged));
  const std::uint64_t refused = c.refused_missing_time + c.refused_future + c.refused_late;
  summary.number("duplicates_dropped", "duplicates dropped",
                 static_cast<double>(c.records - c.flagged - refused));
  if (refused_path) {
    summary.text("", "refused",
                 std::to_string(refused) + " to " + *refused_path + ": " +
                     std::to_string(c.refused_missing_time) + " without a time, " +
                     std::to_string(c.refused_future) + " in the future, " +
                     std::to_string(c.refused_late) + " late");
    summary.number("refused_missing_time", "", static_cast<double>(c.refused_missing_time));
    summary.number("refused_future", "", static_cast<double>(c.refused_future));
    summary.number("refused_late", "", static_cast<double>(c.refused_late));
  }
  state->describe(summary, c.flagged);
  summary.text("capacity_source", "", capacity_note);
  print_scan_summary(summary, state->shown_filter(), c, start_time, scan,
                     resumed ? resumed->state.counters : ScanCounters{});
  return 0;
}

}  // namespace bulkbloom::cli
