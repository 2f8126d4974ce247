// Shards (DESIGN §9): a shard's bits are an ordinary Filter of the shard's blocks, made through the
// backend registry like any filter, and fed each key's hash moved into its local block
// (shard_math.hpp). Nothing here touches a bit itself: the engines do, with their own kernels.
#include "bulkbloom/shard.hpp"

#include <algorithm>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>

#include "backend.hpp"
#include "cpu/kernels.hpp"
#include "file_io.hpp"
#include "filter_access.hpp"
#include "key_hash.hpp"
#include "shard_file.hpp"
#include "shard_math.hpp"

namespace bulkbloom {

struct ShardAccess {
  static FilterShard make(const Layout& layout, std::uint32_t index, std::uint32_t num_shards,
                          Filter bits) {
    return FilterShard(layout, index, num_shards, std::move(bits));
  }
  static const Filter& bits(const FilterShard& shard) { return shard.bits_; }
  static Filter& bits(FilterShard& shard) { return shard.bits_; }
};

namespace {

using detail::KeyMode;

// Keys are hashed and moved to their local blocks this many at a time (8 MiB of hashes), so that
// a batch goes to the engine in pieces large enough for its threads, and a batch of up to this
// many keys is checked and applied after one hashing pass.
constexpr std::size_t kChunk = std::size_t{1} << 20;

std::string range_text(BlockSpan blocks) {
  return "[" + std::to_string(blocks.begin) + ", " + std::to_string(blocks.end) + ")";
}

void check_shard_count(const Layout& layout, std::uint32_t num_shards) {
  layout.validate();
  if (num_shards == 0 || num_shards > layout.num_blocks) {
    throw std::invalid_argument("shard count " + std::to_string(num_shards) + " is not in [1, " +
                                std::to_string(layout.num_blocks) +
                                "]: every shard holds at least one of the layout's " +
                                std::to_string(layout.num_blocks) + " blocks");
  }
}

void check_size(std::size_t expected, std::size_t actual, const char* what) {
  if (expected != actual) {
    throw std::invalid_argument(std::string(what) + " has " + std::to_string(actual) +
                                " entries; expected " + std::to_string(expected));
  }
}

// The host kernels that hash uint64_t keys for shard_of(), which has no engine to ask: the best
// this CPU runs. Every target computes the same hashes.
const detail::HostKernels& routing_hash_kernels() {
  static const detail::HostKernels* const kernels = [] {
    const auto targets = detail::highway_targets();
    return targets.empty() ? detail::scalar_target().host : targets.front().host;
  }();
  return *kernels;
}

// Writes the layout's hashes of `keys` to `out`.
void hash_keys(const detail::HostKernels& host, const Layout& layout,
               std::span<const std::uint64_t> keys, std::uint64_t* out) {
  host.hash(layout, keys.data(), keys.size(), KeyMode::hash_with_layout, out);
}
void hash_keys(const detail::HostKernels&, const Layout& layout,
               std::span<const std::string_view> keys, std::uint64_t* out) {
  for (std::size_t i = 0; i < keys.size(); ++i) out[i] = detail::xxh64_bytes(keys[i], layout.seed);
}

template <typename Key>
std::uint64_t hash_one(const Layout& layout, const Key& key) {
  std::uint64_t h = 0;
  hash_keys(routing_hash_kernels(), layout, std::span<const Key>(&key, 1), &h);
  return h;
}

template <typename Key>
std::string key_text(const Key& key, std::size_t position) {
  if constexpr (std::is_same_v<Key, std::string_view>) {
    return "the byte key at position " + std::to_string(position) + " (" +
           std::to_string(key.size()) + " bytes)";
  } else {
    return "key " + std::to_string(key) + " at position " + std::to_string(position);
  }
}

template <typename Key>
void shard_of_impl(const Layout& layout, std::span<const Key> keys, std::uint32_t num_shards,
                   std::span<std::uint32_t> out) {
  check_shard_count(layout, num_shards);
  check_size(keys.size(), out.size(), "shard_of: output span");
  if constexpr (std::is_same_v<Key, std::string_view>) detail::check_byte_keys_allowed(layout);
  const detail::InvariantDivisor divide_by_blocks(layout.num_blocks);
  const std::size_t chunk = std::min(keys.size(), kChunk);
  const auto hashes = std::make_unique_for_overwrite<std::uint64_t[]>(chunk);
  for (std::size_t offset = 0; offset < keys.size(); offset += chunk) {
    const std::size_t n = std::min(chunk, keys.size() - offset);
    hash_keys(routing_hash_kernels(), layout, keys.subspan(offset, n), hashes.get());
    for (std::size_t i = 0; i < n; ++i) {
      out[offset + i] =
          detail::route_block(layout.block_of(hashes[i]), num_shards, divide_by_blocks);
    }
  }
}

// Hands `work` a filter's bits as writable host memory to fill completely with copies of block
// ranges: the CPU engine's own memory, or a staging buffer copied to a device afterwards.
template <typename Work>
void with_writable_bytes(Filter& filter, Work&& work) {
  const std::byte* host = detail::FilterAccess::engine(filter).host_bytes();
  if (host != nullptr) {
    work(std::span<std::byte>(const_cast<std::byte*>(host), filter.layout().size_bytes()));
    return;
  }
  std::vector<std::byte> staging(filter.layout().size_bytes());
  work(std::span<std::byte>(staging));
  filter.copy_bytes_from(staging);
}

// The shards sorted by index, after checking that they are all the shards of one layout.
std::vector<const FilterShard*> complete_set(std::span<const FilterShard> shards) {
  if (shards.empty()) throw std::invalid_argument("no shards given: need all shards of a filter");
  const FilterShard& first = shards.front();
  if (shards.size() != first.num_shards()) {
    throw std::invalid_argument("got " + std::to_string(shards.size()) +
                                " shards of a filter cut into " +
                                std::to_string(first.num_shards()) + ": need all of them");
  }
  std::vector<const FilterShard*> sorted(shards.size(), nullptr);
  for (const FilterShard& shard : shards) {
    if (!(shard.layout() == first.layout()) || shard.num_shards() != first.num_shards()) {
      throw std::invalid_argument("shards of different filters: " + first.layout().describe() +
                                  " in " + std::to_string(first.num_shards()) + " shards vs " +
                                  shard.layout().describe() + " in " +
                                  std::to_string(shard.num_shards()));
    }
    if (sorted[shard.index()] != nullptr) {
      throw std::invalid_argument("shard " + std::to_string(shard.index()) + " of " +
                                  std::to_string(shard.num_shards()) + " is given twice");
    }
    sorted[shard.index()] = &shard;
  }
  return sorted;
}

// The empty bits of shard `index` of `num_shards`, as a filter of their own.
Filter local_bits(const Layout& layout, std::uint32_t index, std::uint32_t num_shards,
                  const Options& options) {
  check_shard_count(layout, num_shards);
  return Filter(
      detail::local_layout(layout, shard_blocks(layout.num_blocks, index, num_shards).size()),
      options);
}

}  // namespace

BlockSpan shard_blocks(std::uint64_t num_blocks, std::uint32_t shard, std::uint32_t num_shards) {
  if (num_blocks == 0 || num_blocks > Layout::kMaxBlocks || num_shards == 0 ||
      num_shards > num_blocks) {
    throw std::invalid_argument("shard count " + std::to_string(num_shards) + " is not in [1, " +
                                std::to_string(num_blocks) + "] for " + std::to_string(num_blocks) +
                                " blocks");
  }
  if (shard >= num_shards) {
    throw std::invalid_argument("shard " + std::to_string(shard) + " does not exist among " +
                                std::to_string(num_shards));
  }
  return {shard * num_blocks / num_shards, (std::uint64_t{shard} + 1) * num_blocks / num_shards};
}

void shard_of(const Layout& layout, std::span<const std::uint64_t> keys, std::uint32_t num_shards,
              std::span<std::uint32_t> out) {
  shard_of_impl(layout, keys, num_shards, out);
}

void shard_of(const Layout& layout, std::span<const std::string_view> keys,
              std::uint32_t num_shards, std::span<std::uint32_t> out) {
  shard_of_impl(layout, keys, num_shards, out);
}

FilterShard::FilterShard(const Layout& layout, std::uint32_t index, std::uint32_t num_shards,
                         const Options& options)
    : FilterShard(layout, index, num_shards, local_bits(layout, index, num_shards, options)) {}

FilterShard::FilterShard(const Layout& layout, std::uint32_t index, std::uint32_t num_shards,
                         Filter bits)
    : layout_(layout),
      index_(index),
      num_shards_(num_shards),
      blocks_(shard_blocks(layout.num_blocks, index, num_shards)),
      bits_(std::move(bits)) {}

std::uint64_t FilterShard::size_bytes() const {
  return bits_.layout().size_bytes();
}

// Hashes `keys` chunk by chunk, moves each hash to its local block, and hands each chunk to
// `apply(local_hashes, offset)` in order. A chunk holding a key of another shard throws before it
// is applied.
template <typename Key, typename Apply>
void FilterShard::for_each_local_chunk(std::span<const Key> keys, Apply&& apply) const {
  if constexpr (std::is_same_v<Key, std::string_view>) detail::check_byte_keys_allowed(layout_);
  const detail::HostKernels& host = *detail::FilterAccess::engine(bits_).host().kernels;
  const detail::LocalHashes to_local(layout_, static_cast<std::uint32_t>(blocks_.begin),
                                     static_cast<std::uint32_t>(blocks_.size()));
  const std::size_t chunk = std::min(keys.size(), kChunk);
  const auto hashes = std::make_unique_for_overwrite<std::uint64_t[]>(chunk);
  for (std::size_t offset = 0; offset < keys.size(); offset += chunk) {
    const std::size_t n = std::min(chunk, keys.size() - offset);
    hash_keys(host, layout_, keys.subspan(offset, n), hashes.get());
    std::uint32_t outside = 0;
    for (std::size_t i = 0; i < n; ++i) hashes[i] = to_local(hashes[i], outside);
    if (outside != 0) {
      for (std::size_t i = offset; i < offset + n; ++i) {
        const std::uint32_t block = layout_.block_of(hash_one(layout_, keys[i]));
        if (block >= blocks_.begin && block < blocks_.end) continue;
        const std::uint32_t owner = shard_of_block(block, layout_.num_blocks, num_shards_);
        throw std::invalid_argument(
            key_text(keys[i], i) + " belongs to shard " + std::to_string(owner) + " of " +
            std::to_string(num_shards_) + " (blocks " +
            range_text(shard_blocks(layout_.num_blocks, owner, num_shards_)) + "), not to shard " +
            std::to_string(index_) + " (blocks " + range_text(blocks_) + ") of " +
            layout_.describe() + "; route keys with shard_of()");
      }
    }
    apply(std::span<const std::uint64_t>(hashes.get(), n), offset);
  }
}

// Throws as for_each_local_chunk() does if any key belongs to another shard. Batches of more than
// one chunk are checked in a pass of their own, so that a wrong key changes nothing.
template <typename Key>
void FilterShard::check_owned(std::span<const Key> keys) const {
  if (keys.size() > kChunk)
    for_each_local_chunk(keys, [](std::span<const std::uint64_t>, std::size_t) {});
}

template <typename Key>
void FilterShard::insert_keys(std::span<const Key> keys) {
  check_owned(keys);
  for_each_local_chunk(keys, [&](std::span<const std::uint64_t> local, std::size_t) {
    detail::FilterAccess::engine(bits_).insert(local, KeyMode::prehashed);
  });
}

template <typename Key>
void FilterShard::contains_keys(std::span<const Key> keys, std::span<std::uint8_t> out) const {
  check_size(keys.size(), out.size(), "contains: output span");
  for_each_local_chunk(keys, [&](std::span<const std::uint64_t> local, std::size_t offset) {
    detail::FilterAccess::engine(bits_).contains(local, KeyMode::prehashed,
                                                 out.subspan(offset, local.size()));
  });
}

template <typename Key>
std::uint64_t FilterShard::insert_if_absent_keys(std::span<const Key> keys,
                                                 std::span<std::uint8_t> is_new) {
  check_size(keys.size(), is_new.size(), "insert_if_absent: is_new span");
  check_owned(keys);
  std::uint64_t fresh = 0;
  for_each_local_chunk(keys, [&](std::span<const std::uint64_t> local, std::size_t offset) {
    fresh += detail::FilterAccess::engine(bits_).insert_if_absent(
        local, KeyMode::prehashed, is_new.subspan(offset, local.size()));
  });
  return fresh;
}

void FilterShard::insert(std::span<const std::uint64_t> keys) {
  insert_keys(keys);
}
void FilterShard::insert(std::span<const std::string_view> keys) {
  insert_keys(keys);
}
void FilterShard::contains(std::span<const std::uint64_t> keys, std::span<std::uint8_t> out) const {
  contains_keys(keys, out);
}
void FilterShard::contains(std::span<const std::string_view> keys,
                           std::span<std::uint8_t> out) const {
  contains_keys(keys, out);
}
std::uint64_t FilterShard::insert_if_absent(std::span<const std::uint64_t> keys,
                                            std::span<std::uint8_t> is_new) {
  return insert_if_absent_keys(keys, is_new);
}
std::uint64_t FilterShard::insert_if_absent(std::span<const std::string_view> keys,
                                            std::span<std::uint8_t> is_new) {
  return insert_if_absent_keys(keys, is_new);
}

std::vector<FilterShard> split(const Filter& filter, std::uint32_t num_shards,
                               const Options& options) {
  const Layout& layout = filter.layout();
  check_shard_count(layout, num_shards);
  const detail::HostBits whole(filter);
  const std::uint64_t block_bytes =
      static_cast<std::uint64_t>(bulkbloom::block_bytes(layout.shape));
  std::vector<FilterShard> shards;
  shards.reserve(num_shards);
  for (std::uint32_t i = 0; i < num_shards; ++i) {
    FilterShard& shard = shards.emplace_back(layout, i, num_shards, options);
    shard.copy_bytes_from(
        whole.bytes().subspan(shard.blocks().begin * block_bytes, shard.size_bytes()));
  }
  return shards;
}

Filter concat(std::span<const FilterShard> shards, const Options& options) {
  const auto sorted = complete_set(shards);
  Filter filter(sorted.front()->layout(), options);
  const std::uint64_t block_bytes =
      static_cast<std::uint64_t>(bulkbloom::block_bytes(filter.layout().shape));
  with_writable_bytes(filter, [&](std::span<std::byte> bytes) {
    for (const FilterShard* shard : sorted) {
      shard->copy_bytes_to(bytes.subspan(shard->blocks().begin * block_bytes, shard->size_bytes()));
    }
  });
  return filter;
}

std::vector<FilterShard> reshard(std::span<const FilterShard> shards, std::uint32_t num_shards,
                                 const Options& options) {
  const auto sorted = complete_set(shards);
  const Layout& layout = sorted.front()->layout();
  check_shard_count(layout, num_shards);
  const std::uint64_t block_bytes =
      static_cast<std::uint64_t>(bulkbloom::block_bytes(layout.shape));
  std::vector<detail::HostBits> old_bits;
  old_bits.reserve(sorted.size());
  for (const FilterShard* shard : sorted) old_bits.emplace_back(ShardAccess::bits(*shard));

  const auto old_count = static_cast<std::uint32_t>(sorted.size());
  std::vector<FilterShard> result;
  result.reserve(num_shards);
  for (std::uint32_t j = 0; j < num_shards; ++j) {
    FilterShard& shard = result.emplace_back(layout, j, num_shards, options);
    const BlockSpan want = shard.blocks();
    with_writable_bytes(ShardAccess::bits(shard), [&](std::span<std::byte> bytes) {
      // The old shards overlapping `want`, from the one holding its first block on.
      for (std::uint32_t i = shard_of_block(want.begin, layout.num_blocks, old_count);
           i < old_count && sorted[i]->blocks().begin < want.end; ++i) {
        const BlockSpan have = sorted[i]->blocks();
        const std::uint64_t begin = std::max(have.begin, want.begin);
        const std::uint64_t end = std::min(have.end, want.end);
        std::memcpy(bytes.data() + (begin - want.begin) * block_bytes,
                    old_bits[i].bytes().data() + (begin - have.begin) * block_bytes,
                    (end - begin) * block_bytes);
      }
    });
  }
  return result;
}

void save(const FilterShard& shard, const std::filesystem::path& path, const FileState& state) {
  detail::save_payload(ShardAccess::bits(shard),
                       {shard.layout(), shard.index(), shard.num_shards()}, path, state);
}

FilterShard load_shard(const std::filesystem::path& path, FileState* state,
                       const Options& options) {
  detail::PayloadPlace place;
  Filter bits = detail::load_payload(path, state, options, place);
  return ShardAccess::make(place.layout, place.shard, place.num_shards, std::move(bits));
}

FilterShard map_shard(const std::filesystem::path& path, FileState* state,
                      const MapOptions& options) {
  detail::PayloadPlace place;
  Filter bits = detail::map_payload(path, state, options, place);
  return ShardAccess::make(place.layout, place.shard, place.num_shards, std::move(bits));
}

}  // namespace bulkbloom
