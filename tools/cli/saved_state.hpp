// A state bulkbloom carries from run to run — a grown filter, a window or a window shard — of
// any kind, read from its single file or from a state directory (docs/FORMAT.md "State
// directories"), for the commands that take either: info and convert.
#pragma once

#include <bulkbloom/window.hpp>
#include <bulkbloom/window_shard.hpp>

#include <filesystem>
#include <string>
#include <variant>

#include "cli/carried_filter.hpp"

namespace bulkbloom::cli {

struct SavedState {
  std::variant<CarriedFilter, WindowedFilter, WindowShard> state;
  /// Saved with it: a window's key count, and the metadata of any kind (a dedup run record).
  FileState saved;
  bool directory = false;  ///< read from a state directory

  /// "grown filter", "sliding window" or "sliding window shard".
  const char* kind_name() const;
};

/// The state in the file or state directory `path`, every byte verified. A whole window's file
/// reads as a window, a shard's as a shard. Throws FormatError for a file of another kind (a
/// filter shard's) or damaged, IoError.
SavedState load_saved_state(const std::filesystem::path& path);

/// Writes `state` to `path`: a new state directory when `directory`, else a single file, the
/// file dedup --filter would write. Returns the bytes written. Throws IoError.
std::uint64_t save_saved_state(SavedState& state, const std::filesystem::path& path,
                               bool directory);

}  // namespace bulkbloom::cli
