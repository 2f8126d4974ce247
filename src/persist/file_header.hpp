// The header codec of every bulkbloom file kind (filter, grown filter, window; docs/FORMAT.md):
// each header starts with an 8-byte magic, a u32 version at 8 and a u32 header_bytes at 12,
// ends with the XXH3-64 checksum of the bytes before it, and holds little-endian fields at fixed
// offsets in between. One codec writes that frame and checks it in the order "Reading" specifies,
// so the kinds cannot drift apart; each kind adds only its own fields and their checks.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <optional>
#include <string>
#include <type_traits>

#include "bulkbloom/format.hpp"

namespace bulkbloom::detail {

/// The magic bytes of the three file kinds.
inline constexpr std::byte kFilterMagic[8] = {std::byte{0x89}, std::byte{'B'}, std::byte{'B'},
                                              std::byte{'L'},  std::byte{'O'}, std::byte{'O'},
                                              std::byte{'M'},  std::byte{'\n'}};
inline constexpr std::byte kGrownMagic[8] = {std::byte{0x89}, std::byte{'B'}, std::byte{'B'},
                                             std::byte{'G'},  std::byte{'R'}, std::byte{'O'},
                                             std::byte{'W'},  std::byte{'\n'}};
inline constexpr std::byte kWindowMagic[8] = {std::byte{0x89}, std::byte{'B'}, std::byte{'B'},
                                              std::byte{'W'},  std::byte{'I'}, std::byte{'N'},
                                              std::byte{'D'},  std::byte{'\n'}};

/// A field of type T (little-endian, as the host is) at byte `at` of a header.
template <typename T>
struct Field {
  std::size_t at;
};

/// Stores `value` at byte `at` of a header.
template <typename T>
void put(std::byte* header, std::size_t at, T value) {
  std::memcpy(header + at, &value, sizeof value);
}

/// Reads the value at byte `at` of a header.
template <typename T>
T get(const std::byte* header, std::size_t at) {
  T value;
  std::memcpy(&value, header + at, sizeof value);
  return value;
}

template <typename T>
void put(std::byte* header, Field<T> field, std::type_identity_t<T> value) {
  put<T>(header, field.at, value);
}

template <typename T>
T get(const std::byte* header, Field<T> field) {
  return get<T>(header, field.at);
}

/// XXH3-64 (seed 0) of the header bytes before its checksum field at `checksum_at`.
std::uint64_t header_checksum(const std::byte* header, std::size_t checksum_at);

/// Bytes [from, to) of a header that a version leaves zero.
struct Reserved {
  std::size_t from;
  std::size_t to;
};

/// One file kind's header frame.
struct HeaderCodec {
  const std::byte* magic;  ///< 8 bytes.
  std::uint32_t version;   ///< The newest version this bulkbloom writes and reads.
  std::uint32_t bytes;     ///< header_bytes; the header checksum is its last 8 bytes.
  const char* kind;        ///< Named when the magic is wrong: "bulkbloom filter".
  const char* version_of;  ///< Names the version in errors: "format", "window format".

  static constexpr Field<std::uint32_t> kVersion{8};
  static constexpr Field<std::uint32_t> kHeaderBytes{12};
  Field<std::uint64_t> checksum() const { return {bytes - 8u}; }

  /// Writes the magic, version and header_bytes into a zeroed header.
  void start(std::byte* header) const;
  /// Writes the header checksum, once every other field is in place.
  void seal(std::byte* header) const;

  /// Reading steps 1 to 5, in this order: the source holds at least a header (`total_bytes`),
  /// the magic, the version, the header checksum, header_bytes is this kind's. Throws
  /// FormatError naming `source` and the first failure. Returns the version.
  std::uint32_t check_frame(const std::byte* header, std::uint64_t total_bytes,
                            const std::string& source) const;
  /// Whether every byte of the `reserved` ranges is zero (the rest of reading step 5).
  bool reserved_are_zero(const std::byte* header, std::initializer_list<Reserved> reserved) const;
};

/// The FormatError "<source>: <problem>".
FormatError format_error(const std::string& source, const std::string& problem);

}  // namespace bulkbloom::detail
