/// @file
/// Filter layouts (block shape, block count, key hash) and sizing from a target false-positive
/// rate, following the model of DESIGN §2.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "bulkbloom/detail/block_math.hpp"

namespace bulkbloom {

/// Block shape: `W` words of `w` bits per block, one bit set per word for each key.
enum class Shape : std::uint8_t {
  sb256 = 0,     ///< 8 x 32-bit words (256 bits); the Parquet / Arrow split block.
  sb256x4 = 1,   ///< 4 x 64-bit words (256 bits); for high false-positive rates (>= 5%).
  sb512 = 2,     ///< 8 x 64-bit words (512 bits); one CPU cache line.
  sb512x16 = 3,  ///< 16 x 32-bit words (512 bits); for low false-positive rates (<= 1e-4).
};

/// How a `uint64_t` key becomes the 64-bit hash that places it.
enum class KeyHash : std::uint8_t {
  xxh64 = 0,     ///< XXH64 of the key's bytes with the layout's seed (Parquet-compatible).
  identity = 1,  ///< The key is already a uniform 64-bit hash and is used as is.
};

/// Words per block of a shape.
BULKBLOOM_HOST_DEVICE constexpr int words_per_block(Shape s) {
  return s == Shape::sb256x4 ? 4 : s == Shape::sb512x16 ? 16 : 8;
}
/// Bits per word of a shape (32 or 64).
BULKBLOOM_HOST_DEVICE constexpr int word_bits(Shape s) {
  return s == Shape::sb256 || s == Shape::sb512x16 ? 32 : 64;
}
/// Bytes per block of a shape (32 or 64).
BULKBLOOM_HOST_DEVICE constexpr int block_bytes(Shape s) {
  return words_per_block(s) * word_bits(s) / 8;
}

/// Name of a shape as used in files, messages and the command line ("sb512").
std::string_view to_string(Shape s);
/// Parses a shape name; throws std::invalid_argument naming the accepted names.
Shape parse_shape(std::string_view name);

/// A complete description of a filter's bits: two filters with equal layouts and equal bytes hold
/// the same set. Trivially copyable, so it can be passed to device code by value.
struct Layout {
  /// Largest block count: block selection scales the hash's high 32 bits onto the count.
  static constexpr std::uint64_t kMaxBlocks = (std::uint64_t{1} << 32) - 1;

  Shape shape = Shape::sb512;     ///< Block shape.
  std::uint64_t num_blocks = 1;   ///< Number of blocks, 1 <= num_blocks <= kMaxBlocks.
  KeyHash hash = KeyHash::xxh64;  ///< Hash applied to `uint64_t` keys and to byte keys.
  std::uint64_t seed = 0;         ///< XXH64 seed; 0 gives Parquet's filter for sb256.

  /// Size of the filter's bit array in bytes.
  BULKBLOOM_HOST_DEVICE constexpr std::uint64_t size_bytes() const {
    return num_blocks * static_cast<std::uint64_t>(block_bytes(shape));
  }

  /// Throws std::invalid_argument if the shape is unknown or num_blocks is out of range.
  void validate() const;

  /// Modelled false-positive rate after inserting `n` distinct keys (DESIGN §2): the mean over a
  /// Poisson(n / num_blocks) block load of the probability that all W probed bits are set.
  double expected_fpr(std::uint64_t n) const;

  /// Modelled bits of filter per key at `n` keys.
  double bits_per_key(std::uint64_t n) const;

  /// The smallest filter that keeps the modelled FPR at `capacity` keys at or under `fpr`, choosing
  /// among all shapes the one that needs the fewest bytes (ties go to the wider block).
  /// Throws std::invalid_argument if capacity is 0, fpr is not in (0, 1), or no filter of at most
  /// kMaxBlocks blocks reaches fpr.
  static Layout for_capacity(std::uint64_t capacity, double fpr, KeyHash hash = KeyHash::xxh64,
                             std::uint64_t seed = 0);

  /// As above with the shape fixed by the caller.
  static Layout for_capacity(Shape shape, std::uint64_t capacity, double fpr,
                             KeyHash hash = KeyHash::xxh64, std::uint64_t seed = 0);

  /// One line for people: "sb512 x 1953125 blocks (119.2 MiB), xxh64 seed 0".
  std::string describe() const;

  /// Layouts are equal when every field is.
  friend constexpr bool operator==(const Layout&, const Layout&) = default;
};

}  // namespace bulkbloom
