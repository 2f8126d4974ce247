// What a dedup run carries from record to record and from run to run — a growing filter or a
// sliding window — behind one interface, so that the command and the scan never ask which.
#pragma once

#include <bulkbloom/incremental.hpp>
#include <bulkbloom/window.hpp>

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "cli/carried_filter.hpp"
#include "cli/progress.hpp"
#include "cli/record_format.hpp"

namespace bulkbloom::cli {

struct NamedPath;

/// The dedup state of a run: it decides which records are new, saves itself (to the --filter
/// file or a checkpoint) and describes itself in the summary.
class DedupState {
 public:
  virtual ~DedupState() = default;

  /// How the run goes on from here: what a filter does when full, the records the run is
  /// expected to bring and how many a resumed run had done, the false drops expected so far.
  struct RunPlan {
    OnFull on_full = OnFull::grow;
    std::uint64_t expected_records = 0;
    std::uint64_t records_done = 0;
    double expected_false_drops = 0.0;
    std::string name;            ///< "filter F" or "the filter", for messages
    WindowSizing window_sizing;  ///< How a window sizes the generations it starts.
    /// Event-time window (dedup --refused): a record more than the lateness behind the clock is
    /// refused rather than decided, as the Flink operator does (docs/WINDOW.md "Late records").
    bool refuse_late = false;
    /// Checkpoints will be saved: the state logs what changes from the start, so that each
    /// checkpoint writes only that (bulkbloom/incremental.hpp).
    bool log_changes = false;
    /// The run's --format name: a window saves it beside its metadata (window_metadata).
    std::string key_format;
  };
  /// Applies `plan`; a filter loaded past its promised rate is reported here (a warning, or
  /// under OnFull::error an Error).
  virtual void start_run(const RunPlan& plan) = 0;

  /// Dedups one chunk's keys in order (`int_keys` or parsed.byte_keys, with parsed.times for an
  /// event-time window): flags[i] = 1 for a record to keep, refused_flag() for one refused
  /// (parsed.refusals, or late under RunPlan::refuse_late), which is neither inserted nor moves
  /// the clock. Returns the number of 1s.
  virtual std::uint64_t dedup(const ParsedRecords& parsed, std::span<const std::uint64_t> int_keys,
                              std::span<std::uint8_t> flags) = 0;
  /// Replaces `path` atomically with the state, `metadata` and the key count `keys`. Returns the
  /// bytes written.
  virtual std::uint64_t save(const std::filesystem::path& path, std::span<const std::byte> metadata,
                             std::uint64_t keys) const = 0;
  /// Commits the state, `metadata` and `keys` into the state directory `dir` (docs/FORMAT.md
  /// "State directories"), writing what changed since the state's last save into `dir`; returns
  /// the bytes written. The state logs its changes for one directory at a time: after a save
  /// into another directory, the next save into `dir` writes its open part whole.
  virtual std::uint64_t save_directory(const std::filesystem::path& dir,
                                       std::span<const std::byte> metadata, std::uint64_t keys) = 0;
  /// save_directory() into the checkpoint directory `dir`, then removes the single checkpoint
  /// file of an older bulkbloom, which the state directory replaces.
  virtual void save_checkpoint(const std::filesystem::path& dir,
                               std::span<const std::byte> metadata, std::uint64_t keys) = 0;
  /// Never-seen records expected to have been wrongly dropped, `kept` records having been kept.
  virtual double expected_false_drops(std::uint64_t kept) const = 0;
  /// Adds the state's own lines to the summary: the expected false drops and how they are
  /// reckoned, the rate now, growth or window.
  virtual void describe(Summary& summary, std::uint64_t kept) const = 0;
  /// The filter whose layout and implementation the summary shows.
  virtual const Filter& shown_filter() const = 0;
};

/// A growing filter as a dedup state; `loaded_from`: the state directory it was loaded from
/// (StateDirectory::load_grown()), whose next save then writes only what changed.
std::unique_ptr<DedupState> filter_state(CarriedFilter filter,
                                         std::optional<StateDirectory> loaded_from = {});
/// A sliding window as a dedup state, as filter_state().
std::unique_ptr<DedupState> window_state(WindowedFilter window,
                                         std::optional<StateDirectory> loaded_from = {});

/// A window's metadata as dedup saves it: a line naming the format its keys were read in (a
/// window keeps none of its own, and integer and byte keys hash differently), then `rest` (the run
/// record, or the checkpoint). docs/FORMAT.md, "What dedup keeps in a window's metadata".
std::vector<std::byte> window_metadata(const std::string& key_format,
                                       std::span<const std::byte> rest);
/// The key format window_metadata() put in `metadata`, which is left holding the rest; nothing
/// for a window saved otherwise (by an older bulkbloom, or by Python), whose format is unknown.
std::optional<std::string> take_window_key_format(std::vector<std::byte>& metadata);

/// Throws UsageError unless --checkpoint `dir` (a real path) is bulkbloom's to manage: new,
/// empty, or holding a checkpoint, and none of `others` (the run's inputs, outputs and state)
/// inside it. A checkpoint removes the files of its earlier saves: a directory shared with other
/// files would lose those whose names look alike.
void check_checkpoint_directory(const std::string& dir, const std::vector<NamedPath>& others);

/// The checkpoint in `dir` (a window's when `window`, else a filter's), with its metadata, or
/// null if there is none: a state directory, or the single file of an older bulkbloom. A
/// directory that cannot be searched is an IoError. `default_fpr` is what a filter checkpoint
/// of an older bulkbloom promises.
std::unique_ptr<DedupState> load_checkpoint_state(const std::filesystem::path& dir, bool window,
                                                  double default_fpr, const Options& options,
                                                  std::vector<std::byte>& metadata);

}  // namespace bulkbloom::cli
