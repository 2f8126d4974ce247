// One key's bits set with atomic ORs, for threads that write the same blocks at once
// (CpuKernels::insert_atomic). Shared by the scalar reference and every Highway target, so that
// all of them write the same way.
#pragma once

#include <atomic>
#include <cstdint>
#include <cstring>

namespace bulkbloom::detail {

/// ORs the `kBlockBytes` bytes at `pattern` into the block at `block` (8-byte aligned), one 64-bit
/// word at a time with relaxed atomics. A block of 32-bit words is OR'd in word pairs: OR acts
/// on each byte alone, so the bytes are those of a word-by-word OR. A word that holds its bits
/// already is only read: into a loaded filter most of a key's words change nothing, and a read
/// leaves the cache line shared where the atomic would take it from the other cores. Relaxed order
/// suffices: the threads share no other data through these words, and the pool's join publishes
/// the bits to the caller.
template <int kBlockBytes>
inline void or_block_atomically(void* block, const void* pattern) {
  static_assert(kBlockBytes % sizeof(std::uint64_t) == 0, "blocks are whole 64-bit words");
  constexpr int kWords = kBlockBytes / static_cast<int>(sizeof(std::uint64_t));
  std::uint64_t bits[kWords];
  std::memcpy(bits, pattern, kBlockBytes);
  auto* words = static_cast<std::uint64_t*>(block);
  for (int i = 0; i < kWords; ++i) {
    std::atomic_ref<std::uint64_t> word(words[i]);
    if ((word.load(std::memory_order_relaxed) & bits[i]) != bits[i]) {
      word.fetch_or(bits[i], std::memory_order_relaxed);
    }
  }
}

}  // namespace bulkbloom::detail
