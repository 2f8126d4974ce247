// The window file (docs/FORMAT.md, "Window files"): one file for the whole window (or one shard of
// it), so that one atomic rename switches generations, clock and caller metadata together. One
// encoder writes the image to a file or to memory, and one decoder reads it from either.
#include <fcntl.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "bulkbloom/incremental.hpp"
#include "bulkbloom/window.hpp"
#include "bulkbloom/window_shard.hpp"
#include "core/filter_access.hpp"
#include "core/key_mode.hpp"
#include "persist/file_io.hpp"
#include "persist/incremental_detail.hpp"
#include "shard/shard_math.hpp"
#include "shard/window_shard_access.hpp"
#include "window/window_access.hpp"
#include "window/window_clock.hpp"

namespace bulkbloom {

namespace {

using detail::DataChecksum;
using detail::Field;
using detail::File;
using detail::get;
using detail::kPayloadAlignment;
using detail::put;
using detail::round_up;
using detail::WindowAccess;

// Version 2 adds the generation table (the promise, and each generation's size and keys). A window
// whose promise is not known (one read from a version 1 file) has generations of one size and is
// written as version 1, byte for byte as before. Version 3 adds the block multiple and each
// filter's whole-window key count (window shards that size per period); it is written only for
// a block multiple above 1, so that other windows keep their version 2 bytes.
constexpr std::uint32_t kWindowVersion = 3;
constexpr std::uint64_t kHeaderBytes = 128;
constexpr detail::HeaderCodec kCodec{detail::kWindowMagic, kWindowVersion, kHeaderBytes,
                                     "bulkbloom window file", "window format"};
constexpr detail::HeaderCodec kCodecV2{detail::kWindowMagic, 2, kHeaderBytes,
                                       "bulkbloom window file", "window format"};
constexpr detail::HeaderCodec kCodecV1{detail::kWindowMagic, 1, kHeaderBytes,
                                       "bulkbloom window file", "window format"};
constexpr const char* kCheckpointFile = "window.bbw";

// The fields after the frame (magic, version, header_bytes) of the 128-byte header; the header
// checksum is its last 8 bytes.
constexpr Field<std::uint8_t> kShape{16};
constexpr Field<std::uint8_t> kHash{17};
constexpr Field<std::uint8_t> kClock{18};
constexpr Field<std::uint8_t> kStarted{19};
constexpr Field<std::uint32_t> kGenerations{20};
constexpr Field<std::uint64_t> kNumBlocks{24};
constexpr Field<std::uint64_t> kSeed{32};
constexpr Field<std::uint64_t> kWindow{40};
constexpr Field<std::uint64_t> kLateness{48};
constexpr Field<std::int64_t> kNewestEpoch{56};
constexpr Field<std::int64_t> kClockTime{64};
constexpr Field<std::uint64_t> kRecordsSeen{72};
constexpr Field<std::uint64_t> kRotations{80};
constexpr Field<std::uint64_t> kKeysInserted{88};
constexpr Field<std::uint64_t> kMetadataBytes{96};
constexpr Field<std::uint64_t> kDataChecksum{104};
constexpr Field<std::uint8_t> kIndex{112};
// Shard files: the shard's index as a 24-bit little-endian number at 113, the shard count at 116
// (both 0 for a whole window; reserved and zero before shards, so older readers reject shards).
constexpr std::size_t kShardIndexAt = 113;
constexpr Field<std::uint32_t> kNumShards{116};
constexpr std::uint32_t kMaxShardIndex = (std::uint32_t{1} << 24) - 1;

using HeaderBytes = std::array<std::byte, kHeaderBytes>;
using PartRecord = WindowAccess::PartRecord;

// Version 2's generation table, after the header: the promised rate (a binary64) and the number
// of filters N, then per filter, in the order of the payloads, its generation (0 the oldest),
// block count (of the whole window, also in a shard's file) and the keys it took (a shard's
// own). A generation is one filter, or more when it grew. Version 3 appends the block multiple
// to the head and the whole window's keys (PartRecord::window_keys) to each entry.
constexpr std::uint64_t kMaxPartsPerGeneration = 8;

struct TableSizes {
  std::uint64_t head;
  std::uint64_t entry;
};
constexpr TableSizes table_sizes(std::uint32_t version) {
  return version >= 3 ? TableSizes{24, 32} : TableSizes{16, 24};
}

// Where the generations lie: generation i (oldest first) at offsets[i], each page-aligned.
struct Placement {
  std::vector<std::uint64_t> offsets;
  std::uint64_t file_bytes;
};

// `generation_bytes`: each generation's payload, oldest first, the whole layout's or a shard's
// blocks of it.
Placement placement(std::uint64_t table, std::span<const std::uint64_t> generation_bytes,
                    std::uint64_t metadata_bytes) {
  Placement where{{}, round_up(kHeaderBytes + table + metadata_bytes, kPayloadAlignment)};
  for (const std::uint64_t bytes : generation_bytes) {
    where.offsets.push_back(where.file_bytes);
    where.file_bytes += round_up(bytes, kPayloadAlignment);
  }
  return where;
}

// Where a window file's payload belongs: shard `shard` of `num_shards` (0: a whole window).
struct ShardFields {
  std::uint32_t shard = 0;
  std::uint32_t num_shards = 0;
};

HeaderBytes encode_header(const detail::HeaderCodec& codec, const WindowConfig& config,
                          ShardFields place, const WindowAccess::Clock& clock,
                          const FileState& state, std::uint64_t data_checksum) {
  HeaderBytes bytes{};
  std::byte* h = bytes.data();
  codec.start(h);
  for (std::size_t b = 0; b < 3; ++b) {
    put(h, kShardIndexAt + b, static_cast<std::uint8_t>(place.shard >> (8 * b)));
  }
  put(h, kNumShards, place.num_shards);
  put(h, kShape, static_cast<std::uint8_t>(config.generation.shape));
  put(h, kHash, static_cast<std::uint8_t>(config.generation.hash));
  put(h, kIndex, static_cast<std::uint8_t>(config.generation.index));
  put(h, kClock, static_cast<std::uint8_t>(config.clock));
  put(h, kStarted, clock.started ? 1 : 0);
  put(h, kGenerations, config.generations);
  put(h, kNumBlocks, config.generation.num_blocks);
  put(h, kSeed, config.generation.seed);
  put(h, kWindow, config.window);
  put(h, kLateness, config.lateness);
  put(h, kNewestEpoch, clock.newest_epoch);
  put(h, kClockTime, clock.clock_time);
  put(h, kRecordsSeen, clock.records_seen);
  put(h, kRotations, clock.rotations);
  put(h, kKeysInserted, state.keys_inserted);
  put(h, kMetadataBytes, state.metadata.size());
  put(h, kDataChecksum, data_checksum);
  codec.seal(h);
  return bytes;
}

std::vector<std::byte> encode_table(std::uint32_t version, const WindowConfig& config,
                                    std::span<const PartRecord> parts) {
  const TableSizes sizes = table_sizes(version);
  std::vector<std::byte> table(sizes.head + sizes.entry * parts.size());
  put(table.data(), 0, config.fpr);
  put(table.data(), 8, static_cast<std::uint64_t>(parts.size()));
  if (version >= 3) put(table.data(), 16, std::uint64_t{config.block_multiple});
  for (std::size_t i = 0; i < parts.size(); ++i) {
    std::byte* entry = table.data() + sizes.head + sizes.entry * i;
    put(entry, 0, parts[i].generation);
    put(entry, 8, parts[i].num_blocks);
    put(entry, 16, parts[i].keys);
    if (version >= 3) put(entry, 24, parts[i].window_keys);
  }
  return table;
}

struct Header {
  std::uint32_t version = 0;
  WindowConfig config;
  ShardFields place;
  WindowAccess::Clock clock{};
  std::uint64_t keys_inserted = 0;
  std::uint64_t metadata_bytes = 0;
  std::uint64_t data_checksum = 0;
};

// The clock state a window in `config` can reach: the newest generation's period is the one of
// the last record (records clock) or of the largest time seen (event time).
bool clock_is_reachable(const WindowConfig& config, const WindowAccess::Clock& c) {
  const std::uint64_t period = config.period();
  if (config.clock == WindowClock::records) {
    const std::uint64_t last = c.records_seen == 0 ? 0 : c.records_seen - 1;
    return c.started && c.newest_epoch == static_cast<std::int64_t>(last / period);
  }
  if (!c.started) return c.records_seen == 0 && c.newest_epoch == 0 && c.clock_time == 0;
  return c.newest_epoch == detail::period_of(c.clock_time, period);
}

// Validates everything the header alone can tell, against the file's size, before any size in
// it is trusted for an allocation or a read. Placement and file length are checked once the
// generation table is read (decode_table).
Header decode_header(const std::byte* h, std::uint64_t total_bytes, const std::string& source) {
  auto fail = [&](const std::string& problem) { return detail::format_error(source, problem); };
  Header header;
  header.version = kCodec.check_frame(h, total_bytes, source);
  const auto started = get(h, kStarted);
  if (started > 1) {
    throw fail("started flag " + std::to_string(started) + " is neither 0 nor 1");
  }
  WindowConfig& config = header.config;
  config.clock = static_cast<WindowClock>(get(h, kClock));
  config.generations = get(h, kGenerations);
  config.window = get(h, kWindow);
  config.lateness = get(h, kLateness);
  config.generation.shape = static_cast<Shape>(get(h, kShape));
  config.generation.hash = static_cast<KeyHash>(get(h, kHash));
  config.generation.index = static_cast<BlockIndex>(get(h, kIndex));
  config.generation.num_blocks = get(h, kNumBlocks);
  config.generation.seed = get(h, kSeed);
  try {
    config.validate();
  } catch (const std::invalid_argument& e) {
    throw fail(std::string("bad window configuration: ") + e.what());
  }
  ShardFields& place = header.place;
  for (std::size_t b = 0; b < 3; ++b) {
    place.shard |= std::uint32_t{get<std::uint8_t>(h, kShardIndexAt + b)} << (8 * b);
  }
  place.num_shards = get(h, kNumShards);
  const std::uint64_t num_blocks = config.generation.num_blocks;
  if (place.num_shards == 0 ? place.shard != 0
                            : place.num_shards > num_blocks || place.shard >= place.num_shards) {
    throw fail("bad shard: shard " + std::to_string(place.shard) + " of " +
               std::to_string(place.num_shards) + " over " + std::to_string(num_blocks) +
               " blocks (a whole window has shard 0 of 0)");
  }
  header.clock = {started == 1, get(h, kNewestEpoch), get(h, kClockTime), get(h, kRecordsSeen),
                  get(h, kRotations)};
  if (!clock_is_reachable(config, header.clock)) {
    throw fail("the clock state (newest period " + std::to_string(header.clock.newest_epoch) +
               ", time " + std::to_string(header.clock.clock_time) + ", records " +
               std::to_string(header.clock.records_seen) + ") cannot occur with this window");
  }
  header.keys_inserted = get(h, kKeysInserted);
  header.metadata_bytes = get(h, kMetadataBytes);
  header.data_checksum = get(h, kDataChecksum);
  const std::uint64_t table = header.version == 1 ? 0 : table_sizes(header.version).head;
  if (header.metadata_bytes > total_bytes || kHeaderBytes + table > total_bytes) {
    throw fail("metadata of " + std::to_string(header.metadata_bytes) +
               " bytes does not fit in the file");
  }
  return header;
}

// A decoded generation table (version 1: the configured size for every generation and no key
// counts), and the placement it gives.
struct Table {
  double fpr = 0.0;
  std::uint32_t block_multiple = 1;
  std::vector<PartRecord> parts;
  bool has_keys = false;
  Placement placement;
};

// The number of filters version 2's table head (`head`, 16 bytes) announces, checked.
std::uint64_t table_parts(const Header& header, const std::byte* head, const std::string& source) {
  const auto parts = get<std::uint64_t>(head, 8);
  const std::uint64_t generations = header.config.generations;
  if (parts < generations || parts > generations * kMaxPartsPerGeneration) {
    throw detail::format_error(source, "the generation table lists " + std::to_string(parts) +
                                           " filters: expected " + std::to_string(generations) +
                                           " to " +
                                           std::to_string(generations * kMaxPartsPerGeneration));
  }
  return parts;
}

// Checks the generation table (`bytes`, empty for version 1) against the header: every
// generation in order, each at least one filter of at least the configured size, a multiple of
// the block multiple; a shard's generations all of the configured size unless its shards size per
// period (shards_size_per_period), then each a multiple of the shard count.
Table decode_table(const Header& header, std::span<const std::byte> bytes,
                   const std::string& source) {
  auto fail = [&](const std::string& problem) { return detail::format_error(source, problem); };
  WindowConfig config = header.config;
  Table table;
  if (header.version == 1) {
    for (std::uint32_t g = 0; g < config.generations; ++g) {
      table.parts.push_back({g, config.generation.num_blocks, 0, 0});
    }
  } else {
    const TableSizes sizes = table_sizes(header.version);
    table.has_keys = true;
    table.fpr = get<double>(bytes.data(), 0);
    if (!(table.fpr > 0.0 && table.fpr < 1.0)) {
      throw fail("promised false-positive rate " + std::to_string(table.fpr) +
                 " is out of range: expected 0 < fpr < 1");
    }
    config.fpr = table.fpr;
    if (header.version >= 3) {
      const auto multiple = get<std::uint64_t>(bytes.data(), 16);
      config.block_multiple = static_cast<std::uint32_t>(multiple);
      if (multiple != config.block_multiple || multiple < 2 ||
          config.generation.num_blocks % multiple != 0) {
        throw fail("block multiple " + std::to_string(multiple) + " does not divide the " +
                   std::to_string(config.generation.num_blocks) +
                   " configured blocks (version 3 files have one above 1)");
      }
      table.block_multiple = config.block_multiple;
    }
    const std::uint32_t num_shards = std::max<std::uint32_t>(header.place.num_shards, 1);
    const bool sized = shards_size_per_period(config, num_shards);
    const std::uint64_t parts = (bytes.size() - sizes.head) / sizes.entry;
    for (std::uint64_t i = 0; i < parts; ++i) {
      const std::byte* entry = bytes.data() + sizes.head + sizes.entry * i;
      PartRecord part{get<std::uint64_t>(entry, 0), get<std::uint64_t>(entry, 8),
                      get<std::uint64_t>(entry, 16), 0};
      // Before version 3 a file held a whole window or shards of configured sizes.
      part.window_keys = header.version >= 3 ? get<std::uint64_t>(entry, 24) : part.keys;
      const std::uint64_t previous = i == 0 ? 0 : table.parts.back().generation;
      if (part.generation != previous && part.generation != previous + 1) {
        throw fail("table entry " + std::to_string(i) + " is of generation " +
                   std::to_string(part.generation) + " after generation " +
                   std::to_string(previous) + ": expected every generation in order");
      }
      if (part.num_blocks < config.generation.num_blocks || part.num_blocks > Layout::kMaxBlocks) {
        throw fail("table entry " + std::to_string(i) + " has " + std::to_string(part.num_blocks) +
                   " blocks: expected " + std::to_string(config.generation.num_blocks) +
                   " (the configured size) to " + std::to_string(Layout::kMaxBlocks));
      }
      if (part.num_blocks % config.block_multiple != 0) {
        throw fail("table entry " + std::to_string(i) + " has " + std::to_string(part.num_blocks) +
                   " blocks, not a multiple of the block multiple " +
                   std::to_string(config.block_multiple));
      }
      if (sized
              ? part.num_blocks % num_shards != 0
              : header.place.num_shards != 0 && (part.num_blocks != config.generation.num_blocks ||
                                                 parts != config.generations)) {
        throw fail("a window shard file's generations must be one filter each of the configured " +
                   std::to_string(config.generation.num_blocks) +
                   " blocks, or (shards that size per period) multiples of the shard count " +
                   std::to_string(num_shards));
      }
      table.parts.push_back(part);
    }
    if (table.parts.back().generation + 1 != config.generations) {
      throw fail("the generation table ends at generation " +
                 std::to_string(table.parts.back().generation) + " of " +
                 std::to_string(config.generations));
    }
  }
  const std::uint64_t block = block_bytes(config.generation.shape);
  const ShardFields place = header.place;
  std::vector<std::uint64_t> generation_bytes;
  for (const PartRecord& g : table.parts) {
    generation_bytes.push_back(
        (place.num_shards == 0 ? g.num_blocks
                               : shard_blocks(g.num_blocks, place.shard, place.num_shards).size()) *
        block);
  }
  table.placement = placement(bytes.size(), generation_bytes, header.metadata_bytes);
  return table;
}

// A window file's length against the placement its table gives.
void check_file_length(const Table& table, std::uint64_t total_bytes, const std::string& source) {
  const std::uint64_t expected = table.placement.file_bytes;
  if (total_bytes < expected) {
    throw detail::format_error(source, "truncated: " + std::to_string(total_bytes) +
                                           " bytes, the header describes " +
                                           std::to_string(expected));
  }
  if (total_bytes > expected) {
    throw detail::format_error(
        source, std::to_string(total_bytes - expected) + " unexpected bytes after the generations");
  }
}

// The file image as a sequence of writes: to a File, or to memory (MemoryImage).
class MemoryImage {
 public:
  void write_all(std::span<const std::byte> data) {
    bytes_.insert(bytes_.end(), data.begin(), data.end());
  }
  void write_at(std::span<const std::byte> data, std::uint64_t offset) {
    std::copy(data.begin(), data.end(), bytes_.begin() + static_cast<std::ptrdiff_t>(offset));
  }
  std::vector<std::byte> take() { return std::move(bytes_); }

 private:
  std::vector<std::byte> bytes_;
};

// The version a file of `config` is written in: 1 for a window whose promise is not known, 3 for
// a block multiple above 1, else 2.
std::uint32_t file_version(const WindowConfig& config) {
  return config.fpr == 0.0 ? 1 : config.block_multiple > 1 ? 3 : 2;
}

// The generation table of a file of `window` (empty for version 1); it records the whole window's
// block counts.
std::vector<std::byte> table_of(const WindowConfig& config, const WindowedFilter& window) {
  const std::uint32_t version = file_version(config);
  if (version == 1) return {};
  std::vector<PartRecord> parts = WindowAccess::records_oldest_first(window);
  for (PartRecord& g : parts) g.num_blocks = WindowAccess::whole_blocks(window, g.num_blocks);
  return encode_table(version, config, parts);
}

const detail::HeaderCodec& codec_of(std::uint32_t version) {
  return version == 1 ? kCodecV1 : version == 2 ? kCodecV2 : kCodec;
}

// Writes the file image of `window` (the whole window, or the blocks `place` names as a window of
// their own) with the header of `config`, the whole window's configuration, in file_version().
template <typename Out>
void write_image(Out& out, const WindowConfig& config, ShardFields place,
                 const WindowedFilter& window, const FileState& state) {
  const std::uint32_t version = file_version(config);
  const std::vector<std::byte> table = table_of(config, window);
  std::vector<std::uint64_t> generation_bytes;
  for (const Filter* generation : WindowAccess::oldest_first(window)) {
    generation_bytes.push_back(generation->layout().size_bytes());
  }
  const Placement where = placement(table.size(), generation_bytes, state.metadata.size());
  // The header goes in last, once the checksum of what follows it is known.
  std::vector<std::byte> prefix(where.offsets.front());
  std::copy(table.begin(), table.end(), prefix.begin() + kHeaderBytes);
  std::copy(state.metadata.begin(), state.metadata.end(),
            prefix.begin() + kHeaderBytes + static_cast<std::ptrdiff_t>(table.size()));
  out.write_all(prefix);
  DataChecksum checksum;
  checksum.update(table);
  checksum.update(state.metadata);
  std::uint64_t written = where.offsets.front();
  std::size_t i = 0;
  for (const Filter* generation : WindowAccess::oldest_first(window)) {
    out.write_all(std::vector<std::byte>(where.offsets[i++] - written));  // the padding before it
    const detail::HostBits bits(*generation);
    checksum.update(bits.bytes());
    out.write_all(bits.bytes());
    written = where.offsets[i - 1] + bits.bytes().size();
  }
  out.write_all(std::vector<std::byte>(where.file_bytes - written));
  const HeaderBytes header = encode_header(codec_of(version), config, place,
                                           WindowAccess::clock(window), state, checksum.digest());
  out.write_at(header, 0);
}

// File bytes held in memory, read as a File is.
struct MemorySource {
  std::span<const std::byte> bytes;

  void read_exactly(std::byte* out, std::uint64_t n, std::uint64_t offset) const {
    std::copy_n(bytes.data() + offset, n, out);  // the decoder checked the length first
  }
};

void read_bits(const File& file, std::uint64_t offset, Filter& filter, DataChecksum& checksum) {
  detail::read_filter_bits(file, offset, filter, checksum);
}
void read_bits(const MemorySource& source, std::uint64_t offset, Filter& filter,
               DataChecksum& checksum) {
  const auto bits = source.bytes.subspan(offset, filter.layout().size_bytes());
  checksum.update(bits);
  filter.copy_bytes_from(bits);
}

// A decoded file: the whole window's configuration, the payload's place, and the payload as a
// window of its own (the whole window, or the shard's blocks under the local layout).
struct Image {
  WindowConfig config;
  ShardFields place;
  WindowedFilter payload;
};

// What a caller wants of a window file: the whole window (a whole window's file, or a shard's
// that is the only one), or a shard (a whole window's file reads as shard 0 of 1).
// A snapshot's parts are listed without restoring them (whole_or_shard).
enum class Want { whole, shard, whole_or_shard };

// What precedes the payloads of a window file (or makes up a window snapshot's metadata): the
// header, the generation table and the caller's metadata, each checked as far as it goes alone.
struct Prefix {
  Header header;
  Table table;
  std::vector<std::byte> table_bytes;
  std::vector<std::byte> metadata;
};

// Reads the prefix of the `size` bytes in `source`: a window file image (`with_payloads`), or a
// window snapshot's metadata, which is the prefix alone.
template <typename Source>
Prefix read_prefix(const Source& source, std::uint64_t size, const std::string& name, Want want,
                   bool with_payloads) {
  HeaderBytes header_bytes{};
  source.read_exactly(header_bytes.data(), std::min<std::uint64_t>(size, kHeaderBytes), 0);
  Prefix prefix{decode_header(header_bytes.data(), size, name), {}, {}, {}};
  const Header& header = prefix.header;
  if (header.version != 1) {
    const TableSizes sizes = table_sizes(header.version);
    std::array<std::byte, table_sizes(kWindowVersion).head> head{};
    source.read_exactly(head.data(), sizes.head, kHeaderBytes);
    const std::uint64_t entries = sizes.entry * table_parts(header, head.data(), name);
    if (kHeaderBytes + sizes.head + entries > size) {
      throw FormatError(name + ": truncated: " + std::to_string(size) +
                        " bytes, the generation table alone needs " +
                        std::to_string(kHeaderBytes + sizes.head + entries));
    }
    prefix.table_bytes.assign(head.begin(), head.begin() + static_cast<std::ptrdiff_t>(sizes.head));
    prefix.table_bytes.resize(sizes.head + entries);
    source.read_exactly(prefix.table_bytes.data() + sizes.head, entries, kHeaderBytes + sizes.head);
  }
  prefix.table = decode_table(header, prefix.table_bytes, name);
  prefix.header.config.fpr = prefix.table.fpr;
  prefix.header.config.block_multiple = prefix.table.block_multiple;
  const Table& table = prefix.table;
  if (want == Want::whole && header.place.num_shards > 1) {
    throw FormatError(name + ": holds shard " + std::to_string(header.place.shard) + " of " +
                      std::to_string(header.place.num_shards) +
                      " of a window, not a whole window; load it with load_window_shard()");
  }
  if (with_payloads) {
    check_file_length(table, size, name);
  } else if (const std::uint64_t expected =
                 kHeaderBytes + prefix.table_bytes.size() + header.metadata_bytes;
             size != expected) {
    throw FormatError(name + ": " + std::to_string(size) + " bytes, the header describes " +
                      std::to_string(expected) + " (a window snapshot's metadata)");
  }
  prefix.metadata.resize(header.metadata_bytes);
  source.read_exactly(prefix.metadata.data(), prefix.metadata.size(),
                      kHeaderBytes + prefix.table_bytes.size());
  return prefix;
}

// The payload window `prefix` describes (the whole window, or the shard's blocks under the local
// layout), each filter, oldest first, filled by `fill(i, filter)`.
template <typename Fill>
Image assemble(const Prefix& prefix, const Options& options, Want want, Fill&& fill) {
  const Header& header = prefix.header;
  ShardFields place = header.place;
  if (place.num_shards == 0) place.num_shards = 1;
  // Every filter is filled next: its pages are written once, there.
  WindowedFilter payload = want == Want::shard
                               ? WindowShardAccess::empty_local(header.config, place.shard,
                                                                place.num_shards, options, false)
                               : WindowAccess::unwritten(header.config, options);
  std::vector<PartRecord> parts = prefix.table.parts;
  if (want == Want::shard) {
    for (PartRecord& g : parts) {
      g.num_blocks = shard_blocks(g.num_blocks, place.shard, place.num_shards).size();
    }
  }
  std::size_t i = 0;
  for (Filter* filter : WindowAccess::restore_oldest_first(payload, parts)) fill(i++, *filter);
  if (!prefix.table.has_keys) WindowAccess::estimate_keys_from_bits(payload);
  WindowAccess::set_clock(payload, header.clock);
  return {header.config, place, std::move(payload)};
}

// Reads and fully verifies the window file image of `size` bytes in `source`.
template <typename Source>
Image read_image(const Source& source, std::uint64_t size, const std::string& name,
                 FileState* state, const Options& options, Want want) {
  Prefix prefix = read_prefix(source, size, name, want, true);
  DataChecksum checksum;
  checksum.update(prefix.table_bytes);
  checksum.update(prefix.metadata);
  Image image = assemble(prefix, options, want, [&](std::size_t i, Filter& filter) {
    read_bits(source, prefix.table.placement.offsets[i], filter, checksum);
  });
  if (checksum.digest() != prefix.header.data_checksum) {
    throw FormatError(name + ": data checksum mismatch: the generations or metadata are corrupt");
  }
  if (state != nullptr) {
    state->keys_inserted = prefix.header.keys_inserted;
    state->metadata = std::move(prefix.metadata);
  }
  return image;
}

template <typename... Args>
Image read_file_image(const std::filesystem::path& path, Args... args) {
  File file(path, O_RDONLY);
  return read_image(file, file.regular_file_size(), path.string(), args...);
}

WindowShard shard_of_image(Image image) {
  return WindowShardAccess::make(image.config, image.place.shard, image.place.num_shards,
                                 std::move(image.payload));
}

ShardFields place_of(const WindowShard& shard) {
  if (shard.index() > kMaxShardIndex) {
    throw std::invalid_argument("window shard " + std::to_string(shard.index()) +
                                " cannot be saved: window shard files hold shard indexes below " +
                                std::to_string(kMaxShardIndex + 1));
  }
  return {shard.index(), shard.num_shards()};
}

// A window snapshot's metadata (bulkbloom/incremental.hpp, docs/FORMAT.md "Incremental state"):
// the window file's header, generation table and caller metadata, without the payloads; the
// header's data checksum covers the table and the caller metadata alone.
std::vector<std::byte> snapshot_metadata(const WindowConfig& config, ShardFields place,
                                         const WindowedFilter& window, const FileState& state) {
  const std::vector<std::byte> table = table_of(config, window);
  DataChecksum checksum;
  checksum.update(table);
  checksum.update(state.metadata);
  const HeaderBytes header = encode_header(codec_of(file_version(config)), config, place,
                                           WindowAccess::clock(window), state, checksum.digest());
  std::vector<std::byte> bytes(header.begin(), header.end());
  bytes.insert(bytes.end(), table.begin(), table.end());
  bytes.insert(bytes.end(), state.metadata.begin(), state.metadata.end());
  return bytes;
}

// Each filter's identity, oldest first: generation g (0 the oldest) covers the period G - 1 - g
// before the newest's; its filters are numbered from 0 in their order. Before the clock started
// the newest's period is 0 and every identity is marked before_clock, as no period is yet. `blocks`
// gives a filter's blocks in the payload from its record.
template <typename Blocks>
std::vector<PartId> part_ids(std::uint32_t generations, const WindowAccess::Clock& clock,
                             std::span<const PartRecord> parts, Blocks&& blocks) {
  std::vector<PartId> ids;
  std::uint32_t part = 0;
  for (std::size_t i = 0; i < parts.size(); ++i) {
    part = i > 0 && parts[i].generation == parts[i - 1].generation ? part + 1 : 0;
    const auto age = static_cast<std::int64_t>(generations - 1 - parts[i].generation);
    ids.push_back({clock.newest_epoch - age, part, blocks(parts[i]), !clock.started});
  }
  return ids;
}

// The identities of the filters a snapshot's metadata describes, with their blocks in its payload
// (a shard's blocks of each generation).
std::vector<PartId> part_ids(const Prefix& prefix) {
  const Header& header = prefix.header;
  return part_ids(
      header.config.generations, header.clock, prefix.table.parts,
      [&](const PartRecord& g) -> std::uint64_t {
        if (header.place.num_shards == 0) return g.num_blocks;
        return shard_blocks(g.num_blocks, header.place.shard, header.place.num_shards).size();
      });
}

StateSnapshot take_window_snapshot(const WindowConfig& config, ShardFields place,
                                   WindowedFilter& window, const FileState& state) {
  StateSnapshot snapshot;
  snapshot.metadata = snapshot_metadata(config, place, window, state);
  snapshot.parts = part_ids(window.config().generations, WindowAccess::clock(window),
                            WindowAccess::records_oldest_first(window),
                            [](const PartRecord& g) { return g.num_blocks; });
  WindowAccess::TakenLog taken = WindowAccess::take_log(window);
  if (taken.logging) {
    snapshot.change = detail::log_change(taken.from_empty, taken.dropped);
    snapshot.log = std::move(taken.hashes);
  }
  // Only the closed parts the state still holds (a jump of several periods closes generations
  // that it clears again).
  const auto held = std::span(snapshot.parts).first(snapshot.parts.size() - 1);
  for (ClosedPart& closed : taken.closed) {
    if (std::find(held.begin(), held.end(), closed.id) != held.end()) {
      snapshot.closed.push_back(std::move(closed));
    }
  }
  return snapshot;
}

Prefix read_snapshot_prefix(std::span<const std::byte> metadata, const std::string& source,
                            Want want) {
  Prefix prefix = read_prefix(MemorySource{metadata}, metadata.size(), source, want, false);
  DataChecksum checksum;
  checksum.update(prefix.table_bytes);
  checksum.update(prefix.metadata);
  if (checksum.digest() != prefix.header.data_checksum) {
    throw FormatError(source + ": data checksum mismatch: the snapshot's metadata is corrupt");
  }
  return prefix;
}

Image restore_image(std::span<const std::byte> metadata, const PartFill& fill, FileState* state,
                    const Options& options, const std::string& source, Want want) {
  Prefix prefix = read_snapshot_prefix(metadata, source, want);
  const std::vector<PartId> ids = part_ids(prefix);
  Image image = assemble(prefix, options, want, [&](std::size_t i, Filter& filter) {
    detail::fill_filter_bits(filter, [&](std::span<std::byte> bits) { fill(i, ids[i], bits); });
  });
  if (state != nullptr) {
    state->keys_inserted = prefix.header.keys_inserted;
    state->metadata = std::move(prefix.metadata);
  }
  return image;
}

void window_part_bits(const WindowedFilter& window, std::size_t index, const PartSink& sink) {
  const std::vector<const Filter*> filters = WindowAccess::oldest_first(window);
  if (index >= filters.size()) {
    throw std::out_of_range("part " + std::to_string(index) + " of a window of " +
                            std::to_string(filters.size()) + " parts");
  }
  const detail::HostBits bits(*filters[index]);
  sink(bits.bytes());
}

void replay_window_log(WindowedFilter& window, std::span<const std::uint64_t> log) {
  window.implementation();  // throws for a moved-from window
  detail::FilterAccess::engine(WindowAccess::open_filter(window))
      .insert(log, detail::KeyMode::prehashed);
}

void replay_window_part_log(WindowedFilter& window, std::size_t index,
                            std::span<const std::uint64_t> log) {
  const std::vector<const Filter*> filters = WindowAccess::oldest_first(window);
  if (index >= filters.size()) {
    throw std::out_of_range("part " + std::to_string(index) + " of a window of " +
                            std::to_string(filters.size()) + " parts");
  }
  detail::FilterAccess::engine(*filters[index]).insert(log, detail::KeyMode::prehashed);
}

}  // namespace

void enable_change_log(WindowedFilter& window) {
  WindowAccess::enable_log(window);
}

void enable_change_log(WindowShard& shard) {
  WindowAccess::enable_log(WindowShardAccess::local(shard));
}

StateSnapshot take_snapshot(WindowedFilter& window, const FileState& state) {
  return take_window_snapshot(window.config(), {}, window, state);
}

StateSnapshot take_snapshot(WindowShard& shard, const FileState& state) {
  return take_window_snapshot(shard.config(), place_of(shard), WindowShardAccess::local(shard),
                              state);
}

void with_part_bits(const WindowedFilter& window, std::size_t index, const PartSink& sink) {
  window_part_bits(window, index, sink);
}

void with_part_bits(const WindowShard& shard, std::size_t index, const PartSink& sink) {
  window_part_bits(WindowShardAccess::local(shard), index, sink);
}

WindowedFilter restore_window(std::span<const std::byte> metadata, const PartFill& fill,
                              FileState* state, const Options& options, const std::string& source) {
  return restore_image(metadata, fill, state, options, source, Want::whole).payload;
}

WindowShard restore_window_shard(std::span<const std::byte> metadata, const PartFill& fill,
                                 FileState* state, const Options& options,
                                 const std::string& source) {
  return shard_of_image(restore_image(metadata, fill, state, options, source, Want::shard));
}

void replay_log(WindowedFilter& window, std::span<const std::uint64_t> log) {
  replay_window_log(window, log);
}

void replay_log(WindowShard& shard, std::span<const std::uint64_t> log) {
  replay_window_log(WindowShardAccess::local(shard), log);
}

void replay_log(WindowedFilter& window, std::size_t index, std::span<const std::uint64_t> log) {
  replay_window_part_log(window, index, log);
}

void replay_log(WindowShard& shard, std::size_t index, std::span<const std::uint64_t> log) {
  replay_window_part_log(WindowShardAccess::local(shard), index, log);
}

namespace detail {

std::vector<PartId> window_snapshot_parts(std::span<const std::byte> metadata,
                                          const std::string& source) {
  return part_ids(read_snapshot_prefix(metadata, source, Want::whole_or_shard));
}

}  // namespace detail

void save(const WindowedFilter& window, const std::filesystem::path& path, const FileState& state) {
  detail::write_file_atomically(
      path, [&](File& out) { write_image(out, window.config(), {}, window, state); });
}

void save(const WindowShard& shard, const std::filesystem::path& path, const FileState& state) {
  const ShardFields place = place_of(shard);
  detail::write_file_atomically(path, [&](File& out) {
    write_image(out, shard.config(), place, WindowShardAccess::local(shard), state);
  });
}

std::vector<std::byte> to_file_bytes(const WindowedFilter& window, const FileState& state) {
  MemoryImage out;
  write_image(out, window.config(), {}, window, state);
  return out.take();
}

std::vector<std::byte> to_file_bytes(const WindowShard& shard, const FileState& state) {
  const ShardFields place = place_of(shard);
  MemoryImage out;
  write_image(out, shard.config(), place, WindowShardAccess::local(shard), state);
  return out.take();
}

WindowedFilter load_window(const std::filesystem::path& path, FileState* state,
                           const Options& options) {
  return read_file_image(path, state, options, Want::whole).payload;
}

WindowedFilter load_window(std::span<const std::byte> bytes, FileState* state,
                           const Options& options, const std::string& source) {
  return read_image(MemorySource{bytes}, bytes.size(), source, state, options, Want::whole).payload;
}

WindowShard load_window_shard(const std::filesystem::path& path, FileState* state,
                              const Options& options) {
  return shard_of_image(read_file_image(path, state, options, Want::shard));
}

WindowShard load_window_shard(std::span<const std::byte> bytes, FileState* state,
                              const Options& options, const std::string& source) {
  return shard_of_image(
      read_image(MemorySource{bytes}, bytes.size(), source, state, options, Want::shard));
}

void save_checkpoint(const std::filesystem::path& dir, const WindowedFilter& window,
                     const FileState& state) {
  detail::save_checkpoint_file(
      dir, kCheckpointFile, [&](const std::filesystem::path& path) { save(window, path, state); });
}

std::optional<WindowCheckpoint> load_window_checkpoint(const std::filesystem::path& dir,
                                                       const Options& options) {
  const auto path = detail::find_checkpoint_file(dir, kCheckpointFile);
  if (!path) return std::nullopt;
  FileState state;
  WindowedFilter window = load_window(*path, &state, options);
  return WindowCheckpoint{std::move(window), std::move(state.metadata), state.keys_inserted};
}

}  // namespace bulkbloom
