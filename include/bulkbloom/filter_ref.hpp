/// @file
/// A trivially copyable, non-owning view of a filter's bits for single-key work, on the host or,
/// compiled by nvcc, inside CUDA kernels.
#pragma once

#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "bulkbloom/detail/block_math.hpp"
#include "bulkbloom/layout.hpp"

namespace bulkbloom {

/// Pointer plus layout. It does not own the bits; the Filter it came from must outlive it. For a
/// filter on the CUDA backend the pointer is device memory and the view is for device code only.
class FilterRef {
 public:
  /// Views `layout.size_bytes()` bytes at `data`, aligned to the block size.
  BULKBLOOM_HOST_DEVICE FilterRef(std::byte* data, const Layout& layout)
      : data_(data), layout_(layout) {}

  /// The viewed bytes.
  BULKBLOOM_HOST_DEVICE std::byte* data() const { return data_; }
  /// The viewed filter's layout.
  BULKBLOOM_HOST_DEVICE const Layout& layout() const { return layout_; }

  /// The 64-bit hash that places `key` under this layout.
  BULKBLOOM_HOST_DEVICE std::uint64_t hash(std::uint64_t key) const {
    return layout_.hash == KeyHash::identity ? key : detail::xxh64_u64(key, layout_.seed);
  }

  /// True if `key` may have been inserted; false means it never was.
  BULKBLOOM_HOST_DEVICE bool contains(std::uint64_t key) const { return contains_hash(hash(key)); }

  /// Sets `key`'s bits with atomic ORs (thread-safe, on the host and on the device).
  BULKBLOOM_HOST_DEVICE void insert(std::uint64_t key) const { insert_hash(hash(key)); }

  /// contains() for a key already hashed by hash() (or by the byte-key hash).
  BULKBLOOM_HOST_DEVICE bool contains_hash(std::uint64_t h) const {
    return detail::with_geometry(layout_.shape, [&]<typename G>(G) { return test<G>(h); });
  }

  /// insert() for a key already hashed.
  BULKBLOOM_HOST_DEVICE void insert_hash(std::uint64_t h) const {
    detail::with_geometry(layout_.shape, [&]<typename G>(G) { set<G>(h); });
  }

 private:
  template <typename G>
  BULKBLOOM_HOST_DEVICE typename G::Word* block(std::uint64_t h) const {
    return reinterpret_cast<typename G::Word*>(data_) +
           std::size_t{layout_.block_of(h)} * G::kWords;
  }

  template <typename G>
  BULKBLOOM_HOST_DEVICE bool test(std::uint64_t h) const {
    const auto pattern = G::pattern(h);
    const typename G::Word* words = block<G>(h);
    bool all = true;
    for (int i = 0; i < G::kWords; ++i) all &= (words[i] & pattern.word[i]) != 0;
    return all;
  }

  template <typename G>
  BULKBLOOM_HOST_DEVICE void set(std::uint64_t h) const {
    const auto pattern = G::pattern(h);
    typename G::Word* words = block<G>(h);
    for (int i = 0; i < G::kWords; ++i) {
#if defined(__CUDA_ARCH__)
      using Atomic =
          std::conditional_t<sizeof(typename G::Word) == 8, unsigned long long, unsigned int>;
      atomicOr(reinterpret_cast<Atomic*>(words + i), static_cast<Atomic>(pattern.word[i]));
#else
      __atomic_fetch_or(words + i, pattern.word[i], __ATOMIC_RELAXED);
#endif
    }
  }

  std::byte* data_;
  Layout layout_;
};

static_assert(std::is_trivially_copyable_v<FilterRef>);

}  // namespace bulkbloom
