#include "cli/event_time.hpp"

#include <charconv>
#include <chrono>

namespace bulkbloom::cli {
namespace {

constexpr std::uint64_t kMaxDurationSeconds = std::uint64_t{1} << 61;

// Reads exactly `digits` decimal digits at `at`, advancing it.
std::optional<int> fixed_digits(std::string_view text, std::size_t& at, int digits) {
  if (text.size() < at + std::size_t(digits)) return std::nullopt;
  int value = 0;
  for (int i = 0; i < digits; ++i) {
    const char c = text[at + std::size_t(i)];
    if (c < '0' || c > '9') return std::nullopt;
    value = value * 10 + (c - '0');
  }
  at += std::size_t(digits);
  return value;
}

bool take(std::string_view text, std::size_t& at, char c) {
  if (at >= text.size() || text[at] != c) return false;
  ++at;
  return true;
}

// Skips ".ddd" (a fraction of a second); true if there was one with at least one digit.
bool skip_fraction(std::string_view text, std::size_t& at) {
  if (!take(text, at, '.')) return false;
  const std::size_t first = at;
  while (at < text.size() && text[at] >= '0' && text[at] <= '9') ++at;
  return at > first;
}

std::optional<std::int64_t> parse_seconds(std::string_view text) {
  std::int64_t seconds = 0;
  const char* end = text.data() + text.size();
  const auto [next, error] = std::from_chars(text.data(), end, seconds);
  if (error != std::errc{} || next == text.data()) return std::nullopt;
  std::size_t at = std::size_t(next - text.data());
  if (at == text.size()) return seconds;
  const bool negative = text.front() == '-';
  const std::size_t fraction_start = at;
  if (!skip_fraction(text, at) || at != text.size()) return std::nullopt;
  const bool nonzero_fraction =
      text.substr(fraction_start + 1).find_first_not_of('0') != std::string_view::npos;
  return negative && nonzero_fraction ? seconds - 1 : seconds;
}

// "Z", "+hh:mm", "+hhmm", "-hh:mm", "-hhmm", or nothing (UTC): seconds east of UTC.
std::optional<int> zone_offset(std::string_view text, std::size_t& at) {
  if (at == text.size() || take(text, at, 'Z')) return 0;
  const char sign = text[at++];
  if (sign != '+' && sign != '-') return std::nullopt;
  const auto hours = fixed_digits(text, at, 2);
  take(text, at, ':');
  const auto minutes = fixed_digits(text, at, 2);
  if (!hours || !minutes || *hours > 23 || *minutes > 59) return std::nullopt;
  const int offset = *hours * 3600 + *minutes * 60;
  return sign == '+' ? offset : -offset;
}

std::optional<std::int64_t> parse_iso8601(std::string_view text) {
  std::size_t at = 0;
  const auto year = fixed_digits(text, at, 4);
  const bool dash1 = take(text, at, '-');
  const auto month = fixed_digits(text, at, 2);
  const bool dash2 = take(text, at, '-');
  const auto day = fixed_digits(text, at, 2);
  if (!year || !dash1 || !month || !dash2 || !day) return std::nullopt;
  const std::chrono::year_month_day date{std::chrono::year(*year),
                                         std::chrono::month(unsigned(*month)),
                                         std::chrono::day(unsigned(*day))};
  if (!date.ok()) return std::nullopt;
  const std::int64_t midnight =
      std::chrono::sys_days(date).time_since_epoch().count() * std::int64_t{86400};
  if (at == text.size()) return midnight;
  if (!take(text, at, 'T') && !take(text, at, ' ')) return std::nullopt;
  const auto hour = fixed_digits(text, at, 2);
  const bool colon1 = take(text, at, ':');
  const auto minute = fixed_digits(text, at, 2);
  const bool colon2 = take(text, at, ':');
  const auto second = fixed_digits(text, at, 2);
  if (!hour || !colon1 || !minute || !colon2 || !second || *hour > 23 || *minute > 59 ||
      *second > 60) {
    return std::nullopt;
  }
  if (at < text.size() && text[at] == '.' && !skip_fraction(text, at)) return std::nullopt;
  const auto offset = zone_offset(text, at);
  if (!offset || at != text.size()) return std::nullopt;
  return midnight + *hour * 3600 + *minute * 60 + *second - *offset;
}

}  // namespace

std::optional<std::uint64_t> parse_duration(std::string_view text) {
  std::uint64_t value = 0;
  const char* end = text.data() + text.size();
  const auto [next, error] = std::from_chars(text.data(), end, value);
  if (error != std::errc{} || next == text.data()) return std::nullopt;
  const std::string_view unit(next, std::size_t(end - next));
  std::uint64_t scale = 0;
  if (unit.empty() || unit == "s") scale = 1;
  if (unit == "m") scale = 60;
  if (unit == "h") scale = 3600;
  if (unit == "d") scale = 86400;
  if (scale == 0 || value > kMaxDurationSeconds / scale) return std::nullopt;
  return value * scale;
}

std::optional<std::int64_t> parse_event_time(std::string_view text) {
  // A date starts with four digits and a dash; anything else must be a number of seconds.
  if (text.size() >= 5 && text[4] == '-' && text.front() != '-') return parse_iso8601(text);
  return parse_seconds(text);
}

}  // namespace bulkbloom::cli
