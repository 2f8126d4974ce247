// Shards (DESIGN §9): a shard's bits are an ordinary Filter of the shard's blocks, made through the
// backend registry like any filter, and fed each key's hash moved into its local block
// (shard_math.hpp). Nothing here touches a bit itself: the engines do, with their own kernels.
#include "bulkbloom/shard.hpp"

#include <stdexcept>
#include <string>
#include <utility>

#include "core/filter_access.hpp"
#include "core/key_hash.hpp"
#include "core/span_checks.hpp"
#include "persist/file_io.hpp"
#include "persist/shard_file.hpp"
#include "registry/backend.hpp"
#include "shard/shard_keys.hpp"
#include "shard/shard_math.hpp"

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

using detail::check_size;
using detail::KeyMode;

void check_shard_count(const Layout& layout, std::uint32_t num_shards) {
  layout.validate();
  if (num_shards == 0 || num_shards > layout.num_blocks) {
    throw std::invalid_argument("shard count " + std::to_string(num_shards) + " is not in [1, " +
                                std::to_string(layout.num_blocks) +
                                "]: every shard holds at least one of the layout's " +
                                std::to_string(layout.num_blocks) + " blocks");
  }
}

template <typename Key>
void shard_of_impl(const Layout& layout, std::span<const Key> keys, std::uint32_t num_shards,
                   std::span<std::uint32_t> out) {
  check_shard_count(layout, num_shards);
  check_size(keys.size(), out.size(), "shard_of: output span");
  const detail::InvariantDivisor divide_by_blocks(layout.num_blocks);
  detail::for_each_hashed_chunk(detail::best_cpu_host_kernels(), layout, keys,
                                [&](std::span<std::uint64_t> hashes, std::size_t offset) {
                                  for (std::size_t i = 0; i < hashes.size(); ++i) {
                                    out[offset + i] = detail::route_block(
                                        layout.block_of(hashes[i]), num_shards, divide_by_blocks);
                                  }
                                });
}

// The shards sorted by index, after checking that they are all the shards of one filter.
std::vector<const FilterShard*> complete_set(std::span<const FilterShard> shards) {
  return detail::complete_set(
      shards, "filter",
      [](const FilterShard& a, const FilterShard& b) { return a.layout() == b.layout(); },
      [](const FilterShard& shard) { return shard.layout().describe(); });
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
    : ShardPlacement(layout.num_blocks, index, num_shards),
      layout_(layout),
      bits_(std::move(bits)) {}

std::uint64_t FilterShard::size_bytes() const {
  return bits_.layout().size_bytes();
}

template <typename Key>
void FilterShard::insert_keys(std::span<const Key> keys) {
  detail::Engine& engine = detail::FilterAccess::engine(bits_);
  detail::for_each_owned_chunk(
      *engine.host().kernels, layout_, *this, keys,
      [&](auto local, std::size_t) { engine.insert(local, KeyMode::prehashed); });
}

template <typename Key>
void FilterShard::contains_keys(std::span<const Key> keys, std::span<std::uint8_t> out) const {
  check_size(keys.size(), out.size(), "contains: output span");
  detail::Engine& engine = detail::FilterAccess::engine(bits_);
  detail::for_each_local_chunk(
      *engine.host().kernels, layout_, *this, keys, [&](auto local, std::size_t offset) {
        engine.contains(local, KeyMode::prehashed, out.subspan(offset, local.size()));
      });
}

template <typename Key>
std::uint64_t FilterShard::insert_if_absent_keys(std::span<const Key> keys,
                                                 std::span<std::uint8_t> is_new) {
  check_size(keys.size(), is_new.size(), "insert_if_absent: is_new span");
  detail::Engine& engine = detail::FilterAccess::engine(bits_);
  std::uint64_t fresh = 0;
  detail::for_each_owned_chunk(
      *engine.host().kernels, layout_, *this, keys, [&](auto local, std::size_t offset) {
        fresh += engine.insert_if_absent(local, KeyMode::prehashed,
                                         is_new.subspan(offset, local.size()));
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
  detail::fill_filter_bits(filter, [&](std::span<std::byte> bytes) {
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
    detail::fill_filter_bits(ShardAccess::bits(shard), [&](std::span<std::byte> bytes) {
      detail::copy_from_shards(
          layout.num_blocks, old_count,
          [&](std::uint32_t i) -> const detail::HostBits& { return old_bits[i]; }, bytes,
          shard.blocks(), block_bytes);
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

std::vector<std::byte> to_file_bytes(const FilterShard& shard, const FileState& state) {
  return detail::payload_file_bytes(ShardAccess::bits(shard),
                                    {shard.layout(), shard.index(), shard.num_shards()}, state);
}

FilterShard load_shard(std::span<const std::byte> bytes, FileState* state, const Options& options,
                       const std::string& source) {
  detail::PayloadPlace place;
  Filter bits = detail::load_payload(bytes, state, options, place, source);
  return ShardAccess::make(place.layout, place.shard, place.num_shards, std::move(bits));
}

FilterShard map_shard(const std::filesystem::path& path, FileState* state,
                      const MapOptions& options) {
  detail::PayloadPlace place;
  Filter bits = detail::map_payload(path, state, options, place);
  return ShardAccess::make(place.layout, place.shard, place.num_shards, std::move(bits));
}

}  // namespace bulkbloom
