// A small command-line parser: long options with values or without, positional arguments, and
// the usage text that lists them.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace bulkbloom::cli {

/// A mistake on the command line: the tool prints the message and the usage hint, exits 2.
class UsageError : public std::invalid_argument {
 public:
  using std::invalid_argument::invalid_argument;
};

/// One subcommand's options. Declare them, parse argv, then read values by long name.
class ArgParser {
 public:
  /// `synopsis` is the usage line after "bulkbloom", e.g. "dedup [options] [INPUT...]".
  ArgParser(std::string synopsis, std::string summary);

  /// Declares `--name VALUE` (also `--name=VALUE`; `short_name` like 'o' adds `-o VALUE`).
  ArgParser& value(std::string name, std::string value_name, std::string help, char short_name = 0);
  /// Declares a flag `--name` that takes no value.
  ArgParser& flag(std::string name, std::string help, char short_name = 0);

  /// Parses argv (without the program and subcommand names). Throws UsageError for an unknown
  /// option, a missing value or a repeated option. For --help, prints usage() on stdout and
  /// returns false: the command then has nothing more to do.
  bool parse(const std::vector<std::string_view>& args);

  /// The usage text: synopsis, summary and one line per option.
  std::string usage() const;

  bool has(std::string_view name) const;
  std::optional<std::string> get(std::string_view name) const;
  std::string get_or(std::string_view name, std::string fallback) const;
  /// A non-negative integer; accepts 1000000, 1e6, 1M (K, M, G, T are powers of 1000).
  std::optional<std::uint64_t> get_count(std::string_view name) const;
  std::optional<double> get_double(std::string_view name) const;
  const std::vector<std::string>& positionals() const { return positionals_; }
  /// The options given, by long name (whichever spelling was used); "" for a flag.
  const std::map<std::string, std::string, std::less<>>& given() const { return values_; }

 private:
  struct Option {
    std::string value_name;  // empty for flags
    std::string help;
    char short_name;
  };
  const Option& find(std::string_view name) const;

  std::string synopsis_;
  std::string summary_;
  std::vector<std::pair<std::string, Option>> options_;
  std::map<std::string, std::string, std::less<>> values_;
  std::vector<std::string> positionals_;
};

/// Parses a count as ArgParser::get_count does; `what` names it in the error message.
std::uint64_t parse_count(std::string_view text, std::string_view what);

}  // namespace bulkbloom::cli
