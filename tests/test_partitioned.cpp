// The partitioned bulk path (src/cpu/partitioned.*) against the scalar kernels, with partitions
// far finer than the engine would choose on a filter this small, so that copies of keys land on
// every side of partition and thread boundaries.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "bulkbloom/detail/block_math.hpp"

#include "core/tuning.hpp"
#include "cpu/kernels.hpp"
#include "cpu/partitioned.hpp"
#include "cpu/plan_chooser.hpp"
#include "test_support.hpp"

namespace bulkbloom::test {
namespace {

using detail::BulkOp;
using detail::CpuKernels;
using detail::KeyMode;

std::vector<detail::CpuTarget> all_targets() {
  auto targets = detail::highway_targets();
  targets.push_back(detail::scalar_target());
  return targets;
}

std::vector<const CpuKernels*> all_kernel_sets() {
  std::vector<const CpuKernels*> sets;
  for (const auto& target : all_targets()) sets.push_back(target.kernels);
  return sets;
}

std::vector<std::uint64_t> batch_with_repeats(std::size_t n) {
  // A quarter of the keys repeat earlier ones, half of those far back (other slices).
  auto keys = random_keys(n, 41);
  SplitMix64 rng(42);
  for (std::size_t i = 1; i < n; i += 4) keys[i] = keys[rng.next() % i];
  return keys;
}

constexpr BlockIndex kBothIndexes[] = {BlockIndex::high32, BlockIndex::full64};

TEST(PartitionedBulk, MatchesTheScalarKernelsForEveryTargetThreadCountAndPartitioning) {
  const auto keys = batch_with_repeats(40009);
  for (const auto& [shape, index] : [] {
         std::vector<std::pair<Shape, BlockIndex>> cases;
         for (Shape s : kAllShapes) {
           for (BlockIndex i : kBothIndexes) cases.emplace_back(s, i);
         }
         return cases;
       }()) {
    const Layout layout{shape, 3001, KeyHash::xxh64, 0, index};
    // The oracle: scalar kernels, one call, in order.
    const CpuKernels& scalar = *detail::scalar_target().kernels;
    std::vector<std::byte> want_bits(layout.size_bytes());
    std::vector<std::uint8_t> want_new(keys.size());
    const auto want_fresh = scalar.insert_if_absent(layout, want_bits.data(), keys.data(),
                                                    keys.size(), KeyMode::hash_with_layout,
                                                    detail::all_blocks(layout), want_new.data());
    const auto probes = random_keys(keys.size(), 43);
    std::vector<std::uint8_t> want_found(probes.size());
    scalar.contains(layout, want_bits.data(), probes.data(), probes.size(),
                    KeyMode::hash_with_layout, want_found.data());

    for (const CpuKernels* kernels : all_kernel_sets()) {
      for (unsigned threads = 1; threads <= 4; ++threads) {
        detail::ThreadPool pool(threads);
        detail::PartitionScratch scratch;
        // 0 and 3 ask for more than 256 partitions of the 3001 blocks: run() makes 256 (shift 4).
        for (unsigned shift : {0u, 3u, 4u, 7u, 12u}) {
          SCOPED_TRACE(std::string(to_string(shape)) + " " + std::string(to_string(index)) + " " +
                       kernels->target + " threads " + std::to_string(threads) + " shift " +
                       std::to_string(shift));
          std::vector<std::byte> bits(layout.size_bytes());
          std::vector<std::uint8_t> is_new(keys.size());
          const auto fresh =
              scratch.run(BulkOp::insert_if_absent, *kernels, layout, bits.data(), keys.data(),
                          keys.size(), KeyMode::hash_with_layout, is_new.data(), pool, shift);
          EXPECT_EQ(fresh, want_fresh);
          ASSERT_EQ(is_new, want_new);
          ASSERT_EQ(bits, want_bits);

          std::vector<std::byte> inserted(layout.size_bytes());
          scratch.run(BulkOp::insert, *kernels, layout, inserted.data(), keys.data(), keys.size(),
                      KeyMode::hash_with_layout, nullptr, pool, shift);
          ASSERT_EQ(inserted, want_bits);

          std::vector<std::uint8_t> found(probes.size());
          scratch.run(BulkOp::contains, *kernels, layout, inserted.data(), probes.data(),
                      probes.size(), KeyMode::hash_with_layout, found.data(), pool, shift);
          ASSERT_EQ(found, want_found);
        }
      }
    }
  }
}

// Keys all in one block of `layout`, as prehashed hashes: under full64 any hash between the
// block's first and last; under high32 any with the block's top half.
std::vector<std::uint64_t> hashes_in_one_block(const Layout& layout, std::uint64_t block,
                                               std::size_t n) {
  SplitMix64 rng(47);
  std::vector<std::uint64_t> hashes(n);
  const unsigned __int128 first =
      ((static_cast<unsigned __int128>(block) << 64) + layout.num_blocks - 1) / layout.num_blocks;
  const unsigned __int128 span = (std::uint64_t{1} << 63) / layout.num_blocks;  // within the block
  for (auto& h : hashes) {
    h = layout.index == BlockIndex::full64
            ? static_cast<std::uint64_t>(first + rng.next() % span)
            : ((((block << 32) + layout.num_blocks - 1) / layout.num_blocks) << 32) |
                  (rng.next() & 0xFFFFFFFFu);
  }
  return hashes;
}

// The partitioning that several threads writing a large filter get (Mode::partitioned with
// 2^kMaxPartitionBits partitions at most), on adversarial batches: empty, fewer keys than
// threads, 2^k +- 1 keys around the parallel threshold, all equal, hot keys, and every key in
// one block. Each thread count gives the single scalar call's bits, flags and count.
TEST(PartitionedBulk, CoarsePartitionsMatchTheScalarKernelsOnAdversarialBatches) {
  constexpr std::size_t kParallel = std::size_t{1} << 14;  // kMinParallelKeys
  for (Shape shape : {Shape::sb256, Shape::sb512}) {
    for (BlockIndex index : kBothIndexes) {
      const Layout layout{shape, 4099, KeyHash::xxh64, 0, index};
      const unsigned shift = 13 - 8;  // ceil(log2(4099)) - kMaxPartitionBits: 129 partitions
      std::vector<std::pair<std::string, std::vector<std::uint64_t>>> batches = {
          {"empty", {}},
          {"one", random_keys(1, 50)},
          {"three", random_keys(3, 51)},
          {"2^14-1", batch_with_repeats(kParallel - 1)},
          {"2^14", batch_with_repeats(kParallel)},
          {"2^14+1", batch_with_repeats(kParallel + 1)},
          {"2^16+1", batch_with_repeats((kParallel << 2) + 1)},
          {"all equal", std::vector<std::uint64_t>(kParallel + 1, 0x5EED)},
          {"hot keys", hot_key_batch(7, 5000, 3 * kParallel, 52)},
      };
      const CpuKernels& scalar = *detail::scalar_target().kernels;
      for (const auto& [name, keys] : batches) {
        for (KeyMode mode : {KeyMode::hash_with_layout, KeyMode::prehashed}) {
          std::vector<std::uint64_t> batch = keys;
          if (mode == KeyMode::prehashed && !batch.empty()) {
            batch = hashes_in_one_block(layout, 4098 / 2, batch.size());  // "one block"
            for (std::uint64_t h : batch) ASSERT_EQ(layout.block_of(h), 4098u / 2);
          }
          std::vector<std::byte> want_bits(layout.size_bytes());
          std::vector<std::uint8_t> want_new(batch.size());
          const auto want_fresh =
              scalar.insert_if_absent(layout, want_bits.data(), batch.data(), batch.size(), mode,
                                      detail::all_blocks(layout), want_new.data());
          auto probes = random_keys(batch.size() + 5, 53);
          std::copy(batch.begin(), batch.begin() + static_cast<std::ptrdiff_t>(batch.size() / 2),
                    probes.begin());
          std::vector<std::uint8_t> want_found(probes.size());
          scalar.contains(layout, want_bits.data(), probes.data(), probes.size(), mode,
                          want_found.data());
          for (const CpuKernels* kernels : all_kernel_sets()) {
            for (unsigned threads = 1; threads <= 4; ++threads) {
              SCOPED_TRACE(std::string(to_string(shape)) + " " + std::string(to_string(index)) +
                           " " + name + (mode == KeyMode::prehashed ? " in one block " : " ") +
                           kernels->target + " threads " + std::to_string(threads));
              detail::ThreadPool pool(threads);
              detail::PartitionScratch scratch;
              std::vector<std::byte> bits(layout.size_bytes());
              std::vector<std::uint8_t> is_new(batch.size(), 7);
              EXPECT_EQ(scratch.run(BulkOp::insert_if_absent, *kernels, layout, bits.data(),
                                    batch.data(), batch.size(), mode, is_new.data(), pool, shift),
                        want_fresh);
              ASSERT_EQ(is_new, want_new);
              ASSERT_TRUE(bits == want_bits);

              std::vector<std::byte> inserted(layout.size_bytes());
              scratch.run(BulkOp::insert, *kernels, layout, inserted.data(), batch.data(),
                          batch.size(), mode, nullptr, pool, shift);
              ASSERT_TRUE(inserted == want_bits);

              std::vector<std::uint8_t> found(probes.size(), 7);
              scratch.run(BulkOp::contains, *kernels, layout, inserted.data(), probes.data(),
                          probes.size(), mode, found.data(), pool, shift);
              ASSERT_EQ(found, want_found);
            }
          }
        }
      }
    }
  }
}

// An adversarial batch of the exactness tests below, its keys hashed by the kernels or given as
// hashes (made to fall into chosen blocks).
struct NamedBatch {
  std::string name;
  std::vector<std::uint64_t> keys;
  KeyMode mode;
};
constexpr KeyMode hashed = KeyMode::hash_with_layout, prehashed = KeyMode::prehashed;

// Pairs of keys in one block but with different bits, the second of each pair half a batch later,
// so that with two slices every block is shared by both: key i and key i + n/2 (prehashed).
std::vector<std::uint64_t> pairs_across_the_halves(std::size_t n, std::uint64_t seed) {
  auto hashes = random_keys(n, seed);
  // Under either index the block comes from the top bits; the bits set come from the low 32.
  for (std::size_t i = n / 2; i < n; ++i)
    hashes[i] = (hashes[i - n / 2] & ~0xFFFFull) | (i & 0xFFFF);
  return hashes;
}

// Inserts without routing (Mode::atomic_key_slices): threads set bits in whatever blocks their
// slice of the keys falls into, with atomic ORs. The bytes must be one scalar insert's for every
// target and thread count, on empty and tiny batches, 2^k +- 1 keys, all-equal and hot keys (every
// slice writing the same blocks), every key in one block, pairs of keys of one block with different
// bits in different slices (the bits a lost OR would drop), and into a filter that holds half the
// keys already (most words then hold their bits: the kernels' read-only path).
TEST(AtomicInsert, KeySlicesGiveTheScalarBytesForEveryTargetThreadCountShapeAndIndex) {
  const CpuKernels& scalar = *detail::scalar_target().kernels;
  std::vector<std::pair<unsigned, std::unique_ptr<detail::ThreadPool>>> pools;
  for (unsigned threads : {1u, 2u, 3u, 4u, 7u}) {
    pools.emplace_back(threads, std::make_unique<detail::ThreadPool>(threads));
  }
  for (Shape shape : kAllShapes) {
    for (BlockIndex index : kBothIndexes) {
      const Layout layout{shape, 1031, KeyHash::xxh64, 0, index};
      const std::vector<NamedBatch> batches = {
          {"empty", {}, hashed},
          {"one", random_keys(1, 60), hashed},
          {"six", random_keys(6, 61), hashed},
          {"2^12-1", batch_with_repeats((1u << 12) - 1), hashed},
          {"2^12", batch_with_repeats(1u << 12), hashed},
          {"2^12+1", batch_with_repeats((1u << 12) + 1), hashed},
          {"2^14+1", batch_with_repeats((1u << 14) + 1), hashed},
          {"all equal", std::vector<std::uint64_t>(4099, 0x5EED), hashed},
          {"hot keys", hot_key_batch(5, 3000, 5000, 62), hashed},
          {"one block, six", hashes_in_one_block(layout, 1030 / 3, 6), prehashed},
          {"one block, 2^12+1", hashes_in_one_block(layout, 1030 / 3, (1u << 12) + 1), prehashed},
          {"one block, 2^14-1", hashes_in_one_block(layout, 1030, (1u << 14) - 1), prehashed},
          {"pairs across the halves", pairs_across_the_halves(1u << 14, 63), prehashed},
          {"pairs across the halves, odd", pairs_across_the_halves((1u << 14) + 1, 64), prehashed},
      };
      for (const auto& [name, batch, mode] : batches) {
        std::vector<std::byte> want_bits(layout.size_bytes());
        scalar.insert(layout, want_bits.data(), batch.data(), batch.size(), mode,
                      detail::all_blocks(layout));
        // The filter before the call: empty, or with the first half of the batch in it.
        std::vector<std::byte> half_loaded(layout.size_bytes());
        scalar.insert(layout, half_loaded.data(), batch.data(), batch.size() / 2, mode,
                      detail::all_blocks(layout));
        for (const CpuKernels* kernels : all_kernel_sets()) {
          for (const auto& [threads, pool] : pools) {
            SCOPED_TRACE(std::string(to_string(shape)) + " " + std::string(to_string(index)) + " " +
                         name + " " + kernels->target + " threads " + std::to_string(threads));
            for (bool loaded : {false, true}) {
              std::vector<std::byte> bits =
                  loaded ? half_loaded : std::vector<std::byte>(layout.size_bytes());
              detail::insert_in_key_slices(*kernels, layout, bits.data(), batch.data(),
                                           batch.size(), mode, *pool, threads);
              ASSERT_TRUE(bits == want_bits) << (loaded ? "half loaded" : "empty");
            }
          }
        }
      }
    }
  }
}

// What one scalar insert_if_absent of a batch leaves and answers.
struct ScalarAnswer {
  std::vector<std::byte> bits;
  std::vector<std::uint8_t> is_new;
  std::uint64_t fresh;
};

// Runs `check(scratch, kernels, layout, before, batch, pool, want)` for 1 to 7 threads, every
// shape, both indexes and every target, on filters of each of `block_counts` blocks and batches
// made to share blocks between slices: empty, tiny, `chunk` +- 1 keys (either side of a chunk),
// repeats far apart, all equal, hot keys, every key in one block (whose later keys find all their
// bits set by earlier ones), 4097 keys in one block, and pairs of keys of one block in different
// slices; into an empty filter and one holding half the batch. `want` is one scalar
// insert_if_absent's over `before`; a Scratch serves every call of one target, as an engine's does.
template <class Scratch, class Check>
void check_every_thread_count(std::initializer_list<std::uint64_t> block_counts, std::size_t chunk,
                              const Check& check) {
  const CpuKernels& scalar = *detail::scalar_target().kernels;
  std::vector<std::unique_ptr<detail::ThreadPool>> pools;
  for (unsigned threads = 1; threads <= 7; ++threads) {
    pools.push_back(std::make_unique<detail::ThreadPool>(threads));
  }
  for (Shape shape : kAllShapes) {
    for (BlockIndex index : kBothIndexes) {
      for (std::uint64_t num_blocks : block_counts) {
        const Layout layout{shape, num_blocks, KeyHash::xxh64, 0, index};
        const std::vector<NamedBatch> batches = {
            {"empty", {}, hashed},
            {"one", random_keys(1, 80), hashed},
            {"six", random_keys(6, 81), hashed},
            {"chunk-1", batch_with_repeats(chunk - 1), hashed},
            {"chunk+1", batch_with_repeats(chunk + 1), hashed},
            {"all equal", std::vector<std::uint64_t>(5001, 0x5EED), hashed},
            {"hot keys", hot_key_batch(7, 3000, 9000, 82), hashed},
            {"one block", hashes_in_one_block(layout, num_blocks / 3, 3001), prehashed},
            {"4097 in one block", hashes_in_one_block(layout, num_blocks - 1, 4097), prehashed},
            {"pairs across the halves", pairs_across_the_halves(20000, 83), prehashed},
        };
        for (const NamedBatch& batch : batches) {
          std::vector<std::byte> half_loaded(layout.size_bytes());
          std::vector<std::uint8_t> ignored(batch.keys.size());
          scalar.insert_if_absent(layout, half_loaded.data(), batch.keys.data(),
                                  batch.keys.size() / 2, batch.mode, detail::all_blocks(layout),
                                  ignored.data());
          for (bool loaded : {false, true}) {
            const auto before = loaded ? half_loaded : std::vector<std::byte>(layout.size_bytes());
            ScalarAnswer want{before, std::vector<std::uint8_t>(batch.keys.size()), 0};
            want.fresh = scalar.insert_if_absent(layout, want.bits.data(), batch.keys.data(),
                                                 batch.keys.size(), batch.mode,
                                                 detail::all_blocks(layout), want.is_new.data());
            for (const CpuKernels* kernels : all_kernel_sets()) {
              Scratch scratch;
              for (const auto& pool : pools) {
                SCOPED_TRACE(std::string(to_string(shape)) + " " + std::string(to_string(index)) +
                             " blocks " + std::to_string(num_blocks) + " " + batch.name +
                             (loaded ? " half loaded " : " ") + kernels->target + " threads " +
                             std::to_string(pool->size()));
                check(scratch, *kernels, layout, before, batch, *pool, want);
                if (::testing::Test::HasFatalFailure()) return;
              }
            }
          }
        }
      }
    }
  }
}

// The routing step of routed key slices: every target lists each key's hash under the task owning
// its block, in input order, and writes that task beside the key (when asked), exactly as the
// scalar kernel does, for 1 to 7 tasks (the SIMD targets compress into up to 4 lists, append one
// key at a time beyond), runs of any length around a vector and a group, both indexes, fewer
// blocks than tasks (some tasks own none) and the most blocks a layout has, and hashes on either
// side of each task's first hash (the SIMD targets split a vector by comparing hashes with those
// bounds; the scalar kernel computes each key's block).
TEST(RoutedKeySlices, RouteKernelsListEachKeyUnderItsBlocksOwnerInInputOrder) {
  const CpuKernels& scalar = *detail::scalar_target().kernels;
  for (BlockIndex index : kBothIndexes) {
    for (auto [num_blocks, hash] : {std::pair{std::uint64_t{3}, KeyHash::xxh64},
                                    std::pair{std::uint64_t{1031}, KeyHash::xxh64},
                                    std::pair{std::uint64_t{1031}, KeyHash::identity},
                                    std::pair{Layout::kMaxBlocks, KeyHash::xxh64}}) {
      const Layout layout{Shape::sb512, num_blocks, hash, 9, index};
      for (unsigned tasks = 1; tasks <= 7; ++tasks) {
        const auto owners = detail::BlockOwners::of(layout, tasks);
        std::vector<std::pair<std::vector<std::uint64_t>, KeyMode>> batches;
        for (std::size_t n : {0u, 1u, 7u, 8u, 9u, 63u, 64u, 65u, 1000u, 4099u}) {
          batches.emplace_back(batch_with_repeats(n), KeyMode::hash_with_layout);
        }
        std::vector<std::uint64_t> bounds = {0, 1, ~std::uint64_t{0} - 1, ~std::uint64_t{0}};
        for (unsigned t = 1; t <= detail::BlockOwners::kHashBounds; ++t) {
          if (!owners.has_first_hash[t]) continue;
          for (std::uint64_t delta : {-1, 0, 1}) bounds.push_back(owners.first_hash[t] + delta);
        }
        for (int copy = 0; copy < 4; ++copy)
          bounds.insert(bounds.end(), bounds.begin(), bounds.end());
        batches.emplace_back(bounds, KeyMode::prehashed);
        for (const auto& [keys, mode] : batches) {
          const std::size_t n = keys.size();
          const std::size_t capacity = n + detail::RouteLists::kRouteSlack;
          // The lists, and the owner bytes (with_owners) or the sentinel bytes left untouched.
          const auto route = [&](const CpuKernels& kernels, bool with_owners) {
            // Guard words past the last list: no list may be written beyond its capacity.
            constexpr std::size_t kGuardWords = 16;
            constexpr std::uint64_t kGuard = 0x5a5a5a5a5a5a5a5aULL;
            std::vector<std::uint64_t> hashes(tasks * capacity + kGuardWords, kGuard);
            constexpr std::uint8_t kUntouched = 0xEE;
            std::vector<std::uint8_t> owner_of(n + 8, kUntouched);
            std::vector<std::size_t> counts(tasks, 0);
            // Two calls, the second continuing the lists.
            const std::size_t half = n / 2;
            for (const auto [begin, end] : {std::pair{std::size_t{0}, half}, std::pair{half, n}}) {
              const detail::RouteLists lists{hashes.data(),
                                             with_owners ? owner_of.data() + begin : nullptr,
                                             capacity, counts.data()};
              kernels.route(layout, keys.data() + begin, end - begin, mode, owners, lists);
            }
            EXPECT_TRUE(std::all_of(hashes.end() - kGuardWords, hashes.end(),
                                    [](std::uint64_t word) { return word == kGuard; }));
            std::vector<std::vector<std::uint64_t>> listed(tasks);
            for (unsigned t = 0; t < tasks; ++t) {
              listed[t].assign(hashes.begin() + t * capacity,
                               hashes.begin() + t * capacity + counts[t]);
            }
            return std::pair{listed, owner_of};
          };
          // What the lists must hold, from the scalar hash and Layout::block_of.
          std::vector<std::uint64_t> hashed(n);
          scalar.hash(layout, keys.data(), n, mode, hashed.data());
          std::vector<std::vector<std::uint64_t>> want(tasks);
          std::vector<std::uint8_t> want_owner(n + 8, 0xEE);
          for (std::size_t i = 0; i < n; ++i) {
            const unsigned t = owners.owner(layout.block_of(hashed[i]));
            ASSERT_LT(t, tasks);
            want[t].push_back(hashed[i]);
            want_owner[i] = static_cast<std::uint8_t>(t);
          }
          for (const CpuKernels* kernels : all_kernel_sets()) {
            SCOPED_TRACE(std::string(to_string(index)) + " blocks " + std::to_string(num_blocks) +
                         " tasks " + std::to_string(tasks) + " n " + std::to_string(n) + " " +
                         kernels->target);
            ASSERT_EQ(route(*kernels, true), std::pair(want, want_owner));
            ASSERT_EQ(route(*kernels, false),
                      std::pair(want, std::vector<std::uint8_t>(n + 8, 0xEE)));
          }
        }
      }
    }
  }
}

// Routed insert_if_absent's flags back in input order: every target gives each key the next flag
// of its owner's list and no other byte, for runs around the vectors' 16-key steps and their
// 8-key halves and VBMI2's 64-key steps, task counts up to the vector loops' bounds of 8 and 16,
// past them and 256 (every owner byte), owner bytes all of the first task, all of the last,
// alternating and random; the lists lie a stride apart with their read slack
// (CpuKernels::kMergeReadSlack) after the longest, holding a sentinel that no key may take, and the
// bytes past n of is_new stay untouched.
TEST(RoutedKeySlices, MergeFlagsGivesEachKeyTheNextFlagOfItsOwnersList) {
  std::mt19937_64 random(37);
  constexpr std::uint8_t kSentinel = 0xEE;
  for (std::size_t n : {0u, 1u, 7u, 8u, 9u, 15u, 16u, 17u, 31u, 33u, 63u, 64u, 65u, 127u, 128u,
                        129u, 1000u, 4099u}) {
    for (unsigned tasks : {1u, 2u, 3u, 7u, 8u, 9u, 16u, 17u, 256u}) {
      std::vector<std::vector<std::uint8_t>> maps;
      maps.emplace_back(n, 0);
      maps.emplace_back(n, static_cast<std::uint8_t>(tasks - 1));
      maps.emplace_back(n);
      for (std::size_t i = 0; i < n; ++i) maps.back()[i] = i % 2 == 0 ? 0 : tasks - 1;
      maps.emplace_back(n);
      for (auto& owner : maps.back()) owner = static_cast<std::uint8_t>(random() % tasks);
      for (const auto& owner_of : maps) {
        std::vector<std::size_t> counts(tasks, 0);
        for (std::uint8_t owner : owner_of) ++counts[owner];
        const std::size_t stride =
            *std::max_element(counts.begin(), counts.end()) + CpuKernels::kMergeReadSlack;
        std::vector<std::uint8_t> lists(tasks * stride, kSentinel);
        std::vector<std::uint8_t> want(n + 16, kSentinel);
        std::fill(counts.begin(), counts.end(), 0);
        for (std::size_t i = 0; i < n; ++i) {
          const auto flag = static_cast<std::uint8_t>(random() % kSentinel);
          lists[owner_of[i] * stride + counts[owner_of[i]]++] = flag;
          want[i] = flag;
        }
        for (const CpuKernels* kernels : all_kernel_sets()) {
          SCOPED_TRACE(std::string(kernels->target) + " n " + std::to_string(n) + " tasks " +
                       std::to_string(tasks));
          std::vector<std::uint8_t> is_new(n + 16, kSentinel);
          kernels->merge_flags(owner_of.data(), n, lists.data(), stride, tasks, is_new.data());
          ASSERT_EQ(is_new, want);
        }
      }
    }
  }
}

// Routed key slices (Mode::routed_key_slices), insert and insert_if_absent: bytes, flags and count
// must be one scalar call's (check_every_thread_count's cases), also on a filter of 3 blocks, fewer
// than the tasks (some own none).
TEST(RoutedKeySlices,
     InsertAndInsertIfAbsentGiveTheScalarAnswersForEveryThreadCountTargetShapeAndIndex) {
  check_every_thread_count<detail::RoutedScratch>(
      {3, 1031, 40009}, detail::RoutedScratch::kChunkKeys,
      [](detail::RoutedScratch& scratch, const CpuKernels& kernels, const Layout& layout,
         const std::vector<std::byte>& before, const NamedBatch& batch, detail::ThreadPool& pool,
         const ScalarAnswer& want) {
        std::vector<std::byte> bits = before;
        std::vector<std::uint8_t> is_new(batch.keys.size(), 7);
        EXPECT_EQ(scratch.insert_if_absent(kernels, layout, bits.data(), batch.keys.data(),
                                           batch.keys.size(), batch.mode, is_new.data(), pool,
                                           pool.size()),
                  want.fresh);
        ASSERT_EQ(is_new, want.is_new);
        ASSERT_TRUE(bits == want.bits);
        bits = before;
        scratch.insert(kernels, layout, bits.data(), batch.keys.data(), batch.keys.size(),
                       batch.mode, pool, pool.size());
        ASSERT_TRUE(bits == want.bits) << "insert";
      });
}

// Routed insert_if_absent asked for more tasks than an owner byte tells apart (256) runs on 256:
// flags, count and bytes are still one scalar call's, for every target, at 256, 257 and 300 tasks
// on a pool of two threads (which runs any number of tasks), on repeats and all-equal keys into a
// filter holding half of them.
TEST(RoutedKeySlices, InsertIfAbsentOnMoreTasksThanOwnerBytesGivesTheScalarAnswers) {
  const CpuKernels& scalar = *detail::scalar_target().kernels;
  const Layout layout{Shape::sb512, 40009};
  detail::ThreadPool pool(2);
  for (const NamedBatch& batch :
       {NamedBatch{"repeats", batch_with_repeats(5000), hashed},
        NamedBatch{"all equal", std::vector<std::uint64_t>(700, 9), hashed}}) {
    std::vector<std::byte> before(layout.size_bytes());
    scalar.insert(layout, before.data(), batch.keys.data(), batch.keys.size() / 2, batch.mode,
                  detail::all_blocks(layout));
    std::vector<std::byte> want_bits = before;
    std::vector<std::uint8_t> want_new(batch.keys.size());
    const std::uint64_t want_fresh =
        scalar.insert_if_absent(layout, want_bits.data(), batch.keys.data(), batch.keys.size(),
                                batch.mode, detail::all_blocks(layout), want_new.data());
    for (const CpuKernels* kernels : all_kernel_sets()) {
      detail::RoutedScratch scratch;
      for (unsigned tasks : {256u, 257u, 300u}) {
        SCOPED_TRACE(batch.name + " " + kernels->target + " tasks " + std::to_string(tasks));
        std::vector<std::byte> bits = before;
        std::vector<std::uint8_t> is_new(batch.keys.size(), 7);
        EXPECT_EQ(
            scratch.insert_if_absent(*kernels, layout, bits.data(), batch.keys.data(),
                                     batch.keys.size(), batch.mode, is_new.data(), pool, tasks),
            want_fresh);
        ASSERT_EQ(is_new, want_new);
        ASSERT_TRUE(bits == want_bits);
      }
    }
  }
}

// Routed insert and insert_if_absent over several chunks (one chunk routed while the one before
// it is written, and insert_if_absent's flags of the one before that merged): bytes, flags and
// count are one scalar call's for 1 to 7 threads, every shape, both indexes and every target, on
// batches of four chunks and a bit (fresh keys with repeats, hot keys, all equal, every key in one
// block), into an empty and a half-loaded filter, so that the lists and counts of one chunk and
// those of the next meet the same blocks, a key's repeats fall in later chunks, and a call reuses
// its first set of lists, owner bytes and flags. Five chunks a call: successive calls on one
// scratch begin on every set of each. insert_if_absent also runs on 5 tasks on two threads.
TEST(RoutedKeySlices, CallsOfSeveralChunksGiveTheScalarAnswers) {
  const CpuKernels& scalar = *detail::scalar_target().kernels;
  constexpr std::size_t kKeys = 4 * detail::RoutedScratch::kChunkKeys + 5;
  std::vector<std::unique_ptr<detail::ThreadPool>> pools;
  for (unsigned threads = 1; threads <= 7; ++threads) {
    pools.push_back(std::make_unique<detail::ThreadPool>(threads));
  }
  for (Shape shape : kAllShapes) {
    for (BlockIndex index : kBothIndexes) {
      const Layout layout{shape, 40009, KeyHash::xxh64, 0, index};
      const std::vector<NamedBatch> batches = {
          {"repeats", batch_with_repeats(kKeys), hashed},
          {"hot keys", hot_key_batch(7, (kKeys - 1000) / 7, 1000, 84), hashed},
          {"all equal", std::vector<std::uint64_t>(kKeys, 0x5EED), hashed},
          {"one block", hashes_in_one_block(layout, 40009 / 2, kKeys), prehashed},
      };
      for (const NamedBatch& batch : batches) {
        std::vector<std::byte> half_loaded(layout.size_bytes());
        scalar.insert(layout, half_loaded.data(), batch.keys.data(), batch.keys.size() / 2,
                      batch.mode, detail::all_blocks(layout));
        for (bool loaded : {false, true}) {
          const auto before = loaded ? half_loaded : std::vector<std::byte>(layout.size_bytes());
          std::vector<std::byte> want = before;
          std::vector<std::uint8_t> want_new(batch.keys.size());
          const std::uint64_t want_fresh =
              scalar.insert_if_absent(layout, want.data(), batch.keys.data(), batch.keys.size(),
                                      batch.mode, detail::all_blocks(layout), want_new.data());
          for (const CpuKernels* kernels : all_kernel_sets()) {
            detail::RoutedScratch scratch;
            for (const auto& pool : pools) {
              SCOPED_TRACE(std::string(to_string(shape)) + " " + std::string(to_string(index)) +
                           " " + batch.name + (loaded ? " half loaded " : " ") + kernels->target +
                           " threads " + std::to_string(pool->size()));
              std::vector<std::byte> bits = before;
              scratch.insert(*kernels, layout, bits.data(), batch.keys.data(), batch.keys.size(),
                             batch.mode, *pool, pool->size());
              ASSERT_TRUE(bits == want) << "insert";
              std::vector<unsigned> task_counts{pool->size()};
              if (pool->size() == 2) task_counts.push_back(5);
              for (const unsigned tasks : task_counts) {
                bits = before;
                std::vector<std::uint8_t> is_new(batch.keys.size(), 7);
                EXPECT_EQ(scratch.insert_if_absent(*kernels, layout, bits.data(), batch.keys.data(),
                                                   batch.keys.size(), batch.mode, is_new.data(),
                                                   *pool, tasks),
                          want_fresh)
                    << tasks << " tasks";
                ASSERT_EQ(is_new, want_new) << tasks << " tasks";
                ASSERT_TRUE(bits == want) << "insert_if_absent, " << tasks << " tasks";
              }
            }
          }
        }
      }
    }
  }
}

TEST(PartitionedBulk, HashKernelsAgreeWithTheScalarHash) {
  const Layout seeded{Shape::sb512, 100, KeyHash::xxh64, 12345};
  for (std::size_t n : {0u, 1u, 7u, 8u, 9u, 63u, 64u, 65u, 1000u}) {
    auto keys = random_keys(n, 44 + n);
    // Keys whose halves are all zeros or all ones, where a product's carries are at their ends,
    // in turn over the first 42 keys: 7 of them against AVX2's steps of 6 (4 in a vector, 2 in
    // scalar code) puts each at every place of a step.
    constexpr std::uint64_t kEdgeKeys[] = {
        0, ~std::uint64_t{0}, 0xFFFFFFFF, 0xFFFFFFFF00000000, std::uint64_t{1} << 32,
        1, 0x8000000080000000};
    for (std::size_t i = 0; i < n && i < 6 * std::size(kEdgeKeys); ++i) {
      keys[i] = kEdgeKeys[i % std::size(kEdgeKeys)];
    }
    std::vector<std::uint64_t> want(n);
    detail::scalar_target().kernels->hash(seeded, keys.data(), n, KeyMode::hash_with_layout,
                                          want.data());
    for (const CpuKernels* kernels : all_kernel_sets()) {
      std::vector<std::uint64_t> got(n);
      kernels->hash(seeded, keys.data(), n, KeyMode::hash_with_layout, got.data());
      EXPECT_EQ(got, want) << kernels->target << " n=" << n;
    }
  }
}

// The window's compaction: the entries not found, in order, for every target, on answers drawn at
// random and all-or-nothing ones, at lengths on either side of the vector widths.
TEST(PartitionedBulk, KeepNotFoundKeepsTheEntriesNotFoundInOrder) {
  SplitMix64 rng(47);
  for (std::size_t n : {0u, 1u, 7u, 8u, 9u, 15u, 16u, 17u, 1000u, 65536u}) {
    for (int pattern = 0; pattern < 4; ++pattern) {
      std::vector<std::uint8_t> found(n);
      for (auto& f : found) f = pattern == 0 ? 0 : pattern == 1 ? 1 : (rng.next() % pattern == 0);
      const auto hashes = random_keys(n, 48 + n);
      std::vector<std::uint32_t> want_index;
      std::vector<std::uint64_t> want_hashes;
      for (std::size_t j = 0; j < n; ++j) {
        if (found[j] != 0) continue;
        want_index.push_back(static_cast<std::uint32_t>(3 * j));
        want_hashes.push_back(hashes[j]);
      }
      for (const auto& target : all_targets()) {
        const detail::HostKernels* kernels = target.host;
        std::vector<std::uint32_t> index(n);
        for (std::size_t j = 0; j < n; ++j) index[j] = static_cast<std::uint32_t>(3 * j);
        auto got_hashes = hashes;
        const std::size_t kept =
            kernels->keep_not_found(found.data(), index.data(), got_hashes.data(), n);
        ASSERT_EQ(kept, want_index.size()) << kernels->target << " n=" << n;
        index.resize(kept);
        got_hashes.resize(kept);
        EXPECT_EQ(index, want_index) << kernels->target << " n=" << n;
        EXPECT_EQ(got_hashes, want_hashes) << kernels->target << " n=" << n;
      }
    }
  }
}

// A writing kernel given a block range works on exactly the keys of that range: a key one block
// outside it on either side would be written by two threads at once.
TEST(PartitionedBulk, WritingKernelsTouchOnlyTheirBlockRange) {
  const auto keys = batch_with_repeats(5003);
  for (Shape shape : kAllShapes) {
    for (BlockIndex index : kBothIndexes) {
      const Layout layout{shape, 64, KeyHash::xxh64, 0, index};
      const detail::BlockRange range{21, 40};
      std::vector<std::uint64_t> inside;
      for (std::uint64_t key : keys) {
        const std::uint32_t block = layout.block_of(detail::xxh64_u64(key, layout.seed));
        if (block >= range.begin && block < range.end) inside.push_back(key);
      }
      const CpuKernels& scalar = *detail::scalar_target().kernels;
      std::vector<std::byte> want_bits(layout.size_bytes());
      std::vector<std::uint8_t> want_new(inside.size());
      scalar.insert_if_absent(layout, want_bits.data(), inside.data(), inside.size(),
                              KeyMode::hash_with_layout, detail::all_blocks(layout),
                              want_new.data());
      for (const CpuKernels* kernels : all_kernel_sets()) {
        SCOPED_TRACE(std::string(to_string(shape)) + " " + std::string(to_string(index)) + " " +
                     kernels->target);
        std::vector<std::byte> bits(layout.size_bytes());
        kernels->insert(layout, bits.data(), keys.data(), keys.size(), KeyMode::hash_with_layout,
                        range);
        EXPECT_EQ(bits, want_bits);

        std::fill(bits.begin(), bits.end(), std::byte{0});
        std::vector<std::uint8_t> is_new(keys.size(), 7);  // 7: not written
        kernels->insert_if_absent(layout, bits.data(), keys.data(), keys.size(),
                                  KeyMode::hash_with_layout, range, is_new.data());
        EXPECT_EQ(bits, want_bits);
        std::vector<std::uint8_t> written;
        for (std::uint8_t flag : is_new) {
          if (flag != 7) written.push_back(flag);
        }
        EXPECT_EQ(written, want_new);
      }
    }
  }
}

// Beyond 32 MiB the kernels prefetch fewer keys ahead than a group holds, so their loop takes
// other paths: keys must still be visited once each and in order, also when a block range keeps
// fewer keys of a group than the prefetch distance. One shape: the loop is the same for all.
// Every kernel set against the scalar kernels on `layout`, over `range`: insert_if_absent and
// insert give the same bits and flags, and contains the same answers for `probes`.
void expect_kernels_match_scalar(const Layout& layout, detail::BlockRange range,
                                 const std::vector<std::uint64_t>& keys,
                                 const std::vector<std::uint64_t>& probes) {
  const CpuKernels& scalar = *detail::scalar_target().kernels;
  std::vector<std::byte> want_bits(layout.size_bytes());
  std::vector<std::uint8_t> want_new(keys.size(), 7);  // 7: not written
  scalar.insert_if_absent(layout, want_bits.data(), keys.data(), keys.size(),
                          KeyMode::hash_with_layout, range, want_new.data());
  std::vector<std::uint8_t> want_found(probes.size());
  scalar.contains(layout, want_bits.data(), probes.data(), probes.size(), KeyMode::hash_with_layout,
                  want_found.data());
  for (const CpuKernels* kernels : all_kernel_sets()) {
    SCOPED_TRACE(std::string(to_string(layout.shape)) + " " + std::to_string(layout.num_blocks) +
                 " blocks, " + std::string(to_string(layout.index)) + ", " + kernels->target +
                 ", range [" + std::to_string(range.begin) + ", " + std::to_string(range.end) +
                 ")");
    std::vector<std::byte> bits(layout.size_bytes());
    std::vector<std::uint8_t> is_new(keys.size(), 7);
    kernels->insert_if_absent(layout, bits.data(), keys.data(), keys.size(),
                              KeyMode::hash_with_layout, range, is_new.data());
    EXPECT_EQ(is_new, want_new);
    EXPECT_TRUE(bits == want_bits);  // not EXPECT_EQ: megabytes would be printed on failure

    std::fill(bits.begin(), bits.end(), std::byte{0});
    kernels->insert(layout, bits.data(), keys.data(), keys.size(), KeyMode::hash_with_layout,
                    range);
    EXPECT_TRUE(bits == want_bits);

    std::vector<std::uint8_t> found(probes.size());
    kernels->contains(layout, bits.data(), probes.data(), probes.size(), KeyMode::hash_with_layout,
                      found.data());
    EXPECT_EQ(found, want_found);
  }
}

TEST(PartitionedBulk, KernelsMatchTheScalarKernelsOnAFilterBeyondTheCaches) {
  const Layout layout{Shape::sb512, std::uint64_t{1} << 20};  // 64 MiB
  const auto keys = batch_with_repeats(50001);
  auto probes = random_keys(20000, 44);
  probes.insert(probes.end(), keys.begin(), keys.begin() + 20000);
  // The whole filter, and a sixteenth of it: about 4 keys of each 64-key group.
  expect_kernels_match_scalar(layout, detail::all_blocks(layout), keys, probes);
  expect_kernels_match_scalar(layout, detail::BlockRange{1000, 1000 + (1u << 16)}, keys, probes);
  Layout wide = layout;
  wide.index = BlockIndex::full64;
  expect_kernels_match_scalar(wide, detail::BlockRange{1000, 1000 + (1u << 16)}, keys, probes);
}

// The full64 index where it differs from high32: hashes on either side of each block boundary
// k * 2^64 / B, whose blocks depend on the low half's carry into the high half's product. Every
// kernel set places them as the 128-bit product says, at block counts up to the largest.
TEST(PartitionedBulk, Full64IndexIsExactAtEveryBlockBoundary) {
  for (std::uint64_t num_blocks : {1ull, 3ull, 10ull, 1000ull, 65537ull}) {
    const Layout layout{Shape::sb256, num_blocks, KeyHash::identity, 0, BlockIndex::full64};
    std::vector<std::uint64_t> hashes;
    for (std::uint64_t k = 0; k <= std::min<std::uint64_t>(num_blocks, 2000); ++k) {
      // The first hash of block k: ceil(k * 2^64 / B), and the hash before it.
      const unsigned __int128 first =
          ((static_cast<unsigned __int128>(k) << 64) + num_blocks - 1) / num_blocks;
      if (first > 0) hashes.push_back(static_cast<std::uint64_t>(first - 1));
      if (first <= ~std::uint64_t{0}) hashes.push_back(static_cast<std::uint64_t>(first));
    }
    for (std::uint64_t h : hashes) {
      const auto want =
          static_cast<std::uint32_t>((static_cast<unsigned __int128>(h) * num_blocks) >> 64);
      ASSERT_EQ(layout.block_of(h), want) << std::hex << h << std::dec << " of " << num_blocks;
    }
    expect_kernels_match_scalar(layout, detail::all_blocks(layout), hashes, hashes);
  }
  // The largest block count, at random hashes and at the top of the hash range.
  SplitMix64 rng(46);
  for (std::uint32_t num_blocks : {0xFFFFFFFFu, 0x80000001u, 0x9E3779B9u}) {
    for (int i = 0; i < 100000; ++i) {
      const std::uint64_t h = i == 0 ? ~std::uint64_t{0} : rng.next();
      const auto want =
          static_cast<std::uint32_t>((static_cast<unsigned __int128>(h) * num_blocks) >> 64);
      ASSERT_EQ(detail::block_of_full64(h, num_blocks), want) << std::hex << h;
    }
  }
}

// The kernels load a block's words whole up to 1 MiB filters and in halves beyond (AVX-512,
// 64-byte blocks): both sides of that bound, for every shape.
TEST(PartitionedBulk, KernelsMatchTheScalarKernelsOnEitherSideOfTheWholeLoadBound) {
  const auto keys = batch_with_repeats(30011);
  auto probes = random_keys(10000, 45);
  probes.insert(probes.end(), keys.begin(), keys.begin() + 10000);
  for (Shape shape : kAllShapes) {
    const std::uint64_t blocks_in_1mib = (std::uint64_t{1} << 20) / Layout{shape, 1}.size_bytes();
    for (std::uint64_t num_blocks : {blocks_in_1mib, blocks_in_1mib + 1}) {
      for (BlockIndex index : kBothIndexes) {
        const Layout layout{shape, num_blocks, KeyHash::xxh64, 0, index};
        expect_kernels_match_scalar(layout, detail::all_blocks(layout), keys, probes);
      }
    }
  }
}

TEST(PartitionedBulk, PlanRoutesWritesAndPartitionsLargeBatchesForLocality) {
  using Mode = detail::BulkPlan::Mode;
  const Layout small{Shape::sb512, 1 << 12};
  EXPECT_EQ(detail::plan_bulk(BulkOp::insert, small, 100, 4).mode, Mode::single);
  EXPECT_EQ(detail::plan_bulk(BulkOp::insert, small, 1 << 20, 1).mode, Mode::single);
  const Layout at_16mib{Shape::sb512, (std::uint64_t{16} << 20) / 64};
  EXPECT_EQ(detail::plan_bulk(BulkOp::insert_if_absent, at_16mib, 100, 4).mode, Mode::single);
  const auto threaded = detail::plan_bulk(BulkOp::insert_if_absent, at_16mib, 1 << 20, 4);
  EXPECT_EQ(threaded.mode, Mode::routed_key_slices);
  EXPECT_EQ(threaded.tasks, 4u);
  EXPECT_EQ(detail::plan_bulk(BulkOp::contains, small, 1 << 20, 4).mode, Mode::key_slices);
  const Layout large{Shape::sb512, std::uint64_t{1} << 24};  // 1 GiB
  EXPECT_EQ(detail::plan_bulk(BulkOp::insert, large, std::size_t{1} << 31, 1).mode,
            Mode::partitioned);
  EXPECT_EQ(detail::plan_bulk(BulkOp::insert, large, std::size_t{1} << 16, 1).mode, Mode::single);
  // Several threads writing a sparse batch: routed to the blocks' owners below 1 GiB, from 1 GiB up
  // hashed once and partitioned into 129 to 256 block ranges.
  const Layout below{Shape::sb512, (std::uint64_t{1} << 24) - 1};
  const Layout odd{Shape::sb256, (std::uint64_t{1} << 25) + 12345};  // 1 GiB and 386 KiB
  for (BulkOp op : {BulkOp::insert, BulkOp::insert_if_absent}) {
    EXPECT_EQ(detail::plan_bulk(op, below, std::size_t{1} << 22, 2).mode, Mode::routed_key_slices);
    const auto large_plan = detail::plan_bulk(op, large, std::size_t{1} << 22, 2);
    EXPECT_EQ(large_plan.mode, Mode::partitioned);
    EXPECT_EQ(large_plan.tasks, 2u);
    EXPECT_EQ(large.num_blocks >> large_plan.partition_shift, 256u);
    const auto odd_plan = detail::plan_bulk(op, odd, std::size_t{1} << 22, 3);
    EXPECT_EQ(odd_plan.mode, Mode::partitioned);
    EXPECT_EQ(((odd.num_blocks - 1) >> odd_plan.partition_shift) + 1, 129u);
    EXPECT_EQ(detail::plan_bulk(op, large, std::size_t{1} << 22, 1).mode, Mode::single);
  }
  // Reads are partitioned from 6 GiB up, where a page walk joins each miss.
  EXPECT_EQ(detail::plan_bulk(BulkOp::contains, large, std::size_t{1} << 22, 2).mode,
            Mode::key_slices);
  const Layout read_below{Shape::sb512, (std::uint64_t{3} << 25) - 1};
  const Layout read_at{Shape::sb512, std::uint64_t{3} << 25};  // 6 GiB
  EXPECT_EQ(detail::plan_bulk(BulkOp::contains, read_below, std::size_t{1} << 22, 2).mode,
            Mode::key_slices);
  const auto read_plan = detail::plan_bulk(BulkOp::contains, read_at, std::size_t{1} << 22, 2);
  EXPECT_EQ(read_plan.mode, Mode::partitioned);
  EXPECT_EQ(read_at.num_blocks >> read_plan.partition_shift, 192u);
  EXPECT_EQ(detail::plan_bulk(BulkOp::contains, read_at, std::size_t{1} << 22, 1).mode,
            Mode::single);
}

TEST(PartitionedBulk, FromOneGiBUpReadsTimePartitionsAgainstKeySlices) {
  using Mode = detail::BulkPlan::Mode;
  const std::size_t n = std::size_t{1} << 22;
  const Layout below{Shape::sb512, (std::uint64_t{1} << 24) - 1};
  const Layout large{Shape::sb512, std::uint64_t{1} << 24};    // 1 GiB
  const Layout read_at{Shape::sb512, std::uint64_t{3} << 25};  // 6 GiB
  const auto alternative = [&](BulkOp op, const Layout& layout, std::size_t keys,
                               unsigned threads) {
    return detail::alternative_plan(op, layout, keys, detail::plan_bulk(op, layout, keys, threads));
  };
  EXPECT_FALSE(alternative(BulkOp::contains, below, n, 2));
  const Layout read_below{Shape::sb512, (std::uint64_t{3} << 25) - 1};  // 6 GiB less a block
  for (const Layout& layout : {large, read_below}) {
    const auto plan = detail::plan_bulk(BulkOp::contains, layout, n, 2);
    EXPECT_EQ(plan.mode, Mode::key_slices);
    const auto other = detail::alternative_plan(BulkOp::contains, layout, n, plan);
    ASSERT_TRUE(other);
    EXPECT_EQ(other->mode, Mode::partitioned);
    EXPECT_EQ(other->tasks, 2u);
    EXPECT_EQ(((layout.num_blocks - 1) >> other->partition_shift) + 1,
              layout == large ? 256u : 192u);
  }
  // Partitioned from 6 GiB up, always: key slices were slower there on every host measured.
  EXPECT_EQ(detail::plan_bulk(BulkOp::contains, read_at, n, 2).mode, Mode::partitioned);
  EXPECT_FALSE(alternative(BulkOp::contains, read_at, n, 2));
  // One thread and calls too short to time keep the plan by size.
  EXPECT_FALSE(alternative(BulkOp::contains, large, n, 1));
  EXPECT_FALSE(alternative(BulkOp::contains, large, (std::size_t{1} << 18) - 1, 2));
}

// Writes of 2^16 keys or more on several threads time a second plan against the plan by size: one
// thread under 16 MiB on up to four tasks, else block ranges, against routed key slices up to
// 1 GiB; from 1 GiB,
// where the plan by size partitions, atomic key slices (insert) and routed key slices
// (insert_if_absent). One thread and shorter calls keep the plan by size alone, and a filter under
// 1 MiB is written on one thread.
TEST(PartitionedBulk, WritesOnSeveralThreadsTimeASecondPlanAgainstThePlanBySize) {
  using Mode = detail::BulkPlan::Mode;
  const std::size_t n = std::size_t{1} << 16;
  const Layout at_1mib{Shape::sb512, (std::uint64_t{1} << 20) / 64};
  const Layout below_16mib{Shape::sb256, (std::uint64_t{16} << 20) / 32 - 1};
  const Layout at_16mib{Shape::sb512, (std::uint64_t{16} << 20) / 64};
  const Layout below_1gib{Shape::sb256, (std::uint64_t{1} << 25) - 1};
  const Layout large{Shape::sb512, std::uint64_t{1} << 24};  // 1 GiB
  for (const auto& [op, layout, by_size, second] :
       {std::tuple{BulkOp::insert, at_1mib, Mode::routed_key_slices, Mode::single},
        std::tuple{BulkOp::insert_if_absent, below_16mib, Mode::routed_key_slices, Mode::single},
        std::tuple{BulkOp::insert, at_16mib, Mode::routed_key_slices, Mode::block_ranges},
        std::tuple{BulkOp::insert_if_absent, below_1gib, Mode::routed_key_slices,
                   Mode::block_ranges},
        std::tuple{BulkOp::insert, large, Mode::partitioned, Mode::atomic_key_slices},
        std::tuple{BulkOp::insert_if_absent, large, Mode::partitioned, Mode::routed_key_slices}}) {
    for (unsigned threads : {2u, 3u, 7u}) {
      for (std::size_t keys : {n, 5 * n + 1}) {
        const auto plan = detail::plan_bulk(op, layout, keys, threads);
        EXPECT_EQ(plan.mode, by_size);
        const auto other = detail::alternative_plan(op, layout, keys, plan);
        ASSERT_TRUE(other);
        // One thread only against a few tasks: its call takes about `tasks` routed calls' time.
        const Mode want =
            second == Mode::single && plan.tasks > detail::tuning::kMaxTasksTimedAgainstOneThread
                ? Mode::block_ranges
                : second;
        EXPECT_EQ(other->mode, want) << threads << " threads";
        EXPECT_EQ(other->tasks, want == Mode::single ? 1u : plan.tasks);
      }
      EXPECT_FALSE(detail::alternative_plan(op, layout, n - 1,
                                            detail::plan_bulk(op, layout, n - 1, threads)));
    }
    // One thread: the plan by size, untimed.
    EXPECT_FALSE(detail::alternative_plan(op, layout, n, detail::plan_bulk(op, layout, n, 1)));
  }
  const Layout under{Shape::sb512, detail::tuning::kMinParallelWriteFilterBytes / 64 - 1};
  for (BulkOp op : {BulkOp::insert, BulkOp::insert_if_absent}) {
    const auto single = detail::plan_bulk(op, under, n, 4);
    EXPECT_EQ(single.mode, Mode::single);
    EXPECT_FALSE(detail::alternative_plan(op, under, n, single));
  }
}

// A 1 GiB filter on two threads reads each batch of 2^18 keys or more with either plan, whichever
// the chooser picks; the first calls try both. Every call must give the scalar reference's answers.
TEST(PartitionedBulk, CallsChosenByMeasurementGiveTheScalarAnswers) {
  const Layout layout{Shape::sb512, std::uint64_t{1} << 24, KeyHash::xxh64, 7, BlockIndex::full64};
  Options two_threads;
  two_threads.threads = 2;
  Filter filter(layout, two_threads);
  Options scalar;
  scalar.implementation = "cpu/scalar";
  scalar.threads = 1;
  Filter reference(layout, scalar);
  const std::size_t n = std::size_t{1} << 18;
  const auto fresh = random_keys(6 * n, 45);
  std::vector<std::uint8_t> flags(n), expected(n);
  for (std::size_t round = 0; round < 6; ++round) {
    // Half new keys, half copies of this and earlier rounds' keys.
    std::vector<std::uint64_t> batch(fresh.begin() + round * n, fresh.begin() + (round + 1) * n);
    SplitMix64 rng(round);
    for (std::size_t i = 1; i < n; i += 2) batch[i] = fresh[rng.next() % (round * n + i)];
    ASSERT_EQ(filter.insert_if_absent(batch, flags), reference.insert_if_absent(batch, expected));
    ASSERT_EQ(flags, expected) << "insert_if_absent, round " << round;
    auto probes = random_keys(n, 100 + round);
    std::copy_n(batch.begin(), n / 2, probes.begin());
    filter.contains(probes, flags);
    reference.contains(probes, expected);
    ASSERT_EQ(flags, expected) << "contains, round " << round;
    const auto more = random_keys(n, 200 + round);
    filter.insert(more);
    reference.insert(more);
  }
  EXPECT_EQ(std::memcmp(filter.view().data(), reference.view().data(), layout.size_bytes()), 0);
}

// Drives a chooser for `calls` calls of 1000 keys, call `call` with plan `plan` taking
// `seconds(plan, call)` a key; returns the plans it ran.
std::vector<unsigned> choices(detail::PlanChooser& chooser, int calls,
                              const std::function<double(unsigned plan, int call)>& seconds) {
  std::vector<unsigned> ran;
  for (int call = 0; call < calls; ++call) {
    const unsigned plan = chooser.next();
    chooser.record(plan, 1000, 1000 * seconds(plan, call));
    ran.push_back(plan);
  }
  return ran;
}

TEST(PlanChooser, TriesBothThenKeepsTheFasterAndRechecksTheOtherEverLessOften) {
  using detail::PlanChooser;
  for (unsigned faster : {0u, 1u}) {
    PlanChooser chooser;
    const auto ran =
        choices(chooser, 2000, [&](unsigned plan, int) { return plan == faster ? 1e-9 : 2e-9; });
    // The first calls alternate, the plan by size first.
    for (unsigned i = 0; i < 2 * PlanChooser::kFirstRuns; ++i) EXPECT_EQ(ran[i], i % 2) << i;
    // Then the slower plan runs only as rechecks of kFirstRuns calls in a row, each further from
    // the last, up to the limit.
    std::vector<std::pair<std::size_t, std::size_t>> rechecks;  // [first call, last call]
    for (std::size_t i = 2 * PlanChooser::kFirstRuns; i < ran.size(); ++i) {
      if (ran[i] == faster) continue;
      if (!rechecks.empty() && rechecks.back().second + 1 == i) {
        rechecks.back().second = i;
      } else {
        rechecks.emplace_back(i, i);
      }
    }
    ASSERT_GE(rechecks.size(), 5u);
    for (const auto& [first, last] : rechecks) {
      if (last + 1 < ran.size()) EXPECT_EQ(last - first + 1, PlanChooser::kFirstRuns) << first;
    }
    EXPECT_EQ(rechecks[0].first - (2 * PlanChooser::kFirstRuns - 1),
              PlanChooser::kFirstRecheckInterval);
    for (std::size_t r = 1; r < rechecks.size(); ++r) {
      const std::size_t gap = rechecks[r].first - rechecks[r - 1].second;
      const std::size_t expected = std::min<std::size_t>(PlanChooser::kFirstRecheckInterval << r,
                                                         PlanChooser::kMaxRecheckInterval);
      EXPECT_EQ(gap, expected) << "recheck " << r << " (faster plan " << faster << ")";
    }
  }
}

TEST(PlanChooser, SwitchesWhenTheOtherPlanBecomesFasterAndIgnoresOneSlowCall) {
  using detail::PlanChooser;
  PlanChooser chooser;
  // Plan 0 is faster for the first 500 calls, except one call slowed by a neighbour; from then on
  // plan 1 is.
  const auto ran = choices(chooser, 1500, [](unsigned plan, int call) {
    if (call == 100) return 50e-9;
    if (call < 500) return plan == 0 ? 1e-9 : 2e-9;
    return plan == 0 ? 3e-9 : 2e-9;
  });
  EXPECT_EQ(ran[101], 0u);  // the slow call alone does not make plan 0 look slower
  // Rechecks of plan 1 at calls 19-20, 52-53, 117-118 and 246-247: gaps of 16, 32, 64 and 128.
  EXPECT_EQ(std::count(ran.begin() + 4, ran.begin() + 500, 1u), 4 * PlanChooser::kFirstRuns);
  // After the change plan 0's own slower calls bring a recheck of plan 1 at once, which takes the
  // preference, and plan 0 runs only as rechecks from then.
  EXPECT_EQ(ran[502], 1u);
  EXPECT_LE(std::count(ran.begin() + 502, ran.begin() + 1000, 0u), 5 * PlanChooser::kFirstRuns);
  EXPECT_LE(std::count(ran.begin() + 1000, ran.end(), 0u), 2 * PlanChooser::kFirstRuns);
  EXPECT_EQ(ran.back(), 1u);
}

// A recheck is decided on the fastest of its calls: one of them slowed by a neighbour does not
// keep the slower plan for the next interval.
TEST(PlanChooser, ARecheckWithOneSlowedCallStillFindsTheFasterPlan) {
  detail::PlanChooser chooser;
  // Plan 1 is faster, but its trials (calls 1 and 3) and the first call of its first recheck
  // (call 19) are slowed.
  const auto ran = choices(chooser, 100, [](unsigned plan, int call) {
    const double slowed = call == 1 || call == 3 || call == 19 ? 4.0 : 1.0;
    return slowed * (plan == 1 ? 1e-9 : 1.5e-9);
  });
  ASSERT_EQ(ran[19], 1u);
  ASSERT_EQ(ran[20], 1u);
  EXPECT_EQ(ran[21], 0u);  // the preferred plan once more, to confirm
  // Plan 1 from then on, until plan 0's first recheck.
  EXPECT_EQ(std::count(ran.begin() + 22, ran.begin() + 37, 0u), 0);
}

// Calls from several threads: a recheck hands the other plan to kFirstRuns calls, whatever
// number of calls are under way at once, and is decided when they are back.
TEST(PlanChooser, ARecheckHandsTheOtherPlanToItsCallsAloneWhenCallsOverlap) {
  using detail::PlanChooser;
  PlanChooser chooser;
  choices(chooser, 2 * PlanChooser::kFirstRuns + PlanChooser::kFirstRecheckInterval - 1,
          [](unsigned plan, int) { return plan == 0 ? 1e-9 : 2e-9; });
  // The next call starts the first recheck, with four calls under way at once.
  std::vector<unsigned> plans;
  for (int call = 0; call < 4; ++call) plans.push_back(chooser.next());
  EXPECT_EQ(std::count(plans.begin(), plans.end(), 1u), PlanChooser::kFirstRuns);
  // Plan 1 has become the faster: its recheck, then plan 0's confirming call, hand it over.
  for (unsigned plan : plans) chooser.record(plan, 1000, 1000 * (plan == 0 ? 1e-9 : 0.5e-9));
  EXPECT_EQ(chooser.next(), 1u);
}

// A burst of load slows every call, of either plan, for a while. The preferred plan's slowed calls
// must not be weighed against the other plan's time from before the burst: that handed the
// preference to the slower plan, which then ran until its next recheck, up to
// kMaxRecheckInterval calls after the burst (bench/DECISIONS.md #37, "The chooser's stale times").
TEST(PlanChooser, ABurstOfLoadOnEveryPlanLeavesThePreferenceWhereItWas) {
  using detail::PlanChooser;
  for (unsigned faster : {0u, 1u}) {
    for (int burst : {2, 3, 40}) {
      PlanChooser chooser;
      const auto ran = choices(chooser, 1200, [&](unsigned plan, int call) {
        const double slowed = call >= 600 && call < 600 + burst ? 4.0 : 1.0;
        return slowed * (plan == faster ? 1e-9 : 1.5e-9);
      });
      // The slower plan runs only as rechecks (one brought forward by the burst, then the
      // interval's): the preference never moves.
      EXPECT_LE(std::count(ran.begin() + 600, ran.end(), 1 - faster), 4 * PlanChooser::kFirstRuns)
          << "faster plan " << faster << ", burst of " << burst;
      EXPECT_EQ(ran.back(), faster);
    }
  }
}

// Writes to a filter under 1 MiB run on one thread whatever the thread count, a count the caller
// set included: there two threads gained nothing steady (bench/DECISIONS.md #37, "Routed writes
// from 1 MiB"). From 1 MiB they are routed to the blocks' owners.
TEST(PartitionedBulk, WritesToFiltersUnder1MiBStayOnOneThreadWhateverTheThreadCount) {
  using Mode = detail::BulkPlan::Mode;
  const Layout half_mib{Shape::sb512, (std::uint64_t{1} << 19) / 64};
  const Layout under{Shape::sb512, (std::uint64_t{1} << 20) / 64 - 1};
  const Layout at{Shape::sb512, (std::uint64_t{1} << 20) / 64};
  const Layout two_mib{Shape::sb512, (std::uint64_t{2} << 20) / 64};
  for (BulkOp op : {BulkOp::insert, BulkOp::insert_if_absent}) {
    for (unsigned threads : {2u, 4u}) {
      EXPECT_EQ(detail::plan_bulk(op, half_mib, 1 << 20, threads).mode, Mode::single);
      EXPECT_EQ(detail::plan_bulk(op, under, 1 << 20, threads).mode, Mode::single);
      for (const Layout& layout : {at, two_mib}) {
        const auto split = detail::plan_bulk(op, layout, 1 << 20, threads);
        EXPECT_EQ(split.mode, Mode::routed_key_slices);
        // One task per 512 KiB of the filter at most, two at least.
        EXPECT_EQ(split.tasks, std::min(threads, static_cast<unsigned>(layout.size_bytes() >> 19)));
      }
    }
    // The cap on tasks binds writes only: reads split the keys as many ways as asked.
    const Layout sixteen_mib{Shape::sb512, (std::uint64_t{16} << 20) / 64};
    EXPECT_EQ(detail::plan_bulk(op, sixteen_mib, 1 << 20, 64).tasks, 32u);
    EXPECT_EQ(detail::plan_bulk(op, sixteen_mib, 1 << 20, 31).tasks, 31u);
    EXPECT_EQ(detail::plan_bulk(op, two_mib, 1 << 20, 3).tasks, 3u);
  }
  EXPECT_EQ(detail::plan_bulk(BulkOp::contains, at, 1 << 20, 8).tasks, 8u);
  // Readers share the blocks: contains splits the keys whatever the filter's size.
  EXPECT_EQ(detail::plan_bulk(BulkOp::contains, under, 1 << 20, 4).mode, Mode::key_slices);
}

TEST(PartitionedBulk, BlockRangesCoverEveryBlockOnce) {
  for (std::uint64_t blocks : {1u, 2u, 3u, 1021u, 4096u}) {
    const Layout layout{Shape::sb256, blocks};
    for (unsigned tasks = 1; tasks <= 4; ++tasks) {
      std::uint32_t next = 0;
      for (unsigned t = 0; t < tasks; ++t) {
        const auto range = detail::task_blocks(layout, t, tasks);
        EXPECT_EQ(range.begin, next);
        EXPECT_LE(range.begin, range.end);
        next = range.end;
      }
      EXPECT_EQ(next, blocks);
    }
  }
}

}  // namespace
}  // namespace bulkbloom::test
