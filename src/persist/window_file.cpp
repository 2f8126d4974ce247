// The window file (docs/FORMAT.md, "Window files"): one file for the whole window (or one shard of
// it), so that one atomic rename switches generations, clock and caller metadata together. One
// encoder writes the image to a file or to memory, and one decoder reads it from either.
#include <fcntl.h>

#include <algorithm>
#include <array>
#include <string>
#include <utility>

#include "bulkbloom/window.hpp"
#include "bulkbloom/window_shard.hpp"
#include "persist/file_io.hpp"
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

constexpr std::uint32_t kWindowVersion = 1;
constexpr std::uint64_t kHeaderBytes = 128;
constexpr detail::HeaderCodec kCodec{detail::kWindowMagic, kWindowVersion, kHeaderBytes,
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

// Where the generations lie: the first at `first`, each `stride` bytes after the one before.
struct Placement {
  std::uint64_t first;
  std::uint64_t stride;
  std::uint64_t file_bytes;
};

// `generation_bytes`: one generation's payload, the whole layout's or a shard's blocks of it.
Placement placement(const WindowConfig& config, std::uint64_t generation_bytes,
                    std::uint64_t metadata_bytes) {
  const std::uint64_t first = round_up(kHeaderBytes + metadata_bytes, kPayloadAlignment);
  const std::uint64_t stride = round_up(generation_bytes, kPayloadAlignment);
  return {first, stride, first + config.generations * stride};
}

// Where a window file's payload belongs: shard `shard` of `num_shards` (0: a whole window).
struct ShardFields {
  std::uint32_t shard = 0;
  std::uint32_t num_shards = 0;
};

HeaderBytes encode_header(const WindowConfig& config, ShardFields place,
                          const WindowAccess::Clock& clock, const FileState& state,
                          std::uint64_t data_checksum) {
  HeaderBytes bytes{};
  std::byte* h = bytes.data();
  kCodec.start(h);
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
  kCodec.seal(h);
  return bytes;
}

struct Header {
  WindowConfig config;
  ShardFields place;
  std::uint64_t generation_bytes = 0;
  WindowAccess::Clock clock{};
  std::uint64_t keys_inserted = 0;
  std::uint64_t metadata_bytes = 0;
  std::uint64_t data_checksum = 0;
  Placement placement{};
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
// it is trusted for an allocation or a read.
Header decode_header(const std::byte* h, std::uint64_t total_bytes, const std::string& source) {
  auto fail = [&](const std::string& problem) { return detail::format_error(source, problem); };
  kCodec.check_frame(h, total_bytes, source);
  const auto started = get(h, kStarted);
  if (started > 1) {
    throw fail("started flag " + std::to_string(started) + " is neither 0 nor 1");
  }
  Header header;
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
  header.generation_bytes =
      place.num_shards == 0 ? config.generation.size_bytes()
                            : shard_blocks(num_blocks, place.shard, place.num_shards).size() *
                                  static_cast<std::uint64_t>(block_bytes(config.generation.shape));
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
  if (header.metadata_bytes > total_bytes) {
    throw fail("metadata of " + std::to_string(header.metadata_bytes) +
               " bytes does not fit in the file");
  }
  header.placement = placement(config, header.generation_bytes, header.metadata_bytes);
  const std::uint64_t expected = header.placement.file_bytes;
  if (total_bytes < expected) {
    throw fail("truncated: " + std::to_string(total_bytes) + " bytes, the header describes " +
               std::to_string(expected));
  }
  if (total_bytes > expected) {
    throw fail(std::to_string(total_bytes - expected) + " unexpected bytes after the generations");
  }
  return header;
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

// Writes the file image of `window` (the whole window, or the blocks `place` names as a window of
// their own) with the header of `config`, the whole window's configuration.
template <typename Out>
void write_image(Out& out, const WindowConfig& config, ShardFields place,
                 const WindowedFilter& window, const FileState& state) {
  const std::uint64_t generation_bytes = window.config().generation.size_bytes();
  const Placement where = placement(config, generation_bytes, state.metadata.size());
  // The header goes in last, once the checksum of what follows it is known.
  std::vector<std::byte> prefix(where.first);
  std::copy(state.metadata.begin(), state.metadata.end(), prefix.begin() + kHeaderBytes);
  out.write_all(prefix);
  DataChecksum checksum;
  checksum.update(state.metadata);
  const std::vector<std::byte> padding(where.stride - generation_bytes);
  for (const Filter* generation : WindowAccess::oldest_first(window)) {
    const detail::HostBits bits(*generation);
    checksum.update(bits.bytes());
    out.write_all(bits.bytes());
    out.write_all(padding);
  }
  const HeaderBytes header =
      encode_header(config, place, WindowAccess::clock(window), state, checksum.digest());
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
enum class Want { whole, shard };

// Reads and fully verifies the window file image of `size` bytes in `source`.
template <typename Source>
Image read_image(const Source& source, std::uint64_t size, const std::string& name,
                 FileState* state, const Options& options, Want want) {
  HeaderBytes header_bytes{};
  source.read_exactly(header_bytes.data(), std::min<std::uint64_t>(size, kHeaderBytes), 0);
  const Header header = decode_header(header_bytes.data(), size, name);
  if (want == Want::whole && header.place.num_shards > 1) {
    throw FormatError(name + ": holds shard " + std::to_string(header.place.shard) + " of " +
                      std::to_string(header.place.num_shards) +
                      " of a window, not a whole window; load it with load_window_shard()");
  }
  std::vector<std::byte> metadata(header.metadata_bytes);
  source.read_exactly(metadata.data(), metadata.size(), kHeaderBytes);

  ShardFields place = header.place;
  if (place.num_shards == 0) place.num_shards = 1;
  WindowConfig payload_config = header.config;
  if (want == Want::shard) {
    payload_config.generation = detail::local_layout(
        header.config.generation,
        shard_blocks(header.config.generation.num_blocks, place.shard, place.num_shards).size());
  }
  WindowedFilter payload(payload_config, options);
  DataChecksum checksum;
  checksum.update(metadata);
  std::uint64_t offset = header.placement.first;
  for (Filter& generation : WindowAccess::ring_oldest_first(payload)) {
    read_bits(source, offset, generation, checksum);
    offset += header.placement.stride;
  }
  if (checksum.digest() != header.data_checksum) {
    throw FormatError(name + ": data checksum mismatch: the generations or metadata are corrupt");
  }
  WindowAccess::set_clock(payload, header.clock);
  if (state != nullptr) {
    state->keys_inserted = header.keys_inserted;
    state->metadata = std::move(metadata);
  }
  return {header.config, place, std::move(payload)};
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

}  // namespace

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
