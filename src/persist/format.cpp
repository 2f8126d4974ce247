// File format v1 (docs/FORMAT.md): header, caller metadata, zero padding, then the payload at a
// page-aligned offset exactly as it sits in memory, so that it can be mapped.
#include "bulkbloom/format.hpp"

#include <fcntl.h>

#include <algorithm>
#include <array>
#include <stdexcept>
#include <string>
#include <utility>

#include "bulkbloom/shard.hpp"

#include "core/filter_access.hpp"
#include "persist/file_io.hpp"
#include "persist/shard_file.hpp"
#include "registry/backend.hpp"
#include "shard/shard_math.hpp"

namespace bulkbloom {
namespace {

using detail::DataChecksum;
using detail::Field;
using detail::File;
using detail::get;
using detail::HostBits;
using detail::kPayloadAlignment;
using detail::put;
using detail::round_up;

constexpr std::uint64_t kHeaderBytes = 96;
constexpr detail::HeaderCodec kCodec{detail::kFilterMagic, kFormatVersion, kHeaderBytes,
                                     "bulkbloom filter", "format"};

// The fields after the frame (magic, version, header_bytes) of the 96-byte header; the header
// checksum is its last 8 bytes.
constexpr Field<std::uint8_t> kShape{16};
constexpr Field<std::uint8_t> kHash{17};
constexpr Field<std::uint8_t> kIndex{18};
constexpr detail::Reserved kReserved19{19, 20};
constexpr Field<std::uint32_t> kNumShards{20};
constexpr Field<std::uint64_t> kNumBlocks{24};
constexpr Field<std::uint64_t> kSeed{32};
constexpr Field<std::uint64_t> kKeysInserted{40};
constexpr Field<std::uint64_t> kMetadataBytes{48};
constexpr Field<std::uint64_t> kPayloadOffset{56};
constexpr Field<std::uint64_t> kPayloadBytes{64};
constexpr Field<std::uint64_t> kDataChecksum{72};
constexpr Field<std::uint32_t> kShardBegin{80};
constexpr Field<std::uint32_t> kShardEnd{84};

struct Header {
  FileInfo info;
  std::uint64_t payload_bytes = 0;
  std::uint64_t data_checksum = 0;
};

using HeaderBytes = std::array<std::byte, kHeaderBytes>;

// `num_shards` 0: a whole filter; else the payload is shard `shard` of that many.
HeaderBytes encode_header(const Layout& layout, std::uint32_t shard, std::uint32_t num_shards,
                          std::uint64_t payload_bytes, const FileState& state,
                          std::uint64_t payload_offset, std::uint64_t data_checksum) {
  HeaderBytes bytes{};
  std::byte* header = bytes.data();
  kCodec.start(header);
  put(header, kShape, static_cast<std::uint8_t>(layout.shape));
  put(header, kHash, static_cast<std::uint8_t>(layout.hash));
  put(header, kIndex, static_cast<std::uint8_t>(layout.index));
  if (num_shards != 0) {
    const BlockSpan blocks = shard_blocks(layout.num_blocks, shard, num_shards);
    put(header, kNumShards, num_shards);
    put(header, kShardBegin, static_cast<std::uint32_t>(blocks.begin));
    put(header, kShardEnd, static_cast<std::uint32_t>(blocks.end));
  }
  put(header, kNumBlocks, layout.num_blocks);
  put(header, kSeed, layout.seed);
  put(header, kKeysInserted, state.keys_inserted);
  put(header, kMetadataBytes, state.metadata.size());
  put(header, kPayloadOffset, payload_offset);
  put(header, kPayloadBytes, payload_bytes);
  put(header, kDataChecksum, data_checksum);
  kCodec.seal(header);
  return bytes;
}

// Reads the shard fields into `info` (all zero: a whole filter) and returns how many blocks the
// payload holds. The block range must be exactly that of the recorded shard of the recorded count.
template <typename Fail>
std::uint64_t decode_shard(const std::byte* header, FileInfo& info, const Fail& fail) {
  const std::uint64_t num_blocks = info.layout.num_blocks;
  info.num_shards = get(header, kNumShards);
  const BlockSpan recorded{get(header, kShardBegin), get(header, kShardEnd)};
  if (info.num_shards == 0) {
    if (recorded.begin != 0 || recorded.end != 0) {
      throw fail("a whole filter's header (num_shards 0) has a shard block range [" +
                 std::to_string(recorded.begin) + ", " + std::to_string(recorded.end) +
                 "); those fields are reserved (0) in whole-filter files");
    }
    return num_blocks;
  }
  if (info.num_shards > num_blocks || recorded.begin >= num_blocks) {
    throw fail("bad shard: " + std::to_string(info.num_shards) + " shards, first block " +
               std::to_string(recorded.begin) + ", for " + std::to_string(num_blocks) + " blocks");
  }
  info.shard = shard_of_block(recorded.begin, num_blocks, info.num_shards);
  const BlockSpan expected = shard_blocks(num_blocks, info.shard, info.num_shards);
  if (!(recorded == expected)) {
    throw fail("bad shard block range [" + std::to_string(recorded.begin) + ", " +
               std::to_string(recorded.end) + "): shard " + std::to_string(info.shard) + " of " +
               std::to_string(info.num_shards) + " over " + std::to_string(num_blocks) +
               " blocks is [" + std::to_string(expected.begin) + ", " +
               std::to_string(expected.end) + ")");
  }
  return expected.size();
}

// Validates everything the header alone can tell, against the source's total size, before any
// size in it is trusted for an allocation or a read.
Header decode_header(const std::byte* header, std::uint64_t total_bytes,
                     const std::string& source) {
  auto fail = [&](const std::string& problem) { return detail::format_error(source, problem); };
  Header h;
  h.info.version = kCodec.check_frame(header, total_bytes, source);
  if (!kCodec.reserved_are_zero(header, {kReserved19})) {
    throw fail("header fields reserved in version 1 are not zero");
  }
  Layout& layout = h.info.layout;
  layout.shape = static_cast<Shape>(get(header, kShape));
  layout.hash = static_cast<KeyHash>(get(header, kHash));
  layout.index = static_cast<BlockIndex>(get(header, kIndex));
  layout.num_blocks = get(header, kNumBlocks);
  layout.seed = get(header, kSeed);
  try {
    layout.validate();
  } catch (const std::invalid_argument& e) {
    throw fail(std::string("bad layout: ") + e.what());
  }
  h.info.keys_inserted = get(header, kKeysInserted);
  h.info.metadata_bytes = get(header, kMetadataBytes);
  h.info.payload_offset = get(header, kPayloadOffset);
  h.info.file_bytes = total_bytes;
  h.payload_bytes = get(header, kPayloadBytes);
  h.data_checksum = get(header, kDataChecksum);
  const std::uint64_t payload_blocks = decode_shard(header, h.info, fail);
  const std::uint64_t needed =
      payload_blocks * static_cast<std::uint64_t>(block_bytes(layout.shape));
  if (h.payload_bytes != needed) {
    throw fail("header and payload disagree: " + std::to_string(payload_blocks) +
               " blocks of the layout need " + std::to_string(needed) +
               " payload bytes, the header says " + std::to_string(h.payload_bytes));
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
// `num_shards` 0: a whole filter; else the payload is shard `shard` of that many.
std::vector<std::byte> file_prefix(const Layout& layout, std::uint32_t shard,
                                   std::uint32_t num_shards, const FileState& state,
                                   std::span<const std::byte> payload) {
  DataChecksum checksum;
  checksum.update(state.metadata.data(), state.metadata.size());
  checksum.update(payload.data(), payload.size());
  const std::uint64_t payload_offset =
      round_up(kHeaderBytes + state.metadata.size(), kPayloadAlignment);
  std::vector<std::byte> prefix(payload_offset);
  const HeaderBytes header = encode_header(layout, shard, num_shards, payload.size(), state,
                                           payload_offset, checksum.digest());
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

// How a reader takes a file's payload: as a whole filter, or as a shard's bits.
enum class ReadAs : std::uint8_t { whole_filter, shard };

// The layout of the filter that a file's payload is read into: the file's own layout for a whole
// filter (a shard's file holds one only as shard 0 of 1), the shard's local layout for a shard.
Layout payload_layout(const Header& header, ReadAs read_as, const std::string& source) {
  const FileInfo& info = header.info;
  if (read_as == ReadAs::shard) {
    return detail::local_layout(
        info.layout,
        header.payload_bytes / static_cast<std::uint64_t>(block_bytes(info.layout.shape)));
  }
  if (info.num_shards > 1) {
    throw FormatError(source + ": holds shard " + std::to_string(info.shard) + " of " +
                      std::to_string(info.num_shards) + " of " + info.layout.describe() +
                      ", not a whole filter; read it as a shard (load_shard, map_shard)");
  }
  return info.layout;
}

// Writes the file image of `bits` with the header of `layout`; `num_shards` 0: a whole filter,
// else the bits are shard `shard` of that many.
void write_image(File& out, const Filter& bits, const Layout& layout, std::uint32_t shard,
                 std::uint32_t num_shards, const FileState& state) {
  const HostBits host(bits);
  out.write_all(file_prefix(layout, shard, num_shards, state, host.bytes()));
  out.write_all(host.bytes());
}

// The bytes write_image() writes, in memory.
std::vector<std::byte> image_bytes(const Filter& bits, const Layout& layout, std::uint32_t shard,
                                   std::uint32_t num_shards, const FileState& state) {
  const HostBits host(bits);
  std::vector<std::byte> image = file_prefix(layout, shard, num_shards, state, host.bytes());
  image.insert(image.end(), host.bytes().begin(), host.bytes().end());
  return image;
}

// Where a file's payload belongs (a whole filter is shard 0 of 1), into `place` if not null.
void fill_place(detail::PayloadPlace* place, const FileInfo& info) {
  if (place == nullptr) return;
  *place = {info.layout, info.shard, std::max<std::uint32_t>(info.num_shards, 1)};
}

// Reads the image of `bytes` bytes at `offset` of `file`, fully verified.
Filter read_image(const File& file, std::uint64_t offset, std::uint64_t bytes,
                  const std::string& source, FileState* state, const Options& options,
                  ReadAs read_as, detail::PayloadPlace* place) {
  std::byte header_bytes[kHeaderBytes] = {};
  file.read_exactly(header_bytes, std::min(bytes, kHeaderBytes), offset);
  const Header header = decode_header(header_bytes, bytes, source);
  std::vector<std::byte> metadata(header.info.metadata_bytes);
  file.read_exactly(metadata.data(), metadata.size(), offset + kHeaderBytes);
  Filter filter(payload_layout(header, read_as, source), options);
  DataChecksum checksum;
  checksum.update(metadata);
  detail::read_filter_bits(file, offset + header.info.payload_offset, filter, checksum);
  check_data_checksum(header, checksum.digest(), source);
  fill_state(state, header, std::move(metadata));
  fill_place(place, header.info);
  return filter;
}

// Reads an image held in memory (a file's bytes), fully verified.
Filter read_image_bytes(std::span<const std::byte> image, const std::string& source,
                        FileState* state, const Options& options, ReadAs read_as,
                        detail::PayloadPlace* place) {
  std::byte header_bytes[kHeaderBytes] = {};
  std::copy_n(image.begin(), std::min<std::size_t>(image.size(), kHeaderBytes), header_bytes);
  const Header header = decode_header(header_bytes, image.size(), source);
  const auto metadata = image.subspan(kHeaderBytes, header.info.metadata_bytes);
  const auto payload = image.subspan(header.info.payload_offset, header.payload_bytes);
  DataChecksum checksum;
  checksum.update(metadata.data(), metadata.size());
  checksum.update(payload.data(), payload.size());
  check_data_checksum(header, checksum.digest(), source);
  Filter filter(payload_layout(header, read_as, source), options);
  filter.copy_bytes_from(payload);
  fill_state(state, header, std::vector<std::byte>(metadata.begin(), metadata.end()));
  fill_place(place, header.info);
  return filter;
}

Filter map_file(const std::filesystem::path& path, FileState* state, const MapOptions& options,
                ReadAs read_as, detail::PayloadPlace* place) {
  OpenedFile opened = open_filter_file(path);
  const Header& header = opened.header;
  const Layout layout = payload_layout(header, read_as, path.string());
  auto engine = detail::make_engine_over_file(layout, options.options, opened.file.fd(),
                                              header.info.payload_offset);
  if (options.verify) {
    DataChecksum checksum;
    checksum.update(opened.metadata.data(), opened.metadata.size());
    checksum.update(engine->host_bytes(), header.payload_bytes);
    check_data_checksum(header, checksum.digest(), path.string());
  }
  Filter filter = detail::FilterAccess::make(layout, std::move(engine));
  fill_state(state, header, std::move(opened.metadata));
  fill_place(place, header.info);
  return filter;
}

}  // namespace

namespace detail {

std::uint64_t filter_image_bytes(const Layout& layout, std::uint64_t metadata_bytes) {
  return round_up(kHeaderBytes + metadata_bytes, kPayloadAlignment) + layout.size_bytes();
}

void write_filter_image(File& out, const Filter& filter, const FileState& state) {
  write_image(out, filter, filter.layout(), 0, 0, state);
}

Filter read_filter_image(const File& file, std::uint64_t offset, std::uint64_t bytes,
                         const std::string& source, FileState* state, const Options& options) {
  return read_image(file, offset, bytes, source, state, options, ReadAs::whole_filter, nullptr);
}

void save_payload(const Filter& bits, const PayloadPlace& place, const std::filesystem::path& path,
                  const FileState& state) {
  write_file_atomically(path, [&](File& out) {
    write_image(out, bits, place.layout, place.shard, place.num_shards, state);
  });
}

Filter load_payload(const std::filesystem::path& path, FileState* state, const Options& options,
                    PayloadPlace& place) {
  const File file(path, O_RDONLY);
  return read_image(file, 0, file.regular_file_size(), path.string(), state, options, ReadAs::shard,
                    &place);
}

Filter map_payload(const std::filesystem::path& path, FileState* state, const MapOptions& options,
                   PayloadPlace& place) {
  return map_file(path, state, options, ReadAs::shard, &place);
}

std::vector<std::byte> payload_file_bytes(const Filter& bits, const PayloadPlace& place,
                                          const FileState& state) {
  return image_bytes(bits, place.layout, place.shard, place.num_shards, state);
}

Filter load_payload(std::span<const std::byte> bytes, FileState* state, const Options& options,
                    PayloadPlace& place, const std::string& source) {
  return read_image_bytes(bytes, source, state, options, ReadAs::shard, &place);
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
  return map_file(path, state, options, ReadAs::whole_filter, nullptr);
}

std::vector<std::byte> to_file_bytes(const Filter& filter, const FileState& state) {
  return image_bytes(filter, filter.layout(), 0, 0, state);
}

Filter load(std::span<const std::byte> bytes, FileState* state, const Options& options,
            const std::string& source) {
  return read_image_bytes(bytes, source, state, options, ReadAs::whole_filter, nullptr);
}

void save_checkpoint(const std::filesystem::path& dir, const Filter& filter,
                     const FileState& state) {
  detail::save_checkpoint_file(
      dir, kCheckpointFile, [&](const std::filesystem::path& path) { save(filter, path, state); });
}

std::optional<Checkpoint> load_checkpoint(const std::filesystem::path& dir,
                                          const Options& options) {
  const auto path = detail::find_checkpoint_file(dir, kCheckpointFile);
  if (!path) return std::nullopt;
  FileState state;
  Filter filter = load(*path, &state, options);
  return Checkpoint{std::move(filter), std::move(state.metadata), state.keys_inserted};
}

}  // namespace bulkbloom
