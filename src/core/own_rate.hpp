// A filter's false-positive rate read from its own bits, and how far that rate strays between
// filters of the same layout and key count: what a measured count is compared with, and the spread
// a statistical check must allow beside the probes' binomial one (bench/fpr_grid, tests/test_fpr).
#pragma once

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <span>

#include "bulkbloom/layout.hpp"

namespace bulkbloom::detail {

/// `mean`: the mean over the blocks of the product of each word's share of set bits (the rate of
/// probes whose bits are independent of the block's). `sigma`: the standard deviation of that mean
/// between filters, the blocks' spread over the square root of their count (blocks hold nearly
/// independent loads).
struct OwnRate {
  double mean = 0.0;
  double sigma = 0.0;
};

/// OwnRate of the bytes `bytes` of a filter of `layout` (layout.size_bytes() of them).
inline OwnRate own_rate(const Layout& layout, std::span<const std::byte> bytes) {
  return with_geometry(layout.shape, [&]<typename G>(G) {
    const auto* words = reinterpret_cast<const typename G::Word*>(bytes.data());
    double sum = 0.0, squares = 0.0;
    for (std::uint64_t b = 0; b < layout.num_blocks; ++b, words += G::kWords) {
      double p = 1.0;
      for (int i = 0; i < G::kWords; ++i) p *= std::popcount(words[i]) / double(G::kWordBits);
      sum += p;
      squares += p * p;
    }
    const double blocks = static_cast<double>(layout.num_blocks);
    const double mean = sum / blocks;
    return OwnRate{mean, std::sqrt(std::max(0.0, squares / blocks - mean * mean) / blocks)};
  });
}

}  // namespace bulkbloom::detail
