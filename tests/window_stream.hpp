// A deterministic record stream for the window tests and the resume worker: keys that repeat at
// chosen distances (around the window length, the rotation period and the forgetting bound) and
// event times that advance with bounded lateness.
#pragma once

#include <bulkbloom/window.hpp>

#include <cstdint>
#include <vector>

#include "test_support.hpp"

namespace bulkbloom::test {

struct WindowStream {
  std::vector<std::uint64_t> keys;
  std::vector<std::int64_t> times;
};

/// `n` records. Record i repeats the key of record i - d for a distance d drawn from `distances`
/// with probability 1/2 (when i >= d), else carries a fresh key. Times grow by 0..2 units a record
/// (so a window of T units spans about T records) and trail the largest time before them by at most
/// `lateness`.
inline WindowStream make_window_stream(std::size_t n, std::uint64_t seed,
                                       const std::vector<std::uint64_t>& distances,
                                       std::uint64_t lateness) {
  SplitMix64 rng(seed);
  auto next = [&rng] { return rng.next(); };
  WindowStream s;
  s.keys.resize(n);
  s.times.resize(n);
  std::int64_t base = 1'000'000;
  for (std::size_t i = 0; i < n; ++i) {
    const std::uint64_t r = next();
    const std::uint64_t d = distances[(r >> 8) % distances.size()];
    s.keys[i] = ((r & 1) != 0 && i >= d) ? s.keys[i - d] : next();
    base += static_cast<std::int64_t>((r >> 40) % 3);
    const std::uint64_t late = lateness == 0 ? 0 : (r >> 20) % (lateness + 1);
    s.times[i] = base - static_cast<std::int64_t>((r >> 16) % 4 == 0 ? late : 0);
  }
  return s;
}

/// The window of the kill-and-resume test: event time, T = 600, lateness 40, 4 generations.
inline WindowConfig resume_test_config() {
  return WindowConfig::for_event_time(1.0, 600, 0.001, 4, 40);
}

/// The stream of the kill-and-resume test.
inline WindowStream resume_test_stream() {
  return make_window_stream(60'000, 17, {1, 7, 300, 599, 600, 601, 1000, 2000}, 40);
}

}  // namespace bulkbloom::test
