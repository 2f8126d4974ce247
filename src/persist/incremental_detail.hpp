// Library-internal pieces of bulkbloom/incremental.hpp shared between the file kinds: each kind's
// snapshot metadata is read by its own codec (window_file.cpp, grown_file.cpp).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "bulkbloom/incremental.hpp"

namespace bulkbloom::detail {

/// The first bytes of a grown filter's snapshot metadata (a window's starts as its file does).
inline constexpr std::byte kGrownSnapshotMagic[8] = {
    std::byte{0x89}, std::byte{'B'}, std::byte{'B'}, std::byte{'G'},
    std::byte{'S'},  std::byte{'N'}, std::byte{'P'}, std::byte{'\n'}};

/// Drops and frees the open part's change log when it and the final logs of the closed parts the
/// state holds beside it until the next take (`closed`) pass StateDirectory::kBaseFraction of the
/// open part's `part_bytes`: a state directory writes the part whole then anyway, so the log would
/// only hold memory, 8 bytes a new key against the ~2 of the part at 1e-3 (a run carrying a window
/// in a directory would otherwise hold a period's keys, more than the window). The closed logs
/// count because nothing bounds how many rotations pass between takes (a Flink job whose
/// checkpoints keep failing): each closed part kept up to its own bytes of log, the whole window
/// again; so every log a state holds stays within one open part's bytes. Returns whether it
/// dropped the log; the snapshot then says OpenChange::rewritten.
inline bool drop_log_past(std::vector<std::uint64_t>& log, std::uint64_t part_bytes,
                          std::span<const ClosedPart> closed) {
  std::size_t hashes = log.size();
  for (const ClosedPart& part : closed) hashes += part.log.size();
  if (static_cast<double>(hashes * sizeof(std::uint64_t)) <=
      StateDirectory::kBaseFraction * static_cast<double>(part_bytes)) {
    return false;
  }
  std::vector<std::uint64_t>().swap(log);
  return true;
}

/// What a change log says of its part: nothing when only the part's bits tell it (`bits_only`:
/// the log was dropped, or a merge changed the bits), else what went into it since it started
/// empty (`from_empty`) or since the log was last taken.
inline OpenChange log_change(bool from_empty, bool bits_only) {
  if (bits_only) return OpenChange::rewritten;
  return from_empty ? OpenChange::since_empty : OpenChange::since_taken;
}

/// snapshot_parts() of a window's or a window shard's snapshot metadata.
std::vector<PartId> window_snapshot_parts(std::span<const std::byte> metadata,
                                          const std::string& source);
/// snapshot_parts() of a grown filter's snapshot metadata.
std::vector<PartId> grown_snapshot_parts(std::span<const std::byte> metadata,
                                         const std::string& source);

}  // namespace bulkbloom::detail
