/// @file
/// The parts of carried state (bulkbloom/incremental.hpp): a part's identity (PartId) and the
/// final change log of a part that stopped being open (ClosedPart), apart from incremental.hpp so
/// that the filters that keep such logs (WindowedFilter, GrownFilter) hold them as this type.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace bulkbloom {

/// The identity of one part of a state. Two parts of one state's history with the same identity
/// hold the same bits, except the open part, which takes keys until it stops being open (a
/// rotation, or a larger filter taking over its period).
struct PartId {
  /// Window: the period the generation covers (clock / period()); before the clock started,
  /// minus the generation's age (0 the newest). Grown filter: the generation's index, 0 the
  /// oldest.
  std::int64_t period = 0;
  /// Which of the period's filters, 0 the first (a window's generation grows by sealing its
  /// filter and starting a larger one); always 0 for a grown filter.
  std::uint32_t part = 0;
  /// Its block count.
  std::uint64_t num_blocks = 0;
  /// A part of an event-time window whose clock has not started (no record yet). Its first
  /// record may fall in any period, 0 and those just before it too, and the periods after it
  /// take keys: without this flag a part named before the clock would share its identity with
  /// a later part of another period's keys (docs/FORMAT.md "Incremental state").
  bool before_clock = false;

  /// A name fit for a file name, e.g. "p42-0-b65536" (period -3: "pm3-0-b65536"; before the
  /// clock, the same name behind "u": "upm3-0-b65536").
  std::string name() const;
  friend bool operator==(const PartId&, const PartId&) = default;
};

/// What the change log of a snapshot says about the open part.
enum class OpenChange : std::uint8_t {
  /// The log holds what went into the open part since the previous take_snapshot() (or since
  /// enable_change_log()), which had the same open part: its bits are the bits then plus the log.
  since_taken = 0,
  /// The open part was started empty since then: its bits are all-zero bits plus the log.
  since_empty = 1,
  /// The log does not tell (logging was not enabled, or the bits changed by a merge): only the
  /// open part's bits (with_part_bits) give it.
  rewritten = 2,
};

/// The final log of a part that stopped being open since the previous take_snapshot() (a window
/// rotated, a larger filter took over the period, or a grown filter added a generation after it)
/// and that the state still holds.
struct ClosedPart {
  PartId id;
  /// since_taken: the part was open at the previous take; its bits are its bits then plus `log`.
  /// since_empty: it was started empty since then; its bits are all-zero bits plus `log`.
  /// rewritten: its log was dropped (it and the logs held beside it passed
  /// StateDirectory::kBaseFraction of the then open part's bytes), not kept, or cannot tell (a
  /// grown filter merged before it grew): only its bits (with_part_bits) give it.
  OpenChange change = OpenChange::rewritten;
  /// Hashes to replay_log() into the part, in the order they went in; empty when rewritten.
  std::vector<std::uint64_t> log;
};

}  // namespace bulkbloom
