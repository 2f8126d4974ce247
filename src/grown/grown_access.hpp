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

  /// The change log of bulkbloom/incremental.hpp: starts it empty, from now.
  static void enable_log(GrownFilter& f) {
    if (f.logging_) return;
    f.logging_ = true;
    f.change_log_.clear();
    f.log_from_empty_ = f.generations_.back().filter.popcount() == 0;
    f.log_rewritten_ = false;
    f.closed_logs_.clear();
  }
  /// What take_snapshot() takes of the log; the log starts again empty.
  struct TakenLog {
    bool logging;     ///< whether the log was enabled (else `hashes` tells nothing)
    bool from_empty;  ///< the newest generation started empty since the last take
    bool rewritten;   ///< its bits changed in a way the log does not tell (a merge, a long log)
    std::vector<std::uint64_t> hashes;
    /// The final logs of the generations sealed since the last take, oldest first.
    std::vector<ClosedPart> closed;
  };
  static TakenLog take_log(GrownFilter& f) {
    TakenLog taken{f.logging_, f.log_from_empty_, f.log_rewritten_, std::move(f.change_log_),
                   std::move(f.closed_logs_)};
    f.change_log_.clear();
    f.closed_logs_.clear();
    f.log_from_empty_ = false;
    f.log_rewritten_ = false;
    return taken;
  }
  /// Generation `index`'s filter, writable.
  static Filter& generation(GrownFilter& f, std::size_t index) {
    return f.generations_[index].filter;
  }
};

/// The most keys `layout` holds with its modelled rate at or under `fpr` (at least 1).
std::uint64_t capacity_at(const Layout& layout, double fpr);

}  // namespace bulkbloom::detail
