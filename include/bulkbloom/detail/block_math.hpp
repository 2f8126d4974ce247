/// @file
/// Pure layout math shared by the host view, the CPU kernels and the CUDA kernels.
///
/// Nothing here depends on CUDA or Highway: it is plain constexpr C++ that nvcc also compiles for
/// the device. This header is the single definition of where a key's bits go (DESIGN §1).
#pragma once

#include <cstddef>
#include <cstdint>

#if defined(__CUDACC__)
#define BULKBLOOM_HOST_DEVICE __host__ __device__
#else
#define BULKBLOOM_HOST_DEVICE
#endif

namespace bulkbloom::detail {

/// Per-word multipliers. SALT[0..7] are Parquet's split-block constants; SALT[8..15] are the
/// first eight SHA-256 round constants with the low bit forced on (odd, and plainly not chosen to
/// favour any key set). They are part of the file format and never change.
inline constexpr std::uint32_t kSalt[16] = {0x47b6137bu, 0x44974d91u, 0x8824ad5bu, 0xa2b7289du,
                                            0x705495c7u, 0x2df1424bu, 0x9efc4947u, 0x5c6bfb31u,
                                            0x428a2f99u, 0x71374491u, 0xb5c0fbcfu, 0xe9b5dba5u,
                                            0x3956c25bu, 0x59f111f1u, 0x923f82a5u, 0xab1c5ed5u};

#if defined(__CUDACC__)
/// kSalt for device code, which cannot read host variables: a per-translation-unit device copy
/// made from kSalt at compile time (internal linkage, as nvcc requires without -rdc).
struct SaltTable {
  std::uint32_t salt[16];
};
constexpr SaltTable make_salt_table() {
  SaltTable table{};
  for (int i = 0; i < 16; ++i) table.salt[i] = kSalt[i];
  return table;
}
static __device__ constexpr SaltTable kSaltDevice = make_salt_table();
#endif

/// kSalt[i] on the host and on the device.
BULKBLOOM_HOST_DEVICE constexpr std::uint32_t salt(int i) {
#if defined(__CUDA_ARCH__)
  return kSaltDevice.salt[i];
#else
  return kSalt[i];
#endif
}

inline constexpr std::uint64_t kXxhPrime1 = 0x9E3779B185EBCA87ull;
inline constexpr std::uint64_t kXxhPrime2 = 0xC2B2AE3D27D4EB4Full;
inline constexpr std::uint64_t kXxhPrime3 = 0x165667B19E3779F9ull;
inline constexpr std::uint64_t kXxhPrime4 = 0x85EBCA77C2B2AE63ull;
inline constexpr std::uint64_t kXxhPrime5 = 0x27D4EB2F165667C5ull;

BULKBLOOM_HOST_DEVICE constexpr std::uint64_t rotl64(std::uint64_t v, int r) {
  return (v << r) | (v >> (64 - r));
}

/// XXH64 of exactly the 8 little-endian bytes of `key`: the general algorithm with its length
/// fixed at 8, so it needs no loads and vectorises as plain 64-bit arithmetic.
BULKBLOOM_HOST_DEVICE constexpr std::uint64_t xxh64_u64(std::uint64_t key, std::uint64_t seed) {
  std::uint64_t h = seed + kXxhPrime5 + 8;
  h ^= rotl64(key * kXxhPrime2, 31) * kXxhPrime1;
  h = rotl64(h, 27) * kXxhPrime1 + kXxhPrime4;
  h ^= h >> 33;
  h *= kXxhPrime2;
  h ^= h >> 29;
  h *= kXxhPrime3;
  h ^= h >> 32;
  return h;
}

/// Block of a 64-bit hash under BlockIndex::high32 (Parquet's): the high half scaled onto
/// [0, num_blocks) without a division.
BULKBLOOM_HOST_DEVICE constexpr std::uint32_t block_of(std::uint64_t hash,
                                                       std::uint32_t num_blocks) {
  return static_cast<std::uint32_t>(((hash >> 32) * num_blocks) >> 32);
}

/// Block of a 64-bit hash under BlockIndex::full64: the whole hash scaled onto [0, num_blocks),
/// floor(hash * num_blocks / 2^64), the high half of the 128-bit product. Built from two 32x32->64
/// products so that every backend can compute it with the same operations, SIMD lanes without a
/// 64x64 multiply included. Exact: with hash = hi * 2^32 + lo, the product over 2^64 is
/// (hi * num_blocks + lo * num_blocks / 2^32) / 2^32, and flooring the inner fraction first
/// changes no floor of the whole since hi * num_blocks is an integer; the sum stays below 2^64.
BULKBLOOM_HOST_DEVICE constexpr std::uint32_t block_of_full64(std::uint64_t hash,
                                                              std::uint32_t num_blocks) {
  const std::uint64_t high = (hash >> 32) * num_blocks;
  const std::uint64_t low = (hash & 0xffffffffu) * num_blocks;
  return static_cast<std::uint32_t>((high + (low >> 32)) >> 32);
}

/// Bit index inside word `i` of a block for the low hash half `x`.
template <int kLog2WordBits>
BULKBLOOM_HOST_DEVICE constexpr std::uint32_t bit_in_word(std::uint32_t x, int i) {
  return (x * salt(i)) >> (32 - kLog2WordBits);
}

/// Compile-time geometry of one block shape: `kWords` words of `Word` each.
template <typename WordT, int kWordCount>
struct BlockGeometry {
  using Word = WordT;
  static constexpr int kWords = kWordCount;
  static constexpr int kWordBits = 8 * static_cast<int>(sizeof(Word));
  static constexpr int kLog2WordBits = kWordBits == 32 ? 5 : 6;
  static constexpr int kBlockBytes = kWords * static_cast<int>(sizeof(Word));

  /// The word-wise bit pattern a hash sets in its block.
  struct Pattern {
    Word word[static_cast<std::size_t>(kWords)];
  };

  BULKBLOOM_HOST_DEVICE static constexpr Pattern pattern(std::uint64_t hash) {
    Pattern p{};
    const auto x = static_cast<std::uint32_t>(hash);
    for (int i = 0; i < kWords; ++i) p.word[i] = Word{1} << bit_in_word<kLog2WordBits>(x, i);
    return p;
  }
};

}  // namespace bulkbloom::detail
