// Library-internal access to a WindowedFilter's ring and clock, for its file format and for
// window shards (DESIGN §9), which drive a window of the shard's blocks with hashes already moved
// into them and with the whole window's clock.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "bulkbloom/window.hpp"

namespace bulkbloom::detail {

struct WindowAccess {
  /// Every filter of the window: generations oldest first, each its sealed filters (oldest
  /// first) and then the one taking its keys.
  static std::vector<const Filter*> oldest_first(const WindowedFilter& w);
  // The newly constructed window's ring, oldest first (its newest is ring_[G - 1] after this).
  static std::vector<Filter>& ring_oldest_first(WindowedFilter& w) {
    w.newest_ = w.config_.generations - 1;
    return w.ring_;
  }

  /// An empty window whose generations are not written when made, for restore_oldest_first()
  /// and a fill of every byte of every filter it returns: each page is written once, by the
  /// fill, not zeroed first.
  static WindowedFilter unwritten(const WindowConfig& config, const Options& options) {
    return WindowedFilter(config, options, false);
  }
  /// What a window file records of each filter besides its bits, in oldest_first() order.
  struct PartRecord {
    std::uint64_t generation;  ///< 0 for the oldest generation, G - 1 for the newest
    std::uint64_t num_blocks;
    std::uint64_t keys;  ///< keys it took in its period
    /// The whole window's keys in it as the window knows them: `keys` for a window of its own,
    /// for a window shard's the sum over all shards as last given, plus the shard's keys since
    /// times the shard count (docs/WINDOW.md "Sizing shards").
    std::uint64_t window_keys;
  };
  static std::vector<PartRecord> records_oldest_first(const WindowedFilter& w);
  /// Gives the newly constructed window the filters `records` describe (every generation at
  /// least one, in order; its newest is ring_[G - 1] after this) with their key counts, and
  /// returns them in the same order, to be filled.
  static std::vector<Filter*> restore_oldest_first(WindowedFilter& w,
                                                   std::span<const PartRecord> records);
  /// For a window read from a file that kept no key counts: each generation's keys estimated
  /// from its bits (the most keys at which the model gives the rate its bits give).
  static void estimate_keys_from_bits(WindowedFilter& w);
  /// Makes the newly constructed `w` a window shard's window of its blocks: 1/parts of each
  /// generation of a whole window whose configured layout is `whole_generation`, fed the whole
  /// window's hashes, which `hashes` moves into each filter's blocks.
  static void make_part(WindowedFilter& w, const Layout& whole_generation, std::uint32_t parts,
                        std::shared_ptr<const ShardHashes> hashes);
  /// The whole window's block count of a filter of `w` of `num_blocks` blocks (a window shard's
  /// filters hold a share of it).
  static std::uint64_t whole_blocks(const WindowedFilter& w, std::uint64_t num_blocks) {
    Layout layout = w.config_.generation;
    layout.num_blocks = num_blocks;
    return w.whole_layout(layout).num_blocks;
  }
  /// Sets each filter's window_keys (PartRecord), in records_oldest_first() order; `keys` has
  /// one entry for each filter.
  static void set_window_keys(WindowedFilter& w, std::span<const std::uint64_t> keys);

  struct Clock {
    bool started;
    std::int64_t newest_epoch;
    std::int64_t clock_time;
    std::uint64_t records_seen;
    std::uint64_t rotations;
    friend bool operator==(const Clock&, const Clock&) = default;
  };
  static Clock clock(const WindowedFilter& w) {
    return {w.started_, w.newest_epoch_, w.clock_time_, w.records_seen_, w.rotations_};
  }
  static void set_clock(WindowedFilter& w, const Clock& c) {
    w.started_ = c.started;
    w.newest_epoch_ = c.newest_epoch;
    w.clock_time_ = c.clock_time;
    w.records_seen_ = c.records_seen;
    w.rotations_ = c.rotations;
  }

  /// insert_if_absent() of hashes already in the window's layout, with the whole window's clock
  /// at each record: its position (records clock; strictly increasing from records_seen(), checked
  /// by the caller) or a time (event time).
  static std::uint64_t dedup_at(WindowedFilter& w, std::span<const std::uint64_t> hashes,
                                std::span<const std::int64_t> clocks, std::uint8_t* is_new);
  /// contains() of hashes already in the window's layout.
  static void contains_hashes(const WindowedFilter& w, std::span<const std::uint64_t> hashes,
                              std::uint8_t* out);
  /// Records clock: the whole window has processed `records` records.
  static void advance_records(WindowedFilter& w, std::uint64_t records);

  /// Whether `filter` has no bit set: in host memory a scan that stops at the first set byte (a
  /// restored open part is seldom empty, and a popcount of it is a pass over all its words).
  static bool no_bit_set(const Filter& filter);
  /// The change log of bulkbloom/incremental.hpp: starts it empty, from now, unless it runs.
  static void enable_log(WindowedFilter& w) {
    if (w.logging_) return;
    w.require_generations("enable_change_log");
    w.logging_ = true;
    w.change_log_.clear();
    w.log_from_empty_ = no_bit_set(w.ring_[w.newest_]);
    w.log_dropped_ = false;
    w.closed_logs_.clear();
  }
  /// What take_snapshot() takes of the log; the log starts again empty.
  struct TakenLog {
    bool logging;     ///< whether the log was enabled (else `hashes` tells nothing)
    bool from_empty;  ///< the open filter started empty since the last take
    bool dropped;     ///< the log passed the open filter's bytes: only its bits tell
    std::vector<std::uint64_t> hashes;
    /// The final logs of the filters that stopped being open since the last take, in order.
    std::vector<ClosedPart> closed;
  };
  static TakenLog take_log(WindowedFilter& w) {
    TakenLog taken{w.logging_, w.log_from_empty_, w.log_dropped_, std::move(w.change_log_),
                   std::move(w.closed_logs_)};
    w.change_log_.clear();
    w.closed_logs_.clear();
    w.log_from_empty_ = false;
    w.log_dropped_ = false;
    return taken;
  }
  /// The filter taking the newest generation's keys (the last of oldest_first()).
  static Filter& open_filter(WindowedFilter& w) { return w.ring_[w.newest_]; }
};

}  // namespace bulkbloom::detail
