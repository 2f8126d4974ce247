// bulkbloom gen: writes test dumps with a known number of distinct keys and repeats.
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>

#include "cli/args.hpp"
#include "cli/commands.hpp"
#include "cli/output_file.hpp"
#include "cli/record_format.hpp"
#include "core/splitmix64.hpp"

namespace bulkbloom::cli {
namespace {

__extension__ typedef unsigned __int128 Uint128;

constexpr std::size_t kWriteBuffer = std::size_t{4} << 20;

// A bijection of 64-bit values, so distinct ids stay distinct.
constexpr auto mix = detail::splitmix64_mix;

class Random {
 public:
  explicit Random(std::uint64_t seed) : stream_(seed) {}
  std::uint64_t next() { return stream_.next(); }
  double uniform() { return static_cast<double>(next() >> 11) * 0x1p-53; }

 private:
  detail::SplitMix64 stream_;
};

// Picks which earlier distinct id a repeat copies: uniform, or Zipf-skewed towards the oldest
// ids with exponent `skew` (a continuous approximation, exact enough for test data).
class RepeatPicker {
 public:
  explicit RepeatPicker(double skew) : skew_(skew) {}
  std::uint64_t pick(std::uint64_t ids_so_far, Random& rng) const {
    if (skew_ <= 0) return rng.next() % ids_so_far;
    const double n = static_cast<double>(ids_so_far) + 1.0;
    const double u = rng.uniform();
    const double rank =
        std::fabs(skew_ - 1.0) < 1e-9
            ? std::pow(n, u)
            : std::pow(1.0 + u * (std::pow(n, 1.0 - skew_) - 1.0), 1.0 / (1.0 - skew_));
    return std::min(static_cast<std::uint64_t>(rank), ids_so_far) - 1;
  }

 private:
  double skew_;
};

// Appends one record holding `key` (record number `row`) in `format`.
class RecordWriter {
 public:
  RecordWriter(RecordFormat format, OutputFile& out)
      : format_(format), out_(out), max_record_(max_record_bytes(format)) {
    buffer_.resize(std::max(kWriteBuffer, 2 * max_record_));
  }

  void write(std::uint64_t key, std::uint64_t row) {
    if (used_ + max_record_ > buffer_.size()) flush();
    char* p = buffer_.data() + used_;
    switch (format_.kind) {
      case FormatKind::u64:
        std::memcpy(p, &key, 8);
        p += 8;
        break;
      case FormatKind::dec:
        p = std::to_chars(p, p + 20, key).ptr;
        *p++ = '\n';
        break;
      case FormatKind::hex:
        p = std::to_chars(p, p + 16, key, 16).ptr;
        *p++ = '\n';
        break;
      case FormatKind::lines:
        p = uuid(p, key);
        *p++ = '\n';
        break;
      case FormatKind::csv:
      case FormatKind::tsv:
        p = delimited(p, key, row);
        break;
    }
    used_ = static_cast<std::size_t>(p - buffer_.data());
  }

  void flush() {
    out_.write({buffer_.data(), used_});
    used_ = 0;
  }

 private:
  // A random-looking version-4 UUID determined by the key: its first 64 bits are the key with
  // the version nibble folded in, the rest a hash of the key.
  static char* uuid(char* p, std::uint64_t key) {
    const std::uint64_t hi = (key & ~0xF000ull) | 0x4000ull;
    const std::uint64_t lo = (mix(key ^ 0x5851F42D4C957F2Dull) & ~(3ull << 62)) | (2ull << 62);
    char digits[32];
    for (int i = 0; i < 16; ++i) digits[i] = "0123456789abcdef"[(hi >> (60 - 4 * i)) & 0xF];
    for (int i = 0; i < 16; ++i) digits[16 + i] = "0123456789abcdef"[(lo >> (60 - 4 * i)) & 0xF];
    for (int i = 0; i < 32; ++i) {
      if (i == 8 || i == 12 || i == 16 || i == 20) *p++ = '-';
      *p++ = digits[i];
    }
    return p;
  }

  // Columns: the key in column N, the record number in the first other column, and a note
  // (quoted, with a comma, in csv) in the rest; at least three columns.
  char* delimited(char* p, std::uint64_t key, std::uint64_t row) const {
    const bool csv = format_.kind == FormatKind::csv;
    const unsigned columns = std::max(format_.column, 3u);
    bool row_written = false;
    for (unsigned c = 1; c <= columns; ++c) {
      if (c > 1) *p++ = csv ? ',' : '\t';
      if (c == format_.column) {
        p = std::to_chars(p, p + 20, key).ptr;
      } else if (!row_written) {
        p = std::to_chars(p, p + 20, row).ptr;
        row_written = true;
      } else {
        const std::string_view note = csv ? "\"seen, again\"" : "seen again";
        std::memcpy(p, note.data(), note.size());
        p += note.size();
      }
    }
    *p++ = '\n';
    return p;
  }

  // The longest record of `format`: a number is at most 20 digits, a UUID 36 characters, and each
  // csv/tsv column holds a number or the 13-byte note, and a separator; N columns have no bound
  // but memory.
  static std::size_t max_record_bytes(const RecordFormat& format) {
    if (format.kind == FormatKind::csv || format.kind == FormatKind::tsv) {
      return std::size_t{std::max(format.column, 3u)} * 21 + 1;
    }
    return 64;
  }

  RecordFormat format_;
  OutputFile& out_;
  std::size_t max_record_;
  std::string buffer_;
  std::size_t used_ = 0;
};

}  // namespace

int run_gen(const Arguments& args) {
  ArgParser parser("gen [options]",
                   "Writes a dump of COUNT records of which a fraction repeat earlier keys, in "
                   "any input format.\nThe distinct keys come first-seen in order; repeats copy "
                   "an earlier key, uniformly or Zipf-skewed.");
  parser.value("count", "N", "records to write (default 1M)")
      .value("dup-fraction", "F", "fraction of records that repeat an earlier key (default 0.1)")
      .value("zipf", "S",
             "skew repeats towards the oldest keys with Zipf exponent S (default: "
             "uniform)")
      .value("format", "FMT", "u64 (default), lines (UUIDs), dec, hex, csv:N, tsv:N", 'f')
      .value("seed", "N", "random seed (default 1)")
      .value("output", "FILE", "destination (default stdout)", 'o');
  if (!parser.parse(args)) return 0;
  if (!parser.positionals().empty()) {
    throw UsageError("unexpected argument '" + parser.positionals().front() + "'");
  }
  const std::uint64_t count = parser.get_count("count").value_or(1'000'000);
  const double dup_fraction = parser.get_double("dup-fraction").value_or(0.1);
  if (!(dup_fraction >= 0.0 && dup_fraction < 1.0)) {
    throw UsageError("--dup-fraction must be in [0, 1), got " + std::to_string(dup_fraction));
  }
  const double skew = parser.get_double("zipf").value_or(0.0);
  if (!(skew >= 0.0 && skew <= 10.0)) {
    throw UsageError("--zipf must be in [0, 10], got " + std::to_string(skew));
  }
  const RecordFormat format = RecordFormat::parse(parser.get_or("format", "u64"));
  const std::uint64_t seed = parser.get_count("seed").value_or(1);

  // Exactly `distinct` records are new, spread evenly: record i is new when the running quota
  // ceil((i + 1) * distinct / count) goes up.
  const auto distinct =
      count == 0
          ? 0
          : std::max<std::uint64_t>(1, static_cast<std::uint64_t>(std::llround(
                                           static_cast<double>(count) * (1.0 - dup_fraction))));
  const auto quota = [&](std::uint64_t i) {
    return static_cast<std::uint64_t>((static_cast<Uint128>(i) * distinct + count - 1) / count);
  };
  OutputFile out(parser.get_or("output", "-"));
  RecordWriter writer(format, out);
  Random rng(seed);
  const RepeatPicker picker(skew);
  const std::uint64_t key_offset = mix(seed);
  std::uint64_t ids = 0;
  for (std::uint64_t i = 0; i < count; ++i) {
    std::uint64_t id;
    if (quota(i + 1) > ids) {
      id = ids++;
    } else {
      id = picker.pick(ids, rng);
    }
    writer.write(mix(id + key_offset), i + 1);
  }
  writer.flush();
  out.sync();
  out.commit();
  std::fprintf(stderr, "wrote %llu %s records (%llu distinct keys, %llu repeats) to %s\n",
               static_cast<unsigned long long>(count), format.name().c_str(),
               static_cast<unsigned long long>(distinct),
               static_cast<unsigned long long>(count - distinct), out.display_name().c_str());
  return 0;
}

}  // namespace bulkbloom::cli
