// bulkbloom/incremental.hpp's pieces common to every kind of state; each kind's snapshot is taken
// and restored by its file codec (window_file.cpp, grown_file.cpp).
#include "bulkbloom/incremental.hpp"

#include <cstring>

#include "persist/file_header.hpp"
#include "persist/incremental_detail.hpp"

namespace bulkbloom {

std::string PartId::name() const {
  // Appended, not a literal + a temporary string, on which GCC 12 warns (-Wrestrict, a false
  // positive).
  std::string name = before_clock ? "up" : "p";
  if (period < 0) {
    name += "m";
    name += std::to_string(static_cast<std::uint64_t>(-(period + 1)) + 1);
  } else {
    name += std::to_string(period);
  }
  name += "-";
  name += std::to_string(part);
  name += "-b";
  name += std::to_string(num_blocks);
  return name;
}

std::vector<PartId> snapshot_parts(std::span<const std::byte> metadata, const std::string& source) {
  if (metadata.size() >= 8 && std::memcmp(metadata.data(), detail::kGrownSnapshotMagic, 8) == 0) {
    return detail::grown_snapshot_parts(metadata, source);
  }
  return detail::window_snapshot_parts(metadata, source);
}

}  // namespace bulkbloom
