// Known answers: block and bit positions worked out from DESIGN §1 outside this code base, then
// compared with every byte of a filter holding one key.
#include <gtest/gtest.h>

#include "test_support.hpp"

namespace bulkbloom::test {
namespace {

struct KnownAnswer {
  std::uint64_t key;
  std::uint64_t seed;
  KeyHash hash;
  std::uint64_t num_blocks;
  Shape shape;
  std::uint64_t block;
  std::vector<int> bits;  // bit index inside word i
  BlockIndex index = BlockIndex::high32;
};

Layout layout_of(const KnownAnswer& ka) {
  return Layout{ka.shape, ka.num_blocks, ka.hash, ka.seed, ka.index};
}

// Expected bytes: little-endian words, block `block`, word i has bit bits[i] set.
std::vector<std::byte> expected_bytes(const KnownAnswer& ka) {
  std::vector<std::byte> bytes(layout_of(ka).size_bytes());
  const int word_bytes = word_bits(ka.shape) / 8;
  for (std::size_t i = 0; i < ka.bits.size(); ++i) {
    const std::size_t byte = ka.block * block_bytes(ka.shape) + i * word_bytes + ka.bits[i] / 8;
    bytes[byte] |= std::byte(1u << (ka.bits[i] % 8));
  }
  return bytes;
}

// XXH64(8 LE bytes of key, seed) and then: block = ((h >> 32) * 1000) >> 32 (high32), x = low 32
// bits, bit_i = (x * SALT[i] mod 2^32) >> (32 - log2 w).
const std::vector<KnownAnswer> kCases = {
    // key 0: h = 0x34c96acdcadb1bbb.
    {0, 0, KeyHash::xxh64, 1000, Shape::sb256, 206, {9, 26, 13, 25, 4, 28, 14, 14}},
    {0, 0, KeyHash::xxh64, 1000, Shape::sb256x4, 206, {19, 53, 26, 51}},
    {0, 0, KeyHash::xxh64, 1000, Shape::sb512, 206, {19, 53, 26, 51, 8, 57, 28, 28}},
    {0,
     0,
     KeyHash::xxh64,
     1000,
     Shape::sb512x16,
     206,
     {9, 26, 13, 25, 4, 28, 14, 14, 19, 19, 27, 31, 3, 20, 15, 5}},
    // key 1: h = 0x9f29cb17a2a49995.
    {1, 0, KeyHash::xxh64, 1000, Shape::sb256, 621, {27, 25, 25, 17, 26, 27, 6, 8}},
    {1, 0, KeyHash::xxh64, 1000, Shape::sb512, 621, {55, 51, 51, 34, 52, 55, 12, 16}},
    // key UINT64_MAX: h = 0x85d136adb773c6c9.
    {~0ull, 0, KeyHash::xxh64, 1000, Shape::sb256x4, 522, {51, 23, 11, 57}},
    {~0ull,
     0,
     KeyHash::xxh64,
     1000,
     Shape::sb512x16,
     522,
     {25, 11, 5, 28, 4, 2, 20, 30, 28, 2, 1, 24, 15, 13, 18, 4}},
    // key 42 with seed 7: h = 0x1889de22bdd8972c.
    {42, 7, KeyHash::xxh64, 1000, Shape::sb256, 95, {30, 17, 15, 5, 15, 16, 12, 22}},
    // Identity hash 0xC000000000000003 over 10 blocks: block (0xC0000000 * 10) >> 32 = 7, x = 3.
    {0xC000000000000003ull,
     0,
     KeyHash::identity,
     10,
     Shape::sb512x16,
     7,
     {26, 25, 19, 29, 10, 17, 27, 2, 24, 10, 4, 23, 21, 1, 22, 0}},
    {0xC000000000000003ull,
     0,
     KeyHash::identity,
     10,
     Shape::sb512,
     7,
     {53, 51, 38, 58, 20, 34, 55, 5}},
    // Identity hash with x = 1: the bits are the salts' top bits. Block (0x80000000 * 4) >> 32.
    {0x8000000000000001ull,
     0,
     KeyHash::identity,
     4,
     Shape::sb256,
     2,
     {8, 8, 17, 20, 14, 5, 19, 11}},
    // BlockIndex::full64: block = (h * num_blocks) >> 64, the 128-bit product's high half, worked
    // out with arbitrary-precision integers; the bits are as above (x is the same).
    {0,
     0,
     KeyHash::xxh64,
     1000,
     Shape::sb512,
     206,
     {19, 53, 26, 51, 8, 57, 28, 28},
     BlockIndex::full64},
    {42,
     7,
     KeyHash::xxh64,
     1000,
     Shape::sb256,
     95,
     {30, 17, 15, 5, 15, 16, 12, 22},
     BlockIndex::full64},
    // h = 0x19999999FFFFFFFF over 10 blocks: high32 gives (0x19999999 * 10) >> 32 = 0, but the
    // low half carries the product over: h * 10 = 0x1_00000003_FFFFFFF6, block 1.
    {0x19999999FFFFFFFFull,
     0,
     KeyHash::identity,
     10,
     Shape::sb512,
     0,
     {46, 46, 29, 23, 35, 52, 24, 40}},
    {0x19999999FFFFFFFFull,
     0,
     KeyHash::identity,
     10,
     Shape::sb512,
     1,
     {46, 46, 29, 23, 35, 52, 24, 40},
     BlockIndex::full64},
    // Either side of the boundary 2^64 / 10 between blocks 0 and 1.
    {0x1999999999999999ull,
     0,
     KeyHash::identity,
     10,
     Shape::sb256,
     0,
     {26, 14, 8, 26, 4, 2, 0, 5},
     BlockIndex::full64},
    {0x199999999999999Aull,
     0,
     KeyHash::identity,
     10,
     Shape::sb256,
     1,
     {3, 22, 26, 14, 18, 8, 20, 17},
     BlockIndex::full64},
};

TEST(KnownAnswer, OneKeySetsExactlyTheSpecifiedBits) {
  for (const auto& ka : kCases) {
    SCOPED_TRACE("key " + std::to_string(ka.key) + " shape " + shape_name(ka.shape) + " index " +
                 std::string(to_string(ka.index)));
    Filter filter(layout_of(ka));
    filter.insert(ka.key);
    EXPECT_EQ(bytes_of(filter), expected_bytes(ka));
    EXPECT_TRUE(filter.contains(ka.key));
    EXPECT_EQ(filter.popcount(), ka.bits.size());
  }
}

TEST(KnownAnswer, ViewSetsTheSameBits) {
  for (const auto& ka : kCases) {
    const Layout layout = layout_of(ka);
    alignas(64) std::vector<std::byte> bits(layout.size_bytes());
    FilterRef(bits.data(), layout).insert(ka.key);
    EXPECT_EQ(bits, expected_bytes(ka)) << "key " << ka.key << " shape " << shape_name(ka.shape);
  }
}

TEST(KnownAnswer, ByteKeyHashesWithXxh64) {
  // XXH64("hello", seed 0) = 0x26c7827d889f6da3 (libxxhash).
  Filter by_bytes(Layout{Shape::sb512, 1000});
  Filter by_hash(Layout{Shape::sb512, 1000, KeyHash::identity});
  const std::string_view hello = "hello";
  by_bytes.insert(std::span<const std::string_view>(&hello, 1));
  by_hash.insert(0x26c7827d889f6da3ull);
  EXPECT_EQ(bytes_of(by_bytes), bytes_of(by_hash));
}

}  // namespace
}  // namespace bulkbloom::test
