/// @file
/// Shards (DESIGN §9): one filter cut into S block ranges that live in different processes and
/// give, together, exactly the answers and the bytes of the one filter.
///
/// S shards of a layout with B blocks split the blocks as [floor(i*B/S), floor((i+1)*B/S)) for
/// i in [0, S), and a key belongs to the shard whose range holds its block. Because both block
/// indexes are monotone in the hash, a shard holds a contiguous range of hashes, and the shards'
/// payloads, concatenated in order, are byte for byte the filter built from the same keys in one
/// process. Every shard holds at least one block, so 1 <= S <= B.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "bulkbloom/filter.hpp"
#include "bulkbloom/format.hpp"
#include "bulkbloom/layout.hpp"

namespace bulkbloom {

/// The blocks [begin, end) of a layout.
struct BlockSpan {
  std::uint64_t begin = 0;  ///< First block.
  std::uint64_t end = 0;    ///< One past the last block.
  /// Number of blocks.
  std::uint64_t size() const { return end - begin; }
  friend constexpr bool operator==(const BlockSpan&, const BlockSpan&) = default;
};

/// The blocks of shard `shard` of `num_shards` over `num_blocks` blocks:
/// [floor(shard*num_blocks/num_shards), floor((shard+1)*num_blocks/num_shards)).
/// Throws std::invalid_argument unless 1 <= num_shards <= num_blocks and shard < num_shards.
BlockSpan shard_blocks(std::uint64_t num_blocks, std::uint32_t shard, std::uint32_t num_shards);

/// The shard of `num_shards` over `num_blocks` blocks whose range holds `block`:
/// ((block + 1) * num_shards - 1) / num_blocks, exact in 64-bit arithmetic (DESIGN §9).
/// The caller guarantees 1 <= num_shards <= num_blocks < 2^32 and block < num_blocks.
constexpr std::uint32_t shard_of_block(std::uint64_t block, std::uint64_t num_blocks,
                                       std::uint32_t num_shards) {
  return static_cast<std::uint32_t>(((block + 1) * num_shards - 1) / num_blocks);
}

/// Where a shard lies in its whole: shard index() of num_shards(), holding the blocks() that
/// shard_blocks() gives it. FilterShard and WindowShard are each one (a window shard holds these
/// blocks of every generation), so that both answer the same questions the same way and check
/// their keys against the same place.
class ShardPlacement {
 public:
  /// Shard `index` of `num_shards` over `num_blocks` blocks. Throws what shard_blocks() throws.
  ShardPlacement(std::uint64_t num_blocks, std::uint32_t index, std::uint32_t num_shards)
      : index_(index),
        num_shards_(num_shards),
        blocks_(shard_blocks(num_blocks, index, num_shards)) {}

  /// Which shard this is, in [0, num_shards()).
  std::uint32_t index() const { return index_; }
  /// How many shards the whole is cut into.
  std::uint32_t num_shards() const { return num_shards_; }
  /// The blocks of the whole layout this shard holds.
  BlockSpan blocks() const { return blocks_; }

 private:
  std::uint32_t index_;
  std::uint32_t num_shards_;
  BlockSpan blocks_;
};

/// Writes to `out[i]` the shard of `num_shards` shards of `layout` that owns `keys[i]`.
/// `out` must be as long as `keys`. Throws std::invalid_argument for a bad layout, a shard count
/// outside [1, layout.num_blocks] or a wrong output length.
void shard_of(const Layout& layout, std::span<const std::uint64_t> keys, std::uint32_t num_shards,
              std::span<std::uint32_t> out);
/// shard_of() for byte strings (hashed with XXH64 and the layout's seed).
void shard_of(const Layout& layout, std::span<const std::string_view> keys,
              std::uint32_t num_shards, std::span<std::uint32_t> out);

/// One shard of a filter: shard `index()` of `num_shards()` of `layout()`, owning the bits of its
/// blocks and nothing else. Its bulk calls take only keys it owns (route them with shard_of());
/// a batch holding another shard's key throws std::invalid_argument naming the key, its shard and
/// both block ranges, before anything is changed. Answers and bytes are exactly those of the
/// same blocks of one whole filter given the same keys in the same order. Its place (index(),
/// num_shards(), blocks() of layout()) is its ShardPlacement. Move-only.
class FilterShard : public ShardPlacement {
 public:
  /// An empty shard. Throws std::invalid_argument for a bad layout or shard numbers (see
  /// shard_blocks), and what the Filter constructor throws for the backend.
  FilterShard(const Layout& layout, std::uint32_t index, std::uint32_t num_shards,
              const Options& options = {});

  /// The layout of the whole filter this shard is part of.
  const Layout& layout() const { return layout_; }
  /// Size of the shard's bits in bytes: blocks().size() blocks.
  std::uint64_t size_bytes() const;
  /// The running implementation, as Filter::implementation() names it.
  std::string implementation() const { return bits_.implementation(); }

  /// Inserts each key.
  void insert(std::span<const std::uint64_t> keys);
  /// insert() for byte strings.
  void insert(std::span<const std::string_view> keys);
  /// Writes 1 to `out[i]` if `keys[i]` may be present, else 0.
  void contains(std::span<const std::uint64_t> keys, std::span<std::uint8_t> out) const;
  /// contains() for byte strings.
  void contains(std::span<const std::string_view> keys, std::span<std::uint8_t> out) const;
  /// Filter::insert_if_absent() for the keys of this shard: in order, against the shard's bits.
  std::uint64_t insert_if_absent(std::span<const std::uint64_t> keys,
                                 std::span<std::uint8_t> is_new);
  /// insert_if_absent() for byte strings.
  std::uint64_t insert_if_absent(std::span<const std::string_view> keys,
                                 std::span<std::uint8_t> is_new);

  /// Clears every bit.
  void clear() { bits_.clear(); }
  /// Number of set bits.
  std::uint64_t popcount() const { return bits_.popcount(); }
  /// False-positive rate of the shard's blocks as they are now (Filter::current_fpr()): the rate
  /// for an absent key that this shard owns.
  double current_fpr() const { return bits_.current_fpr(); }
  /// Copies the shard's size_bytes() bytes (its blocks of the whole filter) into `out`.
  void copy_bytes_to(std::span<std::byte> out) const { bits_.copy_bytes_to(out); }
  /// Replaces the shard's bytes with `in`, which must be size_bytes() long.
  void copy_bytes_from(std::span<const std::byte> in) { bits_.copy_bytes_from(in); }

 private:
  friend struct ShardAccess;
  FilterShard(const Layout& layout, std::uint32_t index, std::uint32_t num_shards, Filter bits);

  template <typename Key>
  void insert_keys(std::span<const Key> keys);
  template <typename Key>
  void contains_keys(std::span<const Key> keys, std::span<std::uint8_t> out) const;
  template <typename Key>
  std::uint64_t insert_if_absent_keys(std::span<const Key> keys, std::span<std::uint8_t> is_new);

  Layout layout_;
  // The shard's blocks as a filter of their own (the "local" layout of src/shard/shard_math.hpp),
  // fed each key's hash moved into its local block.
  Filter bits_;
};

/// `filter` cut into `num_shards` shards, each a copy of its blocks. Throws std::invalid_argument
/// for a shard count outside [1, num_blocks].
std::vector<FilterShard> split(const Filter& filter, std::uint32_t num_shards,
                               const Options& options = {});

/// The whole filter from all its shards, given in any order: byte for byte the filter split() cut.
/// Throws std::invalid_argument unless `shards` are exactly shards 0..S-1 of one layout and S.
Filter concat(std::span<const FilterShard> shards, const Options& options = {});

/// The same filter cut into `num_shards` shards instead: a copy of bytes, no key is rehashed and
/// no answer changes. `shards` as for concat().
std::vector<FilterShard> reshard(std::span<const FilterShard> shards, std::uint32_t num_shards,
                                 const Options& options = {});

/// Writes `shard` to `path` atomically in the filter file format (docs/FORMAT.md): the header
/// records the whole layout and the shard's place in it, the payload is the shard's bytes.
void save(const FilterShard& shard, const std::filesystem::path& path, const FileState& state = {});

/// Reads and fully verifies a shard file. A whole filter's file reads as shard 0 of 1.
/// Throws FormatError for a bad file, IoError when it cannot be read.
FilterShard load_shard(const std::filesystem::path& path, FileState* state = nullptr,
                       const Options& options = {});

/// Exactly the bytes save(shard, path, state) writes, in memory.
std::vector<std::byte> to_file_bytes(const FilterShard& shard, const FileState& state = {});

/// load_shard() of file bytes held in memory; `source` names them in errors.
FilterShard load_shard(std::span<const std::byte> bytes, FileState* state = nullptr,
                       const Options& options = {}, const std::string& source = "shard bytes");

/// Maps a shard file as map() maps a filter file: private, pages read on first touch.
FilterShard map_shard(const std::filesystem::path& path, FileState* state = nullptr,
                      const MapOptions& options = {});

}  // namespace bulkbloom
