// Highway kernels: compiled once per SIMD target (foreach_target.h), chosen at run time.
//
// Keys are handled in groups: a group's hashes are computed with 64-bit SIMD lanes and its blocks
// prefetched while the previous group is tested or set, so that a filter larger than the caches
// keeps many cache-line misses in flight. Each key's block is then tested or set on its own, in
// input order, with the block's words as SIMD lanes (one load, multiply by the salts, variable
// shift, AND/OR). Keeping the per-key step in order is what makes insert_if_absent exactly the
// sequential loop, also when copies of a key fall into one SIMD vector of hashes.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "cpu/highway_kernels.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>

#include <algorithm>
#include <array>
#include <bit>
#include <cstring>

#include "bulkbloom/detail/block_math.hpp"
#include "cpu/atomic_block.hpp"
#include "cpu/fill_stats.hpp"
#include "cpu/kernels.hpp"

HWY_BEFORE_NAMESPACE();
namespace bulkbloom::detail {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// Keys hashed together. The next group is hashed before the current one is worked on, and its
// blocks are prefetched while the current group's are visited: a whole group ahead, far enough to
// keep many misses in flight, near enough to stay in the L1. The size was chosen by measurement
// (bench/RESULTS.md).
constexpr std::size_t kGroup = 64;

// The low 64 bits of a 64x64-bit lane product. AVX-512DQ, which every x86 target from AVX3 up has
// (lower target bits are the better targets), multiplies 64-bit lanes natively; Highway 1.0.3
// lacks the op on the other x86 targets, so there it is built from 32-bit products.
template <class D>
HWY_INLINE hn::Vec<D> MulLow64(D d, hn::Vec<D> a, hn::Vec<D> b) {
#if (HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX3) || HWY_TARGET == HWY_EMU128 || HWY_TARGET == HWY_SCALAR
  (void)d;
  return a * b;
#elif HWY_TARGET == HWY_AVX2 || HWY_TARGET == HWY_SSE4
  // Both cross products' low halves from one 32-bit multiply (pmulld) of a by b with b's halves
  // swapped, summed by swapping them back: two multiplies and no 64-bit shift, where the form
  // below takes three multiplies and two shifts for a constant b (XXH64's five products are most
  // of AVX2's hash). Measured on Zen 3, where pmulld is one micro-op; it is two on Intel's cores.
  const hn::RepartitionToNarrow<D> d32;
  const auto a32 = hn::BitCast(d32, a), b32 = hn::BitCast(d32, b);
  const auto cross_halves = hn::Mul(a32, hn::Shuffle2301(b32));
  const auto cross = hn::And(hn::BitCast(d, cross_halves + hn::Shuffle2301(cross_halves)),
                             hn::Set(d, 0xFFFFFFFF00000000ULL));
  return hn::MulEven(a32, b32) + cross;
#else
  const hn::RepartitionToNarrow<D> d32;
  const auto a32 = hn::BitCast(d32, a), b32 = hn::BitCast(d32, b);
  const auto low = hn::MulEven(a32, b32);
  const auto cross = hn::MulEven(a32, hn::BitCast(d32, hn::ShiftRight<32>(b))) +
                     hn::MulEven(hn::BitCast(d32, hn::ShiftRight<32>(a)), b32);
  return low + hn::ShiftLeft<32>(cross);
#endif
}

// xxh64_u64 (block_math.hpp) on every lane: rotl(v, r) is RotateRight by 64 - r.
template <class D>
HWY_INLINE hn::Vec<D> Xxh64(D d, hn::Vec<D> key, std::uint64_t seed) {
  auto h = hn::Set(d, seed + kXxhPrime5 + 8);
  const auto mixed = hn::RotateRight<33>(MulLow64(d, key, hn::Set(d, kXxhPrime2)));
  h = hn::Xor(h, MulLow64(d, mixed, hn::Set(d, kXxhPrime1)));
  h = MulLow64(d, hn::RotateRight<37>(h), hn::Set(d, kXxhPrime1)) + hn::Set(d, kXxhPrime4);
  h = hn::Xor(h, hn::ShiftRight<33>(h));
  h = MulLow64(d, h, hn::Set(d, kXxhPrime2));
  h = hn::Xor(h, hn::ShiftRight<29>(h));
  h = MulLow64(d, h, hn::Set(d, kXxhPrime3));
  return hn::Xor(h, hn::ShiftRight<32>(h));
}

void HashKeys(const Layout& layout, const std::uint64_t* HWY_RESTRICT keys, std::size_t n,
              KeyMode mode, std::uint64_t* HWY_RESTRICT out) {
  if (mode == KeyMode::prehashed || layout.hash == KeyHash::identity) {
    std::memcpy(out, keys, n * sizeof(std::uint64_t));
    return;
  }
  // A local: read through `layout`, GCC 12 loaded and broadcast it every vector.
  const std::uint64_t seed = layout.seed;
#if HWY_TARGET == HWY_SSE4 || HWY_TARGET == HWY_SSSE3
  // Two lanes' products built from 32-bit ones cost more than the integer unit's one each
  // (bench/DECISIONS.md #37, "Hashing and compressing on AVX2"): scalar code hashes every key.
  for (std::size_t i = 0; i < n; ++i) out[i] = xxh64_u64(keys[i], seed);
#else
  const hn::ScalableTag<std::uint64_t> d;
  const std::size_t lanes = hn::Lanes(d);
  std::size_t i = 0;
#if HWY_TARGET == HWY_AVX2
  // AVX2 builds each 64-bit product from two 32-bit multiplies on the vector units, while the
  // integer unit, which multiplies 64 bits at once, is idle: two keys of every six go to it (the
  // share measured fastest, bench/DECISIONS.md #37, "Hashing and compressing on AVX2").
  constexpr std::size_t kScalarKeys = 2;
  for (; i + lanes + kScalarKeys <= n; i += lanes + kScalarKeys) {
    hn::StoreU(Xxh64(d, hn::LoadU(d, keys + i), seed), d, out + i);
    for (std::size_t k = i + lanes; k < i + lanes + kScalarKeys; ++k) {
      out[k] = xxh64_u64(keys[k], seed);
    }
  }
#endif
  for (; i + lanes <= n; i += lanes) {
    hn::StoreU(Xxh64(d, hn::LoadU(d, keys + i), seed), d, out + i);
  }
  if (i < n) {  // the tail, through a zero-padded vector
    HWY_ALIGN std::uint64_t tail[hn::MaxLanes(d)] = {};
    std::copy(keys + i, keys + n, tail);
    hn::Store(Xxh64(d, hn::Load(d, tail), seed), d, tail);
    std::copy(tail, tail + (n - i), out + i);
  }
#endif
}

// Filters up to this size load 64-byte vectors of words whole, larger ones in halves (see
// BlockOps::LoadWords): whole loads are faster while the filter sits in a core's L2, split ones
// once it does not (bench/RESULTS.md).
constexpr std::uint64_t kWholeLoadFilterBytes = std::uint64_t{1} << 20;

// One block of geometry `Geo` as SIMD lanes: `kChunks` vectors of the block's words.
// `kSplitLoads`: load 64-byte vectors as two halves.
template <class Geo, bool kSplitLoads>
struct BlockOps {
  using Word = typename Geo::Word;
  using D = hn::CappedTag<Word, Geo::kWords>;
  static constexpr std::size_t kLanes = hn::MaxLanes(D());
  static constexpr std::size_t kChunks = Geo::kWords / kLanes;
  // Whether splitting loads applies: 64-byte vectors, which only AVX-512 has on x86.
  static constexpr bool kCanSplitLoads = kLanes * sizeof(Word) == 64 && HWY_ARCH_X86;

  // A block's words [p, p + kLanes) as one vector. On the AVX-512 cores measured, a 512-bit load of
  // a line not yet in the L1 was much slower than two 256-bit loads, for reasons not known
  // (bench/RESULTS.md). Stores stay whole: split ones measured no faster.
  static HWY_INLINE hn::Vec<D> LoadWords(const Word* HWY_RESTRICT p) {
    const D d;
#if HWY_TARGET != HWY_SCALAR  // which has no half vectors
    if constexpr (kSplitLoads && kCanSplitLoads) {
      const hn::Half<D> half;
      return hn::Combine(d, hn::LoadU(half, p + kLanes / 2), hn::LoadU(half, p));
    }
#endif
    return hn::LoadU(d, p);
  }

  // The bits key hash `x` sets in words [j * kLanes, (j + 1) * kLanes) (bit_in_word per lane).
  static HWY_INLINE hn::Vec<D> Pattern(std::uint32_t x, std::size_t j) {
    const D d;
    if constexpr (sizeof(Word) == 4) {
      const auto bit =
          hn::ShiftRight<32 - Geo::kLog2WordBits>(hn::Set(d, x) * hn::LoadU(d, kSalt + j * kLanes));
      return hn::Set(d, 1) << bit;
    } else {
      const hn::Rebind<std::uint32_t, D> d32;
      const auto bit = hn::ShiftRight<32 - Geo::kLog2WordBits>(hn::Set(d32, x) *
                                                               hn::LoadU(d32, kSalt + j * kLanes));
      return hn::Set(d, 1) << hn::PromoteTo(d, bit);
    }
  }

  // Each word of a key's pattern has exactly one bit set, so the key is present iff every
  // pattern word shares its bit with the block's word: one TestBit (vptestmq on AVX-512) per
  // vector instead of AndNot and a compare with zero.
  static HWY_INLINE bool Test(const Word* HWY_RESTRICT block, std::uint64_t hash) {
    const D d;
    const auto x = static_cast<std::uint32_t>(hash);
    auto present = hn::TestBit(LoadWords(block), Pattern(x, 0));
    for (std::size_t j = 1; j < kChunks; ++j) {
      present = hn::And(present, hn::TestBit(LoadWords(block + j * kLanes), Pattern(x, j)));
    }
    return hn::AllTrue(d, present);
  }

  static HWY_INLINE void Set(Word* HWY_RESTRICT block, std::uint64_t hash) {
    const D d;
    const auto x = static_cast<std::uint32_t>(hash);
    for (std::size_t j = 0; j < kChunks; ++j) {
      hn::StoreU(hn::Or(LoadWords(block + j * kLanes), Pattern(x, j)), d, block + j * kLanes);
    }
  }

  // Sets the key's bits; returns whether they were all set before.
  static HWY_INLINE bool TestAndSet(Word* HWY_RESTRICT block, std::uint64_t hash) {
    const D d;
    const auto x = static_cast<std::uint32_t>(hash);
    const auto update = [&](std::size_t j) {
      const auto words = LoadWords(block + j * kLanes);
      const auto pattern = Pattern(x, j);
      hn::StoreU(hn::Or(words, pattern), d, block + j * kLanes);
      return hn::TestBit(words, pattern);
    };
    auto present = update(0);
    for (std::size_t j = 1; j < kChunks; ++j) present = hn::And(present, update(j));
    return hn::AllTrue(d, present);
  }
};

// Calls `f(ops)` with the BlockOps for this filter's size.
template <class Geo, class F>
HWY_INLINE void WithBlockOps(const Layout& layout, const F& f) {
  if constexpr (BlockOps<Geo, true>::kCanSplitLoads) {
    if (layout.size_bytes() > kWholeLoadFilterBytes) return f(BlockOps<Geo, true>());
  }
  f(BlockOps<Geo, false>());
}

// Block of each hash lane under the layout's index (Layout::block_of), from 32x32->64 products as
// in block_math.hpp: high32 takes the high half times num_blocks; full64 adds the low half's
// product, shifted down, before the final shift.
template <class D>
HWY_INLINE hn::Vec<D> BlockOf(D d, hn::Vec<D> hash, std::uint32_t num_blocks, BlockIndex index) {
#if HWY_TARGET == HWY_SCALAR  // one lane, no narrower vector type: the plain 64-bit products
  const auto blocks = hn::Set(d, num_blocks);
  auto high = hn::ShiftRight<32>(hash) * blocks;
  if (index == BlockIndex::full64) {
    high = high + hn::ShiftRight<32>(hn::And(hash, hn::Set(d, 0xffffffffu)) * blocks);
  }
  return hn::ShiftRight<32>(high);
#else
  const hn::RepartitionToNarrow<D> d32;
  const auto blocks = hn::Set(d32, num_blocks);
  auto high = hn::MulEven(hn::BitCast(d32, hn::ShiftRight<32>(hash)), blocks);
  if (index == BlockIndex::full64) {
    // MulEven multiplies the even 32-bit lanes: the low half of each 64-bit hash.
    high = high + hn::ShiftRight<32>(hn::MulEven(hn::BitCast(d32, hash), blocks));
  }
  return hn::ShiftRight<32>(high);
#endif
}

// Writes the positions in a group of the keys whose block is in `range`, in order, to `kept`;
// returns how many there are. With several threads each key is in one thread's range, so a branch
// per key would mispredict half the time: AVX-512 (every x86 target from AVX3 up, all with 512-bit
// vectors) compresses a vector of positions in one instruction, other targets keep or drop each
// position without branching. The intrinsic, because Highway 1.0.3's 64-bit Compress builds its
// lookup table on the stack on every call.
template <class D>
HWY_INLINE std::size_t KeepRange(D d, BlockRange range, std::size_t size,
                                 const std::uint64_t* HWY_RESTRICT blocks,
                                 std::uint64_t* HWY_RESTRICT kept) {
  const std::uint32_t range_size = range.end - range.begin;
  std::size_t count = 0;
#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX3
  static_assert(hn::MaxLanes(D()) == 8, "_mm512_maskz_compress_epi64 needs 512-bit vectors");
  const auto first_block = hn::Set(d, range.begin);
  const auto in_range_size = hn::Set(d, range_size);
  for (std::size_t i = 0; i < size; i += hn::Lanes(d)) {
    const auto keep = hn::And(hn::Lt(hn::Sub(hn::Load(d, blocks + i), first_block), in_range_size),
                              hn::FirstN(d, size - i));
    const auto positions = hn::Iota(d, i);
    hn::StoreU(hn::Vec<D>{_mm512_maskz_compress_epi64(keep.raw, positions.raw)}, d, kept + count);
    count += hn::CountTrue(d, keep);
  }
#else
  (void)d;
  for (std::size_t i = 0; i < size; ++i) {
    kept[count] = i;
    count += (blocks[i] - range.begin) < range_size ? 1 : 0;
  }
#endif
  return count;
}

// Which keys of a group ForEachKey visits: `kAll`, or those whose positions Keep writes to `kept`.
struct EveryKey {
  static constexpr bool kAll = true;
  template <class D>
  HWY_INLINE std::size_t Keep(D, std::size_t size, const std::uint64_t*, std::uint64_t*) const {
    return size;
  }
};

struct KeysInRange {
  static constexpr bool kAll = false;
  BlockRange range;
  template <class D>
  HWY_INLINE std::size_t Keep(D d, std::size_t size, const std::uint64_t* HWY_RESTRICT blocks,
                              std::uint64_t* HWY_RESTRICT kept) const {
    return KeepRange(d, range, size, blocks, kept);
  }
};

// Where a prefetched line is to go.
enum class CacheLevel { l1, l2 };

// Asks for the cache line at `p` to be brought into `kLevel`.
//
// Blocks go to the L2 (PREFETCHT1): measured faster than a fill of the L1 for filters beyond the
// caches, likely because an L1 fill holds one of the L1's few miss buffers until its line arrives
// while the L2 keeps more misses in flight. Lines about to be written get a read prefetch too:
// PREFETCHW measured slower at every size (bench/RESULTS.md). Keys, read a few groups ahead, go
// to the L1.
//
// Inline assembly on x86 because GCC 12 dropped __builtin_prefetch from these kernels in some
// forms of this code (no prefetch instruction left in the object file), and with it the
// memory-level parallelism at DRAM sizes.
template <CacheLevel kLevel>
HWY_INLINE void PrefetchLine(const void* p) {
#if HWY_ARCH_X86
  if constexpr (kLevel == CacheLevel::l1) {
    asm volatile("prefetcht0 %0" : : "m"(*static_cast<const char*>(p)));
  } else {
    asm volatile("prefetcht1 %0" : : "m"(*static_cast<const char*>(p)));
  }
#else
  __builtin_prefetch(p, 0, kLevel == CacheLevel::l1 ? 3 : 2);
#endif
}

// Keys are read this many groups ahead of their hashing. A batch larger than the caches streams its
// keys from memory, and the hardware prefetcher did not keep up with that stream while the
// kernels' block prefetches were in flight; four groups ahead gained at every filter size, more
// gained nothing (bench/RESULTS.md).
constexpr std::size_t kKeyPrefetchGroups = 4;
constexpr std::size_t kKeysPerLine = 64 / sizeof(std::uint64_t);

// Calls `visit(block, hash, index)` in input order for the keys of keys[0..n) that `keys_kept`
// keeps, hashing one group ahead and prefetching its blocks, and returns the sum of what the
// calls return (insert_if_absent: its count of new keys).
//
// The sum is kept here, in a register: a count the visitor added to through a reference lived in
// memory, since the flag stores may alias it, and the compiler then branched on each key's
// answer to skip that increment. With a fraction of the keys already present the branch
// mispredicts, and at DRAM sizes each misprediction also discards the block prefetches issued
// after it.
template <class Geo, class Kept, class Visit>
HWY_INLINE std::uint64_t ForEachKey(const Layout& layout, std::byte* bits,
                                    const std::uint64_t* keys, std::size_t n, KeyMode mode,
                                    const Kept& keys_kept, const Visit& visit) {
  constexpr bool kEveryKey = Kept::kAll;
  using Word = typename Geo::Word;
  const hn::ScalableTag<std::uint64_t> d;
  const std::size_t lanes = hn::Lanes(d);
  auto* words = reinterpret_cast<Word*>(bits);
  const auto num_blocks = static_cast<std::uint32_t>(layout.num_blocks);
  // Blocks are computed a whole vector at a time, also past the end of a short last group: the
  // arrays have a vector of slack, zeroed so that no lane reads indeterminate bytes.
  constexpr std::size_t kSlots = kGroup + hn::MaxLanes(d);
  HWY_ALIGN std::uint64_t hashes[2][kSlots] = {};
  HWY_ALIGN std::uint64_t blocks[2][kSlots] = {};
  HWY_ALIGN std::uint64_t kept[2][kSlots];  // positions of the keys kept; not kEveryKey
  std::size_t count[2] = {0, 0};

  // Hashes the group at `start`, computes its blocks in SIMD and keeps the keys to visit.
  const auto prepare = [&](std::size_t start, int slot) {
    const std::size_t size = std::min(kGroup, n - start);
    HashKeys(layout, keys + start, size, mode, hashes[slot]);
    const std::size_t ahead = start + kKeyPrefetchGroups * kGroup;
    for (std::size_t k = ahead; k < std::min(n, ahead + kGroup); k += kKeysPerLine) {
      PrefetchLine<CacheLevel::l1>(keys + k);
    }
    for (std::size_t i = 0; i < size; i += lanes) {
      hn::Store(BlockOf(d, hn::Load(d, hashes[slot] + i), num_blocks, layout.index), d,
                blocks[slot] + i);
    }
    if constexpr (kEveryKey) {
      count[slot] = size;
    } else {
      count[slot] = keys_kept.Keep(d, size, blocks[slot], kept[slot]);
    }
  };
  // The i-th key of a group to work on, as a position in the group.
  const auto key_at = [&](int slot, std::size_t i) {
    return kEveryKey ? i : static_cast<std::size_t>(kept[slot][i]);
  };
  const auto prefetch = [&](int slot, std::size_t i) {
    PrefetchLine<CacheLevel::l2>(words + blocks[slot][key_at(slot, i)] * Geo::kWords);
  };
  std::uint64_t sum = 0;
  const auto visit_one = [&](int slot, std::size_t start, std::size_t i) {
    const std::size_t key = key_at(slot, i);
    sum += visit(words + blocks[slot][key] * Geo::kWords, hashes[slot][key], start + key);
  };
  if (n == 0) return 0;
  prepare(0, 0);
  for (std::size_t i = 0; i < count[0]; ++i) prefetch(0, i);
  int slot = 0;
  for (std::size_t start = 0; start < n; start += kGroup, slot ^= 1) {
    const bool more = start + kGroup < n;
    if (more) prepare(start + kGroup, slot ^ 1);
    // One block of the next group is prefetched as each key of this one is visited, since a
    // burst of prefetches would fill the core's miss queue and stall it with nothing else to do.
    // When the next group has more keys (this one is short, or has fewer keys in `range`), its
    // surplus is asked for first, so that a group's worth of blocks stays on its way.
    const std::size_t here = count[slot], there = more ? count[slot ^ 1] : 0;
    const std::size_t paired = std::min(here, there), surplus = there - paired;
    for (std::size_t j = 0; j < surplus; ++j) prefetch(slot ^ 1, j);
    for (std::size_t i = 0; i < paired; ++i) {
      prefetch(slot ^ 1, surplus + i);
      visit_one(slot, start, i);
    }
    for (std::size_t i = paired; i < here; ++i) visit_one(slot, start, i);
  }
  return sum;
}

// ForEachKey for `range`, with the filtering left out when it is the whole filter.
template <class Geo, class Visit>
HWY_INLINE std::uint64_t ForEachKeyIn(const Layout& layout, std::byte* bits,
                                      const std::uint64_t* keys, std::size_t n, KeyMode mode,
                                      BlockRange range, const Visit& visit) {
  if (range.begin == 0 && range.end == layout.num_blocks) {
    return ForEachKey<Geo>(layout, bits, keys, n, mode, EveryKey(), visit);
  }
  return ForEachKey<Geo>(layout, bits, keys, n, mode, KeysInRange{range}, visit);
}

void Insert(const Layout& layout, std::byte* bits, const std::uint64_t* keys, std::size_t n,
            KeyMode mode, BlockRange range) {
  with_geometry(layout.shape, [&]<typename Geo>(Geo) {
    WithBlockOps<Geo>(layout, [&]<class Ops>(Ops) {
      ForEachKeyIn<Geo>(layout, bits, keys, n, mode, range,
                        [](typename Geo::Word* block, std::uint64_t hash, std::size_t) {
                          Ops::Set(block, hash);
                          return std::uint64_t{0};
                        });
    });
  });
}

// Insert for threads that share blocks: the pattern is computed in SIMD as Set's is, then OR'd
// into the block with atomics (atomic_block.hpp). Every key of the slice is visited, in order.
void InsertAtomic(const Layout& layout, std::byte* bits, const std::uint64_t* keys, std::size_t n,
                  KeyMode mode) {
  with_geometry(layout.shape, [&]<typename Geo>(Geo) {
    using Ops = BlockOps<Geo, false>;  // only the pattern: loads are or_block_atomically's
    using Word = typename Geo::Word;
    ForEachKey<Geo>(layout, bits, keys, n, mode, EveryKey(),
                    [](Word* block, std::uint64_t hash, std::size_t) {
                      const typename Ops::D d;
                      const auto x = static_cast<std::uint32_t>(hash);
                      HWY_ALIGN Word pattern[Geo::kWords];
                      for (std::size_t j = 0; j < Ops::kChunks; ++j) {
                        hn::Store(Ops::Pattern(x, j), d, pattern + j * Ops::kLanes);
                      }
                      or_block_atomically<Geo::kBlockBytes>(block, pattern);
                      return std::uint64_t{0};
                    });
  });
}

void Contains(const Layout& layout, const std::byte* bits, const std::uint64_t* keys, std::size_t n,
              KeyMode mode, std::uint8_t* out) {
  auto* readable = const_cast<std::byte*>(bits);  // only read below
  with_geometry(layout.shape, [&]<typename Geo>(Geo) {
    WithBlockOps<Geo>(layout, [&]<class Ops>(Ops) {
      ForEachKey<Geo>(layout, readable, keys, n, mode, EveryKey(),
                      [out](typename Geo::Word* block, std::uint64_t hash, std::size_t k) {
                        out[k] = Ops::Test(block, hash) ? 1 : 0;
                        return std::uint64_t{0};
                      });
    });
  });
}

// Tests and sets each key `for_each` visits (ForEachKey or ForEachKeyIn, given the geometry, the
// keys to visit and the visitor) in order, writing its flag; returns the count of new keys.
template <class ForEach>
HWY_INLINE std::uint64_t TestAndSetEach(const Layout& layout, std::uint8_t* is_new,
                                        const ForEach& for_each) {
  std::uint64_t fresh = 0;
  with_geometry(layout.shape, [&]<typename Geo>(Geo) {
    WithBlockOps<Geo>(layout, [&]<class Ops>(Ops) {
      fresh =
          for_each(Geo(), [is_new](typename Geo::Word* block, std::uint64_t hash, std::size_t k) {
            const std::uint64_t absent = Ops::TestAndSet(block, hash) ? 0 : 1;
            is_new[k] = static_cast<std::uint8_t>(absent);
            return absent;
          });
    });
  });
  return fresh;
}

std::uint64_t InsertIfAbsent(const Layout& layout, std::byte* bits, const std::uint64_t* keys,
                             std::size_t n, KeyMode mode, BlockRange range, std::uint8_t* is_new) {
  return TestAndSetEach(layout, is_new, [&]<class Geo>(Geo, const auto& visit) {
    return ForEachKeyIn<Geo>(layout, bits, keys, n, mode, range, visit);
  });
}

// CpuKernels::route is compiled for each task count up to this, its lists' counts in registers,
// each vector of keys split between the lists by compares with the owners' first hashes; beyond,
// each key's owner is computed from its block and the key appended to that list alone.
constexpr unsigned kMaxListsInRegisters = BlockOwners::kHashBounds + 1;

// Starts a route over kTasks lists: the owners' first hashes as vectors (task 1 on) and each
// list's start and count. The caller's own arrays, not a struct's, so that the counts stay in
// registers while it runs (a struct's went to the stack, and each vector's appends waited on the
// previous vector's counts through a store and a load).
template <unsigned kTasks, class D>
HWY_INLINE void StartRoute(D d, const BlockOwners& owners, const RouteLists& lists,
                           hn::Vec<D> (&first_hash)[kTasks], bool (&has_first_hash)[kTasks],
                           std::size_t (&count)[kTasks], std::uint64_t* (&list)[kTasks]) {
  for (unsigned t = 1; t < kTasks; ++t) {
    first_hash[t] = hn::Set(d, owners.first_hash[t]);
    has_first_hash[t] = owners.has_first_hash[t];
  }
  for (unsigned t = 0; t < kTasks; ++t) {
    count[t] = lists.counts[t];
    list[t] = lists.hashes + t * lists.capacity;
  }
}

#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX3
// CpuKernels::route on AVX-512 for kTasks tasks: each vector of keys hashed, its lanes split
// between the tasks by comparing the hashes with the owners' first hashes (BlockOwners: no block
// computed), and appended to each task's list with a compress into a register and a whole-vector
// store (as KeepRange: no branch on which task owns a key, which is as unpredictable as the key;
// the compressing store to memory is microcoded on some hosts). The task count is a template
// argument so that the lists' counts live in registers: held in memory, each vector's appends
// waited on the previous vector's count through a store and a load (bench/DECISIONS.md #37).
template <unsigned kTasks>
void RouteCompressed(const Layout& layout, const std::uint64_t* keys, std::size_t n, KeyMode mode,
                     const BlockOwners& owners, const RouteLists& lists) {
  const hn::ScalableTag<std::uint64_t> d;
  static_assert(hn::MaxLanes(d) == 8, "one __mmask8 and eight owner bytes a vector");
  const bool hashing = mode != KeyMode::prehashed && layout.hash != KeyHash::identity;
  // A local: read through `layout`, which the stores may alias, it was loaded every vector.
  const std::uint64_t seed = layout.seed;
  hn::Vec<decltype(d)> first_hash[kTasks];  // lanes at or past it: task t or a later one
  bool has_first_hash[kTasks] = {};
  std::size_t count[kTasks];
  std::uint64_t* list[kTasks];
  StartRoute(d, owners, lists, first_hash, has_first_hash, count, list);
  const auto append = [&](hn::Vec<decltype(d)> key, __mmask8 valid, std::size_t i) {
    const auto hash = hashing ? Xxh64(d, key, seed) : key;
    __mmask8 from_here = valid;           // valid lanes at or past task t's first hash
    __m128i owner = _mm_setzero_si128();  // a byte a lane
    for (unsigned t = 0; t < kTasks; ++t) {
      __mmask8 from_next = 0;
      if (t + 1 < kTasks && has_first_hash[t + 1]) {
        from_next = _mm512_mask_cmpge_epu64_mask(from_here, hash.raw, first_hash[t + 1].raw);
        owner = _mm_add_epi8(owner, _mm_maskz_set1_epi8(from_next, 1));
      }
      const __mmask8 keep = static_cast<__mmask8>(from_here & ~from_next);
      _mm512_storeu_si512(list[t] + count[t], _mm512_maskz_compress_epi64(keep, hash.raw));
      count[t] += static_cast<std::size_t>(__builtin_popcount(keep));
      from_here = from_next;
    }
    if (lists.owner_of != nullptr) _mm_mask_storeu_epi8(lists.owner_of + i, valid, owner);
  };
  std::size_t i = 0;
  for (; i + 8 <= n; i += 8) append(hn::LoadU(d, keys + i), 0xFF, i);
  if (i < n) {  // the tail, through a zero-padded vector
    const auto valid = static_cast<__mmask8>((1u << (n - i)) - 1);
    append(hn::Vec<decltype(d)>{_mm512_maskz_loadu_epi64(valid, keys + i)}, valid, i);
  }
  for (unsigned t = 0; t < kTasks; ++t) lists.counts[t] = count[t];
}
#endif

// Scalable vectors (SVE, RVV) have no lane count to size a table by, nor arrays of vectors: they
// route as RouteEachKey does for many tasks.
#if !(HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX3) && !HWY_HAVE_SCALABLE
// Lane orders that compress a vector of kLanes 64-bit lanes by a mask: row `bits` lists the lanes
// whose bit is set, lowest first, then the others. Highway 1.0.3's Compress keeps its table in a
// function-local constexpr array, which GCC 12 copies onto the stack at every call (512 bytes on
// AVX2, a `rep movsq` a compress): this one is static.
template <std::size_t kLanes>
constexpr auto MakeCompressOrders() {
  std::array<std::array<std::int64_t, kLanes>, std::size_t{1} << kLanes> orders{};
  for (std::size_t bits = 0; bits < orders.size(); ++bits) {
    std::size_t at = 0;
    for (bool kept : {true, false}) {
      for (std::size_t lane = 0; lane < kLanes; ++lane) {
        if (((bits >> lane & 1) != 0) == kept) orders[bits][at++] = static_cast<std::int64_t>(lane);
      }
    }
  }
  return orders;
}
template <std::size_t kLanes>
alignas(64) constexpr auto kCompressOrders = MakeCompressOrders<kLanes>();

// kCompressOrders as the orders of the 32-bit halves of the lanes: lane L is halves 2L, 2L + 1.
template <std::size_t kLanes>
constexpr auto MakeCompressHalfOrders() {
  std::array<std::array<std::int32_t, 2 * kLanes>, std::size_t{1} << kLanes> orders{};
  for (std::size_t bits = 0; bits < orders.size(); ++bits) {
    for (std::size_t at = 0; at < kLanes; ++at) {
      const auto lane = static_cast<std::int32_t>(kCompressOrders<kLanes>[bits][at]);
      orders[bits][2 * at] = 2 * lane;
      orders[bits][2 * at + 1] = 2 * lane + 1;
    }
  }
  return orders;
}
template <std::size_t kLanes>
alignas(64) constexpr auto kCompressHalfOrders = MakeCompressHalfOrders<kLanes>();

// Stores the lanes of `v` that `keep` holds to out[0, count), lowest first, and returns count;
// writes a whole vector (the lanes past count are the others).
template <class D>
HWY_INLINE std::size_t CompressToList(D d, hn::Vec<D> v, hn::Mask<D> keep, std::uint64_t* out) {
  constexpr std::size_t kLanes = hn::MaxLanes(d);
  static_assert(kLanes <= 4, "a row a mask: 2^kLanes rows");
  std::uint8_t bits = 0;
  hn::StoreMaskBits(d, keep, &bits);
#if HWY_TARGET == HWY_AVX2
  // vpermd takes 32-bit indices as loaded; 64-bit ones Highway 1.0.3 turns into those with three
  // more instructions a compress, and a key is compressed once a task.
  const hn::RepartitionToNarrow<D> d32;
  const auto halves = hn::SetTableIndices(d32, kCompressHalfOrders<kLanes>[bits].data());
  hn::StoreU(hn::BitCast(d, hn::TableLookupLanes(hn::BitCast(d32, v), halves)), d, out);
#else
  hn::StoreU(hn::TableLookupLanes(v, hn::SetTableIndices(d, kCompressOrders<kLanes>[bits].data())),
             d, out);
#endif
  return static_cast<std::size_t>(std::popcount(bits));
}

// CpuKernels::route on the other targets for kTasks tasks: RouteCompressed's scheme in Highway's
// portable ops. AVX2 compresses 64-bit lanes through a table and a permute (CompressToList) and
// compares unsigned 64-bit lanes as signed ones with their top bits flipped: cheaper than the
// block and owner products, which it builds from 32-bit ones, and a key stored to every list
// (bench/DECISIONS.md #37, "Routing on AVX2"). Keys are hashed a group at a time, not a vector
// (DECISIONS.md, "Hashing and compressing on AVX2").
template <unsigned kTasks>
void RouteCompressedPortable(const Layout& layout, const std::uint64_t* keys, std::size_t n,
                             KeyMode mode, const BlockOwners& owners, const RouteLists& lists) {
  const hn::ScalableTag<std::uint64_t> d;
  const hn::Rebind<std::uint8_t, decltype(d)> d8;
  const std::size_t lanes = hn::Lanes(d);
  const bool hashing = mode != KeyMode::prehashed && layout.hash != KeyHash::identity;
  using V = hn::Vec<decltype(d)>;
  hn::Vec<decltype(d)> first_hash[kTasks];  // lanes at or past it: task t or a later one
  bool has_first_hash[kTasks] = {};
  std::size_t count[kTasks];
  std::uint64_t* list[kTasks];
  StartRoute(d, owners, lists, first_hash, has_first_hash, count, list);
  // Appends the lanes of `hash` that `valid` holds to their owners' lists, and writes every
  // lane's owner byte to owner_out unless it is null.
  const auto append = [&](V hash, hn::Mask<decltype(d)> valid, std::uint8_t* owner_out) {
    auto from_here = valid;  // valid lanes at or past task t's first hash
    V owner = hn::Zero(d);
    for (unsigned t = 0; t < kTasks; ++t) {  // unrolled whole: the counts stay in registers
      auto from_next = hn::MaskFromVec(hn::Zero(d));
      if (t + 1 < kTasks && has_first_hash[t + 1]) {
        // hash >= first_hash[t + 1], in the compare Highway 1.0.3 has for unsigned lanes
        from_next = hn::AndNot(hn::Gt(first_hash[t + 1], hash), from_here);
        owner = hn::Sub(owner, hn::VecFromMask(d, from_next));  // a true lane is all ones: -1
      }
      count[t] += CompressToList(d, hash, hn::AndNot(from_next, from_here), list[t] + count[t]);
      from_here = from_next;
    }
    if (owner_out != nullptr) hn::StoreU(hn::TruncateTo(d8, owner), d8, owner_out);
  };
  // HashKeys on AVX2 gives some keys of each step to the integer multiplier.
  HWY_ALIGN std::uint64_t hashed[kGroup];
  HWY_ALIGN std::uint8_t owner_tail[hn::MaxLanes(d)];
  for (std::size_t start = 0; start < n; start += kGroup) {
    const std::size_t size = std::min(kGroup, n - start);
    const std::uint64_t* hashes = keys + start;
    if (hashing) {
      HashKeys(layout, keys + start, size, mode, hashed);
      hashes = hashed;
    }
    std::uint8_t* owner_out = lists.owner_of != nullptr ? lists.owner_of + start : nullptr;
    std::size_t i = 0;
    for (; i + lanes <= size; i += lanes) {
      append(hn::LoadU(d, hashes + i), hn::FirstN(d, lanes),
             owner_out != nullptr ? owner_out + i : nullptr);
    }
    if (i < size) {  // the last group's tail, through a zero-padded vector
      HWY_ALIGN std::uint64_t tail[hn::MaxLanes(d)] = {};
      std::copy(hashes + i, hashes + size, tail);
      append(hn::Load(d, tail), hn::FirstN(d, size - i),
             owner_out != nullptr ? owner_tail : nullptr);
      if (owner_out != nullptr) std::copy(owner_tail, owner_tail + (size - i), owner_out + i);
    }
  }
  for (unsigned t = 0; t < kTasks; ++t) lists.counts[t] = count[t];
}
#endif

// CpuKernels::route beyond kMaxListsInRegisters tasks: a group's hashes and each key's owner from
// its block in SIMD, then each key stored at its owner's count.
void RouteEachKey(const Layout& layout, const std::uint64_t* keys, std::size_t n, KeyMode mode,
                  const BlockOwners& owners, const RouteLists& lists) {
  const hn::ScalableTag<std::uint64_t> d;
  const std::size_t lanes = hn::Lanes(d);
  const auto num_blocks = static_cast<std::uint32_t>(layout.num_blocks);
  // A vector of slack past a short last group, zeroed so that no lane reads indeterminate bytes.
  constexpr std::size_t kSlots = kGroup + hn::MaxLanes(d);
  HWY_ALIGN std::uint64_t hashes[kSlots] = {};
  HWY_ALIGN std::uint64_t owner_lane[kSlots] = {};
  const auto scale = hn::Set(d, owners.scale);
  for (std::size_t start = 0; start < n; start += kGroup) {
    const std::size_t size = std::min(kGroup, n - start);
    HashKeys(layout, keys + start, size, mode, hashes);
    for (std::size_t i = 0; i < size; i += lanes) {
      const auto block = BlockOf(d, hn::Load(d, hashes + i), num_blocks, layout.index);
      hn::Store(hn::ShiftRight<32>(MulLow64(d, block, scale)), d, owner_lane + i);
    }
    for (std::size_t i = 0; i < size; ++i) {
      const auto owner = static_cast<unsigned>(owner_lane[i]);
      lists.hashes[owner * lists.capacity + lists.counts[owner]++] = hashes[i];
      if (lists.owner_of != nullptr) lists.owner_of[start + i] = static_cast<std::uint8_t>(owner);
    }
  }
}

// Route for kTasks tasks, up to kMaxListsInRegisters.
template <unsigned kTasks>
void RouteFew(const Layout& layout, const std::uint64_t* keys, std::size_t n, KeyMode mode,
              const BlockOwners& owners, const RouteLists& lists) {
#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX3
  RouteCompressed<kTasks>(layout, keys, n, mode, owners, lists);
#elif HWY_HAVE_SCALABLE
  RouteEachKey(layout, keys, n, mode, owners, lists);
#else
  RouteCompressedPortable<kTasks>(layout, keys, n, mode, owners, lists);
#endif
}

// CpuKernels::route.
void Route(const Layout& layout, const std::uint64_t* keys, std::size_t n, KeyMode mode,
           BlockOwners owners, RouteLists lists) {
  static_assert(kMaxListsInRegisters == 4, "one case a task count below");
  switch (owners.tasks) {
    case 1:
      return RouteFew<1>(layout, keys, n, mode, owners, lists);
    case 2:
      return RouteFew<2>(layout, keys, n, mode, owners, lists);
    case 3:
      return RouteFew<3>(layout, keys, n, mode, owners, lists);
    case 4:
      return RouteFew<4>(layout, keys, n, mode, owners, lists);
    default:
      return RouteEachKey(layout, keys, n, mode, owners, lists);
  }
}

// CpuKernels::merge_flags. A slice's keys take their flags from the tasks' lists in an order
// the keys' blocks decide, so no branch per key: 16 keys a step, one compare a task, then in two
// halves of 8 keys each task's next 8 flags spread over the keys it owns by a byte shuffle from a
// table indexed by its owners' mask, and OR'd together (a lane no task owns stays zero). A task
// count beyond kMaxMergeTasksInVectors costs more compares and shuffles a step than the loop a key
// below, which takes every key's flag from its task's list at its own count.
constexpr unsigned kMaxMergeTasksInVectors = 8;
constexpr unsigned kMaxMergeTasksInExpands = 16;

#if HWY_TARGET != HWY_SCALAR && !HWY_HAVE_SCALABLE
// Row `mask` spreads consecutive bytes over the lanes of an 8-lane mask: lane j takes byte
// (rank of j among the mask's set bits) when its bit is set; other lanes' index has the top bit
// set, which TableLookupBytesOr0 turns into zero.
constexpr auto MakeExpandOrders() {
  std::array<std::array<std::uint8_t, 8>, 256> orders{};
  for (std::size_t mask = 0; mask < orders.size(); ++mask) {
    std::uint8_t rank = 0;
    for (std::size_t lane = 0; lane < 8; ++lane) {
      orders[mask][lane] = (mask >> lane & 1) != 0 ? rank++ : std::uint8_t{0x80};
    }
  }
  return orders;
}
alignas(64) constexpr auto kExpandOrders = MakeExpandOrders();
#endif

void MergeFlags(const std::uint8_t* HWY_RESTRICT owner_of, std::size_t n,
                const std::uint8_t* HWY_RESTRICT flags, std::size_t list_stride, unsigned tasks,
                std::uint8_t* HWY_RESTRICT is_new) {
  static_assert(CpuKernels::kMergeReadSlack >= 8, "8 flags loaded a task a half step");
  std::array<const std::uint8_t*, RouteLists::kMaxTasks> next;
  for (unsigned t = 0; t < tasks; ++t) next[t] = flags + t * list_stride;
  std::size_t i = 0;
#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX3_DL
  // VBMI2 expands a task's next flags over the lanes it owns straight from its list: 64 keys a
  // step, one compare and one expanding load a task, no table. Its cost grows with the tasks
  // and meets the loop a key's at twice kMaxMergeTasksInExpands (measured, bench/cpu_kernels).
  if (tasks <= kMaxMergeTasksInExpands) {
    for (; i + 64 <= n; i += 64) {
      const __m512i owners = _mm512_loadu_si512(owner_of + i);
      __m512i merged = _mm512_setzero_si512();
      for (unsigned t = 0; t < tasks; ++t) {
        const __mmask64 mine =
            _mm512_cmpeq_epi8_mask(owners, _mm512_set1_epi8(static_cast<char>(t)));
        merged = _mm512_mask_expandloadu_epi8(merged, mine, next[t]);
        next[t] += std::popcount(static_cast<std::uint64_t>(mine));
      }
      _mm512_storeu_si512(is_new + i, merged);
    }
  }
#endif
#if HWY_TARGET != HWY_SCALAR && !HWY_HAVE_SCALABLE
  if (tasks <= kMaxMergeTasksInVectors) {
    const hn::FixedTag<std::uint8_t, 16> d16;
    const hn::FixedTag<std::uint8_t, 8> d8;
    for (; i + 16 <= n; i += 16) {
      const auto owners = hn::LoadU(d16, owner_of + i);
      hn::Vec<decltype(d8)> merged[2] = {hn::Zero(d8), hn::Zero(d8)};  // keys i on, i + 8 on
      for (unsigned t = 0; t < tasks; ++t) {
        std::uint8_t masks[2];
        hn::StoreMaskBits(d16, hn::Eq(owners, hn::Set(d16, static_cast<std::uint8_t>(t))), masks);
        for (int half = 0; half < 2; ++half) {
          merged[half] = hn::Or(merged[half], hn::TableLookupBytesOr0(
                                                  hn::LoadU(d8, next[t]),
                                                  hn::Load(d8, kExpandOrders[masks[half]].data())));
          next[t] += std::popcount(masks[half]);
        }
      }
      hn::StoreU(merged[0], d8, is_new + i);
      hn::StoreU(merged[1], d8, is_new + i + 8);
    }
  }
#endif
  for (; i < n; ++i) is_new[i] = *next[owner_of[i]]++;
}

// A window's compaction after each generation (CpuKernels::keep_not_found). Whether a key was
// found is as unpredictable as the traffic's repeats, so no branch per key: AVX-512 (as in
// KeepRange) compresses
// eight entries of each array per step (register forms and a plain store, as KeepRange does),
// other targets keep or drop each entry by the count alone. In place: the eight lanes written at
// `kept` <= j end before j + 8, all read already.
std::size_t KeepNotFound(const std::uint8_t* HWY_RESTRICT found, std::uint32_t* index,
                         std::uint64_t* hashes, std::size_t count) {
  std::size_t kept = 0, j = 0;
#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX3
  for (; j + 8 <= count; j += 8) {
    const __mmask8 keep = static_cast<__mmask8>(_mm_cmpeq_epi8_mask(
        _mm_loadl_epi64(reinterpret_cast<const __m128i*>(found + j)), _mm_setzero_si128()));
    const __m512i lane_hashes = _mm512_loadu_si512(hashes + j);
    const __m256i lane_index = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(index + j));
    _mm512_storeu_si512(hashes + kept, _mm512_maskz_compress_epi64(keep, lane_hashes));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(index + kept),
                        _mm256_maskz_compress_epi32(keep, lane_index));
    kept += static_cast<std::size_t>(__builtin_popcount(keep));
  }
#endif
  for (; j < count; ++j) {
    index[kept] = index[j];
    hashes[kept] = hashes[j];
    kept += found[j] == 0 ? 1 : 0;
  }
  return kept;
}

// The fill statistics with this target's bit count: the popcount instruction where the target
// has it (cpu/fill_stats.hpp).
struct CountBits {
  int operator()(std::uint64_t word) const { return static_cast<int>(hwy::PopCount(word)); }
};

std::uint64_t PopCount(const std::uint64_t* words, std::size_t n) {
  return count_set_bits(words, n, CountBits());
}

double FprSum(const Layout& layout, const std::byte* bits, std::uint64_t begin, std::uint64_t end) {
  return with_geometry(
      layout.shape, [&]<typename G>(G) { return block_fpr_sum<G>(bits, begin, end, CountBits()); });
}

// Exported per target: its kernel sets, and the Highway target it was compiled for.
CpuTarget Target() {
  // Highway's portable fallback is called SCALAR; a distinct name keeps it apart from the
  // reference kernels ("cpu/scalar").
  static const char* const kName =
      HWY_TARGET == HWY_SCALAR ? "HWY_SCALAR" : hwy::TargetName(HWY_TARGET);
  static const CpuKernels kKernels{kName,          HashKeys, Insert,     InsertAtomic, Contains,
                                   InsertIfAbsent, Route,    MergeFlags, PopCount,     FprSum};
  static const HostKernels kHost{kName, HashKeys, KeepNotFound};
  return {&kKernels, &kHost};
}
std::int64_t TargetBit() {
  return HWY_TARGET;
}

}  // namespace HWY_NAMESPACE
}  // namespace bulkbloom::detail
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace bulkbloom::detail {

HWY_EXPORT(Target);
HWY_EXPORT(TargetBit);

std::vector<CpuTarget> highway_targets() {
  // Highway lists the targets compiled here that this CPU runs, best first. Each exported
  // function's entries say which target they were compiled for, so each target's kernels are
  // found by that answer rather than by position in the table.
  std::vector<CpuTarget> targets;
  const auto& target_bits = HWY_DISPATCH_TABLE(TargetBit);
  const auto& kernel_sets = HWY_DISPATCH_TABLE(Target);
  for (const std::int64_t wanted : hwy::SupportedAndGeneratedTargets()) {
    for (std::size_t i = 0; i < std::size(target_bits); ++i) {
      if (target_bits[i] != nullptr && target_bits[i]() == wanted) {
        targets.push_back(kernel_sets[i]());
        break;
      }
    }
  }
  return targets;
}

}  // namespace bulkbloom::detail
#endif  // HWY_ONCE
