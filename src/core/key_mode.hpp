// How bulk keys reach an engine or a kernel.
#pragma once

#include <cstdint>

namespace bulkbloom::detail {

/// Whether bulk keys still need the layout's hash, or are hashes already (byte-string keys are
/// hashed by the front end, then passed on as hashes).
enum class KeyMode : std::uint8_t { hash_with_layout, prehashed };

}  // namespace bulkbloom::detail
