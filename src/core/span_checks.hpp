// The length check of bulk calls' spans, which the filter, the window, the grown filter and the
// shards make alike so that a wrong length reads the same everywhere.
#pragma once

#include <cstddef>
#include <stdexcept>
#include <string>

namespace bulkbloom::detail {

/// Throws std::invalid_argument, naming `what`, unless a span has `expected` entries (`actual`).
inline void check_size(std::size_t expected, std::size_t actual, const char* what) {
  if (expected != actual) {
    throw std::invalid_argument(std::string(what) + " has " + std::to_string(actual) +
                                " entries; expected " + std::to_string(expected));
  }
}

}  // namespace bulkbloom::detail
