// The filter's fill statistics as every CPU kernel set computes them (CpuKernels::popcount and
// CpuKernels::fpr_sum): the same arithmetic in the same order on every target, each counting a
// word's set bits with `count_bits`, which each kernel set defines with its target's instructions.
//
// Each kernel set passes a `count_bits` type of its own, defined in its target's code, so no two
// sets share an instantiation: one copy shared between the reference and a SIMD target could run
// the target's instructions on a CPU that lacks them. The templates are forced inline, so each
// set's loop is compiled for its target (the popcount instruction from SSE4 up); the kernel files
// are built without contracting multiplies and adds (CMakeLists.txt), since a fused one would
// round the rate differently where a target has FMA.
#pragma once

#include <cstddef>
#include <cstdint>

namespace bulkbloom::detail {

template <class CountBits>
[[gnu::always_inline]] inline std::uint64_t count_set_bits(const std::uint64_t* words,
                                                           std::size_t n,
                                                           const CountBits& count_bits) {
  std::uint64_t total = 0;
  for (std::size_t i = 0; i < n; ++i) total += static_cast<std::uint64_t>(count_bits(words[i]));
  return total;
}

/// Σ over the blocks [begin, end) of geometry G, in block order, of the product over the block's
/// words, in word order, of each word's share of set bits: the chance that a key not in the filter
/// finds all its bits set, were its block that one (Filter::current_fpr, before the division by
/// the block count).
template <class G, class CountBits>
[[gnu::always_inline]] inline double block_fpr_sum(const std::byte* bits, std::uint64_t begin,
                                                   std::uint64_t end, const CountBits& count_bits) {
  const auto* words = reinterpret_cast<const typename G::Word*>(bits) + begin * G::kWords;
  double sum = 0.0;
  for (std::uint64_t b = begin; b < end; ++b, words += G::kWords) {
    double p = 1.0;
    for (int i = 0; i < G::kWords; ++i) p *= count_bits(words[i]) / double(G::kWordBits);
    sum += p;
  }
  return sum;
}

}  // namespace bulkbloom::detail
