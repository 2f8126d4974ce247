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

// A carried filter or window keeps the layout and rate it was made with: sizing options given
// for it change nothing, which the user should hear about rather than find out from `info`. A
// window's --capacity sizes the generations it starts (noted by the caller).
void warn_sizing_ignored(const ArgParser& parser, bool fpr_differs, bool window,
                         const std::string& path) {
  std::string ignored;
  for (const char* name : {"capacity", "shape", "seed", "index", "num-blocks"}) {
    if (window && std::string_view(name) == "capacity") continue;
    if (parser.get(name)) ignored += std::string(ignored.empty() ? "" : ", ") + "--" + name;
  }
  if (parser.get("fpr") && fpr_differs) {
    ignored += std::string(ignored.empty() ? "" : ", ") + "--fpr";
  }
  if (ignored.empty()) return;
  std::fprintf(stderr,
               "bulkbloom dedup: warning: %s ignored: %s exists and keeps the layout and "
               "false-positive rate it was made with (see bulkbloom info %s)\n",
               ignored.c_str(), path.c_str(), path.c_str());
}

// Integers and byte strings hash differently: every key the carried filter or window at `path`
// took as `held` keys would pass again as new in a run of `format`.
[[noreturn]] void refuse_other_key_kind(const std::string& path, bool window,
                                        const std::string& held, const RecordFormat& format) {
  const std::string kind = window ? "window" : "filter";
  throw Error(path + " holds " + (window ? "a window of " : "") + held +
              " keys, which hash differently from the " + format.name() +
              " keys of this run: a repeat of a key it holds would get through; read the input "
              "with a format of the " +
              kind + "'s kind (-f " + held + ") or start a new " + kind);
}

// The outcome of a run that its --filter state shows committed already: nothing to do.
int report_committed_earlier(const std::string& filter_path) {
  std::fprintf(stderr,
               "bulkbloom dedup: this run was committed earlier (%s holds it); its outputs are in "
               "place and unchanged\n",
               filter_path.c_str());
  return 0;
}

ArgParser dedup_parser() {
  ArgParser parser("dedup [options] [INPUT...]",
                   "Writes the first occurrence of each key of the inputs (files, or stdin when "
                   "none or '-'), in input order.\nA never-seen key is wrongly dropped with the "
                   "filter's false-positive rate; a repeated key is never written twice.");
  parser.value("output", "FILE", "where unique records go (default stdout)", 'o')
      .value("dups", "FILE", "also write the dropped records here")
      .value("refused", "FILE",
             "event-time window: write here, undecided, the records without an event time, "
             "past now + --max-future, or more than --lateness behind the window's clock")
      .value("filter", "PATH",
             "load this filter or window first if it exists, save it after (across runs): a "
             "file, or a state directory (a directory, or a new name ending in '/') into which "
             "each run writes only what changed")
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
             "and outputs only; a directory of its own: new, empty, or a checkpoint)")
      .value("checkpoint-every", "N", "records between checkpoints (default 100M)")
      .flag("resume", "continue from the checkpoint in --checkpoint DIR, if there is one")
      .flag("force",
            "run even when it would replace the outputs of a run committed to --filter (the "
            "last 100 are recalled) with those of other inputs, or is such a run whose outputs "
            "are gone (they will hold only the records whose keys the state does not hold yet)")
      .flag("wait-lock",
            "when another run holds the --filter state or the checkpoint directory, wait for it "
            "(default: stop with an error)");
  return parser;
}

// Phase 1: what the run was asked to do, its options checked against each other before anything
// is opened or created.
struct DedupRequest {
  ScanOptions scan;
  std::optional<WindowRequest> window;
  Options backend;
  SizingRequest sizing;
  OnFull on_full = OnFull::grow;
  std::string output_path;
  std::optional<std::string> dups_path;
  std::optional<std::string> refused_path;
  // Where links lead: the state is replaced and locked there (state_lock.hpp).
  std::optional<std::string> filter_path;
  bool filter_directory = false;  // --filter names a state directory
  std::optional<std::string> checkpoint_dir;
  std::uint64_t checkpoint_every = kDefaultCheckpointEvery;

  // -o, then --dups and --refused when given: the order of the run record's outputs.
  std::vector<std::string> output_paths() const {
    std::vector<std::string> paths = {output_path};
    if (dups_path) paths.push_back(*dups_path);
    if (refused_path) paths.push_back(*refused_path);
    return paths;
  }
};

DedupRequest read_request(const ArgParser& parser) {
  DedupRequest request;
  request.scan = scan_options(parser);
  request.window = window_request(parser, request.scan.format);
  if (request.window) {
    request.scan.format.time_column = request.window->time_column;
    if (request.window->clock == WindowClock::event_time) {
      const std::int64_t now = std::chrono::duration_cast<std::chrono::seconds>(
                                   std::chrono::system_clock::now().time_since_epoch())
                                   .count();
      request.scan.format.latest_time = now + static_cast<std::int64_t>(request.window->max_future);
    }
  }
  request.backend = backend_options(parser);
  request.sizing = sizing_request(parser);
  request.on_full = on_full_policy(parser);
  request.output_path = parser.get_or("output", "-");
  request.dups_path = parser.get("dups");
  request.refused_path = parser.get("refused");
  if (request.refused_path) {
    if (!request.window || request.window->clock != WindowClock::event_time) {
      throw UsageError("--refused needs an event-time window (--window with --time-field)");
    }
    if (parser.has("checkpoint")) {
      throw UsageError(
          "--refused cannot be combined with --checkpoint yet: a checkpoint records the lengths "
          "of -o and --dups only");
    }
    request.scan.format.refuse_bad_times = true;
  }
  if (const auto filter = parser.get("filter")) {
    check_filter_output(*filter, "--filter");
    const StatePath where = state_path(*filter, "--filter");
    request.filter_path = where.path;
    request.filter_directory = where.directory;
  }
  request.checkpoint_dir = parser.get("checkpoint");
  if (request.checkpoint_dir) request.checkpoint_dir = real_state_path(*request.checkpoint_dir);
  request.checkpoint_every = parser.get_count("checkpoint-every").value_or(kDefaultCheckpointEvery);
  if (request.checkpoint_every == 0) throw UsageError("--checkpoint-every must be at least 1");
  if ((parser.has("resume") || parser.has("checkpoint-every")) && !request.checkpoint_dir) {
    throw UsageError("--resume and --checkpoint-every need --checkpoint DIR");
  }
  if (request.checkpoint_dir && (request.output_path == "-" || request.dups_path == "-")) {
    throw UsageError("--checkpoint needs the outputs in files (-o FILE), not stdout");
  }
  // Checked again once the inputs are open (a named pipe); stdin is refused here, before the
  // checkpoint directory is made.
  if (request.checkpoint_dir &&
      (parser.positionals().empty() ||
       std::ranges::find(parser.positionals(), "-") != parser.positionals().end())) {
    throw UsageError(kCheckpointNeedsFiles);
  }
  if (int(request.output_path == "-") + int(request.dups_path == "-") +
          int(request.refused_path == "-") >
      1) {
    throw UsageError(
        "-o -, --dups - and --refused - would interleave records on stdout: send all but one "
        "of them to files");
  }

  std::vector<NamedPath> named;
  for (const std::string& input : parser.positionals()) named.push_back({"input", input, false});
  named.push_back({"output", request.output_path, true});
  if (request.dups_path) named.push_back({"--dups file", *request.dups_path, true});
  if (request.refused_path) named.push_back({"--refused file", *request.refused_path, true});
  if (request.filter_path) {
    named.push_back({request.filter_directory ? "--filter directory" : "--filter file",
                     *request.filter_path, true});
  }
  if (request.checkpoint_dir) {
    check_checkpoint_directory(*request.checkpoint_dir, named);
    named.push_back({"--checkpoint directory", *request.checkpoint_dir, true});
  }
  check_paths_distinct(named);
  return request;
}

// Phase 2: the state is locked before it is read, and until it is replaced.
struct StateLocks {
  StateLocks(const DedupRequest& request, bool wait) {
    if (request.filter_path) {
      filter.emplace(*request.filter_path, false, wait);
      // Left by a killed run: it is dead.
      if (request.filter_directory) {
        StateDirectory(*request.filter_path).remove_uncommitted();
      } else {
        detail::remove_stale_saves(*request.filter_path);
      }
    }
    if (request.checkpoint_dir) checkpoint.emplace(*request.checkpoint_dir, true, wait);
  }
  std::optional<StateLock> filter;
  std::optional<StateLock> checkpoint;
};

// Phase 3: the state the run starts from, and what it already holds.
struct StartingState {
  std::unique_ptr<DedupState> state;
  std::optional<DedupCheckpoint> resumed;  // set when resuming from --checkpoint
  std::uint64_t keys_before = 0;           // keys the state held before this run
  std::string capacity_note;               // where its size came from, for the summary
  // The --filter state's fingerprint when the run began (StatePath::fingerprint), which its
  // checkpoints record.
  std::optional<std::string> filter_before;
  // The run record of the --filter state the run began from (kept by its checkpoints too), which
  // its commit recalls as the run before it.
  std::optional<RunRecord> last_run;
};

// The checkpoint in --checkpoint DIR with its input position and output lengths, or nothing
// when there is none yet.
std::optional<StartingState> resume_state(const DedupRequest& request,
                                          const std::string& identity) {
  const std::string& dir = *request.checkpoint_dir;
  std::vector<std::byte> metadata;
  StartingState start;
  start.state = load_checkpoint_state(dir, request.window.has_value(), request.sizing.fpr,
                                      request.backend, metadata);
  if (!start.state) return std::nullopt;
  start.resumed = decode_checkpoint(metadata, dir);
  if (start.resumed->run_identity != identity) {
    throw UsageError("the checkpoint in " + dir +
                     " was made by another command or from inputs that changed since (it has: " +
                     start.resumed->run_identity + "; now: " + identity +
                     "); remove it or drop --resume");
  }
  start.keys_before = start.resumed->keys_before;
  start.capacity_note = "from the checkpoint";
  if (start.resumed->filter_run) start.last_run = decode_run_record(*start.resumed->filter_run);
  return start;
}

// The window in the --filter state directory `directory`.
WindowedFilter load_window(StateDirectory& directory, FileState* saved, const Options& options) {
  if (directory.stored_kind() == StateDirectory::Kind::grown) {
    throw FormatError(directory.path().string() +
                      " is a grown filter's state directory, not a window: dedup reads it without "
                      "--window, info describes it");
  }
  return directory.load_window(saved, options);
}

// Whether carried_state() tells the user which sizing options the state overrides: not when it is
// read only for its run record, on the way to a refusal or to "committed earlier".
enum class SizingNotes { print, skip };

// The state carried in the existing --filter file or state directory, with the run record of the
// run that last committed it.
StartingState carried_state(const DedupRequest& request, const ArgParser& parser,
                            SizingNotes notes) {
  const std::string& path = *request.filter_path;
  StartingState start;
  std::vector<std::byte> metadata;
  // Kept with the state, so that its commit writes what changed since this load.
  std::optional<StateDirectory> directory;
  if (request.filter_directory) directory.emplace(path);
  if (request.window) {
    FileState saved;
    WindowedFilter window = directory ? load_window(*directory, &saved, request.backend)
                                      : load_window(path, &saved, request.backend);
    check_window_matches(window.config(), *request.window, path);
    if (const auto keys = take_window_key_format(saved.metadata);
        keys && RecordFormat::parse(*keys).integer_keys() != request.scan.format.integer_keys()) {
      refuse_other_key_kind(path, true, *keys, request.scan.format);
    }
    if (request.sizing.capacity && notes == SizingNotes::print) {
      std::fprintf(stderr,
                   "bulkbloom dedup: --capacity %llu sizes the generations this run starts in "
                   "%s; its current generations keep their sizes\n",
                   static_cast<unsigned long long>(*request.sizing.capacity), path.c_str());
    }
    if (notes == SizingNotes::print) {
      warn_sizing_ignored(parser, request.sizing.fpr != window.config().fpr, true, path);
    }
    start.keys_before = saved.keys_inserted;
    metadata = std::move(saved.metadata);
    start.state = window_state(std::move(window), std::move(directory));
  } else {
    CarriedFilter filter =
        directory ? CarriedFilter::load(*directory, request.backend, &metadata)
                  : CarriedFilter::load(path, request.sizing.fpr, request.backend, &metadata);
    if (!filter.hashes_like(request.scan.format)) {
      refuse_other_key_kind(path, false, filter.key_format(), request.scan.format);
    }
    if (notes == SizingNotes::print) {
      warn_sizing_ignored(parser, request.sizing.fpr != filter.promised_fpr(), false, path);
    }
    start.keys_before = filter.keys();
    start.state = filter_state(std::move(filter), std::move(directory));
  }
  start.capacity_note = "loaded from " + path;
  start.last_run = decode_run_record(metadata);
  return start;
}

// A new state sized for the inputs (or as --capacity and the sizing options say).
StartingState new_state(const DedupRequest& request, const ChunkReader& reader) {
  StartingState start;
  if (request.window) {
    start.state =
        window_state(WindowedFilter(window_config(*request.window, request.sizing, reader,
                                                  request.scan.format, start.capacity_note),
                                    request.backend));
  } else {
    const std::uint64_t capacity =
        sized_capacity(request.sizing, reader, request.scan.format, start.capacity_note, true);
    start.state = filter_state(CarriedFilter(sized_layout(request.sizing, capacity), capacity,
                                             request.sizing.fpr, request.scan.format.name(),
                                             request.backend));
  }
  return start;
}

// Phases 4 and 5: the records processed, then the commit. Every output is flushed under its
// temporary name, then renamed into place, and the carried state (filter or window) is replaced
// last. A crash before that last rename leaves the old state, from which a rerun computes the
// same outputs again; a checkpointed run first saves a complete checkpoint holding the final
// state, from which --resume finishes the renames (docs/FORMAT.md, "Committing a run").
class DedupRun {
 public:
  DedupRun(const DedupRequest& request, const ArgParser& parser, std::string identity,
           StartingState& start, ChunkReader& reader)
      : request_(request),
        parser_(parser),
        identity_(std::move(identity)),
        start_(start),
        reader_(reader),
        output_paths_(request.output_paths()) {}

  // Returns where the scan ended (its counters).
  ScanState run() {
    if (start_.resumed && start_.resumed->complete) return finish_completed_run();
    return process_and_commit();
  }

  // The bytes the commit of the --filter state wrote (0 before, or without --filter).
  std::uint64_t state_bytes_written() const { return state_bytes_written_; }

 private:
  // A run whose records were all processed before it was killed: only renames and the state
  // remain.
  ScanState finish_completed_run() {
    const DedupCheckpoint& resumed = *start_.resumed;
    finish_renames(output_paths_);
    // A completed run's outputs must still be those it wrote: nothing can write them again.
    const std::uint64_t lengths[2] = {resumed.output_bytes, resumed.dups_bytes};
    for (std::size_t i = 0; i < output_paths_.size(); ++i) {
      const auto now = record_output(output_paths_[i]);
      if (!now || now->size != lengths[i]) {
        throw Error("the run in " + *request_.checkpoint_dir + " completed earlier, but " +
                    output_paths_[i] +
                    (now ? " is not the file it wrote (" + std::to_string(now->size) +
                               " bytes, not " + std::to_string(lengths[i]) + ")"
                         : " is missing") +
                    "; remove " + *request_.checkpoint_dir + " to run it again");
      }
    }
    if (request_.filter_path) commit_state(start_.keys_before + resumed.state.counters.flagged);
    return resumed.state;
  }

  ScanState process_and_commit() {
    const bool resumed = start_.resumed.has_value();
    const auto staging =
        request_.checkpoint_dir ? OutputFile::Staging::resumable : OutputFile::Staging::temporary;
    OutputFile unique_out(request_.output_path, staging,
                          resumed ? start_.resumed->output_bytes : 0);
    std::optional<OutputFile> dups_out;
    if (request_.dups_path) {
      dups_out.emplace(*request_.dups_path, staging, resumed ? start_.resumed->dups_bytes : 0);
    }
    std::optional<OutputFile> refused_out;  // never with a checkpoint, so never resumed
    if (request_.refused_path) refused_out.emplace(*request_.refused_path, staging, 0);

    ScanSettings settings = scan_settings(request_.scan);
    settings.flagged_out = &unique_out;
    settings.unflagged_out = dups_out ? &*dups_out : nullptr;
    settings.refused_out = refused_out ? &*refused_out : nullptr;
    settings.start = resumed ? start_.resumed->state : ScanState{};
    const auto output_lengths = [&] {
      return std::pair{unique_out.bytes_written(), dups_out ? dups_out->bytes_written() : 0};
    };
    if (request_.checkpoint_dir) {
      settings.checkpoint_every = request_.checkpoint_every;
      settings.on_checkpoint = [&](const ScanState& at) {
        const auto [out_bytes, dups_bytes] = output_lengths();
        save_progress(at, out_bytes, dups_bytes, false);
      };
    }
    const ScanState end = run_scan(*start_.state, reader_, settings);
    unique_out.sync();
    if (dups_out) dups_out->sync();
    if (refused_out) refused_out->sync();
    if (request_.checkpoint_dir) {
      const auto [out_bytes, dups_bytes] = output_lengths();
      save_progress(end, out_bytes, dups_bytes, true);
    }
    if (refused_out) refused_out->commit();
    if (dups_out) dups_out->commit();
    unique_out.commit();
    if (request_.filter_path) commit_state(start_.keys_before + end.counters.flagged);
    return end;
  }

  // Saves a checkpoint: the state with the input position and the synced output lengths.
  void save_progress(const ScanState& at, std::uint64_t out_bytes, std::uint64_t dups_bytes,
                     bool complete) const {
    const DedupCheckpoint checkpoint{identity_,
                                     at,
                                     out_bytes,
                                     dups_bytes,
                                     start_.keys_before,
                                     complete,
                                     start_.state->expected_false_drops(at.counters.flagged),
                                     start_.filter_before,
                                     start_.last_run && !start_.last_run->legacy
                                         ? encode_run_record(*start_.last_run)
                                         : std::vector<std::byte>{}};
    const SignalsDeferred deferred;
    start_.state->save_checkpoint(*request_.checkpoint_dir, encode_checkpoint(checkpoint),
                                  start_.keys_before + at.counters.flagged);
  }

  // Replaces the carried state, recording this run and the outputs it committed.
  void commit_state(std::uint64_t keys) {
    RunRecord record;
    record.command = run_command(parser_);
    const std::vector<std::string>& inputs = parser_.positionals();
    for (std::size_t i = 0; i < inputs.size(); ++i) {
      // A resumed run did not read every byte itself: the checkpoint's fingerprint showed the
      // inputs unchanged since, so their bytes now are the ones read.
      const auto content = start_.resumed ? content_of(inputs[i]) : reader_.contents()[i];
      if (!content) {
        record.inputs.clear();  // one input cannot be read again: the run cannot be recognised
        break;
      }
      record.inputs.push_back({inputs[i], *content});
    }
    for (const std::string& out : output_paths_) {
      if (const auto committed = record_output(out)) record.outputs.push_back(*committed);
    }
    // An output that is not a regular file (/dev/null) cannot be checked: the run cannot be
    // recognised, but the runs recalled before it still can.
    if (record.outputs.size() != output_paths_.size()) record.inputs.clear();
    record.earlier = runs_before(start_.last_run);
    const std::vector<std::byte> metadata = encode_run_record(record);
    commit_with_signals_deferred([&] {
      state_bytes_written_ =
          request_.filter_directory
              ? start_.state->save_directory(*request_.filter_path, metadata, keys)
              : start_.state->save(*request_.filter_path, metadata, keys);
    });
  }

  const DedupRequest& request_;
  const ArgParser& parser_;
  const std::string identity_;
  StartingState& start_;
  ChunkReader& reader_;
  const std::vector<std::string> output_paths_;
  std::uint64_t state_bytes_written_ = 0;
};

// Phase 6: the summary.
void print_summary(const DedupRequest& request, const StartingState& start, const ScanState& end,
                   std::uint64_t state_bytes_written,
                   std::chrono::steady_clock::time_point start_time) {
  // Nothing to build: describing the state reads every bit of its filters.
  if (request.scan.stats == ScanOptions::Stats::none) return;
  const ScanCounters& c = end.counters;
  Summary summary;
  summary.number("records_read", "records read", static_cast<double>(c.records));
  summary.number("unique_written", "unique written", static_cast<double>(c.flagged));
  const std::uint64_t refused = c.refused_missing_time + c.refused_future + c.refused_late;
  summary.number("duplicates_dropped", "duplicates dropped",
                 static_cast<double>(c.records - c.flagged - refused));
  if (request.refused_path) {
    summary.text("", "refused",
                 std::to_string(refused) + " to " + *request.refused_path + ": " +
                     std::to_string(c.refused_missing_time) + " without a time, " +
                     std::to_string(c.refused_future) + " in the future, " +
                     std::to_string(c.refused_late) + " late");
    summary.number("refused_missing_time", "", static_cast<double>(c.refused_missing_time));
    summary.number("refused_future", "", static_cast<double>(c.refused_future));
    summary.number("refused_late", "", static_cast<double>(c.refused_late));
  }
  start.state->describe(summary, c.flagged);
  summary.text("capacity_source", "", start.capacity_note);
  if (request.filter_path) {
    summary.number(
        "state_bytes_written", "state written", static_cast<double>(state_bytes_written),
        std::to_string(state_bytes_written) + " bytes to " + *request.filter_path +
            (request.filter_directory ? " (a state directory: what changed since its last commit)"
                                      : " (the whole file)"));
  }
  print_scan_summary(summary, start.state->shown_filter(), c, start_time, request.scan,
                     start.resumed ? start.resumed->state.counters : ScanCounters{});
}

}  // namespace

int run_dedup(const Arguments& args) {
  ArgParser parser = dedup_parser();
  if (!parser.parse(args)) return 0;
  const auto start_time = std::chrono::steady_clock::now();
  const DedupRequest request = read_request(parser);
  const StateLocks locks(request, parser.has("wait-lock"));
  const std::string identity = run_fingerprint(args, parser.positionals());

  const auto planned_run = [&] {
    PlannedRun planned{run_command(parser),
                       identity,
                       parser.positionals(),
                       {request.output_path, request.dups_path.value_or("-")}};
    if (request.refused_path) planned.outputs.push_back(*request.refused_path);
    return planned;
  };
  const std::optional<StatePath> filter =
      request.filter_path ? std::optional(StatePath{*request.filter_path, request.filter_directory})
                          : std::nullopt;
  // Under the lock, before anything reads it.
  const std::optional<std::string> filter_now =
      filter ? std::optional(filter->fingerprint()) : std::nullopt;

  std::optional<StartingState> resumed;
  if (request.checkpoint_dir && parser.has("resume")) resumed = resume_state(request, identity);
  if (resumed && filter_now && resumed->resumed->filter_before &&
      *resumed->resumed->filter_before != *filter_now) {
    // The checkpoint's state was built on a commit of --filter that another has replaced since:
    // committing it would drop that commit's keys. Unless that commit is this run's own.
    std::optional<RunRecord> last_run;
    if (filter->holds_state())
      last_run = carried_state(request, parser, SizingNotes::skip).last_run;
    // Only whether it is this run's own commit: any other way, the refusal below says why (the
    // replaced outputs' refusal would advise a --force that cannot help here).
    if (last_run && check_rerun(*last_run, planned_run(), *request.filter_path, /*force=*/true) ==
                        Rerun::committed) {
      return report_committed_earlier(*request.filter_path);
    }
    if (*filter_now == "none") {
      throw Error("the --filter state " + *request.filter_path +
                  " was removed after the checkpoint in " + *request.checkpoint_dir +
                  " was made from it: resuming would put back what it held then; remove " +
                  *request.checkpoint_dir + " to run this again from no state");
    }
    throw Error("the --filter state " + *request.filter_path +
                " was committed by another run after the checkpoint in " + *request.checkpoint_dir +
                " was made: resuming would replace that commit with a state that lacks its keys, "
                "and their repeats would get through; remove " +
                *request.checkpoint_dir + " to run this again from " + *request.filter_path +
                " as it is now");
  }
  ChunkReader reader(parser.positionals(), request.scan.format, request.scan.chunk_bytes,
                     resumed ? resumed->resumed->state.position : InputPosition{},
                     request.scan.skip_bad, request.filter_path.has_value());
  if (request.checkpoint_dir && !reader.total_known()) throw UsageError(kCheckpointNeedsFiles);

  StartingState start;
  if (resumed) {
    start = std::move(*resumed);
    if (!start.resumed->filter_run && filter && filter->holds_state()) {
      // A checkpoint of an older bulkbloom keeps no record of the --filter state it began from,
      // which is that state as it is now (checked above): read from there (a second state in
      // memory, once), the commit still recalls the runs before.
      start.last_run = carried_state(request, parser, SizingNotes::skip).last_run;
    }
  } else if (filter && filter->holds_state()) {
    start = carried_state(request, parser, SizingNotes::print);
    const std::optional<RunRecord>& last_run = start.last_run;
    // The same command on inputs of the same content after this run committed (a rerun after a
    // crash between the state's rename and the end of the process): its work is done. Another
    // run must not silently replace its outputs (docs/FORMAT.md, "Reruns").
    if (last_run && check_rerun(*last_run, planned_run(), *request.filter_path,
                                parser.has("force")) == Rerun::committed) {
      return report_committed_earlier(*request.filter_path);
    }
  } else {
    start = new_state(request, reader);
  }

  start.filter_before =
      start.resumed && start.resumed->filter_before ? start.resumed->filter_before : filter_now;
  const auto& scan = request.scan;
  start.state->start_run(
      {request.on_full, reader.total_known() ? estimated_records(reader, scan.format) : 0,
       start.resumed ? start.resumed->state.counters.records : 0,
       start.resumed ? start.resumed->expected_false_drops : 0.0,
       request.filter_path ? "filter " + *request.filter_path : std::string("the filter"),
       request.window ? window_sizing(*request.window, request.sizing, reader, scan.format)
                      : WindowSizing{},
       request.refused_path.has_value(), request.checkpoint_dir.has_value(), scan.format.name()});
  DedupRun run(request, parser, identity, start, reader);
  const ScanState end = run.run();
  mark_run_committed();
  print_summary(request, start, end, run.state_bytes_written(), start_time);
  return 0;
}

}  // namespace bulkbloom::cli
