#include "cli/dedup_state.hpp"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>
#include <optional>
#include <string_view>

#include "cli/dedup_checkpoint.hpp"
#include "cli/errors.hpp"
#include "cli/scan_command.hpp"
#include "persist/file_io.hpp"

namespace bulkbloom::cli {
namespace {

// The single checkpoint file of older versions, which still loads; the first checkpoint saved
// as a state directory removes it.
constexpr const char* kFilterCheckpointFile = "checkpoint.bbf";
constexpr const char* kWindowCheckpointFile = "window.bbw";

// The state directories a state is saved into (its checkpoints, a --filter directory). The
// state's change log runs from its last save into one directory, so that only the directory last
// saved into is kept open: a save into another starts that one afresh (StateDirectory writes
// the open part whole when the log does not run from its own last commit).
class DirectorySaves {
 public:
  DirectorySaves() = default;
  explicit DirectorySaves(std::optional<StateDirectory> loaded) : directory_(std::move(loaded)) {}

  // Saves `state` into `dir` with `save(directory, state)`; returns the bytes written.
  template <typename State, typename Save>
  std::uint64_t save(const std::filesystem::path& dir, State& state, Save&& save) {
    if (!directory_ || directory_->path() != dir) directory_.emplace(dir);
    return save(*directory_, state);
  }

 private:
  std::optional<StateDirectory> directory_;
};

// The single checkpoint file of an older bulkbloom in `dir`, removed once a checkpoint is saved
// as a state directory there.
void remove_legacy_checkpoint(const std::filesystem::path& dir, const char* legacy_file) {
  std::error_code ignored;
  std::filesystem::remove(dir / legacy_file, ignored);
}

class FilterState final : public DedupState {
 public:
  explicit FilterState(CarriedFilter filter, std::optional<StateDirectory> loaded_from = {})
      : filter_(std::move(filter)), directories_(std::move(loaded_from)) {}

  void start_run(const RunPlan& plan) override {
    if (filter_.loaded_past_promise()) {
      const std::string problem =
          plan.name + " was already past its false-positive rate when loaded: its bits give " +
          std::to_string(filter_.current_fpr()) + " (promised " +
          std::to_string(filter_.promised_fpr()) + ")";
      if (plan.on_full == OnFull::error) throw Error(problem);
      std::fprintf(stderr,
                   "bulkbloom dedup: warning: %s; new keys are wrongly dropped at that rate "
                   "whatever it grows (rebuild it from the data it was made from)\n",
                   problem.c_str());
    }
    filter_.set_growth(plan.on_full, plan.expected_records, plan.records_done, plan.name,
                       "without --on-full error it grows");
    filter_.set_expected_false_drops(plan.expected_false_drops);
    if (plan.log_changes) enable_change_log(filter_);
  }

  std::uint64_t dedup(const ParsedRecords& parsed, std::span<const std::uint64_t> int_keys,
                      std::span<std::uint8_t> flags) override {
    if (parsed.byte_keys.empty()) return filter_.insert_if_absent(int_keys, flags);
    return filter_.insert_if_absent(std::span<const std::string_view>(parsed.byte_keys), flags);
  }

  std::uint64_t save(const std::filesystem::path& path, std::span<const std::byte> metadata,
                     std::uint64_t) const override {
    filter_.save(path, metadata);
    return std::filesystem::file_size(path);
  }

  std::uint64_t save_directory(const std::filesystem::path& dir,
                               std::span<const std::byte> metadata, std::uint64_t) override {
    return directories_.save(
        dir, filter_, [&](StateDirectory& d, GrownFilter& f) { return d.save(f, metadata); });
  }

  void save_checkpoint(const std::filesystem::path& dir, std::span<const std::byte> metadata,
                       std::uint64_t keys) override {
    save_directory(dir, metadata, keys);
    remove_legacy_checkpoint(dir, kFilterCheckpointFile);
  }

  double expected_false_drops(std::uint64_t) const override {
    return filter_.expected_false_drops();
  }

  void describe(Summary& summary, std::uint64_t kept) const override {
    const double drops = expected_false_drops(kept);
    char line[160];
    std::snprintf(line, sizeof line, "%.1f (the filter's false-positive rate over the run)", drops);
    summary.number("expected_wrongly_dropped", "expected unique wrongly dropped", drops, line);
    const double fpr = filter_.current_fpr();
    std::snprintf(line, sizeof line, "%.3g from the bits (promised %.3g)", fpr,
                  filter_.promised_fpr());
    summary.number("final_fpr", "false-positive rate now", fpr, line);
    summary.number("promised_fpr", "", filter_.promised_fpr());
    summary.number("generations", "", static_cast<double>(filter_.generation_count()));
    summary.number("growths", "", static_cast<double>(filter_.growths()));
    if (filter_.growths() > 0) {
      summary.text(
          "", "filter grew",
          std::to_string(filter_.growths()) + " time(s) in this run to stay under its rate: " +
              std::to_string(filter_.generation_count()) + " generation(s), the newest sized for " +
              std::to_string(filter_.newest_capacity()) + " keys");
    }
  }

  const Filter& shown_filter() const override { return filter_.newest(); }

 private:
  CarriedFilter filter_;
  DirectorySaves directories_;
};

class WindowState final : public DedupState {
 public:
  explicit WindowState(WindowedFilter window, std::optional<StateDirectory> loaded_from = {})
      : window_(std::move(window)), directories_(std::move(loaded_from)) {}

  // A window forgets, so it does not fill up over time; but a generation can take more keys in
  // its period than it was sized for (a day that brings more than the sizing allowed for).
  void start_run(const RunPlan& plan) override {
    window_.set_sizing(plan.window_sizing);
    on_full_ = plan.on_full;
    name_ = plan.name == "the filter" ? "the window" : plan.name;
    drops_before_ = plan.expected_false_drops - window_.expected_false_drops();
    overfull_seen_ = window_.overfull_generations();
    refuse_late_ = plan.refuse_late;
    key_format_ = plan.key_format;
    if (plan.log_changes) enable_change_log(window_);
  }

  std::uint64_t dedup(const ParsedRecords& parsed, std::span<const std::uint64_t> int_keys,
                      std::span<std::uint8_t> flags) override {
    if (refuse_late_ || !parsed.refusals.empty()) return dedup_refusing(parsed, flags);
    const std::span<const std::string_view> byte_keys(parsed.byte_keys);
    std::uint64_t kept = 0;
    if (window_.config().clock == WindowClock::records) {
      kept = byte_keys.empty() ? window_.insert_if_absent(int_keys, flags)
                               : window_.insert_if_absent(byte_keys, flags);
    } else {
      const std::span<const std::int64_t> times(parsed.times);
      kept = byte_keys.empty() ? window_.insert_if_absent(int_keys, times, flags)
                               : window_.insert_if_absent(byte_keys, times, flags);
    }
    if (window_.overfull_generations() != overfull_seen_) report_overfull();
    return kept;
  }

  std::uint64_t save(const std::filesystem::path& path, std::span<const std::byte> metadata,
                     std::uint64_t keys) const override {
    bulkbloom::save(window_, path, {keys, window_metadata(key_format_, metadata)});
    return std::filesystem::file_size(path);
  }

  std::uint64_t save_directory(const std::filesystem::path& dir,
                               std::span<const std::byte> metadata, std::uint64_t keys) override {
    return directories_.save(dir, window_, [&](StateDirectory& d, WindowedFilter& w) {
      return d.save(w, {keys, window_metadata(key_format_, metadata)});
    });
  }

  void save_checkpoint(const std::filesystem::path& dir, std::span<const std::byte> metadata,
                       std::uint64_t keys) override {
    save_directory(dir, metadata, keys);
    remove_legacy_checkpoint(dir, kWindowCheckpointFile);
  }

  // Summed batch by batch in the window, at its rate when each record came: the rate now says
  // nothing about a run whose window has since rotated or emptied.
  double expected_false_drops(std::uint64_t) const override {
    return drops_before_ + window_.expected_false_drops();
  }

  void describe(Summary& summary, std::uint64_t kept) const override {
    const double drops = expected_false_drops(kept);
    char line[200];
    std::snprintf(line, sizeof line,
                  "%.1f (summed over the run at the window's false-positive rate as each batch "
                  "came)",
                  drops);
    summary.number("expected_wrongly_dropped", "expected unique wrongly dropped", drops, line);
    const double fpr = window_.current_fpr();
    const double promised = window_.config().fpr;
    if (promised != 0.0) {
      std::snprintf(line, sizeof line, "%.3g from the bits (promised %.3g)", fpr, promised);
      summary.number("promised_fpr", "", promised);
    } else {
      std::snprintf(line, sizeof line, "%.3g from the bits (promise not recorded in the file)",
                    fpr);
    }
    summary.number("final_fpr", "false-positive rate now", fpr, line);
    summary.text("window", "window", window_.config().describe());
    summary.integer("window_memory_bytes", "window memory now", window_.memory_bytes());
    summary.number("overfull_generations", "", static_cast<double>(window_.overfull_generations()));
    if (window_.overfull_generations() != 0) {
      summary.text("", "window overfull", overfull_message());
    }
  }

  const Filter& shown_filter() const override { return window_.generation(0); }

 private:
  // What happened when a generation went over its size: the period, its keys and size.
  std::string overfull_message() const {
    const OverfullGeneration over = *window_.last_overfull();
    const WindowConfig& config = window_.config();
    const auto period = static_cast<std::int64_t>(config.period());
    const char* unit = config.clock == WindowClock::event_time ? "event times" : "records";
    char rate[32];
    std::snprintf(rate, sizeof rate, "%.3g", config.fpr);
    return std::to_string(window_.overfull_generations()) + " generation(s) took more keys in " +
           "their period than sized for; the latest, for " + unit + " [" +
           std::to_string(over.period * period) + ", " +
           std::to_string((over.period + 1) * period) + "), took " + std::to_string(over.keys) +
           " keys, sized for " + std::to_string(over.capacity) +
           ": until it leaves the window, new keys are dropped " + "above the promised rate " +
           rate;
  }

  void report_overfull() {
    overfull_seen_ = window_.overfull_generations();
    const std::string what = name_ + ": " + overfull_message();
    const std::string how =
        "; a larger --capacity sizes the generations a run starts (the window cannot resize a "
        "generation within its period)";
    if (on_full_ == OnFull::error) throw Error(what + how);
    std::fprintf(stderr, "bulkbloom dedup: warning: %s%s\n", what.c_str(), how.c_str());
  }

  // dedup() of an event-time window that refuses records (whose keys are bytes: the time column
  // is read from csv or tsv): the others go through the window together, in order. A record is
  // late by the Flink operator's rule: more than the lateness behind the largest time taken so
  // far, which refused records never move.
  std::uint64_t dedup_refusing(const ParsedRecords& parsed, std::span<std::uint8_t> flags) {
    taken_.clear();
    taken_keys_.clear();
    taken_times_.clear();
    std::optional<std::int64_t> clock = window_.clock_time();
    const std::uint64_t lateness = window_.config().lateness;
    for (std::size_t i = 0; i < parsed.byte_keys.size(); ++i) {
      TimeRefusal why = parsed.refusals.empty() ? TimeRefusal::none : parsed.refusals[i];
      const std::int64_t time = parsed.times[i];
      // The difference in unsigned arithmetic: exact for any two int64 times, never overflows.
      if (why == TimeRefusal::none && refuse_late_ && clock &&
          time<*clock&& static_cast<std::uint64_t>(*clock) - static_cast<std::uint64_t>(time)>
              lateness) {
        why = TimeRefusal::late;
      }
      if (why != TimeRefusal::none) {
        flags[i] = refused_flag(why);
        continue;
      }
      if (!clock || time > *clock) clock = time;
      taken_.push_back(i);
      taken_keys_.push_back(parsed.byte_keys[i]);
      taken_times_.push_back(time);
    }
    taken_flags_.resize(taken_.size());
    const std::uint64_t kept = window_.insert_if_absent(
        std::span<const std::string_view>(taken_keys_), std::span<const std::int64_t>(taken_times_),
        std::span<std::uint8_t>(taken_flags_));
    for (std::size_t j = 0; j < taken_.size(); ++j) flags[taken_[j]] = taken_flags_[j];
    if (window_.overfull_generations() != overfull_seen_) report_overfull();
    return kept;
  }

  WindowedFilter window_;
  DirectorySaves directories_;
  bool refuse_late_ = false;
  std::string key_format_;
  std::vector<std::size_t> taken_;  // dedup_refusing(): the records not refused, and theirs
  std::vector<std::string_view> taken_keys_;
  std::vector<std::int64_t> taken_times_;
  std::vector<std::uint8_t> taken_flags_;
  OnFull on_full_ = OnFull::grow;
  std::string name_ = "the window";
  double drops_before_ = 0.0;  // expected false drops before this object's (a resumed run's)
  std::uint64_t overfull_seen_ = 0;
};

}  // namespace

void check_checkpoint_directory(const std::string& dir, const std::vector<NamedPath>& others) {
  namespace fs = std::filesystem;
  std::error_code error;
  const fs::file_status status = fs::status(dir, error);
  if (fs::exists(status) && !fs::is_directory(status)) {
    throw UsageError("--checkpoint " + dir + " is a file, not a directory");
  }
  constexpr std::string_view kLegacyFiles[] = {kFilterCheckpointFile, kWindowCheckpointFile};
  if (StateDirectory::holds_state(dir)) {
    // Another state directory (a --filter DIR/ of another job) would be overwritten by the
    // first checkpoint, and its files removed. A damaged manifest is the load's to name.
    bool verified = true;
    try {
      StateDirectory(dir).stored_kind();
    } catch (const FormatError&) {
      verified = false;
    }
    std::ifstream in(fs::path(dir) / "MANIFEST", std::ios::binary);
    const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    if (verified && !holds_checkpoint(std::as_bytes(std::span(bytes)))) {
      throw UsageError("--checkpoint " + dir +
                       " holds a bulkbloom state that is not a dedup checkpoint (a --filter "
                       "state directory?); a checkpoint needs a directory of its own");
    }
  } else if (StateDirectory::holds_other_files(dir, kLegacyFiles)) {
    throw UsageError("--checkpoint " + dir +
                     " is a directory that holds files other than a checkpoint; a checkpoint "
                     "removes the files of its earlier saves, so it needs a directory of its own "
                     "(name a new one, e.g. " +
                     dir + ".checkpoint)");
  }
  fs::path root = fs::weakly_canonical(fs::absolute(dir), error).lexically_normal();
  if (error) return;  // then no path can be found inside it either
  if (root.filename().empty()) root = root.parent_path();  // "ck/" names ck
  for (const NamedPath& other : others) {
    if (other.path == "-") continue;
    const fs::path place = fs::weakly_canonical(fs::absolute(other.path), error).parent_path();
    if (error) continue;
    if (std::ranges::mismatch(root, place).in1 == root.end()) {
      throw UsageError("the " + other.role + " " + other.path +
                       " is inside the --checkpoint directory " + dir +
                       ", which a checkpoint manages (it removes files there it no longer "
                       "needs): put the checkpoint in a directory of its own");
    }
  }
}

std::unique_ptr<DedupState> filter_state(CarriedFilter filter,
                                         std::optional<StateDirectory> loaded_from) {
  return std::make_unique<FilterState>(std::move(filter), std::move(loaded_from));
}

namespace {
constexpr std::string_view kWindowKeysLine = "bulkbloom-window-keys ";
}  // namespace

std::vector<std::byte> window_metadata(const std::string& key_format,
                                       std::span<const std::byte> rest) {
  const std::string line = std::string(kWindowKeysLine) + key_format + "\n";
  std::vector<std::byte> metadata(line.size() + rest.size());
  std::memcpy(metadata.data(), line.data(), line.size());
  std::ranges::copy(rest, metadata.begin() + static_cast<std::ptrdiff_t>(line.size()));
  return metadata;
}

std::optional<std::string> take_window_key_format(std::vector<std::byte>& metadata) {
  const std::string_view text(reinterpret_cast<const char*>(metadata.data()), metadata.size());
  const std::size_t end = text.find('\n');
  if (!text.starts_with(kWindowKeysLine) || end == std::string_view::npos) return std::nullopt;
  std::string format(text.substr(kWindowKeysLine.size(), end - kWindowKeysLine.size()));
  metadata.erase(metadata.begin(), metadata.begin() + static_cast<std::ptrdiff_t>(end + 1));
  return format;
}

std::unique_ptr<DedupState> window_state(WindowedFilter window,
                                         std::optional<StateDirectory> loaded_from) {
  return std::make_unique<WindowState>(std::move(window), std::move(loaded_from));
}

std::unique_ptr<DedupState> load_checkpoint_state(const std::filesystem::path& dir, bool window,
                                                  double default_fpr, const Options& options,
                                                  std::vector<std::byte>& metadata) {
  if (StateDirectory::holds_state(dir)) {
    StateDirectory directory(dir);
    if (window) {
      FileState state;
      WindowedFilter loaded = directory.load_window(&state, options);
      metadata = std::move(state.metadata);
      take_window_key_format(metadata);  // the checkpoint's run identity names the format
      return window_state(std::move(loaded), std::move(directory));
    }
    CarriedFilter loaded(directory.load_grown(&metadata, options));
    return filter_state(std::move(loaded), std::move(directory));
  }
  if (window) {
    auto saved = load_window_checkpoint(dir, options);
    if (!saved) return nullptr;
    metadata = std::move(saved->metadata);
    return window_state(std::move(saved->window));
  }
  const auto file = detail::find_checkpoint_file(dir, kFilterCheckpointFile);
  if (!file) return nullptr;
  return filter_state(CarriedFilter::load(*file, default_fpr, options, &metadata));
}

}  // namespace bulkbloom::cli
