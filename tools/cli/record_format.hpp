// Input formats: how a stream splits into records and which bytes of a record are its key.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <string>
#include <string_view>
#include <vector>

namespace bulkbloom::cli {

/// The kinds of record the tool reads and writes.
enum class FormatKind {
  u64,    ///< 8-byte little-endian integers, no separators.
  lines,  ///< Each line is a key, hashed as bytes.
  dec,    ///< Each line is a decimal integer key.
  hex,    ///< Each line is a hexadecimal integer key (optional 0x).
  csv,    ///< Column N of comma-separated records (RFC 4180); whole records are kept.
  tsv,    ///< Column N of tab-separated records.
};

/// A format as written on the command line: "u64", "lines", "dec", "hex", "csv:N", "tsv:N".
struct RecordFormat {
  FormatKind kind = FormatKind::u64;
  unsigned column = 0;       ///< 1-based key column for csv and tsv.
  unsigned time_column = 0;  ///< 1-based event-time column for csv and tsv; 0 for none.
  /// csv / tsv: the first line of each input is a header: never hashed, and the first input's
  /// is written once at the top of each output.
  bool header = false;
  /// Event times above this are bad records (a bound on the window's clock).
  std::int64_t latest_time = INT64_MAX;
  /// A record whose event time is missing, unparseable or above latest_time is kept as a
  /// refused record (ParsedRecords::refusals, for dedup --refused) rather than bad input.
  bool refuse_bad_times = false;

  /// Parses a format name; throws UsageError listing the accepted names.
  static RecordFormat parse(std::string_view name);
  /// The name parse() accepts.
  std::string name() const;
  /// True for formats whose keys are integers (hashed as u64, interchangeable across formats).
  bool integer_keys() const;
};

/// Why a record with an event time was set aside undecided (dedup --refused).
enum class TimeRefusal : std::uint8_t {
  none,     ///< Not refused.
  missing,  ///< No event time (missing or unparseable).
  future,   ///< Later than now + --max-future.
  late,     ///< More than --lateness behind the window's clock (decided by the window).
};

/// A refused record's flag in a dedup scan, where 1 is kept and 0 dropped: 2, 3 or 4.
constexpr std::uint8_t refused_flag(TimeRefusal why) {
  return static_cast<std::uint8_t>(1 + static_cast<std::uint8_t>(why));
}

/// Keys and record extents of one chunk of complete records.
struct ParsedRecords {
  std::vector<std::uint64_t> int_keys;      ///< For integer-key formats.
  std::vector<std::string_view> byte_keys;  ///< For lines, csv, tsv.
  /// csv keys whose doubled quotes were made one: byte_keys points into them (a deque, so that
  /// adding one moves none).
  std::deque<std::string> undoubled_keys;
  std::vector<std::int64_t> times;  ///< Event times, when the format has a time column.
  /// With refuse_bad_times, one per record: why it is refused (its key and time, 0, are then
  /// not to be used); empty when no record of the chunk was.
  std::vector<TimeRefusal> refusals;
  std::vector<std::size_t> begins;  ///< Record i is [begins[i], ends[i]) in the chunk.
  std::vector<std::size_t> ends;
  std::uint64_t lines = 0;  ///< Newlines consumed (for line numbers in messages).
  std::uint64_t skipped_bad = 0;

  std::size_t size() const { return int_keys.size() + byte_keys.size(); }
};

/// The length of the complete records at the start of `text`: through the last newline that
/// ends a record (for csv, one outside quotes: a quoted field may span lines), 0 if none does.
std::size_t complete_records_length(const RecordFormat& format, std::string_view text);

/// Splits `text` (complete newline-terminated records; the last one may lack its newline) into
/// records, keys and (with a time column) event times, as seconds since 1970 or ISO-8601 (see
/// parse_event_time). A malformed record throws DataError "<source>:<line>: ..." with its line
/// number counted from `first_line`, or is counted in skipped_bad when `skip_bad` is set.
void parse_text_records(const RecordFormat& format, std::string_view text,
                        const std::string& source, std::uint64_t first_line, bool skip_bad,
                        ParsedRecords& out);

}  // namespace bulkbloom::cli
