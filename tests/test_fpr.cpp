// The measured false-positive rate must agree with the model (DESIGN §2) within the binomial
// spread, for every shape and block index, at half, full and double its design capacity.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>

#include "bulkbloom/detail/fpr_model.hpp"
#include "core/own_rate.hpp"
#include "test_support.hpp"

namespace bulkbloom::test {
namespace {

struct FprCase {
  Shape shape;
  double target;  // design FPR at capacity
};

// Hits of `filter` among `probes`.
std::uint64_t false_positives_of(const Filter& filter, const std::vector<std::uint64_t>& probes) {
  std::vector<std::uint8_t> flags(probes.size());
  filter.contains(probes, flags);
  std::uint64_t hits = 0;
  for (auto f : flags) hits += f;
  return hits;
}

// Hits among `probes` of a filter holding `keys`.
std::uint64_t false_positives(const Layout& layout, const std::vector<std::uint64_t>& keys,
                              const std::vector<std::uint64_t>& probes) {
  Filter filter(layout);
  filter.insert(keys);
  return false_positives_of(filter, probes);
}

// How many binomial standard deviations `hits` of `probes` lie from the modelled rate.
double sigmas(std::uint64_t hits, std::size_t probes, double model) {
  const double mean = model * static_cast<double>(probes);
  return (static_cast<double>(hits) - mean) / std::sqrt(mean * (1.0 - model));
}

constexpr FprCase kFprCases[] = {{Shape::sb256, 0.01},   {Shape::sb256, 0.001},
                                 {Shape::sb256x4, 0.05}, {Shape::sb512, 0.01},
                                 {Shape::sb512, 0.001},  {Shape::sb512x16, 0.0001}};

constexpr std::uint64_t kCapacity = 200'000;
constexpr std::size_t kProbes = 2'000'000;

TEST(FalsePositiveRate, MatchesTheModelAtHalfFullAndDoubleLoad) {
  // Probe keys come from their own stream; a collision with an inserted key has probability
  // ~1e-8 and would only add one count.
  const auto probes = random_keys(kProbes, 0xABCDEF);
  std::vector<std::uint8_t> flags(kProbes);
  std::printf("%-9s %-8s %-5s %-12s %-12s %-8s\n", "shape", "target", "load", "model", "measured",
              "sigmas");
  for (const FprCase& c : kFprCases) {
    for (BlockIndex index : {BlockIndex::high32, BlockIndex::full64}) {
      const Layout layout =
          Layout::for_capacity(c.shape, kCapacity, c.target, KeyHash::xxh64, 0, index);
      EXPECT_LE(layout.expected_fpr(kCapacity), c.target);
      for (double load : {0.5, 1.0, 2.0}) {
        const auto n = static_cast<std::uint64_t>(load * kCapacity);
        Filter filter(layout);
        filter.insert(random_keys(n, 1000 + n));
        filter.contains(probes, flags);
        std::uint64_t hits = 0;
        for (auto f : flags) hits += f;
        const double model = layout.expected_fpr(n);
        const double mean = model * kProbes;
        const double sigma = std::sqrt(mean * (1.0 - model));
        const double deviation = (static_cast<double>(hits) - mean) / sigma;
        std::printf("%-9s %-8g %-5g %-12.4e %-12.4e %+.2f\n", shape_name(c.shape).c_str(), c.target,
                    load, model, double(hits) / kProbes, deviation);
        // 5 sigma: with 18 fixed-seed checks a correct filter never trips it, a biased one does.
        EXPECT_LE(std::abs(deviation), 5.0)
            << shape_name(c.shape) << " load " << load << ": " << hits << " false positives in "
            << kProbes << " probes, model " << mean;
        if (load == 1.0) EXPECT_LE(double(hits) / kProbes, c.target + 5 * sigma / kProbes);
      }
    }
  }
}

// The model to within 2.5 %, tighter than the checks above, at a layout sized as the Spark module
// sizes one (1M rows at 1 %, seed 42) and filled to 90 % as its benchmark's dumps fill theirs
// (#34: the Spark runs' false drops were read as a 5 % excess over the model). Four filters of
// 900,000 keys, 4M probes each: about 94,000 false positives. The spread counted is the probes'
// binomial one around each filter's own rate plus that rate's own spread between filters (from
// its blocks), summed over the filters: about 0.45 %, so the 5-sigma bound is about 2.3 %.
TEST(FalsePositiveRate, PooledCountsMatchTheModelToFiveSigmaAtASparkLayout) {
  Layout layout = Layout::for_capacity(1'000'000, 0.01);
  layout.seed = 42;
  constexpr std::uint64_t kKeys = 900'000;
  constexpr std::size_t kFilterProbes = 4'000'000;
  const double model = layout.expected_fpr(kKeys);
  double hits = 0.0, expected = 0.0, variance = 0.0;
  for (std::uint64_t f = 0; f < 4; ++f) {
    Filter filter(layout);
    filter.insert(random_keys(kKeys, 3400 + f));
    const std::uint64_t found = false_positives_of(filter, random_keys(kFilterProbes, 3500 + f));
    const detail::OwnRate own = detail::own_rate(filter.layout(), bytes_of(filter));
    const double probes = static_cast<double>(kFilterProbes);
    hits += static_cast<double>(found);
    expected += model * probes;
    variance += probes * model * (1.0 - model) + probes * probes * own.sigma * own.sigma;
  }
  const double deviation = (hits - expected) / std::sqrt(variance);
  std::printf("%s at %llu keys: %.0f false positives, model %.1f (%+.2f %%, %+.2f sigmas)\n",
              layout.describe().c_str(), static_cast<unsigned long long>(kKeys), hits, expected,
              100.0 * (hits / expected - 1.0), deviation);
  EXPECT_LE(std::abs(deviation), 5.0);
  EXPECT_LE(5.0 * std::sqrt(variance) / expected, 0.025) << "the check lost its resolution";
}

// full64 places a key by its whole hash, so a block's keys share a contiguous hash range rather
// than a set of high halves; the in-block bits (the low half) must stay as independent of the
// block as under high32. Measured against the model at block counts that are powers of two and
// not, prime among them (the model assumes independence: a dependence would show as a bias; at a
// handful of blocks the Poisson loads of the model no longer describe n keys, so none so few).
TEST(FalsePositiveRate, Full64MatchesTheModelAtManyBlockCounts) {
  const auto probes = random_keys(kProbes / 2, 0x5EED);
  for (std::uint64_t num_blocks : {1000ull, 4096ull, 65536ull, 99991ull, 300007ull}) {
    const Layout layout{Shape::sb512, num_blocks, KeyHash::xxh64, 0, BlockIndex::full64};
    const auto n = static_cast<std::uint64_t>(num_blocks * 512 / 10.1);  // p = 1 % load
    const std::uint64_t hits = false_positives(layout, random_keys(n, 77 + num_blocks), probes);
    const double deviation = sigmas(hits, probes.size(), layout.expected_fpr(n));
    std::printf("full64 %9llu blocks: model %.4e measured %.4e %+.2f sigmas\n",
                static_cast<unsigned long long>(num_blocks), layout.expected_fpr(n),
                double(hits) / probes.size(), deviation);
    EXPECT_LE(std::abs(deviation), 5.0) << num_blocks << " blocks";
  }
}

// The uneven loads of the high32 index, made large enough to measure: identity hashes whose high
// half varies in its top 16 bits only place keys as a 2^16-prefix space would, so of 25000 blocks
// 15536 get 3 prefixes and the others 2. The measured FPR must follow the model of the two loads
// and not the uniform one. (Many blocks, so that one filter's loads are close to their mean.)
TEST(FalsePositiveRate, High32UnevenLoadsMatchTheTwoLoadModel) {
  constexpr std::uint64_t kBlocks = 25000;
  constexpr unsigned kPrefixBits = 16;
  const auto restricted = [](std::size_t n, std::uint64_t seed) {
    auto keys = random_keys(n, seed);
    for (auto& k : keys) k &= 0xFFFF'0000'FFFF'FFFFull;  // bits 32..47 cleared
    return keys;
  };
  const Layout layout{Shape::sb512, kBlocks, KeyHash::identity};
  for (std::uint64_t n : {1'000'000ull, 1'500'000ull}) {
    const std::uint64_t hits =
        false_positives(layout, restricted(n, 91 + n), restricted(kProbes, 92));
    const double uneven = detail::indexed_fpr(Shape::sb512, kBlocks, kPrefixBits, n);
    const double uniform = detail::indexed_fpr(Shape::sb512, kBlocks, 64, n);
    std::printf(
        "high32 on 2^16 prefixes, %llu keys: uneven model %.4e uniform %.4e measured %.4e\n",
        static_cast<unsigned long long>(n), uneven, uniform, double(hits) / kProbes);
    EXPECT_LE(std::abs(sigmas(hits, kProbes, uneven)), 5.0) << n << " keys";
    EXPECT_GT(std::abs(sigmas(hits, kProbes, uniform)), 10.0) << n << " keys";
  }
}

}  // namespace
}  // namespace bulkbloom::test
