/// @file
/// Sliding-window dedup: drop a key if it arrived within the last T, forget it some time after,
/// in bounded memory. A ring of G equal generations (ordinary filters); docs/WINDOW.md has the
/// rules, the guarantees and the sizing math.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "bulkbloom/filter.hpp"
#include "bulkbloom/format.hpp"
#include "bulkbloom/layout.hpp"

namespace bulkbloom {

namespace detail {
struct WindowAccess;
}  // namespace detail

/// What moves a window forward.
enum class WindowClock : std::uint8_t {
  records = 0,     ///< The count of records processed (every record, new or dropped).
  event_time = 1,  ///< The records' own integer timestamps (any unit, e.g. seconds).
};

/// The shape of a window: its clock, its length T, its G generations and their layout.
struct WindowConfig {
  /// Largest number of generations.
  static constexpr std::uint32_t kMaxGenerations = 64;

  WindowClock clock = WindowClock::records;  ///< What moves the window.
  /// T: a repeat this close (in clock units) to an earlier arrival of its key is always dropped.
  std::uint64_t window = 1;
  /// G, 2 <= G <= kMaxGenerations. More generations forget closer to T but cost more lookups.
  std::uint32_t generations = 4;
  /// L (event_time only): how far a record's time may trail the largest time seen before it
  /// while repeats within T of event time are still always dropped.
  std::uint64_t lateness = 0;
  /// The layout of each generation.
  Layout generation;

  /// Clock units between rotations: ceil((T + L) / (G - 1)).
  std::uint64_t period() const;
  /// A key whose last arrival is this far (clock units) behind the clock is forgotten: G·period().
  std::uint64_t forget_after() const;
  /// Bytes of all generations together.
  std::uint64_t memory_bytes() const { return generations * generation.size_bytes(); }
  /// Modelled false-positive rate of the whole window when each generation holds
  /// `keys_per_generation` distinct keys: 1 − (1 − fpr_g)^G.
  double expected_fpr(std::uint64_t keys_per_generation) const;

  /// Throws std::invalid_argument naming the bad field and its limit.
  void validate() const;
  /// One line for people, e.g. "event_time window 129600 + lateness 0 over 4 generations ...".
  std::string describe() const;

  /// A record-count window of `window_records` whose union FPR stays at or under `fpr` when full:
  /// each generation holds period() records at 1 − (1 − fpr)^(1/G).
  static WindowConfig for_records(std::uint64_t window_records, double fpr,
                                  std::uint32_t generations = 4);
  /// An event-time window of length `window` (and lateness) for `records_per_unit` records per
  /// time unit at most; each generation is sized for the records of one period() as above.
  static WindowConfig for_event_time(double records_per_unit, std::uint64_t window, double fpr,
                                     std::uint32_t generations = 4, std::uint64_t lateness = 0);
};

/// A sliding-window dedup filter: G generations of one layout in a ring. Move-only: a moved-from
/// window is only fit to be assigned to or destroyed, and every call that reaches its generations
/// throws std::logic_error.
///
/// A record is new when no generation may contain its key; every record (new or not) is inserted
/// into the newest generation. Each period() the oldest generation is cleared and becomes the
/// newest. On every backend, insert_if_absent() returns exactly what the sequential per-record
/// loop (rotate if due; new = no generation contains the key; insert into the newest) returns.
class WindowedFilter {
 public:
  /// An empty window. Throws std::invalid_argument for a bad config, and what Filter throws.
  explicit WindowedFilter(const WindowConfig& config, const Options& options = {});

  WindowedFilter(WindowedFilter&&) noexcept;
  WindowedFilter& operator=(WindowedFilter&&) noexcept;
  WindowedFilter(const WindowedFilter&) = delete;
  WindowedFilter& operator=(const WindowedFilter&) = delete;
  ~WindowedFilter();

  /// The window's configuration.
  const WindowConfig& config() const { return config_; }
  /// The running implementation of the generations, e.g. "cpu/scalar".
  std::string implementation() const;

  /// Record-count clock: dedups `keys` in order; is_new[i] = 1 if no generation held keys[i].
  /// Returns the number of 1s. Throws std::invalid_argument on an event-time window.
  std::uint64_t insert_if_absent(std::span<const std::uint64_t> keys,
                                 std::span<std::uint8_t> is_new);
  /// As above for byte-string keys (XXH64 with the layout's seed).
  std::uint64_t insert_if_absent(std::span<const std::string_view> keys,
                                 std::span<std::uint8_t> is_new);
  /// Event-time clock: `times[i]` is the time of record i. Records may come out of order; the
  /// window's clock is the largest time seen (docs/WINDOW.md). Throws std::invalid_argument on a
  /// record-count window.
  std::uint64_t insert_if_absent(std::span<const std::uint64_t> keys,
                                 std::span<const std::int64_t> times,
                                 std::span<std::uint8_t> is_new);
  /// As above for byte-string keys.
  std::uint64_t insert_if_absent(std::span<const std::string_view> keys,
                                 std::span<const std::int64_t> times,
                                 std::span<std::uint8_t> is_new);

  /// Writes 1 to `out[i]` if some generation may contain `keys[i]`. A pure read.
  void contains(std::span<const std::uint64_t> keys, std::span<std::uint8_t> out) const;
  /// contains() for byte strings.
  void contains(std::span<const std::string_view> keys, std::span<std::uint8_t> out) const;
  /// True if some generation may contain `key`.
  bool contains(std::uint64_t key) const;

  /// Event-time clock: moves the clock to `time` with no record (an idle source's progress),
  /// rotating as due. Earlier times change nothing. Throws std::invalid_argument on a
  /// record-count window.
  void advance_to(std::int64_t time);

  /// Records processed so far (new and dropped).
  std::uint64_t records_seen() const { return records_seen_; }
  /// Event-time clock: the largest time seen, or nothing before the first record.
  std::optional<std::int64_t> clock_time() const;
  /// Periods the clock has moved on since it started. Each clears a generation; a jump of G or
  /// more periods clears all G at once and still counts every period, so the count depends only
  /// on the first and the current period (which window shards rely on, DESIGN §9).
  std::uint64_t rotations() const { return rotations_; }
  /// Generation by age: 0 is the newest, G − 1 the oldest.
  const Filter& generation(std::uint32_t age) const;
  /// False-positive rate of the window as it is now: 1 − Π(1 − current_fpr of each generation).
  double current_fpr() const;

 private:
  friend struct detail::WindowAccess;
  template <typename Key>
  std::uint64_t dedup_keys(std::span<const Key> keys, std::span<const std::int64_t> times,
                           std::span<std::uint8_t> is_new);
  template <typename Key>
  void contains_keys(std::span<const Key> keys, std::span<std::uint8_t> out) const;
  std::uint64_t dedup_hashes(std::span<const std::uint64_t> hashes,
                             std::span<const std::int64_t> times, std::uint8_t* is_new);
  std::uint64_t dedup_segment(std::span<const std::uint64_t> hashes, std::uint8_t* is_new);
  void contains_hashes(std::span<const std::uint64_t> hashes, std::uint8_t* out) const;
  void move_clock(std::int64_t time);
  void rotate_to_epoch(std::int64_t epoch);
  void require_clock(WindowClock clock, const char* call) const;
  void require_generations(const char* call) const;

  WindowConfig config_;
  std::vector<Filter> ring_;       // ring_[newest_] is the newest generation
  std::uint32_t newest_ = 0;       // index of the newest generation in ring_
  bool started_ = false;           // whether the clock has a value (event time: a record came)
  std::int64_t newest_epoch_ = 0;  // period number the newest generation covers
  std::int64_t clock_time_ = 0;    // event time: the largest time seen
  std::uint64_t records_seen_ = 0;
  std::uint64_t rotations_ = 0;
};

/// Writes the whole window (generations, clock, rotation state) and `state` to `path` as one
/// window file (docs/FORMAT.md), atomically as save() does. Throws IoError.
void save(const WindowedFilter& window, const std::filesystem::path& path,
          const FileState& state = {});

/// Reads and fully verifies a window file onto the backend chosen by `options`.
/// Throws FormatError for a bad file, IoError when it cannot be read.
WindowedFilter load_window(const std::filesystem::path& path, FileState* state = nullptr,
                           const Options& options = {});

/// Exactly the bytes save(window, path, state) writes, in memory (for checkpoints of stream
/// processors and pickling).
std::vector<std::byte> to_file_bytes(const WindowedFilter& window, const FileState& state = {});

/// load_window() of file bytes held in memory; `source` names them in errors. A shard's bytes
/// (bulkbloom/window_shard.hpp) load only when S = 1.
WindowedFilter load_window(std::span<const std::byte> bytes, FileState* state = nullptr,
                           const Options& options = {}, const std::string& source = "window bytes");

/// A window together with the caller's metadata from one checkpoint.
struct WindowCheckpoint {
  WindowedFilter window;            ///< The window as it was at the checkpoint.
  std::vector<std::byte> metadata;  ///< The caller's bytes saved with it.
  std::uint64_t keys_inserted = 0;  ///< The caller's key counter saved with it.
};

/// Saves a window checkpoint into directory `dir` (created if missing) as one file written
/// atomically, so the window and `state` always belong to the same moment. Throws IoError.
void save_checkpoint(const std::filesystem::path& dir, const WindowedFilter& window,
                     const FileState& state);

/// The latest window checkpoint in `dir`, or nothing if none was ever completed there.
/// Throws FormatError if the checkpoint file exists but is damaged, IoError if `dir` is not a
/// directory or cannot be searched (a resumed run must not start over by mistake).
std::optional<WindowCheckpoint> load_window_checkpoint(const std::filesystem::path& dir,
                                                       const Options& options = {});

}  // namespace bulkbloom
