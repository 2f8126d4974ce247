// What a dedup run saves with its filter at each checkpoint, so that a run killed at any moment
// resumes to output byte-identical to an uninterrupted one.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "cli/record_scan.hpp"

namespace bulkbloom::cli {

/// A dedup run's position, saved as the checkpoint's metadata beside the filter.
struct DedupCheckpoint {
  /// Identifies the run (format, inputs and their sizes, outputs): resuming a different run is
  /// refused.
  std::string run_identity;
  ScanState state;                 ///< Input position, line number, counters.
  std::uint64_t output_bytes = 0;  ///< Synced length of the unique output.
  std::uint64_t dups_bytes = 0;    ///< Synced length of the --dups output.
  std::uint64_t keys_before = 0;   ///< Keys the filter held before this run (--filter).
  bool complete = false;           ///< Every record is processed; only the renames remain.
  /// Never-seen records expected to have been wrongly dropped so far (absent in checkpoints of
  /// older versions: 0).
  double expected_false_drops = 0.0;
  /// StatePath::fingerprint() of the --filter state when the run began; a resume after another
  /// commit to it is refused (absent without --filter, and in checkpoints of older versions).
  std::optional<std::string> filter_before;
  /// The run record (encode_run_record()) of the --filter state when the run began, which its
  /// commit recalls (empty: the state had none); absent in checkpoints of older versions.
  std::optional<std::vector<std::byte>> filter_run;
};

/// Whether `manifest` (a state directory's MANIFEST bytes) holds a dedup checkpoint: its
/// metadata, which the manifest keeps as it is, starts with a checkpoint's header line.
bool holds_checkpoint(std::span<const std::byte> manifest);

/// The metadata bytes for a checkpoint: "key=value" lines, readable with a text viewer.
std::vector<std::byte> encode_checkpoint(const DedupCheckpoint& checkpoint);
/// Parses encode_checkpoint()'s bytes. Throws FormatError naming `where` if they are not.
DedupCheckpoint decode_checkpoint(std::span<const std::byte> bytes, const std::string& where);

}  // namespace bulkbloom::cli
