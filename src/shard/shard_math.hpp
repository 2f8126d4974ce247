// The per-key arithmetic of shards (DESIGN §9): the shard of a block, and a key's hash moved into
// the blocks of its shard so that the shard's bits can live in an ordinary filter of their own.
#pragma once

#include <cstddef>
#include <cstdint>
#include <limits>
#include <span>

#include "bulkbloom/layout.hpp"
#include "bulkbloom/shard.hpp"

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

namespace bulkbloom::detail {

/// Moves the whole window's hashes into shard `index` of `num_shards`'s blocks of a generation
/// of any size: a window shard's generations may differ in size (DESIGN §9), and a key's local
/// block depends on the size.
///
/// A generation of the configured size `whole.num_blocks` is cut as shard_blocks() cuts it.
/// Every other size is B = b * S blocks (the sizing keeps each a multiple of S), cut into the
/// blocks [i * b, (i + 1) * b) of shard i. Those hold exactly the hashes with
/// floor(h * S / 2^64) = i under full64, or floor((h >> 32) * S / 2^32) = i under high32,
/// whatever b is: floor(h * b * S / 2^64) lies in [i * b, (i + 1) * b) exactly when
/// i <= h * S / 2^64 < i + 1, and the same with h >> 32 and 2^32. So one routing (the
/// configured layout's, whose size is a multiple of S too) serves every size.
///
/// The local hash is LocalHashes' for the generation's whole size: the local block under the
/// high32 index and the low 32 bits of h (the bit pattern, for every shape) kept. No single
/// moved hash serves every size under full64: with h' = h * S mod 2^64 the local block is
/// floor(h' * b / 2^64), which needs up to 64 bits of h', while the pattern needs the low 32
/// bits of h, which h' does not keep (nor does h' >> 32 give floor(h' * b / 2^64) for every
/// b). Under high32, ((h >> 32) * S mod 2^32) << 32 | (h & 0xffffffff) would serve every b;
/// it is left out so that both indexes take one path.
class ShardHashes {
 public:
  /// `place` is the shard's place in a generation of the configured layout `whole`.
  ShardHashes(const Layout& whole, const ShardPlacement& place)
      : whole_(whole),
        index_(place.index()),
        num_shards_(place.num_shards()),
        configured_count_(place.blocks().size()),
        configured_(whole, static_cast<std::uint32_t>(place.blocks().begin),
                    static_cast<std::uint32_t>(place.blocks().size())) {}

  /// The whole window's block count of a generation whose shard holds `count` blocks.
  std::uint64_t whole_blocks(std::uint64_t count) const {
    return count == configured_count_ ? whole_.num_blocks : count * num_shards_;
  }

  /// Writes to `out` the local hashes of `in` (hashes of the shard's keys under the whole
  /// layout) for a generation whose shard holds `count` blocks.
  void move(std::uint64_t count, std::span<const std::uint64_t> in, std::uint64_t* out) const {
    std::uint32_t outside = 0;  // the caller checked ownership
    if (count == configured_count_) {
      for (std::size_t i = 0; i < in.size(); ++i) out[i] = configured_(in[i], outside);
      return;
    }
    Layout sized = whole_;
    sized.num_blocks = count * num_shards_;
    const LocalHashes to_local(sized, static_cast<std::uint32_t>(index_ * count),
                               static_cast<std::uint32_t>(count));
    for (std::size_t i = 0; i < in.size(); ++i) out[i] = to_local(in[i], outside);
  }

 private:
  Layout whole_;
  std::uint64_t index_;
  std::uint64_t num_shards_;
  std::uint64_t configured_count_;
  LocalHashes configured_;
};

}  // namespace bulkbloom::detail
