// Contracts of DESIGN §3 on every shape and every implementation this build runs here.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cstring>
#include <random>
#include <thread>
#include <unordered_set>

#include "core/tuning.hpp"
#include "test_support.hpp"

namespace bulkbloom::test {
namespace {

struct Case {
  std::string implementation;
  Shape shape;
};

void PrintTo(const Case& c, std::ostream* os) {
  *os << c.implementation << " " << to_string(c.shape);
}

std::vector<Case> all_cases() {
  std::vector<Case> cases;
  for (const auto& impl : available_implementations()) {
    for (Shape s : kAllShapes) cases.push_back({impl, s});
  }
  return cases;
}

std::string case_name(const testing::TestParamInfo<Case>& info) {
  std::string name = info.param.implementation + "_" + shape_name(info.param.shape);
  std::replace(name.begin(), name.end(), '/', '_');
  return name;
}

class FilterContract : public testing::TestWithParam<Case> {
 protected:
  // A small filter (high load in the tests below) so that blocks are shared by many keys.
  Filter make(std::uint64_t num_blocks = 257, KeyHash hash = KeyHash::xxh64) const {
    Options options;
    options.implementation = GetParam().implementation;
    return Filter(Layout{GetParam().shape, num_blocks, hash, 0}, options);
  }
  Filter make_scalar(std::uint64_t num_blocks = 257) const {
    Options options;
    options.implementation = "cpu/scalar";
    options.threads = 1;  // the oracle: one key at a time, in order
    return Filter(Layout{GetParam().shape, num_blocks}, options);
  }
  // Blocks of this shape in a filter just over 16 MiB: written on several threads (from 1 MiB),
  // and too large for these tests' keys to fill, so that a key left out would show.
  std::uint64_t blocks_of_a_threaded_write() const {
    return (std::uint64_t{16} << 20) / block_bytes(GetParam().shape) + 3;
  }
  // That, and a filter just over 1 MiB, whose routed writes are timed against one thread rather
  // than block ranges (src/cpu/partitioned.hpp).
  std::vector<std::uint64_t> blocks_of_threaded_writes() const {
    return {(std::uint64_t{1} << 20) / block_bytes(GetParam().shape) + 3,
            blocks_of_a_threaded_write()};
  }
  // Calls `calls(filter, reference)` with a filter of `num_blocks` of this implementation on 2,
  // then 3 threads, and a scalar reference of the same layout.
  template <class Calls>
  void on_two_and_three_threads(std::uint64_t num_blocks, const Calls& calls) const {
    for (unsigned threads : {2u, 3u}) {
      SCOPED_TRACE(std::to_string(threads) + " threads");
      Options options;
      options.implementation = GetParam().implementation;
      options.threads = threads;
      Filter filter(Layout{GetParam().shape, num_blocks}, options),
          reference = make_scalar(num_blocks);
      calls(filter, reference);
    }
  }
};

// The reference meaning of insert_if_absent: one key at a time, contains then insert.
std::vector<std::uint8_t> sequential_insert_if_absent(Filter& filter,
                                                      std::span<const std::uint64_t> keys) {
  std::vector<std::uint8_t> flags;
  for (std::uint64_t k : keys) {
    flags.push_back(filter.contains(k) ? 0 : 1);
    filter.insert(k);
  }
  return flags;
}

TEST_P(FilterContract, NoFalseNegativesOnAnyPath) {
  const auto keys = random_keys(20000, 11);
  Filter batch = make(), single = make(), strings = make();
  batch.insert(keys);
  for (auto k : keys) single.insert(k);
  std::vector<std::string> texts;
  for (auto k : keys) texts.push_back("key-" + std::to_string(k));
  std::vector<std::string_view> views(texts.begin(), texts.end());
  strings.insert(views);

  std::vector<std::uint8_t> flags(keys.size());
  batch.contains(keys, flags);
  EXPECT_EQ(std::count(flags.begin(), flags.end(), 1), std::ptrdiff_t(keys.size()));
  single.contains(keys, flags);
  EXPECT_EQ(std::count(flags.begin(), flags.end(), 1), std::ptrdiff_t(keys.size()));
  strings.contains(views, flags);
  EXPECT_EQ(std::count(flags.begin(), flags.end(), 1), std::ptrdiff_t(keys.size()));
  const FilterRef view = batch.view();
  for (auto k : keys) {
    ASSERT_TRUE(batch.contains(k));
    ASSERT_TRUE(view.contains(k));
  }
  EXPECT_EQ(bytes_of(batch), bytes_of(single));
}

TEST_P(FilterContract, IdentityHashUsesKeysAsHashes) {
  const auto keys = random_keys(5000, 12);
  Filter filter = make(257, KeyHash::identity);
  filter.insert(keys);
  std::vector<std::byte> by_view(filter.layout().size_bytes());
  const FilterRef view(by_view.data(), filter.layout());
  for (auto k : keys) view.insert_hash(k);
  EXPECT_EQ(bytes_of(filter), by_view);
}

TEST_P(FilterContract, InsertIsOrderIndependentAndMatchesTheReference) {
  auto keys = random_keys(30000, 13);
  Filter in_order = make();
  in_order.insert(keys);
  std::shuffle(keys.begin(), keys.end(), std::mt19937_64(5));
  Filter shuffled = make();
  // In uneven batches too.
  for (std::size_t i = 0; i < keys.size(); i += 997) {
    shuffled.insert(std::span(keys).subspan(i, std::min<std::size_t>(997, keys.size() - i)));
  }
  EXPECT_EQ(bytes_of(in_order), bytes_of(shuffled));
  Filter reference = make_scalar();
  reference.insert(keys);
  EXPECT_EQ(bytes_of(in_order), bytes_of(reference));
}

TEST_P(FilterContract, ContainsMatchesTheReference) {
  const auto keys = random_keys(40000, 14);
  Filter filter = make(), reference = make_scalar();
  filter.insert(std::span(keys).first(10000));
  reference.insert(std::span(keys).first(10000));
  std::vector<std::uint8_t> got(keys.size()), want(keys.size());
  filter.contains(keys, got);
  reference.contains(keys, want);
  EXPECT_EQ(got, want);
  // One key at a time (its own path on host memory): the same answers, false positives included,
  // also on the full64 index, and on a filter mapped from a file.
  for (std::size_t i = 0; i < keys.size(); ++i) ASSERT_EQ(filter.contains(keys[i]), want[i] != 0);
  Layout full64 = filter.layout();
  full64.index = BlockIndex::full64;
  Options options, scalar;
  options.implementation = GetParam().implementation;
  scalar.implementation = "cpu/scalar";
  Filter wide(full64, options), wide_reference(full64, scalar);
  wide.insert(std::span(keys).first(10000));
  wide_reference.insert(std::span(keys).first(10000));
  wide_reference.contains(keys, want);
  for (std::size_t i = 0; i < keys.size(); ++i) ASSERT_EQ(wide.contains(keys[i]), want[i] != 0);
  const TempDir dir;
  save(wide, dir.path() / "f.bbf");
  const Filter mapped = map(dir.path() / "f.bbf");
  for (std::size_t i = 0; i < keys.size(); ++i) ASSERT_EQ(mapped.contains(keys[i]), want[i] != 0);
}

// `n` keys drawn at random from `distinct` keys.
std::vector<std::uint64_t> hot_keys(std::size_t distinct, std::size_t n, std::uint64_t seed) {
  const auto hot = random_keys(distinct, seed);
  std::vector<std::uint64_t> batch(n);
  SplitMix64 rng(seed + 1);
  for (auto& key : batch) key = hot[rng.next() % hot.size()];
  return batch;
}

// Batches built to break a careless dedup: every copy of a key must be reported new at most once.
std::vector<std::vector<std::uint64_t>> adversarial_batches() {
  std::vector<std::vector<std::uint64_t>> batches;
  batches.push_back({});                                     // empty
  batches.push_back(std::vector<std::uint64_t>(1000, 77));   // all equal
  batches.push_back({0, ~0ull, 0, ~0ull, 0, 1, ~0ull - 1});  // edge values
  batches.push_back(std::vector<std::uint64_t>(17, 0));      // not a multiple of any width
  std::vector<std::uint64_t> sequential(5000);
  for (std::size_t i = 0; i < sequential.size(); ++i) sequential[i] = i;
  batches.push_back(sequential);
  batches.push_back(hot_keys(300, 9000, 15));  // each of 300 keys ~30 times at random positions
  // Copies of one key back to back in runs of 1..64 (one vector, several vectors).
  std::vector<std::uint64_t> runs;
  for (int run = 1; run <= 64; ++run) runs.insert(runs.end(), run, 1000 + run % 7);
  batches.push_back(runs);
  return batches;
}

TEST_P(FilterContract, InsertIfAbsentIsTheSequentialLoop) {
  for (const auto& batch : adversarial_batches()) {
    SCOPED_TRACE("batch of " + std::to_string(batch.size()));
    Filter filter = make(), reference = make_scalar();
    std::vector<std::uint8_t> is_new(batch.size());
    const auto fresh = filter.insert_if_absent(batch, is_new);
    const auto want = sequential_insert_if_absent(reference, batch);
    EXPECT_EQ(is_new, want);
    EXPECT_EQ(fresh, std::uint64_t(std::count(want.begin(), want.end(), 1)));
    EXPECT_EQ(bytes_of(filter), bytes_of(reference));

    std::unordered_set<std::uint64_t> reported;
    for (std::size_t i = 0; i < batch.size(); ++i) {
      if (is_new[i]) EXPECT_TRUE(reported.insert(batch[i]).second) << "leak: " << batch[i];
    }
    // A second pass over the same keys finds nothing new.
    EXPECT_EQ(filter.insert_if_absent(batch, is_new), 0u);
  }
}

// Batches for the threaded paths: large enough to be split between threads (the split starts at
// 16Ki keys), with copies of keys on both sides of every slice boundary.
std::vector<std::vector<std::uint64_t>> threaded_batches() {
  std::vector<std::vector<std::uint64_t>> batches;
  batches.push_back(random_keys(50001, 31));  // not a multiple of any vector width
  // The second half repeats the first: each copy sits in another thread's slice.
  auto halves = random_keys(20000, 32);
  halves.insert(halves.end(), halves.begin(), halves.end());
  batches.push_back(halves);
  // Copies of a few keys everywhere, so every partition and slice sees repeats.
  batches.push_back(hot_keys(64, 40000, 33));
  batches.push_back(std::vector<std::uint64_t>(33333, 5));  // all equal
  return batches;
}

TEST_P(FilterContract, EveryThreadCountGivesTheReferenceBytesAndFlags) {
  auto batches = threaded_batches();
  for (const auto& batch : adversarial_batches()) batches.push_back(batch);
  for (unsigned threads = 1; threads <= 4; ++threads) {
    for (const auto& batch : batches) {
      SCOPED_TRACE(std::to_string(threads) + " threads, batch of " + std::to_string(batch.size()));
      Options options;
      options.implementation = GetParam().implementation;
      options.threads = threads;
      const Layout layout{GetParam().shape, 1021};
      Filter filter(layout, options), reference = make_scalar(1021);
      std::vector<std::uint8_t> is_new(batch.size()), want_new(batch.size());
      const auto fresh = filter.insert_if_absent(batch, is_new);
      EXPECT_EQ(fresh, reference.insert_if_absent(batch, want_new));
      ASSERT_EQ(is_new, want_new);
      ASSERT_EQ(bytes_of(filter), bytes_of(reference));

      Filter inserted(layout, options), inserted_reference = make_scalar(1021);
      inserted.insert(batch);
      inserted_reference.insert(batch);
      ASSERT_EQ(bytes_of(inserted), bytes_of(inserted_reference));

      // Half-loaded, so that contains answers both ways.
      const auto probes = random_keys(batch.size(), 35);
      std::vector<std::uint8_t> got(batch.size()), want(batch.size());
      inserted.contains(probes, got);
      inserted_reference.contains(probes, want);
      ASSERT_EQ(got, want);
      inserted.contains(batch, got);
      ASSERT_EQ(std::count(got.begin(), got.end(), 1), std::ptrdiff_t(batch.size()));
    }
  }
}

// popcount and current_fpr read the whole filter, on the engine's threads for a CPU filter, split
// into spans (core/tuning.hpp): on filters of under one span and of two and a part, whose words
// hold half their bits set, or a quarter, or an eighth (so that the blocks' rates carry enough
// digits for a block's product and the sum to round: a product fused with the sum's add, or a
// sum in another order, then differs), every thread count and every CPU target give the scalar
// reference's count exactly and its rate to the last bit, and both are what a plain pass over
// the bytes gives.
TEST_P(FilterContract, FillStatisticsAreTheReferenceOnesForEveryThreadCount) {
  const bool cpu = GetParam().implementation.rfind("cpu/", 0) == 0;
  const auto [words, word_bits] = detail::with_geometry(GetParam().shape, []<typename G>(G) {
    return std::pair{G::kWords, G::kWordBits};
  });
  const std::uint64_t span_blocks = detail::tuning::kFillSpanBytes / block_bytes(GetParam().shape);
  for (const std::uint64_t num_blocks : {std::uint64_t{1021}, 2 * span_blocks + 7}) {
    const Layout layout{GetParam().shape, num_blocks};
    std::vector<std::byte> bytes(layout.size_bytes());
    std::mt19937_64 random(36);
    for (std::size_t i = 0; i < bytes.size(); i += 8) {
      std::uint64_t word = random();
      // The first 1024 blocks' words half set, and half the others': sb512x16's products of 16
      // shares then need more than 53 bits, and the sum is still small beside them at first.
      const std::uint64_t halvings = i < 1024 * block_bytes(layout.shape) ? 0 : random() % 4;
      for (std::uint64_t left = halvings; left > 1; --left) word &= random();
      std::memcpy(bytes.data() + i, &word, 8);
    }
    std::uint64_t set_bits = 0;
    double rate = 0.0;
    for (std::uint64_t b = 0; b < num_blocks; ++b) {
      double p = 1.0;
      for (int w = 0; w < words; ++w) {
        std::uint64_t word = 0;
        std::memcpy(&word, bytes.data() + b * block_bytes(layout.shape) + w * word_bits / 8,
                    static_cast<std::size_t>(word_bits / 8));
        set_bits += static_cast<std::uint64_t>(std::popcount(word));
        p *= std::popcount(word) / static_cast<double>(word_bits);
      }
      rate += p;
    }
    rate /= static_cast<double>(num_blocks);
    Filter reference = make_scalar(num_blocks);
    reference.copy_bytes_from(bytes);
    ASSERT_EQ(reference.popcount(), set_bits);
    ASSERT_NEAR(reference.current_fpr(), rate, 1e-12 * rate);
    for (unsigned threads = 1; threads <= 4; ++threads) {
      SCOPED_TRACE(std::to_string(num_blocks) + " blocks, " + std::to_string(threads) + " threads");
      Options options;
      options.implementation = GetParam().implementation;
      options.threads = threads;
      Filter filter(layout, options);
      filter.copy_bytes_from(bytes);
      EXPECT_EQ(filter.popcount(), set_bits);
      if (cpu) {
        EXPECT_EQ(filter.current_fpr(), reference.current_fpr());
      } else {  // a GPU sums in its own order
        EXPECT_NEAR(filter.current_fpr(), rate, 1e-12 * rate);
      }
    }
  }
}

// Inserts of 2^16 keys or more on several threads are timed both ways on the CPU: the plan by size
// (here routed key slices: the filters are over 1 MiB, written on several threads) and one thread
// (under 16 MiB) or block ranges (src/cpu/partitioned.hpp), the first calls taking them in turn
// whatever the timings (src/cpu/plan_chooser.hpp). After every call the bytes are the reference's,
// whichever plan ran: calls 1 and 3 below run the other plan. The filters are large enough not to
// fill up, so that a key left out would show. (Atomic key slices, timed against partitions from
// 1 GiB: test_partitioned.)
TEST_P(FilterContract, LargeInsertsOnSeveralThreadsGiveTheReferenceBytesWhicheverPlanRuns) {
  if (GetParam().implementation.rfind("cpu/", 0) != 0) GTEST_SKIP() << "a CPU engine's plans";
  const std::size_t n = std::size_t{1} << 18;
  const std::vector<std::vector<std::uint64_t>> batches = {
      random_keys(n, 70), random_keys(2 * n - 1, 71), std::vector<std::uint64_t>(n, 72),
      hot_keys(16, n + 1, 73), random_keys(n, 70)};
  for (const std::uint64_t num_blocks : blocks_of_threaded_writes()) {
    on_two_and_three_threads(num_blocks, [&](Filter& filter, Filter& reference) {
      for (std::size_t call = 0; call < batches.size(); ++call) {
        filter.insert(batches[call]);
        reference.insert(batches[call]);
        ASSERT_EQ(bytes_of(filter), bytes_of(reference)) << "call " << call;
      }
    });
  }
}

// insert_if_absent of 2^16 keys or more on several threads is timed both ways as well: the plan by
// size (routed key slices) and one thread or block ranges (src/cpu/partitioned.hpp), calls 1 and 3
// below by the other plan. Flags, counts and bytes are the reference's after every call: new keys,
// keys of earlier calls, repeats within a call, all equal and hot keys.
TEST_P(FilterContract, LargeInsertIfAbsentCallsOnSeveralThreadsGiveTheReferenceWhicheverPlanRuns) {
  if (GetParam().implementation.rfind("cpu/", 0) != 0) GTEST_SKIP() << "a CPU engine's plans";
  const std::size_t n = std::size_t{1} << 17;
  auto repeats = random_keys(n, 74);
  std::copy_n(random_keys(n, 75).begin(), n / 2, repeats.begin() + n / 4);  // call 0's keys
  const std::vector<std::vector<std::uint64_t>> batches = {random_keys(n, 75),
                                                           random_keys(2 * n - 1, 76),
                                                           repeats,
                                                           std::vector<std::uint64_t>(n, 77),
                                                           hot_keys(16, n + 1, 78),
                                                           random_keys(n, 76)};
  for (const std::uint64_t num_blocks : blocks_of_threaded_writes()) {
    on_two_and_three_threads(num_blocks, [&](Filter& filter, Filter& reference) {
      for (std::size_t call = 0; call < batches.size(); ++call) {
        SCOPED_TRACE("call " + std::to_string(call));
        std::vector<std::uint8_t> is_new(batches[call].size()), want_new(batches[call].size());
        EXPECT_EQ(filter.insert_if_absent(batches[call], is_new),
                  reference.insert_if_absent(batches[call], want_new));
        ASSERT_EQ(is_new, want_new);
        ASSERT_EQ(bytes_of(filter), bytes_of(reference));
      }
    });
  }
}

// Filters left at the default thread count share one process-wide pool; a call that finds it
// busy runs on its own thread. Several threads, each on its own filters, must still get the
// reference answers.
TEST_P(FilterContract, FiltersOnTheSharedPoolAnswerFromManyThreadsAtOnce) {
  const auto batches = threaded_batches();
  const Layout layout{GetParam().shape, 1021};
  std::vector<std::vector<std::uint8_t>> want_new, want_hits;
  const auto probes = random_keys(40000, 36);
  for (const auto& batch : batches) {
    Filter reference = make_scalar(1021);
    want_new.emplace_back(batch.size());
    reference.insert_if_absent(batch, want_new.back());
    want_hits.emplace_back(probes.size());
    reference.contains(probes, want_hits.back());
  }
  Options options;
  options.implementation = GetParam().implementation;
  constexpr int kCallers = 4, kRounds = 8;
  std::vector<int> mismatches(kCallers, 0);
  std::vector<std::thread> callers;
  for (int c = 0; c < kCallers; ++c) {
    callers.emplace_back([&, c] {
      for (int round = 0; round < kRounds; ++round) {
        for (std::size_t b = 0; b < batches.size(); ++b) {
          Filter filter(layout, options);
          std::vector<std::uint8_t> is_new(batches[b].size()), hits(probes.size());
          filter.insert_if_absent(batches[b], is_new);
          filter.contains(probes, hits);
          mismatches[c] += (is_new != want_new[b]) + (hits != want_hits[b]);
        }
      }
    });
  }
  for (auto& caller : callers) caller.join();
  for (int c = 0; c < kCallers; ++c) EXPECT_EQ(mismatches[c], 0) << "caller " << c;
  if (GetParam().implementation.starts_with("cpu/")) {
    EXPECT_EQ(Filter(layout, options).threads(), std::max(1u, std::thread::hardware_concurrency()));
  }
}

TEST_P(FilterContract, InsertIfAbsentAcrossBatchesAndForStrings) {
  const auto keys = random_keys(4000, 17);
  std::vector<std::uint64_t> stream;
  for (int copy = 0; copy < 3; ++copy) stream.insert(stream.end(), keys.begin(), keys.end());
  std::shuffle(stream.begin(), stream.end(), std::mt19937_64(3));
  Filter filter = make(4096), reference = make_scalar(4096);
  std::vector<std::uint8_t> is_new(stream.size());
  for (std::size_t i = 0; i < stream.size(); i += 1000) {
    filter.insert_if_absent(std::span(stream).subspan(i, 1000), std::span(is_new).subspan(i, 1000));
  }
  EXPECT_EQ(is_new, sequential_insert_if_absent(reference, stream));

  std::vector<std::string> texts;
  for (auto k : stream) texts.push_back(std::to_string(k % 5000));
  std::vector<std::string_view> views(texts.begin(), texts.end());
  Filter by_string = make(4096);
  const auto fresh = by_string.insert_if_absent(views, is_new);
  std::unordered_set<std::string_view> distinct(views.begin(), views.end());
  EXPECT_LE(fresh, distinct.size());
  std::unordered_set<std::string_view> reported;
  for (std::size_t i = 0; i < views.size(); ++i) {
    if (is_new[i]) EXPECT_TRUE(reported.insert(views[i]).second) << "leak: " << views[i];
  }
}

TEST_P(FilterContract, MergeIntersectClear) {
  const auto a_keys = random_keys(3000, 18), b_keys = random_keys(3000, 19);
  Filter a = make(), b = make(), both = make();
  a.insert(a_keys);
  b.insert(b_keys);
  both.insert(a_keys);
  both.insert(b_keys);
  Filter merged = make();
  merged.merge(a);
  merged.merge(b);
  EXPECT_EQ(bytes_of(merged), bytes_of(both));

  Filter common = make();
  common.insert(a_keys);
  common.intersect(both);
  EXPECT_EQ(bytes_of(common), bytes_of(a));
  common.intersect(b);
  const auto ca = bytes_of(common), aa = bytes_of(a), bb = bytes_of(b);
  for (std::size_t i = 0; i < ca.size(); ++i) ASSERT_EQ(ca[i], aa[i] & bb[i]) << i;

  merged.clear();
  EXPECT_EQ(merged.popcount(), 0u);
  EXPECT_FALSE(merged.contains(a_keys[0]));

  Filter other_layout(Layout{GetParam().shape, 258});
  EXPECT_THROW(merged.merge(other_layout), std::invalid_argument);
  EXPECT_THROW(merged.intersect(other_layout), std::invalid_argument);
  Filter other_seed(Layout{GetParam().shape, 257, KeyHash::xxh64, 1});
  EXPECT_THROW(merged.merge(other_seed), std::invalid_argument);
}

TEST_P(FilterContract, EstimatesFollowTheLoad) {
  const std::uint64_t n = 100000;
  const Layout layout = Layout::for_capacity(GetParam().shape, n, 0.01);
  Options options;
  options.implementation = GetParam().implementation;
  Filter filter(layout, options);
  filter.insert(random_keys(n, 20));
  EXPECT_NEAR(filter.estimated_count() / double(n), 1.0, 0.02);
  EXPECT_NEAR(filter.current_fpr() / layout.expected_fpr(n), 1.0, 0.05);
}

INSTANTIATE_TEST_SUITE_P(AllImplementations, FilterContract, testing::ValuesIn(all_cases()),
                         case_name);

// The registry's names and BULKBLOOM_IMPL are checked in test_backend.cpp.
TEST(FilterApi, ImplementationAndThreadsAreInspectable) {
  Options scalar;
  scalar.implementation = "cpu/scalar";
  scalar.threads = 3;
  Filter pinned(Layout{Shape::sb512, 16}, scalar);
  EXPECT_EQ(pinned.implementation(), "cpu/scalar");
  EXPECT_EQ(pinned.threads(), 3u);
}

TEST(FilterApi, BackendNamesParseAndUnknownOnesAreNamed) {
  EXPECT_EQ(parse_backend("auto"), Backend::automatic);
  EXPECT_EQ(parse_backend("cpu"), Backend::cpu);
  EXPECT_EQ(parse_backend("cuda"), Backend::cuda);
  try {
    parse_backend("gpu");
    FAIL() << "no exception";
  } catch (const std::invalid_argument& e) {
    EXPECT_STREQ(e.what(), "unknown backend 'gpu': expected auto, cpu or cuda");
  }
}

TEST(FilterApi, CudaWithoutTheBackendIsAClearError) {
  Options options;
  options.backend = Backend::cuda;
  try {
    Filter filter(Layout{Shape::sb512, 16}, options);
    // A build with CUDA and a device present gets a CUDA filter.
    EXPECT_TRUE(filter.implementation().starts_with("cuda")) << filter.implementation();
  } catch (const BackendUnavailable& e) {
    EXPECT_NE(std::string(e.what()).find("CUDA"), std::string::npos) << e.what();
  }
}

TEST(FilterApi, MismatchedSpansAndByteKeysOnIdentityLayoutsAreRejected) {
  Filter filter(Layout{Shape::sb512, 16});
  const std::vector<std::uint64_t> keys(10, 1);
  std::vector<std::uint8_t> short_flags(9);
  EXPECT_THROW(filter.contains(keys, short_flags), std::invalid_argument);
  EXPECT_THROW(filter.insert_if_absent(keys, short_flags), std::invalid_argument);
  std::vector<std::byte> wrong_size(10);
  EXPECT_THROW(filter.copy_bytes_to(wrong_size), std::invalid_argument);
  EXPECT_THROW(filter.copy_bytes_from(wrong_size), std::invalid_argument);

  Filter identity(Layout{Shape::sb512, 16, KeyHash::identity});
  const std::string_view key = "abc";
  EXPECT_THROW(identity.insert(std::span<const std::string_view>(&key, 1)), std::invalid_argument);
}

TEST(FilterApi, MovesAndByteRoundTrip) {
  Filter a(Layout{Shape::sb256, 100});
  a.insert(random_keys(500, 21));
  const auto bytes = bytes_of(a);
  Filter b = std::move(a);
  EXPECT_EQ(bytes_of(b), bytes);
  Filter c(Layout{Shape::sb256, 100});
  c.copy_bytes_from(bytes);
  EXPECT_EQ(bytes_of(c), bytes);
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(c.view().data()) % 64, 0u);
}

TEST(FilterApi, AMovedFromFilterThrowsUntilAssignedTo) {
  Filter a(Layout{Shape::sb256, 100});
  Filter b = std::move(a);
  const std::vector<std::uint64_t> keys = {1, 2, 3};
  std::vector<std::uint8_t> flags(keys.size());
  const auto says_moved = [](auto call) {
    return message_of<std::logic_error>(call).find("moved from") != std::string::npos;
  };
  EXPECT_TRUE(says_moved([&] { a.insert(keys); }));
  EXPECT_TRUE(says_moved([&] { a.contains(keys, flags); }));
  EXPECT_TRUE(says_moved([&] { a.insert_if_absent(std::uint64_t{7}); }));
  EXPECT_TRUE(says_moved([&] { a.popcount(); }));
  EXPECT_TRUE(says_moved([&] { a.implementation(); }));
  EXPECT_TRUE(says_moved([&] { b.merge(a); }));
  EXPECT_TRUE(says_moved([&] { save(a, testing::TempDir() + "moved_from.bbf"); }));
  EXPECT_FALSE(std::filesystem::exists(testing::TempDir() + "moved_from.bbf"));
  a = Filter(Layout{Shape::sb256, 100});
  a.insert(keys);
  EXPECT_TRUE(a.contains(std::uint64_t{2}));
}

}  // namespace
}  // namespace bulkbloom::test
