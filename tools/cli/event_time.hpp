// Event times and window lengths as input columns and the command line write them.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

namespace bulkbloom::cli {

/// A duration in seconds: an integer with an optional unit s, m, h or d ("36h", "90m", "129600",
/// "0s"), the same for every duration option. Nothing if malformed or over 2^61 seconds; zero is
/// a duration, which the options that need a positive one refuse themselves.
std::optional<std::uint64_t> parse_duration(std::string_view text);

/// An event time in whole seconds since 1970-01-01T00:00:00Z, rounded down: decimal seconds
/// ("1732924740", "-5", "1732924740.25"), an ISO-8601 date-time
/// ("2026-11-29T23:59:00Z", "2026-11-29 23:59:00.5+01:00"; no zone means UTC) or a date
/// ("2026-11-29"). Nothing if malformed.
std::optional<std::int64_t> parse_event_time(std::string_view text);

}  // namespace bulkbloom::cli
