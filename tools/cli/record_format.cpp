#include "cli/record_format.hpp"

#include <algorithm>
#include <charconv>
#include <cstdio>
#include <cstring>
#include <optional>

#include "cli/args.hpp"
#include "cli/errors.hpp"
#include "cli/event_time.hpp"

namespace bulkbloom::cli {
namespace {

constexpr std::string_view kFormatNames =
    "u64, lines, dec, hex, csv:N, tsv:N (N = key column, from 1)";

std::string_view trim_blanks(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

bool parse_integer(std::string_view text, int base, std::uint64_t& value) {
  text = trim_blanks(text);
  if (base == 16 && text.size() > 2 && text[0] == '0' && (text[1] == 'x' || text[1] == 'X')) {
    text.remove_prefix(2);
  }
  // A negative decimal is its two's-complement pattern, as the Python package takes a negative
  // int (and a signed 64-bit column stores it): -1 is 0xffffffffffffffff. From -2^63 on.
  const bool negative = base == 10 && text.starts_with('-');
  if (negative) text.remove_prefix(1);
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value, base);
  if (text.empty() || ec != std::errc() || end != text.data() + text.size()) return false;
  if (negative) {
    if (value > std::uint64_t{1} << 63) return false;
    value = 0 - value;
  }
  return true;
}

// Field `column` (1-based) of a tsv record, or false if it has fewer fields.
bool tsv_field(std::string_view record, unsigned column, std::string_view& field) {
  for (unsigned c = 1; c < column; ++c) {
    const auto tab = record.find('\t');
    if (tab == std::string_view::npos) return false;
    record.remove_prefix(tab + 1);
  }
  field = record.substr(0, record.find('\t'));
  return true;
}

// What csv_field() found.
enum class CsvField { found, missing, unclosed_quote, text_after_quote };

// Field `column` of a csv record (RFC 4180): a quoted field may hold commas, line breaks and
// doubled quotes. `field` is its text as written between the quotes, and `doubled` says whether
// that holds a doubled quote, which stands for one.
CsvField csv_field(std::string_view record, unsigned column, std::string_view& field,
                   bool& doubled) {
  std::size_t pos = 0;
  for (unsigned c = 1;; ++c) {
    std::size_t begin = pos, end;
    doubled = false;
    if (pos < record.size() && record[pos] == '"') {
      std::size_t q = pos + 1;
      for (;;) {
        q = record.find('"', q);
        if (q == std::string_view::npos) return CsvField::unclosed_quote;
        if (q + 1 < record.size() && record[q + 1] == '"') {
          doubled = true;
          q += 2;
          continue;
        }
        break;
      }
      begin = pos + 1;
      end = q;
      pos = q + 1;
      if (pos < record.size() && record[pos] != ',') return CsvField::text_after_quote;
    } else {
      end = std::min(record.find(',', pos), record.size());
      pos = end;
    }
    if (c == column) {
      field = record.substr(begin, end - begin);
      return CsvField::found;
    }
    if (pos >= record.size()) return CsvField::missing;
    ++pos;  // past the comma
  }
}

// A quoted field's text with each doubled quote made one, as CSV readers give it.
std::string undouble_quotes(std::string_view quoted) {
  std::string text;
  text.reserve(quoted.size());
  for (std::size_t i = 0; i < quoted.size(); ++i) {
    text += quoted[i];
    if (quoted[i] == '"') ++i;  // the second of the pair
  }
  return text;
}

// Where the csv record that starts at `begin` of `text` ends (RFC 4180): at the first newline
// outside quotes. A quote opens a quoted field only at the start of a field; elsewhere it is
// text.
struct CsvRecordEnd {
  std::size_t newline;           ///< Offset of that newline, or text.size() when there is none.
  std::uint64_t inner_newlines;  ///< Line breaks inside its quoted fields.
};

CsvRecordEnd csv_record_end(std::string_view text, std::size_t begin) {
  CsvRecordEnd found{text.size(), 0};
  std::size_t pos = begin;
  for (;;) {  // at the start of a field
    if (pos < text.size() && text[pos] == '"') {
      std::size_t q = pos + 1;
      for (;;) {
        q = text.find('"', q);
        if (q == std::string_view::npos || q + 1 >= text.size() || text[q + 1] != '"') break;
        q += 2;
      }
      const std::size_t closed = std::min(q, text.size());
      found.inner_newlines += static_cast<std::uint64_t>(
          std::count(text.begin() + static_cast<std::ptrdiff_t>(pos),
                     text.begin() + static_cast<std::ptrdiff_t>(closed), '\n'));
      if (q == std::string_view::npos) return found;  // not closed in `text`
      pos = q + 1;
    }
    while (pos < text.size() && text[pos] != ',' && text[pos] != '\n') ++pos;
    if (pos >= text.size()) return found;
    if (text[pos] == '\n') {
      found.newline = pos;
      return found;
    }
    ++pos;  // past the comma
  }
}

// The length of `text` up to and including its last newline; 0 without one.
std::size_t through_last_newline(std::string_view text) {
  const void* last = memrchr(text.data(), '\n', text.size());
  return last ? static_cast<std::size_t>(static_cast<const char*>(last) - text.data()) + 1 : 0;
}

}  // namespace

std::size_t complete_records_length(const RecordFormat& format, std::string_view text) {
  if (format.kind != FormatKind::csv) return through_last_newline(text);
  // Before the first quote every newline ends a record; from the record that holds it on, the
  // quotes decide, until no quote is left.
  std::size_t complete = 0;
  for (;;) {
    const std::size_t quote = text.find('"', complete);
    if (quote == std::string_view::npos) return std::max(complete, through_last_newline(text));
    const std::size_t begin = std::max(complete, through_last_newline(text.substr(0, quote)));
    const CsvRecordEnd end = csv_record_end(text, begin);
    if (end.newline == text.size()) return begin;  // the record goes on in the next read
    complete = end.newline + 1;
  }
}

RecordFormat RecordFormat::parse(std::string_view name) {
  if (name == "u64") return {FormatKind::u64};
  if (name == "lines") return {FormatKind::lines};
  if (name == "dec") return {FormatKind::dec};
  if (name == "hex") return {FormatKind::hex};
  for (auto [prefix, kind] : {std::pair{std::string_view("csv:"), FormatKind::csv},
                              std::pair{std::string_view("tsv:"), FormatKind::tsv}}) {
    if (!name.starts_with(prefix)) continue;
    const auto column = name.substr(prefix.size());
    unsigned n = 0;
    const auto [end, ec] = std::from_chars(column.data(), column.data() + column.size(), n);
    if (ec != std::errc() || end != column.data() + column.size() || n == 0) {
      throw UsageError("format '" + std::string(name) + "': the column must be a number >= 1");
    }
    return {kind, n};
  }
  throw UsageError("unknown format '" + std::string(name) + "': expected one of " +
                   std::string(kFormatNames));
}

std::string RecordFormat::name() const {
  switch (kind) {
    case FormatKind::u64:
      return "u64";
    case FormatKind::lines:
      return "lines";
    case FormatKind::dec:
      return "dec";
    case FormatKind::hex:
      return "hex";
    case FormatKind::csv:
      return "csv:" + std::to_string(column);
    case FormatKind::tsv:
      return "tsv:" + std::to_string(column);
  }
  return "?";
}

bool RecordFormat::integer_keys() const {
  return kind == FormatKind::u64 || kind == FormatKind::dec || kind == FormatKind::hex;
}

void parse_text_records(const RecordFormat& format, std::string_view text,
                        const std::string& source, std::uint64_t first_line, bool skip_bad,
                        ParsedRecords& out) {
  out.int_keys.clear();
  out.byte_keys.clear();
  out.times.clear();
  out.refusals.clear();
  out.begins.clear();
  out.ends.clear();
  out.lines = 0;
  out.skipped_bad = 0;
  out.undoubled_keys.clear();
  const char* const base = text.data();
  const char* p = base;
  const char* const end = base + text.size();
  // csv: the next quote. Records without one end at their newline; the others go by the quotes.
  const char* next_quote = format.kind == FormatKind::csv
                               ? static_cast<const char*>(std::memchr(p, '"', end - p))
                               : nullptr;
  while (p < end) {
    const char* newline = static_cast<const char*>(std::memchr(p, '\n', end - p));
    std::uint64_t inner_newlines = 0;
    if (next_quote != nullptr && next_quote < (newline ? newline : end)) {
      const CsvRecordEnd record = csv_record_end(text, static_cast<std::size_t>(p - base));
      newline = record.newline < text.size() ? base + record.newline : nullptr;
      inner_newlines = record.inner_newlines;
      const char* after = newline ? newline + 1 : end;
      next_quote = static_cast<const char*>(std::memchr(after, '"', end - after));
    }
    const char* record_end = newline ? newline + 1 : end;
    // The key never includes the line terminator, LF or CRLF.
    std::string_view line(p, (newline ? newline : end) - p);
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    // An empty line is no record in any format: in csv:2 it has no second column, and taking it
    // as an empty key in the others would pass the first blank line and drop the rest as its
    // repeats (CSV readers skip it; dedup, which writes every record somewhere, says so).
    const bool empty_line = line.empty();
    bool good = !empty_line;
    CsvField csv_result = CsvField::found;
    std::uint64_t int_key = 0;
    std::string_view byte_key;
    switch (good ? format.kind : FormatKind::u64) {
      case FormatKind::lines:
        byte_key = line;
        break;
      case FormatKind::dec:
      case FormatKind::hex:
        good = parse_integer(line, format.kind == FormatKind::dec ? 10 : 16, int_key);
        break;
      case FormatKind::csv: {
        bool doubled = false;
        csv_result = csv_field(line, format.column, byte_key, doubled);
        good = csv_result == CsvField::found;
        if (good && doubled) byte_key = out.undoubled_keys.emplace_back(undouble_quotes(byte_key));
        break;
      }
      case FormatKind::tsv:
        good = tsv_field(line, format.column, byte_key);
        break;
      case FormatKind::u64:
        break;
    }
    std::optional<std::int64_t> time;
    bool bad_time = false;
    bool future_time = false;
    if (good && format.time_column != 0) {
      std::string_view field;
      bool doubled = false;  // a time holds no quote: such a field is no time either way
      const bool has_field =
          format.kind == FormatKind::csv
              ? csv_field(line, format.time_column, field, doubled) == CsvField::found
              : tsv_field(line, format.time_column, field);
      time = has_field ? parse_event_time(trim_blanks(field)) : std::nullopt;
      bad_time = !time;
      future_time = time && *time > format.latest_time;
      good = !bad_time && !future_time;
    }
    TimeRefusal refusal = TimeRefusal::none;
    if ((bad_time || future_time) && format.refuse_bad_times) {
      refusal = bad_time ? TimeRefusal::missing : TimeRefusal::future;
      if (out.refusals.empty()) out.refusals.resize(out.begins.size(), TimeRefusal::none);
      time = 0;
      good = true;
    }
    if (!good) {
      if (!skip_bad) {
        // Control bytes as \xNN: a binary file read as text would otherwise send them to the
        // terminal, and a NUL would end the message where C strings meet it.
        std::string shown;
        for (const char c : line.substr(0, 60)) {
          const auto byte = static_cast<unsigned char>(c);
          if (byte < 0x20 || byte == 0x7f) {
            char escaped[5];
            std::snprintf(escaped, sizeof escaped, "\\x%02x", byte);
            shown += escaped;
          } else {
            shown += c;
          }
        }
        if (line.size() > 60) shown += "...";
        const std::string problem =
            empty_line ? "empty line: no key"
            : bad_time ? "no event time (seconds or ISO-8601) in column " +
                             std::to_string(format.time_column)
            : future_time
                ? "event time " + std::to_string(*time) + " is after " +
                      std::to_string(format.latest_time) +
                      ", now plus --max-future: it would move the window's clock past the "
                      "records to come"
            : format.integer_keys() ? "not a " + format.name() + " integer"
            : csv_result == CsvField::unclosed_quote
                ? "a quoted field is not closed before the end of the input"
            : csv_result == CsvField::text_after_quote
                ? "text after the closing quote of a field (a quote inside a quoted field is "
                  "written twice)"
                : "no column " + std::to_string(format.column);
        throw DataError(source + ":" + std::to_string(first_line + out.lines) + ": " + problem +
                        ": '" + shown + "' (use --skip-bad to skip such records)");
      }
      ++out.skipped_bad;
    } else {
      if (format.integer_keys()) {
        out.int_keys.push_back(int_key);
      } else {
        out.byte_keys.push_back(byte_key);
      }
      if (time) out.times.push_back(*time);
      if (!out.refusals.empty()) out.refusals.push_back(refusal);
      out.begins.push_back(static_cast<std::size_t>(p - base));
      out.ends.push_back(static_cast<std::size_t>(record_end - base));
    }
    out.lines += (newline ? 1 : 0) + inner_newlines;
    p = record_end;
  }
}

}  // namespace bulkbloom::cli
