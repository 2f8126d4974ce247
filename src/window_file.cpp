// The window file (docs/FORMAT.md, "Window files"): one file for the whole window, so that one
// atomic rename switches generations, clock and caller metadata together.
#include <fcntl.h>

#include <algorithm>
#include <array>
#include <string>
#include <utility>

#include "bulkbloom/window.hpp"
#include "file_io.hpp"
#include "window_clock.hpp"

namespace bulkbloom {
namespace detail {

struct WindowAccess {
  static std::vector<const Filter*> oldest_first(const WindowedFilter& w) {
    std::vector<const Filter*> out;
    for (std::uint32_t age = w.config_.generations; age-- > 0;) out.push_back(&w.generation(age));
    return out;
  }
  // The newly constructed window's ring, oldest first (its newest is ring_[G - 1] after this).
  static std::vector<Filter>& ring_oldest_first(WindowedFilter& w) {
    w.newest_ = w.config_.generations - 1;
    return w.ring_;
  }

  struct Clock {
    bool started;
    std::int64_t newest_epoch;
    std::int64_t clock_time;
    std::uint64_t records_seen;
    std::uint64_t rotations;
  };
  static Clock clock(const WindowedFilter& w) {
    return {w.started_, w.newest_epoch_, w.clock_time_, w.records_seen_, w.rotations_};
  }
  static void set_clock(WindowedFilter& w, const Clock& c) {
    w.started_ = c.started;
    w.newest_epoch_ = c.newest_epoch;
    w.clock_time_ = c.clock_time;
    w.records_seen_ = c.records_seen;
    w.rotations_ = c.rotations;
  }
};

}  // namespace detail

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
constexpr detail::Reserved kReserved{113, 120};

using HeaderBytes = std::array<std::byte, kHeaderBytes>;

// Where the generations lie: the first at `first`, each `stride` bytes after the one before.
struct Placement {
  std::uint64_t first;
  std::uint64_t stride;
  std::uint64_t file_bytes;
};

Placement placement(const WindowConfig& config, std::uint64_t metadata_bytes) {
  const std::uint64_t first = round_up(kHeaderBytes + metadata_bytes, kPayloadAlignment);
  const std::uint64_t stride = round_up(config.generation.size_bytes(), kPayloadAlignment);
  return {first, stride, first + config.generations * stride};
}

HeaderBytes encode_header(const WindowConfig& config, const WindowAccess::Clock& clock,
                          const FileState& state, std::uint64_t data_checksum) {
  HeaderBytes bytes{};
  std::byte* h = bytes.data();
  kCodec.start(h);
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
  if (!kCodec.reserved_are_zero(h, {kReserved}) || started > 1) {
    throw fail("header size, started flag or reserved field has a value version 1 never writes");
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
  header.placement = placement(config, header.metadata_bytes);
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

}  // namespace

void save(const WindowedFilter& window, const std::filesystem::path& path, const FileState& state) {
  const WindowConfig& config = window.config();
  const Placement where = placement(config, state.metadata.size());
  detail::write_file_atomically(path, [&](File& out) {
    // The header goes in last, once the checksum of what follows it is known.
    std::vector<std::byte> prefix(where.first);
    std::copy(state.metadata.begin(), state.metadata.end(), prefix.begin() + kHeaderBytes);
    out.write_all(prefix);
    DataChecksum checksum;
    checksum.update(state.metadata);
    const std::vector<std::byte> padding(where.stride - config.generation.size_bytes());
    for (const Filter* generation : WindowAccess::oldest_first(window)) {
      const detail::HostBits bits(*generation);
      checksum.update(bits.bytes());
      out.write_all(bits.bytes());
      out.write_all(padding);
    }
    const HeaderBytes header =
        encode_header(config, WindowAccess::clock(window), state, checksum.digest());
    out.write_at(header, 0);
  });
}

WindowedFilter load_window(const std::filesystem::path& path, FileState* state,
                           const Options& options) {
  const std::string source = path.string();
  File file(path, O_RDONLY);
  const std::uint64_t size = file.regular_file_size();
  HeaderBytes header_bytes{};
  file.read_exactly(header_bytes.data(), std::min<std::uint64_t>(size, kHeaderBytes), 0);
  const Header header = decode_header(header_bytes.data(), size, source);
  std::vector<std::byte> metadata(header.metadata_bytes);
  file.read_exactly(metadata.data(), metadata.size(), kHeaderBytes);

  WindowedFilter window(header.config, options);
  DataChecksum checksum;
  checksum.update(metadata);
  std::uint64_t offset = header.placement.first;
  for (Filter& generation : WindowAccess::ring_oldest_first(window)) {
    detail::read_filter_bits(file, offset, generation, checksum);
    offset += header.placement.stride;
  }
  if (checksum.digest() != header.data_checksum) {
    throw FormatError(source + ": data checksum mismatch: the generations or metadata are corrupt");
  }
  WindowAccess::set_clock(window, header.clock);
  if (state != nullptr) {
    state->keys_inserted = header.keys_inserted;
    state->metadata = std::move(metadata);
  }
  return window;
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
