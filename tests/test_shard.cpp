// Shards (DESIGN §9): the routing arithmetic against its definition, and shards against the one
// filter they are cut from, byte for byte and flag for flag, in memory and through files.
#include <bulkbloom/shard.hpp>

// The header checksum of patched files, computed as docs/FORMAT.md specifies.
#define XXH_INLINE_ALL
#include <xxhash.h>

#include <algorithm>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "shard/shard_math.hpp"
#include "test_support.hpp"

namespace bulkbloom {
namespace {

using test::bytes_of;
using test::message_of;
using test::random_keys;
using test::read_file;
using test::TempDir;
using test::write_file;

constexpr BlockIndex kBothIndexes[] = {BlockIndex::high32, BlockIndex::full64};
constexpr std::uint32_t kShardCounts[] = {1, 2, 3, 7, 64};
constexpr std::uint64_t kMaxBlocks = Layout::kMaxBlocks;

// The shard whose range holds `block`, by walking the ranges.
std::uint32_t shard_by_search(std::uint64_t block, std::uint64_t num_blocks,
                              std::uint32_t num_shards) {
  for (std::uint32_t s = 0; s < num_shards; ++s) {
    const BlockSpan span = shard_blocks(num_blocks, s, num_shards);
    if (block >= span.begin && block < span.end) return s;
  }
  ADD_FAILURE() << "block " << block << " is in no shard";
  return ~0u;
}

TEST(ShardMath, InvariantDivisorIsExactDivision) {
  test::SplitMix64 rng(7);
  std::vector<std::uint64_t> divisors = {
      2, 3, 5, 7, 64, 1000, 4294967295ull, 4294967294ull, 2147483649ull};
  for (int i = 0; i < 200; ++i) divisors.push_back(2 + rng.next() % kMaxBlocks);
  for (std::uint64_t d : divisors) {
    const detail::InvariantDivisor divide(d);
    // Numerators up to d * 2^32 - 1 keep the quotient's successor times d below 2^64.
    const std::uint64_t top = d * 4294967296ull - 1;
    std::vector<std::uint64_t> numerators = {0, 1, d - 1, d, d + 1, top, top - 1, top - d};
    for (int i = 0; i < 500; ++i) {
      const std::uint64_t q = rng.next() % 4294967296ull;
      numerators.push_back(q * d);
      numerators.push_back(q * d + d - 1);
      numerators.push_back(rng.next() % top);
    }
    for (std::uint64_t n : numerators) ASSERT_EQ(divide.floor_div(n), n / d) << n << " / " << d;
  }
  EXPECT_EQ(detail::InvariantDivisor(1).floor_div(0), 0u);
}

TEST(ShardMath, ShardOfBlockMatchesTheRangesForManyBlockAndShardCounts) {
  // Every block of small filters, for every shard count they allow.
  for (std::uint64_t blocks = 1; blocks <= 130; ++blocks) {
    const detail::InvariantDivisor divide(blocks);
    for (std::uint32_t shards = 1; shards <= blocks; ++shards) {
      for (std::uint64_t block = 0; block < blocks; ++block) {
        const std::uint32_t want = shard_by_search(block, blocks, shards);
        ASSERT_EQ(shard_of_block(block, blocks, shards), want)
            << block << " " << blocks << " " << shards;
        ASSERT_EQ(detail::route_block(static_cast<std::uint32_t>(block), shards, divide), want)
            << block << " " << blocks << " " << shards;
      }
    }
  }
  // Large filters: the blocks at each end of every shard, and random ones.
  test::SplitMix64 rng(11);
  for (std::uint64_t blocks :
       std::vector<std::uint64_t>{kMaxBlocks, kMaxBlocks - 1, 2147483649ull, 1000003ull}) {
    const detail::InvariantDivisor divide(blocks);
    for (std::uint32_t shards : {1u, 2u, 3u, 7u, 64u, 1000u, 65537u}) {
      for (std::uint32_t s = 0; s < shards; s += 1 + shards / 50) {
        const BlockSpan span = shard_blocks(blocks, s, shards);
        for (std::uint64_t block :
             {span.begin, span.end - 1, span.begin + rng.next() % span.size()}) {
          ASSERT_EQ(shard_of_block(block, blocks, shards), s) << block << " " << blocks;
          ASSERT_EQ(detail::route_block(static_cast<std::uint32_t>(block), shards, divide), s)
              << block << " " << blocks << " " << shards;
        }
      }
    }
  }
}

TEST(ShardMath, LocalHashesLandInTheSameBlockOfTheShardWithTheSameBits) {
  test::SplitMix64 rng(13);
  for (BlockIndex index : kBothIndexes) {
    for (std::uint64_t blocks :
         std::vector<std::uint64_t>{1, 2, 7, 1000, 2147483649ull, kMaxBlocks}) {
      const Layout whole{Shape::sb512, blocks, KeyHash::identity, 0, index};
      for (std::uint32_t shards : {1u, 3u, 64u}) {
        if (shards > blocks) continue;
        for (std::uint32_t s = 0; s < shards; ++s) {
          const BlockSpan span = shard_blocks(blocks, s, shards);
          const Layout local = detail::local_layout(whole, span.size());
          const detail::LocalHashes to_local(whole, static_cast<std::uint32_t>(span.begin),
                                             static_cast<std::uint32_t>(span.size()));
          int inside = 0;
          for (int i = 0; i < 20000 && inside < 2000; ++i) {
            const std::uint64_t h = rng.next();
            const std::uint32_t block = whole.block_of(h);
            std::uint32_t outside = 0;
            const std::uint64_t moved = to_local(h, outside);
            ASSERT_EQ(outside != 0, block < span.begin || block >= span.end) << h;
            if (outside != 0) continue;
            ++inside;
            ASSERT_EQ(local.block_of(moved), block - span.begin) << h << " " << blocks;
            ASSERT_EQ(static_cast<std::uint32_t>(moved), static_cast<std::uint32_t>(h));
          }
          // The first and last local blocks, which hold the extreme prefixes.
          for (std::uint64_t local_block : {std::uint64_t{0}, span.size() - 1}) {
            std::uint32_t outside = 0;
            // A hash of whole block span.begin + local_block: its smallest prefix.
            const std::uint64_t b = span.begin + local_block;
            __extension__ using U128 = unsigned __int128;
            const std::uint64_t h =
                index == BlockIndex::high32
                    ? static_cast<std::uint64_t>(((U128{b} << 32) + blocks - 1) / blocks) << 32
                    : static_cast<std::uint64_t>(((U128{b} << 64) + blocks - 1) / blocks);
            ASSERT_EQ(whole.block_of(h), b);
            const std::uint64_t moved = to_local(h, outside);
            ASSERT_EQ(outside, 0u);
            ASSERT_EQ(local.block_of(moved), local_block);
          }
        }
      }
    }
  }
}

// Keys with repeats inside and across shards, 0 and UINT64_MAX among them.
std::vector<std::uint64_t> keys_with_repeats(std::size_t n, std::uint64_t seed) {
  auto keys = random_keys(n, seed);
  for (std::size_t i = 3; i < keys.size(); i += 5) keys[i] = keys[i / 3];
  keys[0] = 0;
  keys[1] = ~0ull;
  keys[2] = keys[1];
  return keys;
}

// Per shard: the keys it owns and their positions in the batch, in order.
struct Routed {
  std::vector<std::vector<std::uint64_t>> keys;
  std::vector<std::vector<std::size_t>> positions;
};
Routed route(const Layout& layout, const std::vector<std::uint64_t>& keys, std::uint32_t shards) {
  std::vector<std::uint32_t> owner(keys.size());
  shard_of(layout, keys, shards, owner);
  Routed routed{std::vector<std::vector<std::uint64_t>>(shards),
                std::vector<std::vector<std::size_t>>(shards)};
  for (std::size_t i = 0; i < keys.size(); ++i) {
    routed.keys[owner[i]].push_back(keys[i]);
    routed.positions[owner[i]].push_back(i);
  }
  return routed;
}

std::vector<std::byte> concatenated_bytes(const std::vector<FilterShard>& shards) {
  std::vector<std::byte> all;
  for (const FilterShard& shard : shards) {
    std::vector<std::byte> part(shard.size_bytes());
    shard.copy_bytes_to(part);
    all.insert(all.end(), part.begin(), part.end());
  }
  return all;
}

// The filter built in one piece and the same keys put through shards: same bytes, same
// insert_if_absent flags, same contains answers. Block counts include ones no S divides.
TEST(Shards, AreTheOneFilterCutInPiecesForEveryShapeIndexAndShardCount) {
  const auto keys = keys_with_repeats(6007, 1);
  const auto probes = random_keys(3001, 2);
  for (Shape shape : test::kAllShapes) {
    for (BlockIndex index : kBothIndexes) {
      for (std::uint64_t blocks : {64ull, 97ull, 1000ull}) {
        const Layout layout{shape, blocks, KeyHash::xxh64, 5, index};
        Filter whole(layout);
        std::vector<std::uint8_t> want_new(keys.size());
        whole.insert_if_absent(keys, want_new);
        std::vector<std::uint8_t> want_found(probes.size());
        whole.contains(probes, want_found);
        for (std::uint32_t num_shards : kShardCounts) {
          SCOPED_TRACE(std::string(to_string(shape)) + " " + std::string(to_string(index)) +
                       " B=" + std::to_string(blocks) + " S=" + std::to_string(num_shards));
          const Routed routed = route(layout, keys, num_shards);
          const Routed routed_probes = route(layout, probes, num_shards);
          std::vector<FilterShard> shards;
          std::vector<std::uint8_t> got_new(keys.size(), 7);
          std::vector<std::uint8_t> got_found(probes.size(), 7);
          std::uint64_t blocks_seen = 0;
          for (std::uint32_t s = 0; s < num_shards; ++s) {
            FilterShard& shard = shards.emplace_back(layout, s, num_shards);
            EXPECT_EQ(shard.blocks().begin, blocks_seen);
            blocks_seen = shard.blocks().end;
            std::vector<std::uint8_t> flags(routed.keys[s].size());
            shard.insert_if_absent(routed.keys[s], flags);
            for (std::size_t i = 0; i < flags.size(); ++i)
              got_new[routed.positions[s][i]] = flags[i];
            std::vector<std::uint8_t> found(routed_probes.keys[s].size());
            shard.contains(routed_probes.keys[s], found);
            for (std::size_t i = 0; i < found.size(); ++i) {
              got_found[routed_probes.positions[s][i]] = found[i];
            }
          }
          EXPECT_EQ(blocks_seen, blocks);
          EXPECT_EQ(got_new, want_new);
          EXPECT_EQ(got_found, want_found);
          EXPECT_EQ(concatenated_bytes(shards), bytes_of(whole));
          EXPECT_EQ(bytes_of(concat(shards)), bytes_of(whole));
          EXPECT_EQ(concatenated_bytes(split(whole, num_shards)), bytes_of(whole));
          // Shards may come in any order.
          auto backwards = split(whole, num_shards);
          std::reverse(backwards.begin(), backwards.end());
          EXPECT_EQ(bytes_of(concat(backwards)), bytes_of(whole));
          EXPECT_EQ(concatenated_bytes(reshard(backwards, 2)), bytes_of(whole));
          for (std::uint32_t other : {1u, 5u, 64u}) {
            const auto moved = reshard(shards, other);
            ASSERT_EQ(moved.size(), other);
            EXPECT_EQ(concatenated_bytes(moved), bytes_of(whole)) << "to " << other;
            EXPECT_EQ(moved.back().blocks(), shard_blocks(blocks, other - 1, other));
          }
        }
      }
    }
  }
}

// A shard through insert() (not insert_if_absent) and through byte-string keys, on every usable
// implementation (a CUDA device's too, where there is one): the engine's own kernels do the work.
TEST(Shards, InsertAndByteKeysMatchTheOneFilterOnEveryImplementation) {
  const auto keys = keys_with_repeats(20011, 3);
  std::vector<std::string> strings;
  for (std::uint64_t k : keys) strings.push_back("event-" + std::to_string(k % 9973) + "-x");
  std::vector<std::string_view> views(strings.begin(), strings.end());
  for (const std::string& impl : available_implementations()) {
    SCOPED_TRACE(impl);
    Options options;
    options.implementation = impl;
    options.threads = 2;
    const Layout layout{Shape::sb256, 3001, KeyHash::xxh64, 77, BlockIndex::full64};
    Filter whole(layout, options);
    whole.insert(keys);
    std::vector<std::uint8_t> want_new(views.size());
    whole.insert_if_absent(views, want_new);

    std::vector<std::uint32_t> owner(keys.size());
    shard_of(layout, keys, 7, owner);
    std::vector<std::uint32_t> owner_of_view(views.size());
    shard_of(layout, views, 7, owner_of_view);
    std::vector<FilterShard> shards;
    std::vector<std::uint8_t> got_new(views.size(), 7);
    for (std::uint32_t s = 0; s < 7; ++s) {
      FilterShard& shard = shards.emplace_back(layout, s, 7, options);
      EXPECT_EQ(shard.implementation(), impl);
      std::vector<std::uint64_t> mine;
      for (std::size_t i = 0; i < keys.size(); ++i) {
        if (owner[i] == s) mine.push_back(keys[i]);
      }
      shard.insert(mine);
      std::vector<std::string_view> my_views;
      std::vector<std::size_t> where;
      for (std::size_t i = 0; i < views.size(); ++i) {
        if (owner_of_view[i] == s) {
          my_views.push_back(views[i]);
          where.push_back(i);
        }
      }
      std::vector<std::uint8_t> flags(my_views.size());
      shard.insert_if_absent(my_views, flags);
      for (std::size_t i = 0; i < flags.size(); ++i) got_new[where[i]] = flags[i];
      std::vector<std::uint8_t> found(my_views.size());
      shard.contains(my_views, found);
      EXPECT_TRUE(std::all_of(found.begin(), found.end(), [](std::uint8_t f) { return f == 1; }));
    }
    EXPECT_EQ(got_new, want_new);
    EXPECT_EQ(concatenated_bytes(shards), bytes_of(whole));
  }
}

// The smallest 64-bit hash that `layout` sends to `block` (block < num_blocks).
std::uint64_t first_hash_of_block(const Layout& layout, std::uint64_t block) {
  __extension__ using U128 = unsigned __int128;
  const std::uint64_t blocks = layout.num_blocks;
  return layout.index == BlockIndex::high32
             ? static_cast<std::uint64_t>(((U128{block} << 32) + blocks - 1) / blocks) << 32
             : static_cast<std::uint64_t>(((U128{block} << 64) + blocks - 1) / blocks);
}

// Keys that are hashes (key_hash identity) on both sides of every shard boundary, and the
// extremes 0 and 2^64 - 1: each goes to the shard the whole filter's block says, and sets the
// bits it sets there.
TEST(Shards, HashesAtShardBoundariesGoWhereTheWholeFilterPutsThem) {
  for (BlockIndex index : kBothIndexes) {
    const Layout layout{Shape::sb256, 100003, KeyHash::identity, 0, index};
    for (std::uint32_t num_shards : {7u, 64u}) {
      SCOPED_TRACE(std::string(to_string(index)) + " S=" + std::to_string(num_shards));
      std::vector<std::uint64_t> keys = {0, ~0ull};
      for (std::uint32_t s = 1; s < num_shards; ++s) {
        const std::uint64_t first =
            first_hash_of_block(layout, shard_blocks(100003, s, num_shards).begin);
        ASSERT_EQ(shard_of_block(layout.block_of(first), 100003, num_shards), s);
        ASSERT_EQ(shard_of_block(layout.block_of(first - 1), 100003, num_shards), s - 1);
        keys.insert(keys.end(), {first, first - 1, first + 1, first - 2});
      }
      Filter whole(layout);
      std::vector<std::uint8_t> want(keys.size());
      whole.insert_if_absent(keys, want);
      const Routed routed = route(layout, keys, num_shards);
      std::vector<FilterShard> shards;
      std::vector<std::uint8_t> got(keys.size(), 7);
      for (std::uint32_t s = 0; s < num_shards; ++s) {
        FilterShard& shard = shards.emplace_back(layout, s, num_shards);
        std::vector<std::uint8_t> flags(routed.keys[s].size());
        shard.insert_if_absent(routed.keys[s], flags);
        for (std::size_t i = 0; i < flags.size(); ++i) got[routed.positions[s][i]] = flags[i];
      }
      EXPECT_EQ(got, want);
      EXPECT_EQ(concatenated_bytes(shards), bytes_of(whole));
    }
  }
}

TEST(Shards, ShardOfAgreesWithTheBlockOfEachKey) {
  const auto keys = keys_with_repeats((std::size_t{1} << 20) + 4099, 4);  // two routing chunks
  for (BlockIndex index : kBothIndexes) {
    const Layout layout{Shape::sb512, 12345, KeyHash::xxh64, 9, index};
    for (std::uint32_t num_shards : kShardCounts) {
      std::vector<std::uint32_t> owner_of_block(layout.num_blocks);
      for (std::uint64_t b = 0; b < layout.num_blocks; ++b) {
        owner_of_block[b] = shard_by_search(b, layout.num_blocks, num_shards);
      }
      std::vector<std::uint32_t> owner(keys.size());
      shard_of(layout, keys, num_shards, owner);
      for (std::size_t i = 0; i < keys.size(); ++i) {
        const std::uint32_t block = layout.block_of(detail::xxh64_u64(keys[i], layout.seed));
        ASSERT_EQ(owner[i], owner_of_block[block]) << i;
      }
    }
  }
}

// A shard has at least one block: more shards than blocks is refused, not silently empty.
TEST(Shards, MoreShardsThanBlocksAreRefused) {
  const Layout layout{Shape::sb512, 5};
  const std::vector<std::uint64_t> keys = {1, 2, 3};
  std::vector<std::uint32_t> owner(keys.size());
  for (std::uint32_t bad : {0u, 6u, 64u}) {
    const auto msg = message_of<std::invalid_argument>([&] { shard_of(layout, keys, bad, owner); });
    EXPECT_NE(msg.find("shard count " + std::to_string(bad) + " is not in [1, 5]"),
              std::string::npos)
        << msg;
    EXPECT_THROW(FilterShard(layout, 0, bad), std::invalid_argument);
    EXPECT_THROW(split(Filter(layout), bad), std::invalid_argument);
  }
  EXPECT_THROW(FilterShard(layout, 5, 5), std::invalid_argument);
  EXPECT_THROW(shard_blocks(5, 0, 6), std::invalid_argument);
  // Five shards of five blocks: one block each.
  for (std::uint32_t s = 0; s < 5; ++s) EXPECT_EQ(FilterShard(layout, s, 5).blocks().size(), 1u);
}

TEST(Shards, KeysOfAnotherShardAreRefusedBeforeAnythingChanges) {
  const Layout layout{Shape::sb512, 1000};
  const auto keys = random_keys(4400000, 5);
  // About 1.1 million keys of shard 1: more than one chunk (2^20 keys), so the wrong key comes
  // after a chunk of good ones.
  const Routed routed = route(layout, keys, 4);
  FilterShard shard(layout, 1, 4);
  std::vector<std::uint64_t> batch = routed.keys[1];
  ASSERT_GT(batch.size(), std::size_t{1} << 20);
  const std::uint64_t stranger = routed.keys[3].front();
  batch.push_back(stranger);  // last, in the batch's last chunk
  const std::string where = "key " + std::to_string(stranger) + " at position " +
                            std::to_string(batch.size() - 1) +
                            " belongs to shard 3 of 4 (blocks [750, 1000)), not to shard 1 "
                            "(blocks [250, 500))";
  std::vector<std::uint8_t> flags(batch.size());
  for (const auto& call : std::vector<std::function<void()>>{
           [&] { shard.insert(batch); },
           [&] { shard.insert_if_absent(batch, flags); },
           [&] { shard.contains(batch, flags); },
       }) {
    const auto msg = message_of<std::invalid_argument>(call);
    EXPECT_NE(msg.find(where), std::string::npos) << msg;
    EXPECT_EQ(shard.popcount(), 0u);
  }
  const std::vector<std::string_view> strangers = {"a", "b", "c", "d", "e", "f", "g", "h"};
  std::vector<std::uint32_t> owner(strangers.size());
  shard_of(layout, strangers, 4, owner);
  const auto it = std::find_if(owner.begin(), owner.end(), [](std::uint32_t s) { return s != 1; });
  ASSERT_NE(it, owner.end());
  const std::vector<std::string_view> one = {strangers[it - owner.begin()]};
  const auto msg = message_of<std::invalid_argument>([&] { shard.insert(one); });
  EXPECT_NE(msg.find("byte key at position 0 (1 bytes) belongs to shard " + std::to_string(*it)),
            std::string::npos)
      << msg;
  EXPECT_EQ(shard.popcount(), 0u);
}

TEST(Shards, ConcatAndReshardNeedExactlyAllShardsOfOneFilter) {
  const Layout layout{Shape::sb512, 100};
  auto shards = split(Filter(layout), 3);
  std::vector<FilterShard> two;
  two.push_back(std::move(shards[0]));
  two.push_back(std::move(shards[1]));
  EXPECT_NE(message_of<std::invalid_argument>([&] { concat(two); }).find("need all of them"),
            std::string::npos);
  std::vector<FilterShard> twice;
  twice.emplace_back(layout, 0, 2);
  twice.emplace_back(layout, 0, 2);
  EXPECT_NE(message_of<std::invalid_argument>([&] { reshard(twice, 4); }).find("given twice"),
            std::string::npos);
  std::vector<FilterShard> mixed;
  mixed.emplace_back(layout, 0, 2);
  mixed.emplace_back(Layout{Shape::sb256, 100}, 1, 2);
  EXPECT_NE(message_of<std::invalid_argument>([&] { concat(mixed); }).find("different filters"),
            std::string::npos);
}

// The payloads of the shard files, concatenated, are the payload of the one filter's file.
TEST(ShardFiles, PayloadsConcatenateToTheFiltersFileAndRoundTrip) {
  TempDir dir;
  const auto keys = keys_with_repeats(5000, 6);
  for (BlockIndex index : kBothIndexes) {
    for (Shape shape : {Shape::sb256x4, Shape::sb512x16}) {
      const Layout layout{shape, 1001, KeyHash::xxh64, 0, index};
      Filter whole(layout);
      whole.insert(keys);
      save(whole, dir.path() / "whole.bbf");
      const auto whole_file = read_file(dir.path() / "whole.bbf");
      const FileInfo whole_info = read_info(dir.path() / "whole.bbf");
      EXPECT_EQ(whole_info.num_shards, 0u);
      const std::vector<std::byte> payload(whole_file.begin() + whole_info.payload_offset,
                                           whole_file.end());
      for (std::uint32_t num_shards : kShardCounts) {
        SCOPED_TRACE(test::shape_name(shape) + " " + std::string(to_string(index)) +
                     " S=" + std::to_string(num_shards));
        const auto shards = split(whole, num_shards);
        std::vector<std::byte> joined;
        for (std::uint32_t s = 0; s < num_shards; ++s) {
          const auto path = dir.path() / ("shard-" + std::to_string(s) + ".bbf");
          const std::vector<std::byte> metadata = {std::byte{'m'}, std::byte(s)};
          save(shards[s], path, {42 + s, metadata});
          const FileInfo info = read_info(path);
          EXPECT_EQ(info.layout, layout);
          EXPECT_EQ(info.num_shards, num_shards);
          EXPECT_EQ(info.shard, s);
          const auto file = read_file(path);
          joined.insert(joined.end(), file.begin() + info.payload_offset, file.end());

          FileState state;
          const FilterShard loaded = load_shard(path, &state);
          EXPECT_EQ(state.keys_inserted, 42 + s);
          EXPECT_EQ(state.metadata, metadata);
          const FilterShard mapped = map_shard(path);
          for (const FilterShard* back : {&loaded, &mapped}) {
            EXPECT_EQ(back->layout(), layout);
            EXPECT_EQ(back->index(), s);
            EXPECT_EQ(back->num_shards(), num_shards);
            std::vector<std::byte> want(shards[s].size_bytes()), got(back->size_bytes());
            shards[s].copy_bytes_to(want);
            back->copy_bytes_to(got);
            EXPECT_EQ(got, want);
          }
          // A loaded shard still takes its keys and gives the one filter's answers.
          std::vector<std::uint32_t> owner(keys.size());
          shard_of(layout, keys, num_shards, owner);
          std::vector<std::uint64_t> mine;
          for (std::size_t i = 0; i < keys.size(); ++i) {
            if (owner[i] == s) mine.push_back(keys[i]);
          }
          std::vector<std::uint8_t> found(mine.size());
          mapped.contains(mine, found);
          EXPECT_TRUE(std::all_of(found.begin(), found.end(), [](std::uint8_t f) { return f; }));
          // A shard file is a whole filter only when it is the only shard.
          if (num_shards == 1) {
            EXPECT_EQ(bytes_of(load(path)), bytes_of(whole));
          } else {
            EXPECT_NE(
                message_of<FormatError>([&] {
                  load(path);
                }).find("holds shard " + std::to_string(s) + " of " + std::to_string(num_shards)),
                std::string::npos);
            EXPECT_THROW(map(path), FormatError);
          }
        }
        EXPECT_EQ(joined, payload);
      }
      // A whole filter's file reads as shard 0 of 1.
      const FilterShard only = load_shard(dir.path() / "whole.bbf");
      EXPECT_EQ(only.num_shards(), 1u);
      EXPECT_EQ(only.blocks(), (BlockSpan{0, 1001}));
    }
  }
}

// Shard fields at 20 (num_shards) and 80 / 84 (block range): a range that is not the recorded
// shard's is refused even under a valid header checksum, and an older reader, which requires
// those bytes to be 0, refuses every shard file.
TEST(ShardFiles, ACorruptedRangeIsRefused) {
  TempDir dir;
  const Layout layout{Shape::sb512, 100};
  const auto path = dir.path() / "shard.bbf";
  save(FilterShard(layout, 1, 3), path);  // blocks [33, 66)
  const auto good = read_file(path);
  std::uint32_t field = 0;
  std::memcpy(&field, good.data() + 20, 4);
  EXPECT_EQ(field, 3u);
  std::memcpy(&field, good.data() + 80, 4);
  EXPECT_EQ(field, 33u);
  std::memcpy(&field, good.data() + 84, 4);
  EXPECT_EQ(field, 66u);
  EXPECT_NO_THROW(load_shard(path));

  auto error_with = [&](std::size_t at, std::uint32_t value) {
    auto image = good;
    std::memcpy(image.data() + at, &value, 4);
    const std::uint64_t checksum = XXH3_64bits(image.data(), 88);
    std::memcpy(image.data() + 88, &checksum, 8);
    const auto bad = dir.path() / "bad.bbf";
    write_file(bad, image);
    const auto msg = message_of<FormatError>([&] { load_shard(bad); });
    EXPECT_EQ(message_of<FormatError>([&] { map_shard(bad); }), msg);
    return msg;
  };
  EXPECT_NE(error_with(80, 34).find("bad shard block range [34, 66)"), std::string::npos);
  EXPECT_NE(error_with(84, 67).find("bad shard block range [33, 67)"), std::string::npos);
  EXPECT_NE(error_with(84, 33).find("bad shard block range [33, 33)"), std::string::npos);
  EXPECT_NE(error_with(20, 4).find("shard 1 of 4 over 100 blocks is [25, 50)"), std::string::npos);
  EXPECT_NE(error_with(20, 101).find("bad shard: 101 shards"), std::string::npos);
  EXPECT_NE(error_with(80, 100).find("bad shard"), std::string::npos);
  EXPECT_NE(error_with(20, 0).find("reserved"), std::string::npos);
}

}  // namespace
}  // namespace bulkbloom
