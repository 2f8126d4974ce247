// Period arithmetic of the window's clock, shared by the window and its file format.
#pragma once

#include <cstdint>

namespace bulkbloom::detail {

/// The period a clock value falls in: floor(time / period), also for negative times.
/// `period` is at least 1 and at most INT64_MAX.
inline std::int64_t period_of(std::int64_t time, std::uint64_t period) {
  const auto p = static_cast<std::int64_t>(period);
  const std::int64_t q = time / p;
  return (time % p < 0) ? q - 1 : q;
}

}  // namespace bulkbloom::detail
