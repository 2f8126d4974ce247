#include "bulkbloom/layout.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <stdexcept>
#include <string>

#include "bulkbloom/detail/fpr_model.hpp"

namespace bulkbloom {
namespace {

using detail::kAllShapes;

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

// The Poisson(lambda) mixture of block_fpr: the FPR of blocks whose load averages lambda keys.
double mixture_fpr(int words, int bits, double lambda) {
  if (lambda <= 0.0) return 0.0;
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

// Fewest blocks of `shape` whose modelled FPR at `capacity` keys under `index` is <= fpr, or 0 if
// none fits. A binary search, exact because the modelled FPR never rises with the block count:
// under high32 the loads are those of floor(2^32 / B) and one more prefixes, which one more block
// leaves unchanged or lowers, while it moves prefixes from the more loaded blocks to the others.
std::uint64_t min_blocks(Shape shape, std::uint64_t capacity, double fpr, BlockIndex index) {
  Layout layout{shape, Layout::kMaxBlocks};
  layout.index = index;
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

// The layout of `shape` for `capacity` keys at `fpr` with the caller's index, or with the one
// for_capacity chooses: high32 while its uneven loads cost at most kMaxHigh32Cost of FPR at the
// size high32 needs, else full64. num_blocks is 0 if no filter of the shape fits.
Layout sized(Shape shape, std::uint64_t capacity, double fpr, KeyHash hash, std::uint64_t seed,
             std::optional<BlockIndex> index) {
  const auto with_index = [&](BlockIndex i) {
    return Layout{shape, min_blocks(shape, capacity, fpr, i), hash, seed, i};
  };
  if (index) return with_index(*index);
  const Layout narrow = with_index(BlockIndex::high32);
  if (narrow.num_blocks != 0) {
    Layout wide = narrow;
    wide.index = BlockIndex::full64;
    const double cost = narrow.expected_fpr(capacity) / wide.expected_fpr(capacity) - 1.0;
    if (cost <= Layout::kMaxHigh32Cost) return narrow;
  }
  return with_index(BlockIndex::full64);
}

void check_sizing_arguments(std::uint64_t capacity, double fpr) {
  if (capacity == 0) throw std::invalid_argument("capacity must be at least 1 key, got 0");
  if (!(fpr > 0.0 && fpr < 1.0)) {
    throw std::invalid_argument("false-positive rate must be in (0, 1), got " + format_double(fpr));
  }
}

}  // namespace

namespace detail {

double indexed_fpr(Shape shape, std::uint64_t num_blocks, unsigned prefix_bits, std::uint64_t n) {
  if (n == 0) return 0.0;
  __extension__ typedef unsigned __int128 Wide;  // 2^64 itself must be representable
  const Wide space = Wide{1} << prefix_bits;
  const Wide light_prefixes = space / num_blocks;  // c
  const Wide heavy_blocks = space % num_blocks;    // r, each with c + 1 prefixes
  const double total = static_cast<double>(space);
  const double keys = static_cast<double>(n);
  const int words = words_per_block(shape);
  const int bits = word_bits(shape);
  const auto share = [&](Wide blocks, Wide prefixes) {
    if (blocks == 0 || prefixes == 0) return 0.0;
    const double fraction = static_cast<double>(prefixes) / total;  // of the hash space, per block
    return static_cast<double>(blocks) * fraction * mixture_fpr(words, bits, keys * fraction);
  };
  return std::min(1.0, share(num_blocks - heavy_blocks, light_prefixes) +
                           share(heavy_blocks, light_prefixes + 1));
}

}  // namespace detail

std::string_view to_string(Shape s) {
  if (static_cast<std::size_t>(s) >= kAllShapes.size()) return "unknown";
  return detail::with_geometry(s, []<typename G>(G) { return G::kName; });
}

namespace {

// "0 (sb256), 1 (sb256x4), ..." for messages.
std::string shape_codes() {
  std::string codes;
  for (Shape s : kAllShapes) {
    if (!codes.empty()) codes += ", ";
    codes += std::to_string(static_cast<int>(s)) + " (" + std::string(to_string(s)) + ")";
  }
  return codes;
}

}  // namespace

Shape parse_shape(std::string_view name) {
  std::string names;
  for (Shape s : kAllShapes) {
    if (to_string(s) == name) return s;
    names += (names.empty() ? "" : ", ") + std::string(to_string(s));
  }
  throw std::invalid_argument("unknown shape '" + std::string(name) + "': expected one of " +
                              names);
}

std::string_view to_string(BlockIndex index) {
  switch (index) {
    case BlockIndex::high32:
      return "high32";
    case BlockIndex::full64:
      return "full64";
  }
  return "unknown";
}

BlockIndex parse_block_index(std::string_view name) {
  for (BlockIndex index : {BlockIndex::high32, BlockIndex::full64}) {
    if (to_string(index) == name) return index;
  }
  throw std::invalid_argument("unknown block index '" + std::string(name) +
                              "': expected high32 or full64");
}

void Layout::validate() const {
  if (static_cast<std::size_t>(shape) >= kAllShapes.size()) {
    throw std::invalid_argument("unknown shape code " + std::to_string(static_cast<int>(shape)) +
                                ": expected " + shape_codes());
  }
  if (hash != KeyHash::xxh64 && hash != KeyHash::identity) {
    throw std::invalid_argument("unknown key hash code " + std::to_string(static_cast<int>(hash)) +
                                ": expected 0 (xxh64) or 1 (identity)");
  }
  if (index != BlockIndex::high32 && index != BlockIndex::full64) {
    throw std::invalid_argument("unknown block index code " +
                                std::to_string(static_cast<int>(index)) +
                                ": expected 0 (high32) or 1 (full64)");
  }
  if (num_blocks == 0 || num_blocks > kMaxBlocks) {
    throw std::invalid_argument(
        "num_blocks must be in [1, 2^32 - 1 = " + std::to_string(kMaxBlocks) + "], got " +
        std::to_string(num_blocks));
  }
}

double Layout::expected_fpr(std::uint64_t n) const {
  return detail::indexed_fpr(shape, num_blocks, index == BlockIndex::full64 ? 64 : 32, n);
}

double Layout::bits_per_key(std::uint64_t n) const {
  return n == 0 ? 0.0 : 8.0 * static_cast<double>(size_bytes()) / static_cast<double>(n);
}

Layout Layout::for_capacity(Shape shape, std::uint64_t capacity, double fpr, KeyHash hash,
                            std::uint64_t seed, std::optional<BlockIndex> index) {
  check_sizing_arguments(capacity, fpr);
  Layout{shape, 1, hash, seed, index.value_or(BlockIndex::high32)}.validate();
  const Layout layout = sized(shape, capacity, fpr, hash, seed, index);
  if (layout.num_blocks == 0) {
    throw std::invalid_argument("no " + std::string(to_string(shape)) + " filter of at most " +
                                std::to_string(kMaxBlocks) + " blocks holds " +
                                std::to_string(capacity) + " keys at false-positive rate " +
                                format_double(fpr));
  }
  return layout;
}

Layout Layout::for_capacity(std::uint64_t capacity, double fpr, KeyHash hash, std::uint64_t seed,
                            std::optional<BlockIndex> index) {
  check_sizing_arguments(capacity, fpr);
  Layout{Shape::sb512, 1, hash, seed, index.value_or(BlockIndex::high32)}.validate();
  // Wider blocks first, so that a tie in bytes goes to the 512-bit shapes; table order otherwise.
  auto preference = kAllShapes;
  std::stable_sort(preference.begin(), preference.end(),
                   [](Shape a, Shape b) { return block_bytes(a) > block_bytes(b); });
  Layout best{};
  std::uint64_t best_bytes = 0;
  for (Shape s : preference) {
    const Layout candidate = sized(s, capacity, fpr, hash, seed, index);
    if (candidate.num_blocks == 0) continue;
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
  // A layout that validate() would refuse is described with its raw codes, never as a valid one.
  const std::string hash_name = hash == KeyHash::xxh64 ? "xxh64"
                                : hash == KeyHash::identity
                                    ? "identity"
                                    : "hash code " + std::to_string(static_cast<int>(hash));
  // The index is named only when it is not Parquet's, which is what every older file holds.
  const std::string index_name = index == BlockIndex::high32 ? ""
                                 : index == BlockIndex::full64
                                     ? ", index full64"
                                     : ", index code " + std::to_string(static_cast<int>(index));
  const bool known_shape = static_cast<std::size_t>(shape) < kAllShapes.size();
  const std::string shape_name = known_shape
                                     ? std::string(to_string(shape))
                                     : "shape code " + std::to_string(static_cast<int>(shape));
  char size[32] = "size unknown";
  if (known_shape) {
    std::snprintf(size, sizeof size, "%.1f MiB",
                  static_cast<double>(size_bytes()) / (1024.0 * 1024.0));
  }
  char buf[224];
  std::snprintf(buf, sizeof buf, "%s x %llu blocks (%s), %s seed %llu%s", shape_name.c_str(),
                static_cast<unsigned long long>(num_blocks), size, hash_name.c_str(),
                static_cast<unsigned long long>(seed), index_name.c_str());
  return buf;
}

}  // namespace bulkbloom
