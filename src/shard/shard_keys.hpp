// Keys of a shard (DESIGN §9): hashing a batch, checking that every key belongs to the shard, and
// moving each hash into the shard's local blocks. Shared by filter shards and window shards so
// that both check and report a foreign key the same way.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "bulkbloom/shard.hpp"
#include "core/key_hash.hpp"
#include "registry/backend.hpp"
#include "shard/shard_math.hpp"

namespace bulkbloom::detail {

/// Keys are hashed and moved to their local blocks this many at a time (8 MiB of hashes), so that
/// a batch goes to an engine in pieces large enough for its threads, and a batch of up to this
/// many keys is checked and applied after one hashing pass.
inline constexpr std::size_t kShardChunk = std::size_t{1} << 20;

/// Writes the layout's hashes of `keys` to `out`.
inline void hash_keys(const HostKernels& host, const Layout& layout,
                      std::span<const std::uint64_t> keys, std::uint64_t* out) {
  host.hash(layout, keys.data(), keys.size(), KeyMode::hash_with_layout, out);
}
inline void hash_keys(const HostKernels&, const Layout& layout,
                      std::span<const std::string_view> keys, std::uint64_t* out) {
  for (std::size_t i = 0; i < keys.size(); ++i) out[i] = xxh64_bytes(keys[i], layout.seed);
}

/// "[begin, end)".
inline std::string range_text(BlockSpan blocks) {
  // Appended, not "[" + ...: GCC 12 warns (-Wrestrict, a false positive) on the latter inlined.
  std::string text = "[";
  text.append(std::to_string(blocks.begin)).append(", ");
  text.append(std::to_string(blocks.end)).append(")");
  return text;
}

/// Shard `index` of `num_shards` of `layout` (its blocks `blocks`), as seen by its keys.
struct ShardPlace {
  Layout layout;
  std::uint32_t index;
  std::uint32_t num_shards;
  BlockSpan blocks;
};

/// Hashes `keys` chunk by chunk with `host`, moves each hash to its local block of `place` (or,
/// with kMove false, keeps the whole layout's hash), and hands each chunk to
/// `apply(hashes, offset)` in order. A chunk holding a key of another shard throws
/// std::invalid_argument, naming the key, its shard and both block ranges, before it is applied.
template <bool kMove = true, typename Key, typename Apply>
void for_each_local_chunk(const HostKernels& host, const ShardPlace& place,
                          std::span<const Key> keys, Apply&& apply) {
  const Layout& layout = place.layout;
  if constexpr (std::is_same_v<Key, std::string_view>) check_byte_keys_allowed(layout);
  const LocalHashes to_local(layout, static_cast<std::uint32_t>(place.blocks.begin),
                             static_cast<std::uint32_t>(place.blocks.size()));
  const std::size_t chunk = std::min(keys.size(), kShardChunk);
  const auto hashes = std::make_unique_for_overwrite<std::uint64_t[]>(chunk);
  for (std::size_t offset = 0; offset < keys.size(); offset += chunk) {
    const std::size_t n = std::min(chunk, keys.size() - offset);
    hash_keys(host, layout, keys.subspan(offset, n), hashes.get());
    std::uint32_t outside = 0;
    if constexpr (kMove) {
      for (std::size_t i = 0; i < n; ++i) hashes[i] = to_local(hashes[i], outside);
    } else {
      for (std::size_t i = 0; i < n; ++i) static_cast<void>(to_local(hashes[i], outside));
    }
    if (outside != 0) {
      for (std::size_t i = offset; i < offset + n; ++i) {
        std::uint64_t h = 0;
        hash_keys(best_cpu_host_kernels(), layout, keys.subspan(i, 1), &h);
        const std::uint32_t block = layout.block_of(h);
        if (block >= place.blocks.begin && block < place.blocks.end) continue;
        const std::uint32_t owner = shard_of_block(block, layout.num_blocks, place.num_shards);
        std::string key;
        if constexpr (std::is_same_v<Key, std::string_view>) {
          key = "the byte key at position " + std::to_string(i) + " (" +
                std::to_string(keys[i].size()) + " bytes)";
        } else {
          key = "key " + std::to_string(keys[i]) + " at position " + std::to_string(i);
        }
        throw std::invalid_argument(
            key + " belongs to shard " + std::to_string(owner) + " of " +
            std::to_string(place.num_shards) + " (blocks " +
            range_text(shard_blocks(layout.num_blocks, owner, place.num_shards)) +
            "), not to shard " + std::to_string(place.index) + " (blocks " +
            range_text(place.blocks) + ") of " + layout.describe() +
            "; route keys with shard_of()");
      }
    }
    apply(std::span<const std::uint64_t>(hashes.get(), n), offset);
  }
}

/// Throws as for_each_local_chunk() does if any key belongs to another shard. Batches of more than
/// one chunk are checked in a pass of their own, so that a wrong key changes nothing; a batch of
/// one chunk is checked by the pass that applies it.
template <typename Key>
void check_owned(const HostKernels& host, const ShardPlace& place, std::span<const Key> keys) {
  if (keys.size() > kShardChunk) {
    for_each_local_chunk(host, place, keys, [](std::span<const std::uint64_t>, std::size_t) {});
  }
}

/// The shards (FilterShard or WindowShard) sorted by index, after checking that they are all the
/// shards of one whole: `same(a, b)` says whether two shards' wholes (layout, window config) are
/// the same, `describe(shard)` names a shard's whole, and `kind` names it in messages ("filter").
template <typename Shard, typename Same, typename Describe>
std::vector<const Shard*> complete_set(std::span<const Shard> shards, const char* kind, Same same,
                                       Describe describe) {
  if (shards.empty()) {
    throw std::invalid_argument(std::string("no shards given: need all shards of a ") + kind);
  }
  const Shard& first = shards.front();
  if (shards.size() != first.num_shards()) {
    throw std::invalid_argument("got " + std::to_string(shards.size()) + " shards of a " + kind +
                                " cut into " + std::to_string(first.num_shards()) +
                                ": need all of them");
  }
  std::vector<const Shard*> sorted(shards.size(), nullptr);
  for (const Shard& shard : shards) {
    if (!same(shard, first) || shard.num_shards() != first.num_shards()) {
      throw std::invalid_argument(std::string("shards of different ") + kind +
                                  "s: " + describe(first) + " in " +
                                  std::to_string(first.num_shards()) + " shards vs " +
                                  describe(shard) + " in " + std::to_string(shard.num_shards()));
    }
    if (sorted[shard.index()] != nullptr) {
      throw std::invalid_argument("shard " + std::to_string(shard.index()) + " of " +
                                  std::to_string(shard.num_shards()) + " is given twice");
    }
    sorted[shard.index()] = &shard;
  }
  return sorted;
}

}  // namespace bulkbloom::detail
