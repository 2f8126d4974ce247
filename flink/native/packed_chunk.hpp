// A chunk of a part's bits as the Flink operator stores it in keyed state (docs/FORMAT.md, "Flink
// keyed state"): the bits themselves, or, when shorter, the packed form: the tag byte 1, then for
// each set bit in order the number of clear bits since the previous set bit (since the chunk's
// start for the first), as an unsigned LEB128 varint. Bit b of the chunk is bit b % 8 of byte
// b / 8. A window's bits are mostly clear until its generations fill (about 1 % set in a 1 GiB
// window holding 10^7 keys of the 3.3e8 it is sized for): there the packed form is 9 % of the
// bits, where RocksDB's block compression left 20 %, and it is set in one pass straight into the
// restored window's memory instead of being decompressed, then copied twice on the Java heap.
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

namespace bulkbloom_jni {

static_assert(std::endian::native == std::endian::little,
              "bit b of a chunk is read as bit b % 64 of its 64-bit word b / 64");

inline constexpr std::uint8_t kPackedTag = 1;

namespace packed_detail {

inline std::uint64_t word_at(const std::byte* bits, std::size_t length, std::size_t at) {
  std::uint64_t word = 0;
  std::memcpy(&word, bits + at, std::min<std::size_t>(8, length - at));
  return word;
}

}  // namespace packed_detail

// The packed form of `bits` when it is shorter than the bits, else empty (store the bits).
inline std::vector<std::uint8_t> pack_chunk(std::span<const std::byte> bits) {
  std::uint64_t set = 0;
  for (std::size_t at = 0; at < bits.size(); at += 8) {
    set += static_cast<std::uint64_t>(
        std::popcount(packed_detail::word_at(bits.data(), bits.size(), at)));
  }
  // Each set bit takes at least one byte.
  if (1 + set >= bits.size()) return {};
  std::vector<std::uint8_t> out;
  out.reserve(static_cast<std::size_t>(1 + set + set / 8));
  out.push_back(kPackedTag);
  std::uint64_t next = 0;  // the bit after the previous set bit
  for (std::size_t at = 0; at < bits.size(); at += 8) {
    for (std::uint64_t word = packed_detail::word_at(bits.data(), bits.size(), at); word != 0;
         word &= word - 1) {
      const std::uint64_t bit = at * 8 + static_cast<std::uint64_t>(std::countr_zero(word));
      std::uint64_t gap = bit - next;
      while (gap >= 0x80) {
        out.push_back(static_cast<std::uint8_t>(gap | 0x80));
        gap >>= 7;
      }
      out.push_back(static_cast<std::uint8_t>(gap));
      next = bit + 1;
    }
    if (out.size() >= bits.size()) return {};
  }
  return out;
}

// Sets in `bits`, all zero, the bits of the packed chunk `packed` (tag included); throws
// std::invalid_argument, saying what is wrong with the chunk, for one that is not such a chunk of
// `bits.size()` bytes.
inline void unpack_chunk(std::span<const std::uint8_t> packed, std::span<std::byte> bits) {
  if (packed.empty() || packed[0] != kPackedTag) {
    throw std::invalid_argument(packed.empty()
                                    ? std::string("an empty chunk")
                                    : "a chunk of " + std::to_string(packed.size()) +
                                          " bytes tagged " + std::to_string(packed[0]) + ", not " +
                                          std::to_string(kPackedTag) + " (packed)");
  }
  const std::uint64_t end_bit = static_cast<std::uint64_t>(bits.size()) * 8;
  auto* out = reinterpret_cast<std::uint8_t*>(bits.data());
  const std::uint8_t* p = packed.data() + 1;
  const std::uint8_t* const end = packed.data() + packed.size();
  std::uint64_t next = 0;
  while (p != end) {
    std::uint64_t gap = *p++;
    if (gap >= 0x80) {
      gap &= 0x7f;
      for (unsigned shift = 7;; shift += 7) {
        if (p == end || shift > 56) {
          throw std::invalid_argument("a packed chunk whose gap at byte " +
                                      std::to_string(p - packed.data()) + " is cut or too long");
        }
        const std::uint64_t b = *p++;
        gap |= (b & 0x7f) << shift;
        if (b < 0x80) break;
      }
    }
    if (gap >= end_bit - next) {
      throw std::invalid_argument("a packed chunk that sets bit " + std::to_string(next + gap) +
                                  " of " + std::to_string(end_bit));
    }
    next += gap;
    out[next >> 3] |= static_cast<std::uint8_t>(1u << (next & 7));
    ++next;
  }
}

}  // namespace bulkbloom_jni
