#include "cli/carried_filter.hpp"

#include <fcntl.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <utility>

#include "cli/errors.hpp"
#include "persist/file_io.hpp"

namespace bulkbloom::cli {
namespace {

using detail::File;
using detail::get;
using detail::kGrownMagic;
using detail::kPayloadAlignment;
using detail::kWindowMagic;
using detail::put;
using detail::round_up;

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

// The sizing record: text lines before the caller's bytes in a carried filter's metadata.
constexpr std::string_view kSizingMagic = "bulkbloom-carried-filter 1\n";
constexpr std::string_view kSizingEnd = "end\n";

// Steps of the midpoint rule per batch when integrating the newest generation's model over the
// batch's fill: the curve is smooth over one batch.
constexpr int kFprSteps = 4;

std::string exact(double value) {
  char text[40];
  std::snprintf(text, sizeof text, "%.17g", value);
  return text;
}

std::string count_text(std::uint64_t value) {
  return std::to_string(value);
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
    text += "generation=" + count_text(capacity) + " " + exact(target) + "\n";
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

// The most keys `layout` holds with its modelled rate at or under `fpr` (at least 1).
std::uint64_t capacity_at(const Layout& layout, double fpr) {
  std::uint64_t low = 1, high = layout.size_bytes() * 8;
  if (layout.expected_fpr(high) <= fpr) return high;
  while (high - low > 1) {
    const std::uint64_t mid = low + (high - low) / 2;
    (layout.expected_fpr(mid) <= fpr ? low : high) = mid;
  }
  return low;
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

}  // namespace

namespace {

bool starts_with_magic(const std::filesystem::path& path, const std::byte (&expected)[8]) {
  const File file(path, O_RDONLY);
  if (file.regular_file_size() < sizeof expected) return false;
  std::byte magic[sizeof expected];
  file.read_exactly(magic, sizeof magic, 0);
  return std::memcmp(magic, expected, sizeof magic) == 0;
}

}  // namespace

std::optional<SizingRecord> read_sizing_record(std::span<const std::byte> metadata,
                                               const std::string& source) {
  Sizing sizing;
  std::vector<std::byte> caller;
  if (!decode_metadata(metadata, source, sizing, caller)) return std::nullopt;
  if (sizing.generations.empty()) throw FormatError(source + ": bad sizing record: no generation");
  return SizingRecord{sizing.promise, sizing.key_format, sizing.generations.front().first};
}

bool is_grown_filter_file(const std::filesystem::path& path) {
  return starts_with_magic(path, kGrownMagic);
}

bool is_window_file(const std::filesystem::path& path) {
  return starts_with_magic(path, kWindowMagic);
}

double generation_target(double promise, std::size_t index) {
  return promise * 0.75 * std::pow(0.25, static_cast<double>(index));
}

CarriedFilter::CarriedFilter(const Layout& layout, std::uint64_t capacity, double fpr,
                             std::string key_format, const Options& options)
    : promise_(fpr), key_format_(std::move(key_format)), options_(options) {
  generations_.push_back({Filter(layout, options), capacity, generation_target(fpr, 0), 0});
}

CarriedFilter::CarriedFilter(std::vector<Generation> generations, double promise,
                             std::string key_format, const Options& options)
    : generations_(std::move(generations)),
      promise_(promise),
      key_format_(std::move(key_format)),
      options_(options) {
  refresh_older_fpr();
}

CarriedFilter CarriedFilter::load(const std::filesystem::path& path, double default_fpr,
                                  const Options& options, std::vector<std::byte>* caller_metadata) {
  const std::string source = path.string();
  if (is_window_file(path)) {
    throw FormatError(source +
                      " is a sliding window's file, not a filter: dedup reads it with --window "
                      "and the options it was made with, info describes it");
  }
  const File file(path, O_RDONLY);
  const std::uint64_t size = file.regular_file_size();
  std::array<std::byte, kGrownHeaderBytes> header{};
  file.read_exactly(header.data(), std::min(size, kGrownHeaderBytes), 0);

  std::vector<Generation> generations;
  std::vector<std::byte> metadata;
  if (size < sizeof kGrownMagic || std::memcmp(header.data(), kGrownMagic, 8) != 0) {
    // A filter file (its reader names any problem, a bad magic included).
    FileState state;
    Filter filter = detail::read_filter_image(file, 0, size, source, &state, options);
    metadata = std::move(state.metadata);
    generations.push_back({std::move(filter), 0, 0.0, state.keys_inserted});
  } else {
    const std::byte* h = header.data();
    const auto fail = [&](const std::string& problem) {
      return detail::format_error(source, problem);
    };
    kGrownCodec.check_frame(h, size, source);
    const auto count = get(h, kGenerations);
    const auto metadata_bytes = get(h, kMetadataBytes);
    if (!kGrownCodec.reserved_are_zero(h, {kReserved20, kReserved48})) {
      throw fail("header fields reserved in version 1 are not zero");
    }
    if (count < 2 || count > kMaxGenerations) {
      throw fail("generations " + std::to_string(count) + " is out of range 2 to 64");
    }
    if (metadata_bytes > size) throw fail("metadata does not fit in the file");
    std::vector<std::byte> table_and_metadata(kTableEntryBytes * count + metadata_bytes);
    if (kGrownHeaderBytes + table_and_metadata.size() > size) throw fail("truncated table");
    file.read_exactly(table_and_metadata.data(), table_and_metadata.size(), kGrownHeaderBytes);
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
      if (offset != where[i].offset || where[i].offset + where[i].bytes > size) {
        throw fail("generation " + std::to_string(i) + " lies outside the file");
      }
    }
    if (where.back().offset + where.back().bytes != size) {
      throw fail("the file length disagrees with its generation table");
    }
    metadata.assign(table_and_metadata.begin() + kTableEntryBytes * count,
                    table_and_metadata.end());
    for (std::uint32_t i = 0; i < count; ++i) {
      FileState state;
      Filter filter = detail::read_filter_image(file, where[i].offset, where[i].bytes,
                                                source + " (generation " + std::to_string(i) + ")",
                                                &state, options);
      generations.push_back({std::move(filter), 0, 0.0, state.keys_inserted});
    }
  }

  Sizing sizing;
  std::vector<std::byte> caller;
  const bool has_sizing = decode_metadata(metadata, source, sizing, caller);
  if (has_sizing && sizing.generations.size() != generations.size()) {
    throw FormatError(source + ": bad sizing record: " + std::to_string(sizing.generations.size()) +
                      " generations described, " + std::to_string(generations.size()) +
                      " in the file");
  }
  if (!has_sizing) {
    // A filter of an older bulkbloom: what it promised was not recorded. Its bits tell how many
    // keys it holds (its saved count misses those it took for repeats once full).
    sizing.promise = default_fpr;
    Generation& only = generations.front();
    const double estimate = only.filter.estimated_count();  // infinite when saturated
    only.keys = std::max(only.keys, std::isfinite(estimate)
                                        ? static_cast<std::uint64_t>(std::llround(estimate))
                                        : only.filter.layout().size_bytes() * 8);
    sizing.generations.emplace_back(capacity_at(only.filter.layout(), default_fpr),
                                    generation_target(default_fpr, 0));
  }
  for (std::size_t i = 0; i < generations.size(); ++i) {
    generations[i].capacity = sizing.generations[i].first;
    generations[i].target = sizing.generations[i].second;
  }
  if (caller_metadata != nullptr) *caller_metadata = std::move(caller);
  CarriedFilter loaded(std::move(generations), sizing.promise, sizing.key_format, options);
  loaded.loaded_past_promise_ = loaded.current_fpr() > loaded.promise_;
  return loaded;
}

void CarriedFilter::save(const std::filesystem::path& path,
                         std::span<const std::byte> caller_metadata) const {
  Sizing sizing{promise_, key_format_, {}};
  for (const Generation& g : generations_) sizing.generations.emplace_back(g.capacity, g.target);
  const std::vector<std::byte> metadata = encode_metadata(sizing, caller_metadata);
  if (generations_.size() == 1) {
    bulkbloom::save(generations_.front().filter, path, {generations_.front().keys, metadata});
    return;
  }
  std::vector<std::uint64_t> sizes;
  for (const Generation& g : generations_) {
    sizes.push_back(detail::filter_image_bytes(g.filter.layout(), 0));
  }
  const std::uint64_t first = images_start(generations_.size(), metadata.size());
  const auto where = extents(first, sizes);
  std::vector<std::byte> prefix(first);
  std::byte* table = prefix.data() + kGrownHeaderBytes;
  for (std::size_t i = 0; i < where.size(); ++i) {
    put<std::uint64_t>(table, kTableEntryBytes * i, where[i].offset);
    put<std::uint64_t>(table, kTableEntryBytes * i + 8, where[i].bytes);
  }
  std::copy(metadata.begin(), metadata.end(), table + kTableEntryBytes * where.size());
  detail::DataChecksum checksum;
  checksum.update(table, kTableEntryBytes * where.size() + metadata.size());
  std::byte* h = prefix.data();
  kGrownCodec.start(h);
  put(h, kGenerations, static_cast<std::uint32_t>(generations_.size()));
  put(h, kKeysInserted, keys());
  put(h, kMetadataBytes, metadata.size());
  put(h, kDataChecksum, checksum.digest());
  kGrownCodec.seal(h);
  detail::write_file_atomically(path, [&](File& out) {
    out.write_all(prefix);
    for (std::size_t i = 0; i < generations_.size(); ++i) {
      detail::write_filter_image(out, generations_[i].filter, {generations_[i].keys, {}});
      if (i + 1 < generations_.size()) {
        const std::uint64_t end = where[i].offset + where[i].bytes;
        out.write_all(std::vector<std::byte>(where[i + 1].offset - end));
      }
    }
  });
}

void CarriedFilter::set_growth(OnFull on_full, std::uint64_t expected_keys, std::uint64_t keys_done,
                               std::string name) {
  on_full_ = on_full;
  expected_keys_ = expected_keys;
  keys_seen_ = keys_done;
  name_ = std::move(name);
}

void CarriedFilter::merge(const CarriedFilter& other, const std::string& other_name) {
  if (generations_.size() != 1 || other.generations_.size() != 1) {
    throw std::logic_error("CarriedFilter::merge takes filters of one generation");
  }
  if (!other.key_format_.empty() && !hashes_like(RecordFormat::parse(other.key_format_))) {
    throw Error(other_name + " holds " + other.key_format_ +
                " keys, which hash differently from the " + key_format_ +
                " keys of the filters before it: the union would not find the repeats of either "
                "kind of key read as the other");
  }
  Generation& mine = generations_.front();
  const Generation& theirs = other.generations_.front();
  mine.filter.merge(theirs.filter);
  // The saved count of a union is not the sum of the parts' counts; the bits estimate it. A
  // saturated union estimates to infinity: its count is then at least every part's.
  mine.keys = std::max(mine.keys, theirs.keys);
  const double estimate = mine.filter.estimated_count();
  if (std::isfinite(estimate))
    mine.keys = std::max(mine.keys, static_cast<std::uint64_t>(estimate));
  if (other.promise_ < promise_) {
    promise_ = other.promise_;
    mine.target = generation_target(promise_, 0);
    mine.capacity = capacity_at(mine.filter.layout(), mine.target);
  }
  if (key_format_.empty()) key_format_ = other.key_format_;
}

bool CarriedFilter::hashes_like(const RecordFormat& format) const {
  return key_format_.empty() ||
         RecordFormat::parse(key_format_).integer_keys() == format.integer_keys();
}

std::uint64_t CarriedFilter::keys() const {
  std::uint64_t total = 0;
  for (const Generation& g : generations_) total += g.keys;
  return total;
}

namespace {

// 1 − Π(1 − p) over `rates`, as −expm1(Σ log1p(−p)): formed directly, a rate below 1e-16 would
// vanish in 1 − p and print as 0.
double any_claims(const std::vector<double>& rates) {
  double log_none_claims = 0.0;
  for (const double p : rates) log_none_claims += std::log1p(-p);
  return -std::expm1(log_none_claims);
}

}  // namespace

double CarriedFilter::current_fpr() const {
  std::vector<double> rates;
  for (const Generation& g : generations_) rates.push_back(g.filter.current_fpr());
  return any_claims(rates);
}

void CarriedFilter::refresh_older_fpr() {
  std::vector<double> rates;
  for (std::size_t i = 0; i + 1 < generations_.size(); ++i) {
    rates.push_back(generations_[i].filter.current_fpr());
  }
  older_fpr_ = any_claims(rates);
}

// Before a batch of `batch_keys` keys: if the newest generation's model could pass its target
// with all the keys no generation holds yet taken as new, add a generation sized for the rest of
// the run's load (or refuse).
void CarriedFilter::make_room(std::uint64_t batch_keys,
                              const std::function<std::uint64_t()>& count_absent) {
  const Generation& newest = generations_.back();
  if (newest.filter.expected_fpr(newest.keys + batch_keys) <= newest.target) return;
  // Near the target, a batch is counted before growing for it: a dump carried into the next run
  // is mostly repeats, and growing for all its records would add a generation (or, under
  // --on-full error, refuse the run) for keys the filter already holds. Those the filter does
  // not hold bound the batch's new keys.
  batch_keys = count_absent();
  if (newest.filter.expected_fpr(newest.keys + batch_keys) <= newest.target) return;
  const std::string sized = "sized for " + count_text(capacity()) +
                            " keys at a false-positive "
                            "rate of " +
                            exact(promise_);
  if (on_full_ == OnFull::error) {
    throw Error(name_ + " is full: it holds " + count_text(keys()) + " keys (" + sized +
                "), and the next batch's " + count_text(batch_keys) +
                " keys it does not hold could pass that rate; without --on-full error it grows");
  }
  const bool replace = newest.keys == 0;  // an empty generation holds nothing: resize it
  if (!replace && generations_.size() == kMaxGenerations) {
    throw Error(name_ + " has grown to " + std::to_string(kMaxGenerations) +
                " generations, the most it may have; start a new filter " + sized);
  }
  const std::uint64_t rest = expected_keys_ > keys_seen_ ? expected_keys_ - keys_seen_ : 0;
  const std::uint64_t capacity = std::max({2 * newest.capacity, batch_keys, rest});
  const double target = replace ? newest.target : newest.target / 4;
  const Layout& first = generations_.front().filter.layout();
  Generation next{Filter(Layout::for_capacity(capacity, target, first.hash, first.seed), options_),
                  capacity, target, 0};
  ++growths_;
  if (replace) {
    generations_.back() = std::move(next);
  } else {
    generations_.push_back(std::move(next));
    refresh_older_fpr();
  }
}

template <typename Key>
void CarriedFilter::contains_older(std::span<const Key> keys, std::span<std::uint8_t> out) const {
  std::fill(out.begin(), out.end(), std::uint8_t{0});
  std::vector<std::uint8_t> found(keys.size());
  for (std::size_t i = 0; i + 1 < generations_.size(); ++i) {
    generations_[i].filter.contains(keys, found);
    for (std::size_t k = 0; k < keys.size(); ++k) out[k] |= found[k];
  }
}

template <typename Key>
void CarriedFilter::contains_all(std::span<const Key> keys, std::span<std::uint8_t> out) const {
  contains_older(keys, out);
  std::vector<std::uint8_t> found(keys.size());
  newest().contains(keys, found);
  for (std::size_t k = 0; k < keys.size(); ++k) out[k] |= found[k];
}

template <typename Key>
std::uint64_t CarriedFilter::dedup(std::span<const Key> keys, std::span<std::uint8_t> is_new) {
  make_room(keys.size(), [&] {
    contains_all(keys, is_new);  // is_new as scratch: written again below
    return static_cast<std::uint64_t>(std::count(is_new.begin(), is_new.end(), std::uint8_t{0}));
  });
  Generation& newest = generations_.back();
  std::uint64_t fresh = 0;
  if (generations_.size() == 1) {
    fresh = newest.filter.insert_if_absent(keys, is_new);
  } else {
    // A key an older generation may hold is not new; the others go into the newest.
    contains_older(keys, is_new);
    std::vector<Key> pending;
    std::vector<std::size_t> where;
    for (std::size_t i = 0; i < keys.size(); ++i) {
      if (is_new[i] == 0) {
        pending.push_back(keys[i]);
        where.push_back(i);
      }
    }
    std::vector<std::uint8_t> flags(pending.size());
    fresh = newest.filter.insert_if_absent(std::span<const Key>(pending), flags);
    std::fill(is_new.begin(), is_new.end(), std::uint8_t{0});
    for (std::size_t j = 0; j < where.size(); ++j) is_new[where[j]] = flags[j];
  }
  // A never-seen key is wrongly dropped when the newest generation (its model over this batch's
  // fill) or an older one (its rate from the bits) claims it.
  double newest_claims = 0.0;
  for (int s = 0; s < kFprSteps; ++s) {
    const double n =
        static_cast<double>(newest.keys) + static_cast<double>(fresh) * (s + 0.5) / kFprSteps;
    newest_claims += newest.filter.expected_fpr(static_cast<std::uint64_t>(n));
  }
  expected_false_drops_ += newest_claims * static_cast<double>(fresh) / kFprSteps;
  if (older_fpr_ > 0.0) {
    const double older = std::min(older_fpr_, 1.0 - 1e-9);
    expected_false_drops_ += static_cast<double>(fresh) * older / (1.0 - older);
  }
  newest.keys += fresh;
  keys_seen_ += keys.size();
  return fresh;
}

std::uint64_t CarriedFilter::insert_if_absent(std::span<const std::uint64_t> keys,
                                              std::span<std::uint8_t> is_new) {
  return dedup(keys, is_new);
}

std::uint64_t CarriedFilter::insert_if_absent(std::span<const std::string_view> keys,
                                              std::span<std::uint8_t> is_new) {
  return dedup(keys, is_new);
}

void CarriedFilter::contains(std::span<const std::uint64_t> keys,
                             std::span<std::uint8_t> out) const {
  contains_all(keys, out);
}

void CarriedFilter::contains(std::span<const std::string_view> keys,
                             std::span<std::uint8_t> out) const {
  contains_all(keys, out);
}

std::string CarriedFilter::describe_generations() const {
  std::string text;
  for (std::size_t i = 0; i < generations_.size(); ++i) {
    const Generation& g = generations_[i];
    char line[320];
    std::snprintf(line, sizeof line,
                  "%sgeneration %zu: %s, sized for %llu keys at %.3g, holds %llu keys, FPR %.3g",
                  i == 0 ? "" : "\n", i, g.filter.layout().describe().c_str(),
                  static_cast<unsigned long long>(g.capacity), g.target,
                  static_cast<unsigned long long>(g.keys), g.filter.current_fpr());
    text += line;
  }
  return text;
}

}  // namespace bulkbloom::cli
