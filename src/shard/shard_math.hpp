// The per-key arithmetic of shards (DESIGN §9): the shard of a block, and a key's hash moved into
// the blocks of its shard so that the shard's bits can live in an ordinary filter of their own.
#pragma once

#include <cstdint>
#include <limits>

#include "bulkbloom/layout.hpp"

namespace bulkbloom::detail {

/// floor(n / d) for a divisor fixed in advance, with a multiplication instead of a division.
///
/// With r = ceil(2^64 / d) = 2^64 / d + e, 0 <= e < 1, the product n * r / 2^64 is
/// n / d + n * e / 2^64, which lies in [n / d, n / d + 1) since n < 2^64; its floor q is
/// floor(n / d) or one more, and q * d > n tells which. Exact when (floor(n / d) + 1) * d < 2^64
/// (so that q * d cannot wrap) and, for d = 1 (where r would be 2^64 and is kept as 0), n = 0.
class InvariantDivisor {
 public:
  constexpr explicit InvariantDivisor(std::uint64_t d)
      : d_(d), r_(d < 2 ? 0 : std::numeric_limits<std::uint64_t>::max() / d + 1) {}

  constexpr std::uint64_t floor_div(std::uint64_t n) const {
    __extension__ using U128 = unsigned __int128;
    const auto q = static_cast<std::uint64_t>((static_cast<U128>(n) * r_) >> 64);
    return q - static_cast<std::uint64_t>(q * d_ > n);
  }

 private:
  std::uint64_t d_;
  std::uint64_t r_;
};

/// The shard of `num_shards` over `num_blocks` blocks whose range [floor(s*B/S), floor((s+1)*B/S))
/// holds `block`: ((block + 1) * S - 1) / B, with `divide_by_blocks` dividing by B. Its
/// preconditions hold because the quotient is below S and S * B < 2^64, and B = 1 forces
/// S = 1 and block = 0, so n = 0.
constexpr std::uint32_t route_block(std::uint32_t block, std::uint32_t num_shards,
                                    const InvariantDivisor& divide_by_blocks) {
  const std::uint64_t n = (std::uint64_t{block} + 1) * num_shards - 1;
  return static_cast<std::uint32_t>(divide_by_blocks.floor_div(n));
}

/// The layout of a shard's bits as a filter of their own: its `count` blocks under the high32
/// index, fed the hashes that LocalHashes makes.
inline Layout local_layout(const Layout& whole, std::uint64_t count) {
  Layout local = whole;
  local.num_blocks = count;
  local.index = BlockIndex::high32;
  return local;
}

/// Moves a key's hash under the whole layout to a hash that local_layout() places at the same
/// offset inside the shard's blocks and with the same bit pattern.
///
/// A hash h goes to block b = whole.block_of(h); its shard keeps block b - begin as block
/// `local` of `count`. The bit pattern is made from the low 32 bits of h, which are kept; the high
/// 32 bits become hi = ceil(local * 2^32 / count), the smallest prefix that high32 with `count`
/// blocks sends to `local`: hi * count >= local * 2^32, and hi * count < local * 2^32 + count
/// <= (local + 1) * 2^32, so (hi * count) >> 32 = local. hi < 2^32 because local < count < 2^32.
/// It is computed as floor((local * 2^32 + count - 1) / count), within InvariantDivisor's
/// preconditions: the quotient is below 2^32 and count < 2^32, and count = 1 means local = 0.
class LocalHashes {
 public:
  LocalHashes(const Layout& whole, std::uint32_t begin, std::uint32_t count)
      : whole_(whole), begin_(begin), count_(count), divide_by_count_(count) {}

  /// The local hash of `h`; ORs a non-zero value into `outside` if h is not in the shard's blocks
  /// (the returned hash is then meaningless).
  std::uint64_t operator()(std::uint64_t h, std::uint32_t& outside) const {
    const std::uint32_t local = whole_.block_of(h) - begin_;  // wraps for blocks before begin
    outside |= static_cast<std::uint32_t>(local >= count_);
    const std::uint64_t prefix =
        divide_by_count_.floor_div((std::uint64_t{local} << 32) + count_ - 1);
    return (prefix << 32) | (h & 0xffffffffu);
  }

 private:
  Layout whole_;
  std::uint32_t begin_;
  std::uint32_t count_;
  InvariantDivisor divide_by_count_;
};

}  // namespace bulkbloom::detail
