/// @file
/// The false-positive model of DESIGN §2 for an index that scales a `prefix_bits`-bit part of the
/// hash onto the blocks: Layout::expected_fpr with 32 (high32) or 64 (full64) bits, and smaller
/// prefix spaces for the tests that check the model against enumeration and measurement.
#pragma once

#include <cstdint>

#include "bulkbloom/detail/shapes.hpp"

namespace bulkbloom::detail {

/// Modelled FPR after `n` distinct keys when 2^prefix_bits equally likely hash prefixes are spread
/// over `num_blocks` blocks by a monotone index: with c = floor(2^prefix_bits / num_blocks) and
/// r = 2^prefix_bits - c * num_blocks, r blocks receive c + 1 prefixes and the others c. A block
/// with k prefixes holds Poisson(n * k / 2^prefix_bits) keys, and an absent key lands on it with
/// probability k / 2^prefix_bits. 1 <= prefix_bits <= 64.
double indexed_fpr(Shape shape, std::uint64_t num_blocks, unsigned prefix_bits, std::uint64_t n);

}  // namespace bulkbloom::detail
