// Library-internal access to a GrownFilter for its file format (src/persist/grown_file.cpp),
// which reads generations and sizing that only a file can supply.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "bulkbloom/grown_filter.hpp"

namespace bulkbloom::detail {

struct GrownAccess {
  /// A filter read from a file: its generations with their sizing, the promise it was made with.
  static GrownFilter loaded(std::vector<GrownFilter::Generation> generations, double promise,
                            std::string key_format, const Options& options) {
    GrownFilter filter(std::move(generations), promise, std::move(key_format), options);
    filter.loaded_past_promise_ = filter.current_fpr() > filter.promise_;
    return filter;
  }
};

/// The most keys `layout` holds with its modelled rate at or under `fpr` (at least 1).
std::uint64_t capacity_at(const Layout& layout, double fpr);

}  // namespace bulkbloom::detail
