// File format v1 (docs/FORMAT.md): header, caller metadata, zero padding, then the payload at a
// page-aligned offset exactly as it sits in memory, so that it can be mapped.
#include "bulkbloom/format.hpp"

#include <fcntl.h>

#include <algorithm>
#include <array>
#include <bit>
#include <string>
#include <utility>

#include "backend.hpp"
#include "file_io.hpp"
#include "filter_access.hpp"

static_assert(std::endian::native == std::endian::little,
              "the file format stores little-endian words as they sit in memory");

namespace bulkbloom {
namespace {

using detail::DataChecksum;
using detail::File;
using detail::get;
using detail::HostBits;
using detail::kPayloadAlignment;
using detail::put;
using detail::round_up;

constexpr std::byte kMagic[8] = {std::byte{0x89}, std::byte{'B'}, std::byte{'B'}, std::byte{'L'},
                                 std::byte{'O'},  std::byte{'O'}, std::byte{'M'}, std::byte{'\n'}};
constexpr std::uint64_t kHeaderBytes = 96;

// Field offsets inside the 96-byte header.
enum HeaderField : std::size_t {
  kVersionAt = 8,
  kHeaderBytesAt = 12,
  kShapeAt = 16,
  kHashAt = 17,
  kIndexAt = 18,
  kReserved8At = 19,
  kReserved32At = 20,
  kNumBlocksAt = 24,
  kSeedAt = 32,
  kKeysInsertedAt = 40,
  kMetadataBytesAt = 48,
  kPayloadOffsetAt = 56,
  kPayloadBytesAt = 64,
  kDataChecksumAt = 72,
  kReserved64At = 80,
  kHeaderChecksumAt = 88,
};

struct Header {
  FileInfo info;
  std::uint64_t payload_bytes = 0;
  std::uint64_t data_checksum = 0;
};

std::uint64_t header_checksum(const std::byte* header) {
  return detail::header_checksum(header, kHeaderChecksumAt);
}

using HeaderBytes = std::array<std::byte, kHeaderBytes>;

HeaderBytes encode_header(const Layout& layout, const FileState& state,
                          std::uint64_t payload_offset, std::uint64_t data_checksum) {
  HeaderBytes bytes{};
  std::byte* header = bytes.data();
  std::memcpy(header, kMagic, sizeof kMagic);
  put<std::uint32_t>(header, kVersionAt, kFormatVersion);
  put<std::uint32_t>(header, kHeaderBytesAt, kHeaderBytes);
  put<std::uint8_t>(header, kShapeAt, static_cast<std::uint8_t>(layout.shape));
  put<std::uint8_t>(header, kHashAt, static_cast<std::uint8_t>(layout.hash));
  put<std::uint8_t>(header, kIndexAt, static_cast<std::uint8_t>(layout.index));
  put<std::uint64_t>(header, kNumBlocksAt, layout.num_blocks);
  put<std::uint64_t>(header, kSeedAt, layout.seed);
  put<std::uint64_t>(header, kKeysInsertedAt, state.keys_inserted);
  put<std::uint64_t>(header, kMetadataBytesAt, state.metadata.size());
  put<std::uint64_t>(header, kPayloadOffsetAt, payload_offset);
  put<std::uint64_t>(header, kPayloadBytesAt, layout.size_bytes());
  put<std::uint64_t>(header, kDataChecksumAt, data_checksum);
  put<std::uint64_t>(header, kHeaderChecksumAt, header_checksum(header));
  return bytes;
}

// Validates everything the header alone can tell, against the source's total size, before any
// size in it is trusted for an allocation or a read.
Header decode_header(const std::byte* header, std::uint64_t total_bytes,
                     const std::string& source) {
  auto fail = [&](const std::string& problem) -> FormatError {
    return FormatError(source + ": " + problem);
  };
  if (total_bytes < kHeaderBytes) {
    throw fail("truncated: " + std::to_string(total_bytes) + " bytes, but the header alone is " +
               std::to_string(kHeaderBytes));
  }
  if (std::memcmp(header, kMagic, sizeof kMagic) != 0) {
    throw fail("not a bulkbloom filter (bad magic bytes)");
  }
  Header h;
  h.info.version = get<std::uint32_t>(header, kVersionAt);
  if (h.info.version == 0 || h.info.version > kFormatVersion) {
    throw fail("format version " + std::to_string(h.info.version) +
               " is not supported: this bulkbloom reads version " + std::to_string(kFormatVersion));
  }
  if (get<std::uint64_t>(header, kHeaderChecksumAt) != header_checksum(header)) {
    throw fail("header checksum mismatch: the header is corrupt");
  }
  if (get<std::uint32_t>(header, kHeaderBytesAt) != kHeaderBytes ||
      get<std::uint8_t>(header, kReserved8At) != 0 ||
      get<std::uint32_t>(header, kReserved32At) != 0 ||
      get<std::uint64_t>(header, kReserved64At) != 0) {
    throw fail("header fields reserved in version 1 are not zero");
  }
  Layout& layout = h.info.layout;
  layout.shape = static_cast<Shape>(get<std::uint8_t>(header, kShapeAt));
  layout.hash = static_cast<KeyHash>(get<std::uint8_t>(header, kHashAt));
  layout.index = static_cast<BlockIndex>(get<std::uint8_t>(header, kIndexAt));
  layout.num_blocks = get<std::uint64_t>(header, kNumBlocksAt);
  layout.seed = get<std::uint64_t>(header, kSeedAt);
  try {
    layout.validate();
  } catch (const std::invalid_argument& e) {
    throw fail(std::string("bad layout: ") + e.what());
  }
  h.info.keys_inserted = get<std::uint64_t>(header, kKeysInsertedAt);
  h.info.metadata_bytes = get<std::uint64_t>(header, kMetadataBytesAt);
  h.info.payload_offset = get<std::uint64_t>(header, kPayloadOffsetAt);
  h.info.file_bytes = total_bytes;
  h.payload_bytes = get<std::uint64_t>(header, kPayloadBytesAt);
  h.data_checksum = get<std::uint64_t>(header, kDataChecksumAt);
  if (h.payload_bytes != layout.size_bytes()) {
    throw fail("header and payload disagree: the layout needs " +
               std::to_string(layout.size_bytes()) + " payload bytes, the header says " +
               std::to_string(h.payload_bytes));
  }
  if (h.info.metadata_bytes <= (std::uint64_t{1} << 62) &&
      kHeaderBytes + h.info.metadata_bytes > total_bytes &&
      h.info.payload_offset == round_up(kHeaderBytes + h.info.metadata_bytes, kPayloadAlignment)) {
    throw fail("truncated: " + std::to_string(total_bytes) + " bytes, but the header and its " +
               std::to_string(h.info.metadata_bytes) + " metadata bytes need more");
  }
  if (h.info.metadata_bytes > total_bytes ||
      h.info.payload_offset != round_up(kHeaderBytes + h.info.metadata_bytes, kPayloadAlignment)) {
    throw fail("bad payload offset " + std::to_string(h.info.payload_offset) + " for " +
               std::to_string(h.info.metadata_bytes) + " metadata bytes");
  }
  const std::uint64_t expected = h.info.payload_offset + h.payload_bytes;
  if (total_bytes < expected) {
    throw fail("truncated: " + std::to_string(total_bytes) + " bytes, the header describes " +
               std::to_string(expected));
  }
  if (total_bytes > expected) {
    throw fail(std::to_string(total_bytes - expected) + " unexpected bytes after the payload");
  }
  return h;
}

void check_data_checksum(const Header& h, std::uint64_t actual, const std::string& source) {
  if (actual != h.data_checksum) {
    throw FormatError(source +
                      ": payload checksum mismatch: the filter bits or metadata are "
                      "corrupt");
  }
}

// Header and metadata plus the zero padding up to the payload, ready to write.
std::vector<std::byte> file_prefix(const Layout& layout, const FileState& state,
                                   std::span<const std::byte> payload) {
  DataChecksum checksum;
  checksum.update(state.metadata.data(), state.metadata.size());
  checksum.update(payload.data(), payload.size());
  const std::uint64_t payload_offset =
      round_up(kHeaderBytes + state.metadata.size(), kPayloadAlignment);
  std::vector<std::byte> prefix(payload_offset);
  const HeaderBytes header = encode_header(layout, state, payload_offset, checksum.digest());
  std::copy(header.begin(), header.end(), prefix.begin());
  std::copy(state.metadata.begin(), state.metadata.end(), prefix.begin() + kHeaderBytes);
  return prefix;
}

// Opens `path`, reads its header and metadata.
struct OpenedFile {
  File file;
  Header header;
  std::vector<std::byte> metadata;
};

OpenedFile open_filter_file(const std::filesystem::path& path) {
  OpenedFile opened{File(path, O_RDONLY), {}, {}};
  const std::uint64_t size = opened.file.regular_file_size();
  std::byte header[kHeaderBytes] = {};
  opened.file.read_exactly(header, std::min(size, kHeaderBytes), 0);
  opened.header = decode_header(header, size, path.string());
  opened.metadata.resize(opened.header.info.metadata_bytes);
  opened.file.read_exactly(opened.metadata.data(), opened.metadata.size(), kHeaderBytes);
  return opened;
}

void fill_state(FileState* state, const Header& header, std::vector<std::byte> metadata) {
  if (state == nullptr) return;
  state->keys_inserted = header.info.keys_inserted;
  state->metadata = std::move(metadata);
}

constexpr const char* kCheckpointFile = "checkpoint.bbf";

}  // namespace

namespace detail {

std::uint64_t filter_image_bytes(const Layout& layout, std::uint64_t metadata_bytes) {
  return round_up(kHeaderBytes + metadata_bytes, kPayloadAlignment) + layout.size_bytes();
}

void write_filter_image(File& out, const Filter& filter, const FileState& state) {
  const HostBits bits(filter);
  out.write_all(file_prefix(filter.layout(), state, bits.bytes()));
  out.write_all(bits.bytes());
}

Filter read_filter_image(const File& file, std::uint64_t offset, std::uint64_t bytes,
                         const std::string& source, FileState* state, const Options& options) {
  std::byte header_bytes[kHeaderBytes] = {};
  file.read_exactly(header_bytes, std::min(bytes, kHeaderBytes), offset);
  const Header header = decode_header(header_bytes, bytes, source);
  std::vector<std::byte> metadata(header.info.metadata_bytes);
  file.read_exactly(metadata.data(), metadata.size(), offset + kHeaderBytes);
  Filter filter(header.info.layout, options);
  DataChecksum checksum;
  checksum.update(metadata);
  detail::read_filter_bits(file, offset + header.info.payload_offset, filter, checksum);
  check_data_checksum(header, checksum.digest(), source);
  fill_state(state, header, std::move(metadata));
  return filter;
}

}  // namespace detail

void save(const Filter& filter, const std::filesystem::path& path, const FileState& state) {
  detail::write_file_atomically(path,
                                [&](File& out) { detail::write_filter_image(out, filter, state); });
}

Filter load(const std::filesystem::path& path, FileState* state, const Options& options) {
  const File file(path, O_RDONLY);
  return detail::read_filter_image(file, 0, file.regular_file_size(), path.string(), state,
                                   options);
}

FileInfo read_info(const std::filesystem::path& path) {
  return open_filter_file(path).header.info;
}

Filter map(const std::filesystem::path& path, FileState* state, const MapOptions& options) {
  OpenedFile opened = open_filter_file(path);
  const Header& header = opened.header;
  auto engine = detail::make_engine_over_file(header.info.layout, options.options, opened.file.fd(),
                                              header.info.payload_offset);
  if (options.verify) {
    DataChecksum checksum;
    checksum.update(opened.metadata.data(), opened.metadata.size());
    checksum.update(engine->host_bytes(), header.payload_bytes);
    check_data_checksum(header, checksum.digest(), path.string());
  }
  Filter filter = detail::FilterAccess::make(header.info.layout, std::move(engine));
  fill_state(state, header, std::move(opened.metadata));
  return filter;
}

std::vector<std::byte> serialize(const Filter& filter, const FileState& state) {
  const HostBits bits(filter);
  std::vector<std::byte> image = file_prefix(filter.layout(), state, bits.bytes());
  image.insert(image.end(), bits.bytes().begin(), bits.bytes().end());
  return image;
}

Filter deserialize(std::span<const std::byte> image, FileState* state, const Options& options) {
  const std::string source = "filter image";
  std::byte header_bytes[kHeaderBytes] = {};
  std::copy_n(image.begin(), std::min<std::size_t>(image.size(), kHeaderBytes), header_bytes);
  const Header header = decode_header(header_bytes, image.size(), source);
  const auto metadata = image.subspan(kHeaderBytes, header.info.metadata_bytes);
  const auto payload = image.subspan(header.info.payload_offset, header.payload_bytes);
  DataChecksum checksum;
  checksum.update(metadata.data(), metadata.size());
  checksum.update(payload.data(), payload.size());
  check_data_checksum(header, checksum.digest(), source);
  Filter filter(header.info.layout, options);
  filter.copy_bytes_from(payload);
  fill_state(state, header, std::vector<std::byte>(metadata.begin(), metadata.end()));
  return filter;
}

void save_checkpoint(const std::filesystem::path& dir, const Filter& filter,
                     const FileState& state) {
  detail::prepare_checkpoint_directory(dir, kCheckpointFile);
  save(filter, dir / kCheckpointFile, state);
}

std::optional<Checkpoint> load_checkpoint(const std::filesystem::path& dir,
                                          const Options& options) {
  const auto path = dir / kCheckpointFile;
  // Only a checkpoint known to be absent is "none": a directory that cannot be searched is an
  // error, or a resumed run would silently start over.
  std::error_code error;
  const bool exists = std::filesystem::exists(path, error);
  if (error)
    throw IoError("cannot look for a checkpoint at " + path.string() + ": " + error.message());
  if (!exists) return std::nullopt;
  FileState state;
  Filter filter = load(path, &state, options);
  return Checkpoint{std::move(filter), std::move(state.metadata), state.keys_inserted};
}

}  // namespace bulkbloom
