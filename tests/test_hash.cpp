// The fast 8-byte XXH64 must be libxxhash's XXH64 of the key's little-endian bytes.
#include <gtest/gtest.h>

#include <cstring>

#define XXH_INLINE_ALL
#include <xxhash.h>

#include "test_support.hpp"

namespace bulkbloom::test {
namespace {

std::uint64_t libxxhash_of_u64(std::uint64_t key, std::uint64_t seed) {
  unsigned char bytes[8];
  for (int i = 0; i < 8; ++i) bytes[i] = static_cast<unsigned char>(key >> (8 * i));
  return XXH64(bytes, sizeof bytes, seed);
}

TEST(Hash, EightByteSpecialisationAgreesWithLibxxhash) {
  SplitMix64 rng(1);
  for (int i = 0; i < 200000; ++i) {
    const std::uint64_t key = rng.next();
    const std::uint64_t seed = (i % 4 == 0) ? 0 : rng.next();
    ASSERT_EQ(detail::xxh64_u64(key, seed), libxxhash_of_u64(key, seed))
        << "key " << key << " seed " << seed;
  }
}

TEST(Hash, EdgeKeysAgreeWithLibxxhash) {
  for (std::uint64_t key : {0ull, 1ull, ~0ull, 0x8000000000000000ull, 0xFFull}) {
    EXPECT_EQ(detail::xxh64_u64(key, 0), libxxhash_of_u64(key, 0));
  }
  // Published-value anchor: XXH64 of eight zero bytes with seed 0.
  EXPECT_EQ(detail::xxh64_u64(0, 0), 0x34c96acdcadb1bbbull);
}

TEST(Hash, ViewHashesPerLayout) {
  std::vector<std::byte> bits(64);
  FilterRef xxh(bits.data(), Layout{Shape::sb512, 1, KeyHash::xxh64, 7});
  FilterRef identity(bits.data(), Layout{Shape::sb512, 1, KeyHash::identity, 7});
  EXPECT_EQ(xxh.hash(42), libxxhash_of_u64(42, 7));
  EXPECT_EQ(identity.hash(42), 42u);
}

}  // namespace
}  // namespace bulkbloom::test
