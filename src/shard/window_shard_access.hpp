// Library-internal access to a WindowShard's window of its blocks, for split/concat and files.
#pragma once

#include <cstdint>
#include <utility>

#include "bulkbloom/window_shard.hpp"

namespace bulkbloom {

struct WindowShardAccess {
  static WindowShard make(const WindowConfig& config, std::uint32_t index, std::uint32_t num_shards,
                          WindowedFilter local) {
    return WindowShard(config, index, num_shards, std::move(local));
  }
  static const WindowedFilter& local(const WindowShard& shard) { return shard.local_; }
  /// The empty window of the blocks of shard `index` of `num_shards` of `config`, with an
  /// unstarted clock, as a WindowShard holds it; with `write` false its generations are not
  /// written when made (WindowAccess::unwritten: a restore fills them).
  static WindowedFilter empty_local(const WindowConfig& config, std::uint32_t index,
                                    std::uint32_t num_shards, const Options& options,
                                    bool write = true);
  static WindowedFilter& local(WindowShard& shard) { return shard.local_; }
};

}  // namespace bulkbloom
