// What people watching a run see: a live progress line, and the summary at the end.
#pragma once

#include <bulkbloom/filter.hpp>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

namespace bulkbloom::cli {

/// A single self-overwriting line on stderr (records/s, MB/s, %, ETA), at most a few times a
/// second, only when enabled (stderr is a terminal).
class ProgressLine {
 public:
  /// `total_bytes` is 0 when the input size is unknown (no % or ETA then).
  ProgressLine(bool enabled, std::uint64_t total_bytes);
  void update(std::uint64_t records, std::uint64_t bytes);
  /// Erases the line.
  void finish();

 private:
  bool enabled_;
  std::uint64_t total_bytes_;
  std::chrono::steady_clock::time_point start_;
  std::chrono::steady_clock::time_point last_;
  bool shown_ = false;
};

/// True when stderr is a terminal.
bool stderr_is_terminal();

/// An ordered list of named values, printed as aligned text or as one JSON object. An entry with
/// an empty label appears only in JSON, one with an empty key only in text.
class Summary {
 public:
  /// A count or measure, printed as a JSON number.
  void number(std::string key, std::string label, double value, std::string text = {});
  /// An integer printed exactly, also in JSON (an identity such as a seed, beyond 2^53).
  void integer(std::string key, std::string label, std::uint64_t value);
  /// A string value.
  void text(std::string key, std::string label, std::string value);
  /// A list of strings: a JSON array; not in the text form (whose caller prints its own lines).
  void list(std::string key, const std::vector<std::string>& items);
  /// Writes "label: text" lines, or one JSON object on one line when `json`.
  void print(bool json, std::FILE* to = stderr) const;

 private:
  struct Entry {
    std::string key, label, text;
    bool is_number;
    double value;
    std::string exact;  // JSON text of an exact integer, else empty
  };
  std::vector<Entry> entries_;
};

/// Adds the filter's shape, size, implementation and thread count to a summary.
void describe_filter(Summary& summary, const Filter& filter);

/// "12.3 M", "4.5 G": a rate or count in people's units.
std::string si(double value);

}  // namespace bulkbloom::cli
