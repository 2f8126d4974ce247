// What filter shards and window shards share (DESIGN §9), so that both do it the same way: the
// keys of a shard (hashing a batch, checking that every key belongs to the shard and reporting a
// foreign one, moving each hash into the shard's local blocks), the check that a set of shards is
// complete, and the copy of block ranges between shards cut differently.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
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

/// Hashes `keys` with `host` under `layout`, kShardChunk keys at a time, and hands each chunk's
/// hashes (writable) to `apply(hashes, offset)` in order. Byte-string keys under a layout that
/// takes none throw std::invalid_argument first.
template <typename Key, typename Apply>
void for_each_hashed_chunk(const HostKernels& host, const Layout& layout, std::span<const Key> keys,
                           Apply&& apply) {
  if constexpr (std::is_same_v<Key, std::string_view>) check_byte_keys_allowed(layout);
  const std::size_t chunk = std::min(keys.size(), kShardChunk);
  const auto hashes = std::make_unique_for_overwrite<std::uint64_t[]>(chunk);
  for (std::size_t offset = 0; offset < keys.size(); offset += chunk) {
    const std::size_t n = std::min(chunk, keys.size() - offset);
    hash_keys(host, layout, keys.subspan(offset, n), hashes.get());
    apply(std::span<std::uint64_t>(hashes.get(), n), offset);
  }
}

/// Throws std::invalid_argument for the first of keys[begin, end) that belongs to another shard
/// than `place` of `layout`, naming the key, its shard and both block ranges.
template <typename Key>
void throw_foreign_key(const Layout& layout, const ShardPlacement& place, std::span<const Key> keys,
                       std::size_t begin, std::size_t end) {
  const BlockSpan blocks = place.blocks();
  for (std::size_t i = begin; i < end; ++i) {
    std::uint64_t h = 0;
    hash_keys(best_cpu_host_kernels(), layout, keys.subspan(i, 1), &h);
    const std::uint32_t block = layout.block_of(h);
    if (block >= blocks.begin && block < blocks.end) continue;
    const std::uint32_t owner = shard_of_block(block, layout.num_blocks, place.num_shards());
    std::string key;
    if constexpr (std::is_same_v<Key, std::string_view>) {
      key = "the byte key at position " + std::to_string(i) + " (" +
            std::to_string(keys[i].size()) + " bytes)";
    } else {
      key = "key " + std::to_string(keys[i]) + " at position " + std::to_string(i);
    }
    throw std::invalid_argument(
        key + " belongs to shard " + std::to_string(owner) + " of " +
        std::to_string(place.num_shards()) + " (blocks " +
        range_text(shard_blocks(layout.num_blocks, owner, place.num_shards())) +
        "), not to shard " + std::to_string(place.index()) + " (blocks " + range_text(blocks) +
        ") of " + layout.describe() + "; route keys with shard_of()");
  }
}

/// Hashes `keys` chunk by chunk with `host` under `layout` (the whole layout the keys are routed
/// by), moves each hash to its local block of shard `place` (or, with kMove false, keeps the whole
/// layout's hash), and hands each chunk to `apply(hashes, offset)` in order. A chunk holding a key
/// of another shard throws as throw_foreign_key() does, before it is applied.
template <bool kMove = true, typename Key, typename Apply>
void for_each_local_chunk(const HostKernels& host, const Layout& layout,
                          const ShardPlacement& place, std::span<const Key> keys, Apply&& apply) {
  const LocalHashes to_local(layout, static_cast<std::uint32_t>(place.blocks().begin),
                             static_cast<std::uint32_t>(place.blocks().size()));
  auto move_and_apply = [&](std::span<std::uint64_t> hashes, std::size_t offset) {
    std::uint32_t outside = 0;
    if constexpr (kMove) {
      for (std::uint64_t& h : hashes) h = to_local(h, outside);
    } else {
      for (const std::uint64_t h : hashes) static_cast<void>(to_local(h, outside));
    }
    if (outside != 0) throw_foreign_key(layout, place, keys, offset, offset + hashes.size());
    apply(std::span<const std::uint64_t>(hashes), offset);
  };
  for_each_hashed_chunk(host, layout, keys, move_and_apply);
}

/// for_each_local_chunk() for a write: a batch holding a key of another shard throws before any
/// chunk is applied, so that a wrong key changes nothing. Batches of more than one chunk are
/// checked in a pass of their own; a batch of one chunk is checked by the pass that applies it.
template <bool kMove = true, typename Key, typename Apply>
void for_each_owned_chunk(const HostKernels& host, const Layout& layout,
                          const ShardPlacement& place, std::span<const Key> keys, Apply&& apply) {
  if (keys.size() > kShardChunk) {
    for_each_local_chunk(host, layout, place, keys,
                         [](std::span<const std::uint64_t>, std::size_t) {});
  }
  for_each_local_chunk<kMove>(host, layout, place, keys, apply);
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

/// Fills `to`, the bytes of the blocks `want` of a whole of `num_blocks` blocks, from the
/// `have_shards` shards of that whole which hold them: `from(i)` gives an object whose bytes()
/// are shard i's blocks, each `block_bytes` long. Only the shards overlapping `want` are asked.
template <typename From>
void copy_from_shards(std::uint64_t num_blocks, std::uint32_t have_shards, From&& from,
                      std::span<std::byte> to, BlockSpan want, std::uint64_t block_bytes) {
  // From the shard holding want's first block on, up to the first that begins after it.
  for (std::uint32_t i = shard_of_block(want.begin, num_blocks, have_shards); i < have_shards;
       ++i) {
    const BlockSpan have = shard_blocks(num_blocks, i, have_shards);
    if (have.begin >= want.end) break;
    const auto& source = from(i);
    const std::uint64_t begin = std::max(have.begin, want.begin);
    const std::uint64_t end = std::min(have.end, want.end);
    std::memcpy(to.data() + (begin - want.begin) * block_bytes,
                source.bytes().data() + (begin - have.begin) * block_bytes,
                (end - begin) * block_bytes);
  }
}

}  // namespace bulkbloom::detail
