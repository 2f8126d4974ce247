#include "bulkbloom/layout.hpp"

#include <array>
#include <cmath>
#include <cstdio>
#include <stdexcept>
#include <string>

namespace bulkbloom {
namespace {

constexpr std::array kAllShapes = {Shape::sb256, Shape::sb256x4, Shape::sb512, Shape::sb512x16};

std::string format_double(double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%g", v);
  return buf;
}

// P(all W probed bits set) for a block that holds exactly j keys: each key set one uniformly
// placed bit in each of the W independent words.
double block_fpr(int words, int bits, double j) {
  const double bit_set = 1.0 - std::pow(1.0 - 1.0 / bits, j);
  return std::pow(bit_set, words);
}

// Fewest blocks of `shape` whose modelled FPR at `capacity` keys is <= fpr, or 0 if none fits.
std::uint64_t min_blocks(Shape shape, std::uint64_t capacity, double fpr) {
  Layout layout{shape, Layout::kMaxBlocks};
  if (layout.expected_fpr(capacity) > fpr) return 0;
  std::uint64_t lo = 1, hi = Layout::kMaxBlocks;  // hi always meets fpr
  while (lo < hi) {
    layout.num_blocks = lo + (hi - lo) / 2;
    if (layout.expected_fpr(capacity) <= fpr) {
      hi = layout.num_blocks;
    } else {
      lo = layout.num_blocks + 1;
    }
  }
  return lo;
}

void check_sizing_arguments(std::uint64_t capacity, double fpr) {
  if (capacity == 0) throw std::invalid_argument("capacity must be at least 1 key, got 0");
  if (!(fpr > 0.0 && fpr < 1.0)) {
    throw std::invalid_argument("false-positive rate must be in (0, 1), got " + format_double(fpr));
  }
}

}  // namespace

std::string_view to_string(Shape s) {
  switch (s) {
    case Shape::sb256:
      return "sb256";
    case Shape::sb256x4:
      return "sb256x4";
    case Shape::sb512:
      return "sb512";
    case Shape::sb512x16:
      return "sb512x16";
  }
  return "unknown";
}

Shape parse_shape(std::string_view name) {
  for (Shape s : kAllShapes) {
    if (to_string(s) == name) return s;
  }
  throw std::invalid_argument("unknown shape '" + std::string(name) +
                              "': expected one of sb256, sb256x4, sb512, sb512x16");
}

void Layout::validate() const {
  if (static_cast<unsigned>(shape) > static_cast<unsigned>(Shape::sb512x16)) {
    throw std::invalid_argument("unknown shape code " + std::to_string(static_cast<int>(shape)) +
                                ": expected 0 (sb256) to 3 (sb512x16)");
  }
  if (hash != KeyHash::xxh64 && hash != KeyHash::identity) {
    throw std::invalid_argument("unknown key hash code " + std::to_string(static_cast<int>(hash)) +
                                ": expected 0 (xxh64) or 1 (identity)");
  }
  if (num_blocks == 0 || num_blocks > kMaxBlocks) {
    throw std::invalid_argument(
        "num_blocks must be in [1, 2^32 - 1 = " + std::to_string(kMaxBlocks) + "], got " +
        std::to_string(num_blocks));
  }
}

double Layout::expected_fpr(std::uint64_t n) const {
  if (n == 0) return 0.0;
  const int words = words_per_block(shape);
  const int bits = word_bits(shape);
  const double lambda = static_cast<double>(n) / static_cast<double>(num_blocks);
  // Past ~1e4 keys per block every bit is set; the load's spread no longer matters.
  if (lambda > 1e4) return block_fpr(words, bits, lambda);
  // Sum the Poisson(lambda) mixture over a window holding all but ~1e-30 of its mass.
  const double spread = 12.0 * std::sqrt(lambda) + 30.0;
  const auto j_lo = static_cast<std::uint64_t>(std::max(0.0, std::floor(lambda - spread)));
  const auto j_hi = static_cast<std::uint64_t>(std::ceil(lambda + spread));
  const double log_lambda = std::log(lambda);
  double sum = 0.0;
  for (std::uint64_t j = j_lo; j <= j_hi; ++j) {
    const double jd = static_cast<double>(j);
    const double log_poisson = -lambda + jd * log_lambda - std::lgamma(jd + 1.0);
    sum += std::exp(log_poisson) * block_fpr(words, bits, jd);
  }
  return std::min(sum, 1.0);
}

double Layout::bits_per_key(std::uint64_t n) const {
  return n == 0 ? 0.0 : 8.0 * static_cast<double>(size_bytes()) / static_cast<double>(n);
}

Layout Layout::for_capacity(Shape shape, std::uint64_t capacity, double fpr, KeyHash hash,
                            std::uint64_t seed) {
  check_sizing_arguments(capacity, fpr);
  Layout{shape, 1, hash, seed}.validate();
  const std::uint64_t blocks = min_blocks(shape, capacity, fpr);
  if (blocks == 0) {
    throw std::invalid_argument("no " + std::string(to_string(shape)) + " filter of at most " +
                                std::to_string(kMaxBlocks) + " blocks holds " +
                                std::to_string(capacity) + " keys at false-positive rate " +
                                format_double(fpr));
  }
  return Layout{shape, blocks, hash, seed};
}

Layout Layout::for_capacity(std::uint64_t capacity, double fpr, KeyHash hash, std::uint64_t seed) {
  check_sizing_arguments(capacity, fpr);
  // Wider blocks first, so that a tie in bytes goes to the 512-bit shapes.
  constexpr std::array kPreference = {Shape::sb512, Shape::sb512x16, Shape::sb256, Shape::sb256x4};
  Layout best{};
  std::uint64_t best_bytes = 0;
  for (Shape s : kPreference) {
    const std::uint64_t blocks = min_blocks(s, capacity, fpr);
    if (blocks == 0) continue;
    const Layout candidate{s, blocks, hash, seed};
    if (best_bytes == 0 || candidate.size_bytes() < best_bytes) {
      best = candidate;
      best_bytes = candidate.size_bytes();
    }
  }
  if (best_bytes == 0) {
    throw std::invalid_argument("no filter of at most " + std::to_string(kMaxBlocks) +
                                " blocks holds " + std::to_string(capacity) +
                                " keys at false-positive rate " + format_double(fpr));
  }
  return best;
}

std::string Layout::describe() const {
  char buf[160];
  const double mib = static_cast<double>(size_bytes()) / (1024.0 * 1024.0);
  std::snprintf(buf, sizeof buf, "%s x %llu blocks (%.1f MiB), %s seed %llu",
                std::string(to_string(shape)).c_str(), static_cast<unsigned long long>(num_blocks),
                mib, hash == KeyHash::xxh64 ? "xxh64" : "identity",
                static_cast<unsigned long long>(seed));
  return buf;
}

}  // namespace bulkbloom
