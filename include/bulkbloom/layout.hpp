/// @file
/// Filter layouts (block shape, block count, key hash, block index) and sizing from a target
/// false-positive rate, following the model of DESIGN §2.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "bulkbloom/detail/block_math.hpp"
#include "bulkbloom/detail/shapes.hpp"

namespace bulkbloom {

/// How a `uint64_t` key becomes the 64-bit hash that places it.
enum class KeyHash : std::uint8_t {
  xxh64 = 0,     ///< XXH64 of the key's bytes with the layout's seed (Parquet-compatible).
  identity = 1,  ///< The key is already a uniform 64-bit hash and is used as is.
};

/// How a hash picks its block (DESIGN §1). Both are monotone in the hash, so a contiguous range
/// of blocks holds a contiguous range of hashes (shards, DESIGN §8). The codes are part of the file
/// format.
enum class BlockIndex : std::uint8_t {
  /// `((h >> 32) * num_blocks) >> 32`, Parquet's: a block receives floor(2^32 / num_blocks) or one
  /// more of the 2^32 hash prefixes, so beyond ~10^8 blocks block loads are measurably uneven.
  high32 = 0,
  /// `(h * num_blocks) >> 64` over the whole 64-bit hash: blocks receive equal shares to 2^-32.
  full64 = 1,
};

/// Words per block of a shape.
BULKBLOOM_HOST_DEVICE constexpr int words_per_block(Shape s) {
  return detail::with_geometry(s, []<typename G>(G) { return G::kWords; });
}
/// Bits per word of a shape (32 or 64).
BULKBLOOM_HOST_DEVICE constexpr int word_bits(Shape s) {
  return detail::with_geometry(s, []<typename G>(G) { return G::kWordBits; });
}
/// Bytes per block of a shape (32 or 64).
BULKBLOOM_HOST_DEVICE constexpr int block_bytes(Shape s) {
  return detail::with_geometry(s, []<typename G>(G) { return G::kBlockBytes; });
}

/// Name of a shape as used in files, messages and the command line ("sb512").
std::string_view to_string(Shape s);
/// Parses a shape name; throws std::invalid_argument naming the accepted names.
Shape parse_shape(std::string_view name);

/// Name of a block index ("high32", "full64").
std::string_view to_string(BlockIndex index);
/// Parses a block index name; throws std::invalid_argument naming the accepted names.
BlockIndex parse_block_index(std::string_view name);

/// A complete description of a filter's bits: two filters with equal layouts and equal bytes hold
/// the same set. Trivially copyable, so it can be passed to device code by value.
struct Layout {
  /// Largest block count: block indices are 32-bit.
  static constexpr std::uint64_t kMaxBlocks = (std::uint64_t{1} << 32) - 1;

  Shape shape = Shape::sb512;             ///< Block shape.
  std::uint64_t num_blocks = 1;           ///< Number of blocks, 1 <= num_blocks <= kMaxBlocks.
  KeyHash hash = KeyHash::xxh64;          ///< Hash applied to `uint64_t` keys and to byte keys.
  std::uint64_t seed = 0;                 ///< XXH64 seed; 0 gives Parquet's filter for sb256.
  BlockIndex index = BlockIndex::high32;  ///< How a hash picks its block.

  /// Size of the filter's bit array in bytes.
  BULKBLOOM_HOST_DEVICE constexpr std::uint64_t size_bytes() const {
    return num_blocks * static_cast<std::uint64_t>(block_bytes(shape));
  }

  /// The block that 64-bit hash `h` goes to under this layout's index.
  BULKBLOOM_HOST_DEVICE constexpr std::uint32_t block_of(std::uint64_t h) const {
    const auto blocks = static_cast<std::uint32_t>(num_blocks);
    return index == BlockIndex::full64 ? detail::block_of_full64(h, blocks)
                                       : detail::block_of(h, blocks);
  }

  /// Throws std::invalid_argument if the shape, hash or index is unknown or num_blocks is out of
  /// range.
  void validate() const;

  /// Modelled false-positive rate after inserting `n` distinct keys (DESIGN §2): the mean over the
  /// block loads of the probability that all W probed bits are set. Exact for the index: under
  /// high32 an absent key meets the two block loads (floor(2^32 / num_blocks) or one more hash
  /// prefixes per block) in proportion to their share of the hash space.
  double expected_fpr(std::uint64_t n) const;

  /// Modelled bits of filter per key at `n` keys.
  double bits_per_key(std::uint64_t n) const;

  /// The smallest filter that keeps the modelled FPR at `capacity` keys at or under `fpr`, choosing
  /// among all shapes the one that needs the fewest bytes (ties go to the wider block).
  /// `index`: the block index, or by default chosen here: high32 (Parquet's) unless it would raise
  /// the FPR by more than kMaxHigh32Cost over full64 at the same size, which happens only beyond
  /// ~10^8 blocks. Throws std::invalid_argument if capacity is 0, fpr is not in (0, 1), or no
  /// filter of at most kMaxBlocks blocks reaches fpr.
  static Layout for_capacity(std::uint64_t capacity, double fpr, KeyHash hash = KeyHash::xxh64,
                             std::uint64_t seed = 0, std::optional<BlockIndex> index = {});

  /// As above with the shape fixed by the caller.
  static Layout for_capacity(Shape shape, std::uint64_t capacity, double fpr,
                             KeyHash hash = KeyHash::xxh64, std::uint64_t seed = 0,
                             std::optional<BlockIndex> index = {});

  /// Relative FPR increase of high32 over full64 up to which for_capacity keeps high32.
  static constexpr double kMaxHigh32Cost = 0.005;

  /// One line for people: "sb512 x 1953125 blocks (119.2 MiB), xxh64 seed 0", with ", index
  /// full64" appended for that index.
  std::string describe() const;

  /// Layouts are equal when every field is.
  friend constexpr bool operator==(const Layout&, const Layout&) = default;
};

}  // namespace bulkbloom
