// Parquet split-block Bloom filters: a Thrift compact-protocol BloomFilterHeader followed by the
// bitset. An sb256 / xxh64 / seed-0 filter's bytes are that bitset exactly.
#include <cstring>
#include <limits>
#include <string>

#include "bulkbloom/format.hpp"

namespace bulkbloom {
namespace {

// Thrift compact protocol type codes used in field headers.
enum CompactType : std::uint8_t {
  kBoolTrue = 1,
  kBoolFalse = 2,
  kByte = 3,
  kI16 = 4,
  kI32 = 5,
  kI64 = 6,
  kDouble = 7,
  kBinary = 8,
  kList = 9,
  kSet = 10,
  kMap = 11,
  kStruct = 12,
};

// BloomFilterHeader { 1: i32 numBytes; 2: BloomFilterAlgorithm algorithm; 3: BloomFilterHash
// hash; 4: BloomFilterCompression compression }. Each of the last three is a union whose field 1
// (an empty struct) is the only member Parquet defines: SPLIT_BLOCK, XXHASH, UNCOMPRESSED.
constexpr int kNumBytesField = 1;
constexpr int kAlgorithmField = 2;
constexpr int kHashField = 3;
constexpr int kCompressionField = 4;

void append_varint(std::vector<std::byte>& out, std::uint64_t v) {
  while (v >= 0x80) {
    out.push_back(std::byte(0x80 | (v & 0x7f)));
    v >>= 7;
  }
  out.push_back(std::byte(v));
}

// A bounds-checked reader of the compact protocol, enough to read BloomFilterHeader and skip any
// field a newer writer adds.
class CompactReader {
 public:
  explicit CompactReader(std::span<const std::byte> bytes) : bytes_(bytes) {}

  std::size_t position() const { return pos_; }

  std::uint8_t byte() {
    if (pos_ >= bytes_.size()) fail("the header is truncated");
    return std::to_integer<std::uint8_t>(bytes_[pos_++]);
  }

  std::uint64_t varint() {
    std::uint64_t v = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      const std::uint8_t b = byte();
      v |= std::uint64_t(b & 0x7f) << shift;
      if ((b & 0x80) == 0) return v;
    }
    fail("a varint is longer than 10 bytes");
  }

  std::int64_t zigzag() {
    const std::uint64_t v = varint();
    return static_cast<std::int64_t>(v >> 1) ^ -static_cast<std::int64_t>(v & 1);
  }

  // Reads a field header; returns false at the struct's stop byte. `last_id` tracks deltas.
  bool field(int& last_id, std::uint8_t& type) {
    const std::uint8_t header = byte();
    if (header == 0) return false;
    type = header & 0x0f;
    const int delta = header >> 4;
    last_id = delta != 0 ? last_id + delta : static_cast<int>(zigzag());
    return true;
  }

  // Skips a value. A bool field keeps its value in the field header, but a bool element of a
  // list, set or map takes one byte; every element consuming a byte bounds the loops below by
  // the input's length.
  void skip(std::uint8_t type, int depth = 0, bool element = false) {
    if (depth > 16) fail("nesting deeper than 16 levels");
    switch (type) {
      case kBoolTrue:
      case kBoolFalse:
        if (element) byte();
        return;
      case kByte:
        byte();
        return;
      case kI16:
      case kI32:
      case kI64:
        varint();
        return;
      case kDouble:
        advance(8);
        return;
      case kBinary:
        advance(varint());
        return;
      case kList:
      case kSet: {
        const std::uint8_t header = byte();
        std::uint64_t size = header >> 4;
        if (size == 15) size = varint();
        for (std::uint64_t i = 0; i < size; ++i) skip(header & 0x0f, depth + 1, true);
        return;
      }
      case kMap: {
        const std::uint64_t size = varint();
        if (size == 0) return;
        const std::uint8_t kinds = byte();
        for (std::uint64_t i = 0; i < size; ++i) {
          skip(kinds >> 4, depth + 1, true);
          skip(kinds & 0x0f, depth + 1, true);
        }
        return;
      }
      case kStruct: {
        int id = 0;
        std::uint8_t inner = 0;
        while (field(id, inner)) skip(inner, depth + 1);
        return;
      }
      default:
        fail("unknown Thrift type " + std::to_string(type));
    }
  }

  // Reads a union and returns the id of its (single) member; skips the member's value.
  int union_member() {
    int id = 0, member = 0;
    std::uint8_t type = 0;
    while (field(id, type)) {
      member = id;
      skip(type, 1);
    }
    return member;
  }

  [[noreturn]] static void fail(const std::string& problem) {
    throw FormatError("Parquet Bloom filter: " + problem);
  }

 private:
  void advance(std::uint64_t n) {
    if (n > bytes_.size() - pos_) fail("the header is truncated");
    pos_ += static_cast<std::size_t>(n);
  }

  std::span<const std::byte> bytes_;
  std::size_t pos_ = 0;
};

}  // namespace

std::vector<std::byte> to_parquet(const Filter& filter) {
  const Layout& layout = filter.layout();
  // Parquet readers place every key with high32: a full64 filter's bits exported as they are would
  // answer "absent" for some of its keys there.
  if (layout.shape != Shape::sb256 || layout.hash != KeyHash::xxh64 || layout.seed != 0 ||
      layout.index != BlockIndex::high32) {
    throw std::invalid_argument(
        "Parquet Bloom filters are sb256 with xxh64, seed 0 and block index high32; this "
        "filter is " +
        layout.describe());
  }
  if (layout.size_bytes() > std::uint64_t(std::numeric_limits<std::int32_t>::max())) {
    throw std::invalid_argument("Parquet Bloom filters hold at most 2^31 - 1 bytes; this one has " +
                                std::to_string(layout.size_bytes()));
  }
  std::vector<std::byte> out;
  const auto num_bytes = static_cast<std::int64_t>(layout.size_bytes());
  out.push_back(std::byte((kNumBytesField << 4) | kI32));
  append_varint(out, static_cast<std::uint64_t>(num_bytes) << 1);  // zigzag of a positive value
  for (int unused = 0; unused < 3; ++unused) {
    // Fields 2, 3, 4 in turn, each a union whose member 1 is an empty struct.
    out.push_back(std::byte((1 << 4) | kStruct));
    out.push_back(std::byte((1 << 4) | kStruct));
    out.push_back(std::byte{0});  // end of the empty member struct
    out.push_back(std::byte{0});  // end of the union
  }
  out.push_back(std::byte{0});  // end of BloomFilterHeader
  const std::size_t header_size = out.size();
  out.resize(header_size + layout.size_bytes());
  filter.copy_bytes_to(std::span(out).subspan(header_size));
  return out;
}

Filter from_parquet(std::span<const std::byte> bytes, const Options& options) {
  CompactReader reader(bytes);
  std::int64_t num_bytes = -1;
  int algorithm = 0, hash = 0, compression = 0;
  int id = 0;
  std::uint8_t type = 0;
  while (reader.field(id, type)) {
    if (id == kNumBytesField && type == kI32) {
      num_bytes = reader.zigzag();
    } else if (id == kAlgorithmField && type == kStruct) {
      algorithm = reader.union_member();
    } else if (id == kHashField && type == kStruct) {
      hash = reader.union_member();
    } else if (id == kCompressionField && type == kStruct) {
      compression = reader.union_member();
    } else {
      reader.skip(type);
    }
  }
  if (algorithm != 1) CompactReader::fail("the algorithm is not SPLIT_BLOCK");
  if (hash != 1) CompactReader::fail("the hash is not XXHASH");
  if (compression != 1) CompactReader::fail("the bitset is compressed");
  if (num_bytes <= 0 || num_bytes % 32 != 0) {
    CompactReader::fail("numBytes " + std::to_string(num_bytes) +
                        " is not a positive multiple of the 32-byte block");
  }
  const std::size_t bitset_at = reader.position();
  if (bytes.size() - bitset_at != static_cast<std::uint64_t>(num_bytes)) {
    CompactReader::fail("the header announces " + std::to_string(num_bytes) + " bitset bytes but " +
                        std::to_string(bytes.size() - bitset_at) + " follow it");
  }
  Filter filter(Layout{Shape::sb256, static_cast<std::uint64_t>(num_bytes) / 32}, options);
  filter.copy_bytes_from(bytes.subspan(bitset_at));
  return filter;
}

}  // namespace bulkbloom
