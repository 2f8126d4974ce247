// Grown filter files and the sizing record (docs/FORMAT.md, "Carried filters"): one generation
// is saved as a plain filter file whose metadata starts with the sizing record, more as a grown
// filter file whose images are complete filter files.
#include <fcntl.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <string_view>
#include <utility>

#include "bulkbloom/grown_filter.hpp"
#include "bulkbloom/incremental.hpp"
#include "core/filter_access.hpp"
#include "core/key_mode.hpp"
#include "grown/grown_access.hpp"
#include "persist/file_io.hpp"
#include "persist/incremental_detail.hpp"

namespace bulkbloom {
namespace {

using detail::File;
using detail::get;
using detail::kGrownMagic;
using detail::kPayloadAlignment;
using detail::kWindowMagic;
using detail::put;
using detail::round_up;
using Generation = GrownFilter::Generation;

constexpr std::uint64_t kGrownHeaderBytes = 64;
constexpr detail::HeaderCodec kGrownCodec{kGrownMagic, 1, kGrownHeaderBytes,
                                          "bulkbloom grown filter", "grown filter format"};
constexpr std::uint64_t kTableEntryBytes = 16;

// The fields after the frame (magic, version, header_bytes) of the 64-byte header of a grown
// filter file; the header checksum is its last 8 bytes.
constexpr detail::Field<std::uint32_t> kGenerations{16};
constexpr detail::Reserved kReserved20{20, 24};
constexpr detail::Field<std::uint64_t> kKeysInserted{24};
constexpr detail::Field<std::uint64_t> kMetadataBytes{32};
constexpr detail::Field<std::uint64_t> kDataChecksum{40};
constexpr detail::Reserved kReserved48{48, 56};

// The sizing record: text lines before the caller's bytes in a grown filter's metadata.
constexpr std::string_view kSizingMagic = "bulkbloom-carried-filter 1\n";
constexpr std::string_view kSizingEnd = "end\n";

std::string exact(double value) {
  char text[40];
  std::snprintf(text, sizeof text, "%.17g", value);
  return text;
}

struct Sizing {
  double promise = 0.0;
  std::string key_format;
  std::vector<std::pair<std::uint64_t, double>> generations;  // capacity, target
};

std::vector<std::byte> encode_metadata(const Sizing& sizing,
                                       std::span<const std::byte> caller_metadata) {
  std::string text(kSizingMagic);
  text += "fpr=" + exact(sizing.promise) + "\n";
  text += "key_format=" + sizing.key_format + "\n";
  for (const auto& [capacity, target] : sizing.generations) {
    text += "generation=" + std::to_string(capacity) + " " + exact(target) + "\n";
  }
  text += kSizingEnd;
  std::vector<std::byte> bytes(text.size() + caller_metadata.size());
  std::memcpy(bytes.data(), text.data(), text.size());
  std::copy(caller_metadata.begin(), caller_metadata.end(), bytes.begin() + text.size());
  return bytes;
}

// Splits metadata into the sizing record and the caller's bytes. False when there is no sizing
// record (a filter of an older bulkbloom: all of it is the caller's).
bool decode_metadata(std::span<const std::byte> metadata, const std::string& source, Sizing& sizing,
                     std::vector<std::byte>& caller) {
  const std::string_view text(reinterpret_cast<const char*>(metadata.data()), metadata.size());
  if (!text.starts_with(kSizingMagic)) {
    caller.assign(metadata.begin(), metadata.end());
    return false;
  }
  const auto bad = [&](const std::string& why) {
    return FormatError(source + ": bad sizing record: " + why);
  };
  std::size_t pos = kSizingMagic.size();
  bool ended = false;
  while (!ended) {
    const std::size_t end = text.find('\n', pos);
    if (end == std::string_view::npos) throw bad("no end line");
    const std::string line(text.substr(pos, end - pos));
    pos = end + 1;
    if (line + "\n" == kSizingEnd) {
      ended = true;
    } else if (line.starts_with("fpr=")) {
      sizing.promise = std::strtod(line.c_str() + 4, nullptr);
    } else if (line.starts_with("key_format=")) {
      sizing.key_format = line.substr(11);
    } else if (line.starts_with("generation=")) {
      char* rest = nullptr;
      const std::uint64_t capacity = std::strtoull(line.c_str() + 11, &rest, 10);
      const double target = std::strtod(rest, nullptr);
      sizing.generations.emplace_back(capacity, target);
    } else {
      throw bad("unknown line '" + line + "'");
    }
  }
  if (!(sizing.promise > 0.0 && sizing.promise < 1.0)) throw bad("the rate is not in (0, 1)");
  for (const auto& [capacity, target] : sizing.generations) {
    if (capacity == 0 || !(target > 0.0 && target < 1.0)) throw bad("a generation's sizing");
  }
  caller.assign(metadata.begin() + static_cast<std::ptrdiff_t>(pos), metadata.end());
  return true;
}

// Where each generation's filter image lies in a grown filter file.
struct Extent {
  std::uint64_t offset;
  std::uint64_t bytes;
};

std::vector<Extent> extents(std::uint64_t first, const std::vector<std::uint64_t>& sizes) {
  std::vector<Extent> out;
  std::uint64_t offset = first;
  for (const std::uint64_t bytes : sizes) {
    out.push_back({offset, bytes});
    offset = round_up(offset + bytes, kPayloadAlignment);
  }
  return out;
}

std::uint64_t images_start(std::size_t generations, std::uint64_t metadata_bytes) {
  return round_up(kGrownHeaderBytes + kTableEntryBytes * generations + metadata_bytes,
                  kPayloadAlignment);
}

// A file's bytes held in memory, read as a File is.
struct ImageBytes {
  std::span<const std::byte> bytes;

  std::uint64_t size() const { return bytes.size(); }
  void read_exactly(std::byte* out, std::uint64_t n, std::uint64_t offset) const {
    if (offset > bytes.size() || n > bytes.size() - offset) {
      throw FormatError("grown filter image: truncated");
    }
    std::copy_n(bytes.data() + offset, n, out);
  }
};

std::uint64_t size_of(const File& file) {
  return file.regular_file_size();
}
std::uint64_t size_of(const ImageBytes& image) {
  return image.size();
}

// The filter file image of `bytes` bytes at `offset`, fully verified.
Filter read_generation(const File& file, std::uint64_t offset, std::uint64_t bytes,
                       const std::string& name, FileState& state, const Options& options) {
  return detail::read_filter_image(file, offset, bytes, name, &state, options);
}
Filter read_generation(const ImageBytes& image, std::uint64_t offset, std::uint64_t bytes,
                       const std::string& name, FileState& state, const Options& options) {
  return load(image.bytes.subspan(offset, bytes), &state, options, name);
}

// The generations and metadata of the filter file or grown filter file in `source`.
template <typename Source>
std::vector<Generation> read_generations(const Source& source, const std::string& name,
                                         const Options& options, std::vector<std::byte>& metadata) {
  const std::uint64_t size = size_of(source);
  std::array<std::byte, kGrownHeaderBytes> header{};
  source.read_exactly(header.data(), std::min(size, kGrownHeaderBytes), 0);
  std::vector<Generation> generations;
  if (size >= sizeof kWindowMagic && std::memcmp(header.data(), kWindowMagic, 8) == 0) {
    throw FormatError(name + " is a sliding window's file, not a filter");
  }
  if (size < sizeof kGrownMagic || std::memcmp(header.data(), kGrownMagic, 8) != 0) {
    // A filter file (its reader names any problem, a bad magic included).
    FileState state;
    Filter filter = read_generation(source, 0, size, name, state, options);
    metadata = std::move(state.metadata);
    generations.push_back({std::move(filter), 0, 0.0, state.keys_inserted});
    return generations;
  }
  const std::byte* h = header.data();
  const auto fail = [&](const std::string& problem) { return detail::format_error(name, problem); };
  kGrownCodec.check_frame(h, size, name);
  const auto count = get(h, kGenerations);
  const auto metadata_bytes = get(h, kMetadataBytes);
  if (!kGrownCodec.reserved_are_zero(h, {kReserved20, kReserved48})) {
    throw fail("header fields reserved in version 1 are not zero");
  }
  if (count < 2 || count > GrownFilter::kMaxGenerations) {
    throw fail("generations " + std::to_string(count) + " is out of range 2 to 64");
  }
  if (metadata_bytes > size) throw fail("metadata does not fit in the file");
  std::vector<std::byte> table_and_metadata(kTableEntryBytes * count + metadata_bytes);
  if (kGrownHeaderBytes + table_and_metadata.size() > size) throw fail("truncated table");
  source.read_exactly(table_and_metadata.data(), table_and_metadata.size(), kGrownHeaderBytes);
  detail::DataChecksum checksum;
  checksum.update(table_and_metadata);
  if (checksum.digest() != get(h, kDataChecksum)) {
    throw fail("data checksum mismatch: the generation table or metadata is corrupt");
  }
  std::vector<std::uint64_t> sizes;
  for (std::uint32_t i = 0; i < count; ++i) {
    sizes.push_back(get<std::uint64_t>(table_and_metadata.data(), kTableEntryBytes * i + 8));
  }
  const auto where = extents(images_start(count, metadata_bytes), sizes);
  for (std::uint32_t i = 0; i < count; ++i) {
    const auto offset = get<std::uint64_t>(table_and_metadata.data(), kTableEntryBytes * i);
    // Checked without forming offset + bytes, which a corrupt length would wrap past 2^64.
    if (offset != where[i].offset || where[i].bytes > size ||
        where[i].offset > size - where[i].bytes) {
      throw fail("generation " + std::to_string(i) + " lies outside the file");
    }
  }
  if (where.back().offset + where.back().bytes != size) {
    throw fail("the file length disagrees with its generation table");
  }
  metadata.assign(table_and_metadata.begin() + kTableEntryBytes * count, table_and_metadata.end());
  for (std::uint32_t i = 0; i < count; ++i) {
    FileState state;
    Filter filter =
        read_generation(source, where[i].offset, where[i].bytes,
                        name + " (generation " + std::to_string(i) + ")", state, options);
    generations.push_back({std::move(filter), 0, 0.0, state.keys_inserted});
  }
  return generations;
}

// The distinct keys `filter`'s bits hold, as estimated from them (its bit count when saturated).
std::uint64_t keys_in_bits(const Filter& filter) {
  const double estimate = filter.estimated_count();  // infinite when saturated
  return std::isfinite(estimate) ? static_cast<std::uint64_t>(std::llround(estimate))
                                 : filter.layout().size_bytes() * 8;
}

template <typename Source>
GrownFilter read_grown(const Source& source, const std::string& name, const Options& options,
                       std::vector<std::byte>* caller_metadata, double default_fpr) {
  std::vector<std::byte> metadata;
  std::vector<Generation> generations = read_generations(source, name, options, metadata);
  Sizing sizing;
  std::vector<std::byte> caller;
  const bool has_sizing = decode_metadata(metadata, name, sizing, caller);
  if (has_sizing && sizing.generations.size() != generations.size()) {
    throw FormatError(name + ": bad sizing record: " + std::to_string(sizing.generations.size()) +
                      " generations described, " + std::to_string(generations.size()) +
                      " in the file");
  }
  if (!has_sizing) {
    // A filter saved without a sizing record: what it promised was not recorded. Its bits tell
    // how many keys it holds (its saved count misses those it took for repeats once full).
    sizing.promise = default_fpr;
    Generation& only = generations.front();
    only.keys = std::max(only.keys, keys_in_bits(only.filter));
    sizing.generations.emplace_back(detail::capacity_at(only.filter.layout(), default_fpr),
                                    GrownFilter::generation_target(default_fpr, 0));
  }
  for (std::size_t i = 0; i < generations.size(); ++i) {
    generations[i].capacity = sizing.generations[i].first;
    generations[i].target = sizing.generations[i].second;
    // A count of 0 beside bits that hold keys is a caller that kept no count (Filter's save()
    // stores the caller's keys_inserted, 0 unless set): the bits tell how many it holds.
    if (generations[i].keys == 0) generations[i].keys = keys_in_bits(generations[i].filter);
  }
  if (caller_metadata != nullptr) *caller_metadata = std::move(caller);
  return detail::GrownAccess::loaded(std::move(generations), sizing.promise, sizing.key_format,
                                     options);
}

// The bytes of a grown filter file up to its first image, and where each image goes.
struct GrownPrefix {
  std::vector<std::byte> bytes;
  std::vector<Extent> where;
};

GrownPrefix grown_prefix(const std::vector<Generation>& generations, std::uint64_t keys,
                         const std::vector<std::byte>& metadata) {
  std::vector<std::uint64_t> sizes;
  for (const Generation& g : generations) {
    sizes.push_back(detail::filter_image_bytes(g.filter.layout(), 0));
  }
  const std::uint64_t first = images_start(generations.size(), metadata.size());
  GrownPrefix prefix{std::vector<std::byte>(first), extents(first, sizes)};
  std::byte* table = prefix.bytes.data() + kGrownHeaderBytes;
  for (std::size_t i = 0; i < prefix.where.size(); ++i) {
    put<std::uint64_t>(table, kTableEntryBytes * i, prefix.where[i].offset);
    put<std::uint64_t>(table, kTableEntryBytes * i + 8, prefix.where[i].bytes);
  }
  std::copy(metadata.begin(), metadata.end(), table + kTableEntryBytes * prefix.where.size());
  detail::DataChecksum checksum;
  checksum.update(table, kTableEntryBytes * prefix.where.size() + metadata.size());
  std::byte* h = prefix.bytes.data();
  kGrownCodec.start(h);
  put(h, kGenerations, static_cast<std::uint32_t>(generations.size()));
  put(h, kKeysInserted, keys);
  put(h, kMetadataBytes, metadata.size());
  put(h, kDataChecksum, checksum.digest());
  kGrownCodec.seal(h);
  return prefix;
}

// Writes a grown filter file of `generations` through `write_bytes` and `write_image`.
template <typename WriteBytes, typename WriteImage>
void write_grown(const std::vector<Generation>& generations, std::uint64_t keys,
                 const std::vector<std::byte>& metadata, WriteBytes write_bytes,
                 WriteImage write_image) {
  const GrownPrefix prefix = grown_prefix(generations, keys, metadata);
  write_bytes(std::span<const std::byte>(prefix.bytes));
  for (std::size_t i = 0; i < generations.size(); ++i) {
    write_image(generations[i].filter, FileState{generations[i].keys, {}});
    if (i + 1 < generations.size()) {
      const std::uint64_t end = prefix.where[i].offset + prefix.where[i].bytes;
      write_bytes(std::vector<std::byte>(prefix.where[i + 1].offset - end));
    }
  }
}

Sizing sizing_of(const GrownFilter& filter) {
  Sizing sizing{filter.promised_fpr(), filter.key_format(), {}};
  for (const Generation& g : filter.generations()) {
    sizing.generations.emplace_back(g.capacity, g.target);
  }
  return sizing;
}

// A grown filter's snapshot metadata (bulkbloom/incremental.hpp, docs/FORMAT.md "Incremental
// state"): the magic, the generation count N, per generation its layout and keys, the length and
// bytes of its file's metadata (sizing record, then the caller's), and the XXH3-64 of all before.
constexpr std::uint64_t kSnapshotHeadBytes = 16;
constexpr std::uint64_t kSnapshotEntryBytes = 32;

std::vector<std::byte> grown_snapshot_metadata(const GrownFilter& filter,
                                               std::span<const std::byte> caller_metadata) {
  const std::vector<std::byte> metadata = encode_metadata(sizing_of(filter), caller_metadata);
  const auto& generations = filter.generations();
  std::vector<std::byte> bytes(kSnapshotHeadBytes + kSnapshotEntryBytes * generations.size() + 8);
  std::memcpy(bytes.data(), detail::kGrownSnapshotMagic, 8);
  put(bytes.data(), 8, static_cast<std::uint32_t>(1));  // version
  put(bytes.data(), 12, static_cast<std::uint32_t>(generations.size()));
  for (std::size_t i = 0; i < generations.size(); ++i) {
    std::byte* entry = bytes.data() + kSnapshotHeadBytes + kSnapshotEntryBytes * i;
    const Layout& layout = generations[i].filter.layout();
    put(entry, 0, static_cast<std::uint8_t>(layout.shape));
    put(entry, 1, static_cast<std::uint8_t>(layout.hash));
    put(entry, 2, static_cast<std::uint8_t>(layout.index));
    put(entry, 8, layout.num_blocks);
    put(entry, 16, layout.seed);
    put(entry, 24, generations[i].keys);
  }
  put(bytes.data(), bytes.size() - 8, static_cast<std::uint64_t>(metadata.size()));
  bytes.insert(bytes.end(), metadata.begin(), metadata.end());
  detail::DataChecksum checksum;
  checksum.update(bytes);
  bytes.resize(bytes.size() + 8);
  put(bytes.data(), bytes.size() - 8, checksum.digest());
  return bytes;
}

// A decoded grown filter snapshot's metadata.
struct GrownSnapshot {
  std::vector<std::pair<Layout, std::uint64_t>> generations;  // layout, keys
  Sizing sizing;
  std::vector<std::byte> caller;
};

GrownSnapshot read_grown_snapshot(std::span<const std::byte> bytes, const std::string& source) {
  const auto fail = [&](const std::string& problem) {
    return detail::format_error(source, problem);
  };
  if (bytes.size() < kSnapshotHeadBytes + 16 ||
      std::memcmp(bytes.data(), detail::kGrownSnapshotMagic, 8) != 0) {
    throw fail("not a grown filter snapshot's metadata (bad magic bytes or too short)");
  }
  detail::DataChecksum checksum;
  checksum.update(bytes.first(bytes.size() - 8));
  if (checksum.digest() != get<std::uint64_t>(bytes.data(), bytes.size() - 8)) {
    throw fail("checksum mismatch: the snapshot's metadata is corrupt");
  }
  if (const auto version = get<std::uint32_t>(bytes.data(), 8); version != 1) {
    throw fail("grown filter snapshot version " + std::to_string(version) +
               " is not supported: this bulkbloom reads version 1");
  }
  const auto count = get<std::uint32_t>(bytes.data(), 12);
  if (count < 1 || count > GrownFilter::kMaxGenerations) {
    throw fail("generations " + std::to_string(count) + " is out of range 1 to 64");
  }
  const std::uint64_t table_end = kSnapshotHeadBytes + kSnapshotEntryBytes * count;
  if (table_end + 16 > bytes.size() ||
      get<std::uint64_t>(bytes.data(), table_end) != bytes.size() - table_end - 16) {
    throw fail("its length disagrees with its generation table and metadata length");
  }
  GrownSnapshot snapshot;
  for (std::uint32_t i = 0; i < count; ++i) {
    const std::byte* entry = bytes.data() + kSnapshotHeadBytes + kSnapshotEntryBytes * i;
    Layout layout;
    layout.shape = static_cast<Shape>(get<std::uint8_t>(entry, 0));
    layout.hash = static_cast<KeyHash>(get<std::uint8_t>(entry, 1));
    layout.index = static_cast<BlockIndex>(get<std::uint8_t>(entry, 2));
    layout.num_blocks = get<std::uint64_t>(entry, 8);
    layout.seed = get<std::uint64_t>(entry, 16);
    try {
      layout.validate();
    } catch (const std::invalid_argument& e) {
      throw fail("generation " + std::to_string(i) + ": " + e.what());
    }
    snapshot.generations.emplace_back(layout, get<std::uint64_t>(entry, 24));
  }
  const auto metadata = bytes.subspan(table_end + 8, bytes.size() - table_end - 16);
  if (!decode_metadata(metadata, source, snapshot.sizing, snapshot.caller) ||
      snapshot.sizing.generations.size() != count) {
    throw fail("its sizing record does not describe its " + std::to_string(count) + " generations");
  }
  return snapshot;
}

std::vector<PartId> grown_part_ids(const std::vector<std::pair<Layout, std::uint64_t>>& layouts) {
  std::vector<PartId> ids;
  for (std::size_t i = 0; i < layouts.size(); ++i) {
    ids.push_back({static_cast<std::int64_t>(i), 0, layouts[i].first.num_blocks});
  }
  return ids;
}

}  // namespace

void enable_change_log(GrownFilter& filter) {
  detail::GrownAccess::enable_log(filter);
}

StateSnapshot take_snapshot(GrownFilter& filter, std::span<const std::byte> caller_metadata) {
  StateSnapshot snapshot;
  snapshot.metadata = grown_snapshot_metadata(filter, caller_metadata);
  for (std::size_t i = 0; i < filter.generation_count(); ++i) {
    snapshot.parts.push_back(
        {static_cast<std::int64_t>(i), 0, filter.generations()[i].filter.layout().num_blocks});
  }
  detail::GrownAccess::TakenLog taken = detail::GrownAccess::take_log(filter);
  if (taken.logging) {
    snapshot.change = detail::log_change(taken.from_empty, taken.rewritten);
    snapshot.log = std::move(taken.hashes);
  }
  snapshot.closed = std::move(taken.closed);
  return snapshot;
}

namespace {

// Part `index` of `filter` is one of its generations: std::out_of_range otherwise.
void check_part(const GrownFilter& filter, std::size_t index) {
  if (index >= filter.generation_count()) {
    throw std::out_of_range("part " + std::to_string(index) + " of a grown filter of " +
                            std::to_string(filter.generation_count()) + " parts");
  }
}

}  // namespace

void with_part_bits(const GrownFilter& filter, std::size_t index, const PartSink& sink) {
  check_part(filter, index);
  const detail::HostBits bits(filter.generations()[index].filter);
  sink(bits.bytes());
}

GrownFilter restore_grown(std::span<const std::byte> metadata, const PartFill& fill,
                          std::vector<std::byte>* caller_metadata, const Options& options,
                          const std::string& source) {
  GrownSnapshot snapshot = read_grown_snapshot(metadata, source);
  const std::vector<PartId> ids = grown_part_ids(snapshot.generations);
  std::vector<Generation> generations;
  for (std::size_t i = 0; i < snapshot.generations.size(); ++i) {
    const auto& [layout, keys] = snapshot.generations[i];
    Filter filter(layout, options);
    detail::fill_filter_bits(filter, [&](std::span<std::byte> bits) { fill(i, ids[i], bits); });
    const auto& [capacity, target] = snapshot.sizing.generations[i];
    generations.push_back({std::move(filter), capacity, target, keys});
  }
  if (caller_metadata != nullptr) *caller_metadata = std::move(snapshot.caller);
  return detail::GrownAccess::loaded(std::move(generations), snapshot.sizing.promise,
                                     snapshot.sizing.key_format, options);
}

void replay_log(GrownFilter& filter, std::span<const std::uint64_t> log) {
  replay_log(filter, filter.generation_count() - 1, log);
}

void replay_log(GrownFilter& filter, std::size_t index, std::span<const std::uint64_t> log) {
  check_part(filter, index);
  detail::FilterAccess::engine(detail::GrownAccess::generation(filter, index))
      .insert(log, detail::KeyMode::prehashed);
}

std::vector<PartId> detail::grown_snapshot_parts(std::span<const std::byte> metadata,
                                                 const std::string& source) {
  return grown_part_ids(read_grown_snapshot(metadata, source).generations);
}

std::optional<SizingRecord> read_sizing_record(std::span<const std::byte> metadata,
                                               const std::string& source) {
  Sizing sizing;
  std::vector<std::byte> caller;
  if (!decode_metadata(metadata, source, sizing, caller)) return std::nullopt;
  if (sizing.generations.empty()) throw FormatError(source + ": bad sizing record: no generation");
  return SizingRecord{sizing.promise, sizing.key_format, sizing.generations.front().first};
}

std::vector<std::byte> sizing_record_bytes(const SizingRecord& record,
                                           std::span<const std::byte> caller_metadata) {
  if (!(record.promised_fpr > 0.0 && record.promised_fpr < 1.0) || record.capacity == 0) {
    throw std::invalid_argument(
        "a sizing record needs a capacity of at least 1 and a rate in "
        "(0, 1), got " +
        std::to_string(record.capacity) + " and " + exact(record.promised_fpr));
  }
  const Sizing sizing{record.promised_fpr,
                      record.key_format,
                      {{record.capacity, GrownFilter::generation_target(record.promised_fpr, 0)}}};
  return encode_metadata(sizing, caller_metadata);
}

GrownFilter GrownFilter::load(const std::filesystem::path& path, const Options& options,
                              std::vector<std::byte>* caller_metadata, double default_fpr) {
  const File file(path, O_RDONLY);
  return read_grown(file, path.string(), options, caller_metadata, default_fpr);
}

GrownFilter GrownFilter::load(std::span<const std::byte> bytes, const Options& options,
                              std::vector<std::byte>* caller_metadata, double default_fpr) {
  return read_grown(ImageBytes{bytes}, "grown filter image", options, caller_metadata, default_fpr);
}

void GrownFilter::save(const std::filesystem::path& path,
                       std::span<const std::byte> caller_metadata) const {
  const std::vector<std::byte> metadata = encode_metadata(sizing_of(*this), caller_metadata);
  if (generations_.size() == 1) {
    bulkbloom::save(generations_.front().filter, path, {generations_.front().keys, metadata});
    return;
  }
  detail::write_file_atomically(path, [&](File& out) {
    write_grown(
        generations_, keys(), metadata, [&](std::span<const std::byte> b) { out.write_all(b); },
        [&](const Filter& f, const FileState& s) { detail::write_filter_image(out, f, s); });
  });
}

std::vector<std::byte> GrownFilter::to_file_bytes(
    std::span<const std::byte> caller_metadata) const {
  const std::vector<std::byte> metadata = encode_metadata(sizing_of(*this), caller_metadata);
  if (generations_.size() == 1) {
    return bulkbloom::to_file_bytes(generations_.front().filter,
                                    {generations_.front().keys, metadata});
  }
  std::vector<std::byte> out;
  const auto append = [&](std::span<const std::byte> b) {
    out.insert(out.end(), b.begin(), b.end());
  };
  write_grown(generations_, keys(), metadata, append,
              [&](const Filter& f, const FileState& s) { append(bulkbloom::to_file_bytes(f, s)); });
  return out;
}

}  // namespace bulkbloom
