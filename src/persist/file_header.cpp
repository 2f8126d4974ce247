#include "persist/file_header.hpp"

#include <algorithm>
#include <bit>

#define XXH_INLINE_ALL
#include <xxhash.h>

static_assert(std::endian::native == std::endian::little,
              "the file formats store little-endian words as they sit in memory");

namespace bulkbloom::detail {

std::uint64_t header_checksum(const std::byte* header, std::size_t checksum_at) {
  return XXH3_64bits(header, checksum_at);
}

FormatError format_error(const std::string& source, const std::string& problem) {
  return FormatError(source + ": " + problem);
}

namespace {

// What a file whose magic is not the expected one holds, when it is another bulkbloom kind and
// which call reads it; empty otherwise.
std::string other_kind(const std::byte* header) {
  if (std::memcmp(header, kFilterMagic, 8) == 0) {
    return ": it is a bulkbloom filter file, which load() reads";
  }
  if (std::memcmp(header, kGrownMagic, 8) == 0) {
    return ": it is a bulkbloom grown filter file, which GrownFilter::load() reads";
  }
  if (std::memcmp(header, kWindowMagic, 8) == 0) {
    return ": it is a bulkbloom window file, which load_window() reads";
  }
  return "";
}

}  // namespace

void HeaderCodec::start(std::byte* header) const {
  std::memcpy(header, magic, 8);
  put(header, kVersion, version);
  put(header, kHeaderBytes, bytes);
}

void HeaderCodec::seal(std::byte* header) const {
  put(header, checksum(), header_checksum(header, checksum().at));
}

std::uint32_t HeaderCodec::check_frame(const std::byte* header, std::uint64_t total_bytes,
                                       const std::string& source) const {
  if (total_bytes < bytes) {
    throw format_error(source, "truncated: " + std::to_string(total_bytes) +
                                   " bytes, but the header alone is " + std::to_string(bytes));
  }
  if (std::memcmp(header, magic, 8) != 0) {
    throw format_error(source,
                       std::string("not a ") + kind + " (bad magic bytes)" + other_kind(header));
  }
  const std::uint32_t found = get(header, kVersion);
  if (found == 0 || found > version) {
    throw format_error(source, std::string(version_of) + " version " + std::to_string(found) +
                                   " is not supported: this bulkbloom reads version " +
                                   std::to_string(version));
  }
  if (get(header, checksum()) != header_checksum(header, checksum().at)) {
    throw format_error(source, "header checksum mismatch: the header is corrupt");
  }
  if (get(header, kHeaderBytes) != bytes) {
    throw format_error(source, "header_bytes " + std::to_string(get(header, kHeaderBytes)) +
                                   " is not the " + std::to_string(bytes) + " this " + kind +
                                   " header has");
  }
  return found;
}

bool HeaderCodec::reserved_are_zero(const std::byte* header,
                                    std::initializer_list<Reserved> reserved) const {
  return std::all_of(reserved.begin(), reserved.end(), [&](const Reserved& r) {
    return std::all_of(header + r.from, header + r.to,
                       [](std::byte b) { return b == std::byte{0}; });
  });
}

}  // namespace bulkbloom::detail
