/// @file
/// Sliding-window dedup: drop a key if it arrived within the last T, forget it some time after,
/// in bounded memory. A ring of G generations (ordinary filters), each sized for its own period;
/// docs/WINDOW.md has the rules, the guarantees and the sizing math.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "bulkbloom/filter.hpp"
#include "bulkbloom/format.hpp"
#include "bulkbloom/layout.hpp"
#include "bulkbloom/part.hpp"

namespace bulkbloom {

namespace detail {
struct WindowAccess;
class ShardHashes;
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
  /// The layout the configuration asks for: every generation has its shape, hash, seed and block
  /// index, and at least its blocks (a generation started when more keys come is larger).
  Layout generation;
  /// The promised false-positive rate of the whole window: the union's when every generation
  /// holds the keys it is sized for. 0 when not known (windows saved before it was recorded):
  /// every generation then keeps `generation`'s size.
  double fpr = 0.0;
  /// Every generation's block count is a multiple of it, the configured one's too. A window
  /// whose generations are sized per period can be cut into S shards when S divides it
  /// (docs/WINDOW.md "Shards"); shardable_by() sets it.
  std::uint32_t block_multiple = 1;

  /// Clock units between rotations: ceil((T + L) / (G - 1)).
  std::uint64_t period() const;
  /// A key whose last arrival is this far (clock units) behind the clock is forgotten: G·period().
  std::uint64_t forget_after() const;
  /// Bytes of all generations together at the configured size (WindowedFilter::memory_bytes() is
  /// what a window holds now).
  std::uint64_t memory_bytes() const { return generations * generation.size_bytes(); }
  /// The rate each generation is sized for, 1 − (1 − fpr)^(1/G); 0 when fpr is not known.
  double generation_fpr() const;
  /// Modelled false-positive rate of the whole window when each generation holds
  /// `keys_per_generation` distinct keys: 1 − (1 − fpr_g)^G.
  double expected_fpr(std::uint64_t keys_per_generation) const;
  /// The most keys a generation of at most `blocks` blocks (rounded down to the block multiple)
  /// holds at generation_fpr(): as WindowSizing::max_keys it keeps every generation a rotation
  /// starts within `blocks` (a bound for memory). 0 when not even one key fits there or the
  /// promise is not known.
  std::uint64_t keys_within(std::uint64_t blocks) const;

  /// Throws std::invalid_argument naming the bad field and its limit.
  void validate() const;
  /// This configuration with block_multiple a multiple of `num_shards` too (their least common
  /// multiple) and the configured block count rounded up to it, so that its windows can be cut
  /// into `num_shards` shards whatever sizes their generations take. Throws
  /// std::invalid_argument if that exceeds Layout::kMaxBlocks.
  WindowConfig shardable_by(std::uint32_t num_shards) const;
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

/// How a window sizes each generation it starts (docs/WINDOW.md "Sizing per period"): for the
/// most keys a generation of the window took in its period (the periods before it), at least
/// `min_keys` and the configuration's size, at most `max_keys` when it is not 0.
struct WindowSizing {
  std::uint64_t min_keys = 0;  ///< Keys every new generation is sized for at least.
  std::uint64_t max_keys = 0;  ///< Keys no new generation is sized beyond (0: no bound).
};

/// A generation that took more keys in its period than it is sized for: its rate is past the
/// window's promise until it leaves the window.
struct OverfullGeneration {
  std::int64_t period = 0;     ///< The period it covers (clock / period()).
  std::uint64_t keys = 0;      ///< Keys it had taken when found over.
  std::uint64_t capacity = 0;  ///< Keys it is sized for.
};

/// A sliding-window dedup filter: G generations in a ring, each sized for its period. Move-only: a
/// moved-from window is only fit to be assigned to or destroyed, and every call that reaches its
/// generations throws std::logic_error.
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
  /// Keys generation `age` took in its period (keys new to it; repeats add no bits), in all its
  /// filters.
  std::uint64_t generation_keys(std::uint32_t age) const;
  /// Keys the filter now taking generation `age`'s keys is sized for, so that its period stays
  /// at config().generation_fpr(); 0 when the promise is not known.
  std::uint64_t generation_capacity(std::uint32_t age) const;
  /// Bytes of generation `age`'s filters, the sealed ones included.
  std::uint64_t generation_memory(std::uint32_t age) const;
  /// Bytes of all generations as they are now.
  std::uint64_t memory_bytes() const;
  /// False-positive rate of the window as it is now: 1 − Π(1 − current_fpr of each generation).
  double current_fpr() const;

  /// The sizing of generations started from now on. If the newest generation holds keys but is
  /// sized for fewer than `sizing.min_keys`, it is sealed (kept for lookups until its period
  /// leaves the window) and a larger filter takes the rest of its period's keys, at the rate the
  /// sealed one leaves to the period (docs/WINDOW.md "Sizing per period"). Nothing changes for a
  /// window whose promise is not known. Throws std::invalid_argument if max_keys is not 0 and
  /// below min_keys.
  void set_sizing(const WindowSizing& sizing);
  const WindowSizing& sizing() const { return sizing_; }
  /// Generations found over their capacity since this object was made or loaded (each counted
  /// once), and the latest of them.
  std::uint64_t overfull_generations() const { return overfull_count_; }
  std::optional<OverfullGeneration> last_overfull() const { return last_overfull_; }
  /// Never-seen keys expected to have been wrongly reported seen by this object's
  /// insert_if_absent calls: summed over the records reported new, at the window's modelled
  /// false-positive rate at each one (each generation's model at the keys it held then).
  double expected_false_drops() const { return expected_false_drops_; }

 private:
  friend struct detail::WindowAccess;
  // An empty window whose generations are written when made only if `write` (see the public
  // constructor); one that is filled next is written there instead (WindowAccess::unwritten).
  WindowedFilter(const WindowConfig& config, const Options& options, bool write);
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
  void start_generation(std::uint32_t slot, const Layout& layout);
  void reset_generation(std::uint32_t slot, const Layout& layout);
  Layout whole_layout(const Layout& layout) const;
  std::span<const std::uint64_t> hashes_for(const Filter& filter,
                                            std::span<const std::uint64_t> hashes) const;
  Layout layout_for(std::uint64_t keys, double rate) const;
  Layout next_generation_layout() const;
  double open_rate(std::uint32_t slot) const;
  void grow_newest(std::uint64_t keys);
  double drop_odds(std::uint64_t keys_before, std::uint64_t keys_after) const;
  std::uint64_t slot_of(std::uint32_t age) const;
  void require_clock(WindowClock clock, const char* call) const;
  void require_generations(const char* call) const;

  WindowConfig config_;
  Options options_;  // for the generations started at rotations
  // A generation's filter that stopped taking keys when a larger one took over its period.
  struct SealedPart {
    Filter filter;
    std::uint64_t keys;
    std::uint64_t window_keys;
  };
  // Per slot of the ring (one per generation): the filter taking the period's keys (ring_), the
  // keys it took, the whole window's keys in it (below), the keys it is sized for (0: promise
  // unknown), whether it went over that, and the filters of the same period sealed before it
  // (oldest first).
  std::vector<Filter> ring_;  // ring_[newest_] is the newest generation
  std::vector<std::uint64_t> keys_;
  std::vector<std::uint64_t> window_keys_;
  std::vector<std::uint64_t> capacity_;
  std::vector<bool> overfull_;
  std::vector<std::vector<SealedPart>> sealed_;
  WindowSizing sizing_;
  std::uint64_t configured_capacity_ = 0;  // keys config_.generation holds at the promise
  // A window shard's window of its blocks (src/shard/window_shard.cpp) holds 1/parts_ of each
  // generation of the whole window, whose configured layout is whole_generation_, and is fed the
  // whole window's hashes, which shard_hashes_ moves into each filter's blocks. It sizes and
  // counts in the whole window's keys (window_keys_: given by the caller, or its own times
  // parts_), so that sizes and capacities are the whole window's. A window of its own has
  // parts_ = 1, whole_generation_ = config_.generation and no shard_hashes_.
  Layout whole_generation_;
  std::uint32_t parts_ = 1;
  std::shared_ptr<const detail::ShardHashes> shard_hashes_;
  std::uint64_t overfull_count_ = 0;
  std::optional<OverfullGeneration> last_overfull_;
  double expected_false_drops_ = 0.0;
  std::uint32_t newest_ = 0;       // index of the newest generation in ring_
  bool started_ = false;           // whether the clock has a value (event time: a record came)
  std::int64_t newest_epoch_ = 0;  // period number the newest generation covers
  std::int64_t clock_time_ = 0;    // event time: the largest time seen
  std::uint64_t records_seen_ = 0;
  std::uint64_t rotations_ = 0;
  // The change log of bulkbloom/incremental.hpp, kept only once enabled: the hashes new to the
  // open filter (ring_[newest_]) since the log was last taken, whether that filter was started
  // empty since then (every change of the open filter restarts the log), and whether the log
  // passed the filter's bytes and was dropped (then only the bits tell, until the next take).
  std::vector<std::uint64_t> change_log_;
  bool logging_ = false;
  bool log_from_empty_ = false;
  bool log_dropped_ = false;
  // The final logs of the filters that stopped being open since the log was last taken (sealed
  // by a rotation or by a larger filter taking over the period), so that a caller holding such a
  // filter as base + logs completes it without its bits; take_snapshot() hands over those of the
  // filters the window still holds.
  std::vector<ClosedPart> closed_logs_;
  void close_log(const Filter& closed, std::int64_t period, std::uint32_t part);
  void restart_log();
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
