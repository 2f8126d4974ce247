// The reference implementation. Kept deliberately plain: every other kernel is tested against it.
#include <bit>

#include "bulkbloom/detail/block_math.hpp"
#include "cpu/atomic_block.hpp"
#include "cpu/fill_stats.hpp"
#include "cpu/kernels.hpp"

namespace bulkbloom::detail {
namespace {

std::uint64_t key_hash(const Layout& layout, std::uint64_t key, KeyMode mode) {
  if (mode == KeyMode::prehashed || layout.hash == KeyHash::identity) return key;
  return xxh64_u64(key, layout.seed);
}

template <typename G>
typename G::Word* block_words(const Layout& layout, std::byte* bits, std::uint64_t hash) {
  return reinterpret_cast<typename G::Word*>(bits) + std::size_t{layout.block_of(hash)} * G::kWords;
}

template <typename G>
bool test_block(const typename G::Word* words, std::uint64_t hash) {
  const auto pattern = G::pattern(hash);
  for (int i = 0; i < G::kWords; ++i) {
    if ((words[i] & pattern.word[i]) == 0) return false;
  }
  return true;
}

template <typename G>
void set_block(typename G::Word* words, std::uint64_t hash) {
  const auto pattern = G::pattern(hash);
  for (int i = 0; i < G::kWords; ++i) words[i] |= pattern.word[i];
}

void hash(const Layout& layout, const std::uint64_t* keys, std::size_t n, KeyMode mode,
          std::uint64_t* out) {
  for (std::size_t k = 0; k < n; ++k) out[k] = key_hash(layout, keys[k], mode);
}

bool in_range(const Layout& layout, std::uint64_t hash, BlockRange range) {
  const std::uint32_t block = layout.block_of(hash);
  return block >= range.begin && block < range.end;
}

void insert(const Layout& layout, std::byte* bits, const std::uint64_t* keys, std::size_t n,
            KeyMode mode, BlockRange range) {
  with_geometry(layout.shape, [&]<typename G>(G) {
    for (std::size_t k = 0; k < n; ++k) {
      const std::uint64_t hash = key_hash(layout, keys[k], mode);
      if (!in_range(layout, hash, range)) continue;
      set_block<G>(block_words<G>(layout, bits, hash), hash);
    }
  });
}

void insert_atomic(const Layout& layout, std::byte* bits, const std::uint64_t* keys, std::size_t n,
                   KeyMode mode) {
  with_geometry(layout.shape, [&]<typename G>(G) {
    for (std::size_t k = 0; k < n; ++k) {
      const std::uint64_t hash = key_hash(layout, keys[k], mode);
      const auto pattern = G::pattern(hash);
      or_block_atomically<G::kBlockBytes>(block_words<G>(layout, bits, hash), pattern.word);
    }
  });
}

void contains(const Layout& layout, const std::byte* bits, const std::uint64_t* keys, std::size_t n,
              KeyMode mode, std::uint8_t* out) {
  auto* mutable_bits = const_cast<std::byte*>(bits);  // only read below
  with_geometry(layout.shape, [&]<typename G>(G) {
    for (std::size_t k = 0; k < n; ++k) {
      const std::uint64_t hash = key_hash(layout, keys[k], mode);
      out[k] = test_block<G>(block_words<G>(layout, mutable_bits, hash), hash) ? 1 : 0;
    }
  });
}

std::uint64_t insert_if_absent(const Layout& layout, std::byte* bits, const std::uint64_t* keys,
                               std::size_t n, KeyMode mode, BlockRange range,
                               std::uint8_t* is_new) {
  std::uint64_t fresh = 0;
  with_geometry(layout.shape, [&]<typename G>(G) {
    for (std::size_t k = 0; k < n; ++k) {
      const std::uint64_t hash = key_hash(layout, keys[k], mode);
      if (!in_range(layout, hash, range)) continue;
      typename G::Word* words = block_words<G>(layout, bits, hash);
      const bool present = test_block<G>(words, hash);
      set_block<G>(words, hash);
      is_new[k] = present ? 0 : 1;
      fresh += present ? 0 : 1;
    }
  });
  return fresh;
}

void route(const Layout& layout, const std::uint64_t* keys, std::size_t n, KeyMode mode,
           BlockOwners owners, RouteLists lists) {
  for (std::size_t k = 0; k < n; ++k) {
    const std::uint64_t hash = key_hash(layout, keys[k], mode);
    const unsigned t = owners.owner(layout.block_of(hash));
    lists.hashes[t * lists.capacity + lists.counts[t]++] = hash;
    if (lists.owner_of != nullptr) lists.owner_of[k] = static_cast<std::uint8_t>(t);
  }
}

void merge_flags(const std::uint8_t* owner_of, std::size_t n, const std::uint8_t* flags,
                 std::size_t list_stride, unsigned /*tasks*/, std::uint8_t* is_new) {
  std::array<std::size_t, RouteLists::kMaxTasks> next{};
  for (std::size_t i = 0; i < n; ++i) {
    const unsigned t = owner_of[i];
    is_new[i] = flags[t * list_stride + next[t]++];
  }
}

std::size_t keep_not_found(const std::uint8_t* found, std::uint32_t* index, std::uint64_t* hashes,
                           std::size_t count) {
  std::size_t kept = 0;
  for (std::size_t j = 0; j < count; ++j) {
    if (found[j] != 0) continue;
    index[kept] = index[j];
    hashes[kept] = hashes[j];
    ++kept;
  }
  return kept;
}

// std::popcount, built for any x86-64: without the popcount instruction, which not every CPU
// this build runs on has (cpu/fill_stats.hpp).
struct CountBits {
  int operator()(std::uint64_t word) const { return std::popcount(word); }
};

std::uint64_t popcount(const std::uint64_t* words, std::size_t n) {
  return count_set_bits(words, n, CountBits());
}

double fpr_sum(const Layout& layout, const std::byte* bits, std::uint64_t begin,
               std::uint64_t end) {
  return with_geometry(
      layout.shape, [&]<typename G>(G) { return block_fpr_sum<G>(bits, begin, end, CountBits()); });
}

}  // namespace

const CpuTarget& scalar_target() {
  static constexpr CpuKernels kKernels{
      "scalar",         hash,  insert,      insert_atomic, contains,
      insert_if_absent, route, merge_flags, popcount,      fpr_sum};
  static constexpr HostKernels kHost{"scalar", hash, keep_not_found};
  static constexpr CpuTarget kTarget{&kKernels, &kHost};
  return kTarget;
}

}  // namespace bulkbloom::detail
