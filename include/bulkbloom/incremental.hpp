/// @file
/// Carried state taken apart, so that saving it costs what changed (DESIGN §9, docs/FORMAT.md
/// "Incremental state"). A window (WindowedFilter, WindowShard) or a GrownFilter is its small
/// metadata plus parts: filters with a stable identity (PartId), of which only the last, the
/// open part, still takes keys. Every other part never changes again, so a caller writes it
/// once. The open part is saved as a base image plus a change log: the 64-bit hashes that went
/// into it since the log was last taken, which OR-ed into the base with the open part's layout
/// give its bits (an insert sets bits, never clears them; a key already held sets none and is
/// not logged).
///
/// Taking a state apart: enable_change_log() once, then at each checkpoint take_snapshot() (the
/// metadata, the parts, the log since the last take) and with_part_bits() for the parts the
/// caller does not hold yet; the parts that stopped being open (a window's rotated or sealed
/// filter, a grown filter's sealed generation) come with their final log
/// (StateSnapshot::closed), so that a part held as base + logs never needs its bits written.
/// Putting it together: restore_window() (restore_window_shard(), restore_grown()) from the
/// metadata and each part's bits (the open part's base), then replay_log() of every log taken
/// since that base (into a part held as base + logs by its index). The result's file bytes
/// (to_file_bytes(), GrownFilter::to_bytes()) equal those of the state that was taken apart.
/// StateDirectory does all of this into a directory of files.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "bulkbloom/format.hpp"
#include "bulkbloom/grown_filter.hpp"
#include "bulkbloom/part.hpp"
#include "bulkbloom/window.hpp"
#include "bulkbloom/window_shard.hpp"

namespace bulkbloom {

namespace detail {
struct StateManifest;
}  // namespace detail

/// A state taken apart by take_snapshot().
struct StateSnapshot {
  /// Everything of the state's file but the bits (configuration, clock, counters, each part's
  /// layout and keys, the caller's FileState or metadata), checksummed; restore_*() read it.
  std::vector<std::byte> metadata;
  /// Every part, oldest first (the order of the file's payloads). The last is the open part.
  std::vector<PartId> parts;
  /// What `log` says about the open part.
  OpenChange change = OpenChange::rewritten;
  /// Hashes to replay_log() into the open part, in the order they went in; empty when `change`
  /// is rewritten.
  std::vector<std::uint64_t> log;
  /// Each part of `parts` but the open one that stopped being open since the previous take, in
  /// the order they closed (none while logging is off). A caller that held such
  /// a part as a base plus logs completes it with this log instead of writing its bits; a caller
  /// that ignores it writes every part it does not hold yet, as before.
  std::vector<ClosedPart> closed;
};

/// Fills `bits` (exactly the part's bytes, all zero when called) with the saved bits of part
/// `index` of the metadata, whose identity is `id`: for the open part, its base (all zero when the
/// base is empty). A fill may leave zero bytes unwritten, and set bits one by one.
using PartFill =
    std::function<void(std::size_t index, const PartId& id, std::span<std::byte> bits)>;
/// Receives the bits of one part, valid during the call.
using PartSink = std::function<void(std::span<const std::byte> bits)>;

/// Starts logging what goes into the open part, from now; nothing changes if the log runs
/// already. A state that never calls it keeps no log and pays nothing. The log starts again
/// whenever the open part changes (rotation, growth) and grows until take_snapshot() takes it,
/// but never past StateDirectory::kBaseFraction of the open part's bytes for all the logs the
/// state holds (the open part's and the closed parts' not yet taken): the open part's log is then
/// dropped, and the next snapshot says OpenChange::rewritten.
/// An open part with no bit set is taken as started empty (OpenChange::since_empty).
void enable_change_log(WindowedFilter& window);
void enable_change_log(WindowShard& shard);
void enable_change_log(GrownFilter& filter);

/// The state taken apart (see StateSnapshot): the metadata with `state` (a window's or shard's
/// FileState, saved as to_file_bytes() saves it) or `caller_metadata` (a grown filter's, as
/// GrownFilter::to_bytes() saves it), and the log, which starts again empty.
StateSnapshot take_snapshot(WindowedFilter& window, const FileState& state = {});
StateSnapshot take_snapshot(WindowShard& shard, const FileState& state = {});
StateSnapshot take_snapshot(GrownFilter& filter, std::span<const std::byte> caller_metadata = {});

/// Hands the bits of part `index` (in StateSnapshot::parts order) to `sink`, without a copy
/// when the state is in host memory. Throws std::out_of_range for an index past the parts.
void with_part_bits(const WindowedFilter& window, std::size_t index, const PartSink& sink);
void with_part_bits(const WindowShard& shard, std::size_t index, const PartSink& sink);
void with_part_bits(const GrownFilter& filter, std::size_t index, const PartSink& sink);

/// The state that `metadata` (StateSnapshot::metadata) describes, each part's bits from `fill`,
/// on the backend chosen by `options`; `state` / `caller_metadata` get what was saved with it.
/// Throws FormatError naming `source` for metadata that is not a snapshot's of that kind, or
/// damaged.
WindowedFilter restore_window(std::span<const std::byte> metadata, const PartFill& fill,
                              FileState* state = nullptr, const Options& options = {},
                              const std::string& source = "window snapshot");
WindowShard restore_window_shard(std::span<const std::byte> metadata, const PartFill& fill,
                                 FileState* state = nullptr, const Options& options = {},
                                 const std::string& source = "window shard snapshot");
GrownFilter restore_grown(std::span<const std::byte> metadata, const PartFill& fill,
                          std::vector<std::byte>* caller_metadata = nullptr,
                          const Options& options = {},
                          const std::string& source = "grown filter snapshot");

/// The parts `metadata` describes, as StateSnapshot::parts lists them (for a reader that wants
/// to know which parts to fetch before restoring). Throws FormatError as restore_*() do.
std::vector<PartId> snapshot_parts(std::span<const std::byte> metadata,
                                   const std::string& source = "snapshot");

/// Sets the bits of `log` (a StateSnapshot::log) in the open part, nothing else: for a state
/// just restored from a base that the log was taken after. Counters and clock come from the
/// metadata, which was taken with the last log.
void replay_log(WindowedFilter& window, std::span<const std::uint64_t> log);
void replay_log(WindowShard& shard, std::span<const std::uint64_t> log);
void replay_log(GrownFilter& filter, std::span<const std::uint64_t> log);
/// Sets the bits of `log` (a ClosedPart::log, or a StateSnapshot::log for the last index) in part
/// `index` (in StateSnapshot::parts order) of a state just restored. Throws std::out_of_range
/// for an index past the parts.
void replay_log(WindowedFilter& window, std::size_t index, std::span<const std::uint64_t> log);
void replay_log(WindowShard& shard, std::size_t index, std::span<const std::uint64_t> log);
void replay_log(GrownFilter& filter, std::size_t index, std::span<const std::uint64_t> log);

/// A state directory (docs/FORMAT.md "State directories"): a state saved so that each save
/// writes what changed since the last one. Every file is written once and never rewritten: the
/// open part is a base file plus log files, and a part that stops being open keeps them, completed
/// by its final log (StateSnapshot::closed), so that its bits are written only when no log tells
/// them; a manifest, replaced atomically last, names the files of the committed state, and files
/// no committed manifest names are removed after each commit. A crash at any moment leaves the
/// last committed state.
///
/// A directory has one writer at a time (the caller's lock, as for any state file). One object
/// carries one state: save() the state that load_*() returned, or the same state each time;
/// its change log is enabled by load_*() and by the first save(). A save after a failed one
/// writes the open part whole again.
class StateDirectory {
 public:
  /// A log is folded into a new base once the logs since the base pass this fraction of the
  /// open part's bytes (docs/FORMAT.md says why this fraction).
  static constexpr double kBaseFraction = 1.0;

  /// For saving into (created on the first save) or loading from `dir`.
  explicit StateDirectory(std::filesystem::path dir);
  StateDirectory(StateDirectory&&) noexcept;
  StateDirectory& operator=(StateDirectory&&) noexcept;
  ~StateDirectory();

  /// Whether `dir` holds a committed state (its manifest). Throws IoError if `dir` exists but is
  /// not a directory or cannot be searched.
  static bool holds_state(const std::filesystem::path& dir);

  /// Whether saving into `dir` would mix the state with files it does not own: `dir` holds no
  /// committed state but files other than those of saves never committed and than `also_ours`
  /// (names the caller's older formats left there, and their saves' `NAME.tmp.*`). Throws
  /// IoError as holds_state() does.
  static bool holds_other_files(const std::filesystem::path& dir,
                                std::span<const std::string_view> also_ours = {});

  /// What a state directory holds.
  enum class Kind : std::uint32_t { window = 1, window_shard = 2, grown = 3 };
  /// The kind of the committed state, from its verified manifest. Throws FormatError for a
  /// damaged manifest, IoError (a missing one).
  Kind stored_kind() const;

  /// Removes the files that no committed manifest names (of saves that failed or were killed,
  /// and of commits since replaced); all of its own files when nothing was committed. For the
  /// directory's one writer, under its lock, before it loads: a save in progress would lose its
  /// files. Best effort: a commit removes what stays.
  void remove_uncommitted() const;

  /// Commits `window` with `state` (as save() would write them to a window file), `shard`, or
  /// `filter` with `caller_metadata`. Returns the bytes this save wrote. Throws IoError.
  std::uint64_t save(WindowedFilter& window, const FileState& state = {});
  std::uint64_t save(WindowShard& shard, const FileState& state = {});
  std::uint64_t save(GrownFilter& filter, std::span<const std::byte> caller_metadata = {});

  /// The committed state, every file verified, with its change log enabled for the next save.
  /// Throws FormatError for a damaged or missing file or a state of another kind, IoError.
  WindowedFilter load_window(FileState* state = nullptr, const Options& options = {});
  WindowShard load_window_shard(FileState* state = nullptr, const Options& options = {});
  GrownFilter load_grown(std::vector<std::byte>* caller_metadata = nullptr,
                         const Options& options = {});

  const std::filesystem::path& path() const { return dir_; }

 private:
  std::uint64_t commit(StateSnapshot snapshot, std::uint32_t kind,
                       const std::function<void(std::size_t, const PartSink&)>& bits_of);
  detail::StateManifest read_manifest(std::uint32_t kind) const;

  std::filesystem::path dir_;
  std::unique_ptr<detail::StateManifest> committed_;  // what the last commit of this object named
  bool synced_ = false;  // the state's log runs from the committed state's last save
};

}  // namespace bulkbloom
