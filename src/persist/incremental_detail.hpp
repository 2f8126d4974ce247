// Library-internal pieces of bulkbloom/incremental.hpp shared between the file kinds: each kind's
// snapshot metadata is read by its own codec (window_file.cpp, grown_file.cpp).
#pragma once

#include <cstddef>
#include <span>
#include <string>
#include <vector>

#include "bulkbloom/incremental.hpp"

namespace bulkbloom::detail {

/// The first bytes of a grown filter's snapshot metadata (a window's starts as its file does).
inline constexpr std::byte kGrownSnapshotMagic[8] = {
    std::byte{0x89}, std::byte{'B'}, std::byte{'B'}, std::byte{'G'},
    std::byte{'S'},  std::byte{'N'}, std::byte{'P'}, std::byte{'\n'}};

/// snapshot_parts() of a window's or a window shard's snapshot metadata.
std::vector<PartId> window_snapshot_parts(std::span<const std::byte> metadata,
                                          const std::string& source);
/// snapshot_parts() of a grown filter's snapshot metadata.
std::vector<PartId> grown_snapshot_parts(std::span<const std::byte> metadata,
                                         const std::string& source);

}  // namespace bulkbloom::detail
