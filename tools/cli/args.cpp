#include "cli/args.hpp"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>

namespace bulkbloom::cli {

ArgParser::ArgParser(std::string synopsis, std::string summary)
    : synopsis_(std::move(synopsis)), summary_(std::move(summary)) {}

ArgParser& ArgParser::value(std::string name, std::string value_name, std::string help,
                            char short_name) {
  options_.emplace_back(std::move(name),
                        Option{std::move(value_name), std::move(help), short_name});
  return *this;
}

ArgParser& ArgParser::flag(std::string name, std::string help, char short_name) {
  options_.emplace_back(std::move(name), Option{"", std::move(help), short_name});
  return *this;
}

const ArgParser::Option& ArgParser::find(std::string_view name) const {
  for (const auto& [n, o] : options_) {
    if (n == name) return o;
  }
  throw std::logic_error("option --" + std::string(name) + " was never declared");
}

bool ArgParser::parse(const std::vector<std::string_view>& args) {
  bool options_ended = false;
  for (std::size_t i = 0; i < args.size(); ++i) {
    const std::string_view arg = args[i];
    if (options_ended || arg == "-" || !arg.starts_with('-')) {
      positionals_.emplace_back(arg);
      continue;
    }
    if (arg == "--") {
      options_ended = true;
      continue;
    }
    if (arg == "--help" || arg == "-h") {
      std::fputs(usage().c_str(), stdout);
      return false;
    }
    std::string name;
    std::optional<std::string> inline_value;
    if (arg.starts_with("--")) {
      const auto eq = arg.find('=');
      name = std::string(arg.substr(2, eq == std::string_view::npos ? arg.npos : eq - 2));
      if (eq != std::string_view::npos) inline_value = std::string(arg.substr(eq + 1));
    } else if (arg.size() == 2) {
      for (const auto& [n, o] : options_) {
        if (o.short_name == arg[1]) name = n;
      }
    }
    const auto it = std::find_if(options_.begin(), options_.end(),
                                 [&](const auto& entry) { return entry.first == name; });
    if (name.empty() || it == options_.end()) {
      throw UsageError("unknown option '" + std::string(arg) + "'");
    }
    if (values_.contains(name)) throw UsageError("option --" + name + " given more than once");
    const Option& option = it->second;
    if (option.value_name.empty()) {
      if (inline_value) throw UsageError("option --" + name + " takes no value");
      values_[name] = "";
    } else if (inline_value) {
      values_[name] = *inline_value;
    } else {
      if (i + 1 >= args.size()) {
        throw UsageError("option --" + name + " needs a value (" + option.value_name + ")");
      }
      values_[name] = std::string(args[++i]);
    }
  }
  return true;
}

std::string ArgParser::usage() const {
  std::string text = "usage: bulkbloom " + synopsis_ + "\n\n" + summary_ + "\n";
  if (!options_.empty()) text += "\noptions:\n";
  for (const auto& [name, option] : options_) {
    std::string left = "  ";
    left += option.short_name ? std::string("-") + option.short_name + ", " : "    ";
    left += "--" + name;
    if (!option.value_name.empty()) left += " " + option.value_name;
    if (left.size() < 30)
      left.resize(30, ' ');
    else
      left += "  ";
    text += left + option.help + "\n";
  }
  return text;
}

bool ArgParser::has(std::string_view name) const {
  find(name);
  return values_.contains(name);
}

std::optional<std::string> ArgParser::get(std::string_view name) const {
  find(name);
  const auto it = values_.find(name);
  if (it == values_.end()) return std::nullopt;
  return it->second;
}

std::string ArgParser::get_or(std::string_view name, std::string fallback) const {
  return get(name).value_or(std::move(fallback));
}

std::uint64_t parse_count(std::string_view text, std::string_view what) {
  const auto bad = [&] {
    return UsageError(std::string(what) + ": '" + std::string(text) +
                      "' is not a count (examples: 1000000, 1e6, 1M)");
  };
  std::uint64_t multiplier = 1;
  std::string_view digits = text;
  if (!digits.empty()) {
    switch (digits.back()) {
      case 'K':
      case 'k':
        multiplier = 1'000;
        break;
      case 'M':
        multiplier = 1'000'000;
        break;
      case 'G':
        multiplier = 1'000'000'000;
        break;
      case 'T':
        multiplier = 1'000'000'000'000;
        break;
      default:
        break;
    }
    if (multiplier != 1) digits.remove_suffix(1);
  }
  // An integer (decimal, or hexadecimal after 0x) is taken exactly: counts and seeds beyond 2^53
  // must not be rounded through a double.
  const bool hex = digits.starts_with("0x") || digits.starts_with("0X");
  std::uint64_t exact = 0;
  const char* first = digits.data() + (hex ? 2 : 0);
  const char* last = digits.data() + digits.size();
  if (const auto [end, ec] = std::from_chars(first, last, exact, hex ? 16 : 10);
      first != last && end == last) {
    if (ec != std::errc() || exact > UINT64_MAX / multiplier) throw bad();
    return exact * multiplier;
  }
  if (hex) throw bad();
  double value = 0;
  const auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), value);
  if (digits.empty() || ec != std::errc() || end != digits.data() + digits.size()) throw bad();
  const double scaled = value * static_cast<double>(multiplier);
  if (!(scaled >= 0) || scaled != std::floor(scaled) || scaled >= 0x1p64) throw bad();
  return static_cast<std::uint64_t>(scaled);
}

std::optional<std::uint64_t> ArgParser::get_count(std::string_view name) const {
  const auto text = get(name);
  if (!text) return std::nullopt;
  return parse_count(*text, "--" + std::string(name));
}

std::optional<double> ArgParser::get_double(std::string_view name) const {
  const auto text = get(name);
  if (!text) return std::nullopt;
  double value = 0;
  const auto [end, ec] = std::from_chars(text->data(), text->data() + text->size(), value);
  if (text->empty() || ec != std::errc() || end != text->data() + text->size()) {
    throw UsageError("--" + std::string(name) + ": '" + *text + "' is not a number");
  }
  return value;
}

}  // namespace bulkbloom::cli
