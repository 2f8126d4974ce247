/// @file
/// Probes of this machine's memory system over a buffer of a given size, so that a Bloom filter's
/// throughput can be read as a fraction of what the hardware allows on the same working set.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>

namespace bulkbloom::probe {

/// How every rate here is timed: in rounds, each thread doing one pass of work and all starting
/// together; a round's rate is the work of all threads over the time of the slowest (so threads
/// sharing a core are not counted as if each had one), and a probe's rate is the median of its
/// rounds' rates, as a benchmark case's is the median of its calls.
///
/// A random probe's rate, over the rounds of its best prefetch variant.
struct ProbeRate {
  double per_s = 0;        ///< The median round's rate.
  double low = 0;          ///< The first quartile of the rounds' rates.
  double high = 0;         ///< The third quartile.
  std::size_t passes = 0;  ///< Rounds timed.
};

/// Rates measured over one buffer, by all the probe's threads together.
struct HardwareLimits {
  /// Independent random 64-byte reads per second (one load per line, many lines in flight), all
  /// threads over the whole buffer.
  double random_read_lines_per_s = 0;
  /// Random 64-byte read-modify-writes per second (load, change, store back one word per line),
  /// each thread in its own slice of the buffer, as each writing thread owns a block range.
  double random_rmw_lines_per_s = 0;
  /// Sequential read bandwidth in bytes per second.
  double seq_read_bytes_per_s = 0;
};

/// What the random probes' rates are per: seconds of the wall clock, or of CPU time of the probing
/// threads, which the time slicing of a shared machine does not inflate.
enum class Timing { wall, cpu };

/// A probe buffer kept for repeated measurements, so that a benchmark can measure the random rates
/// right before and right after each timed case, on the same memory: on a shared machine the
/// rates move by tens of percent from one minute to the next, and a ratio to a limit measured
/// at another moment reads that drift as the kernel's.
class MemoryProbe {
 public:
  /// Allocates and faults in `buffer_bytes` (rounded down to whole 64-byte lines; 2 MiB pages
  /// requested, as for filters). Throws std::invalid_argument if `buffer_bytes` < 64,
  /// std::bad_alloc if the buffer cannot be had.
  explicit MemoryProbe(std::uint64_t buffer_bytes);
  /// Probes `memory` (whole 64-byte lines of it), which the caller owns and keeps alive: a filter's
  /// own bits, so that probe and filter run on the same pages under the same page policy. The
  /// read-modify-write probe changes words of it. Throws std::invalid_argument if it is shorter
  /// than one line.
  explicit MemoryProbe(std::span<std::byte> memory);
  ~MemoryProbe();
  MemoryProbe(const MemoryProbe&) = delete;
  MemoryProbe& operator=(const MemoryProbe&) = delete;

  /// All three rates with `threads` threads, each probe running about `seconds`. Threads beyond
  /// the usable CPUs share them, and the rates say so. Throws std::invalid_argument if
  /// `threads` == 0.
  HardwareLimits measure(unsigned threads, double seconds = 0.25);
  /// The probed memory.
  const void* data() const;
  std::uint64_t bytes() const;
  /// Times the random probes that follow by `timing` (Timing::wall unless set).
  void set_timing(Timing timing) { timing_ = timing; }

  /// Random 64-byte reads with `threads` threads, each of the four prefetch variants run for at
  /// least `seconds` / 4 (and 3 rounds); the variant with the best median.
  ProbeRate random_read(unsigned threads, double seconds);
  /// Random read-modify-writes, as random_read().
  ProbeRate random_rmw(unsigned threads, double seconds);
  /// HardwareLimits::random_read_lines_per_s alone, measured for about `seconds`.
  double random_read_lines_per_s(unsigned threads, double seconds);
  /// HardwareLimits::random_rmw_lines_per_s alone, measured for about `seconds`.
  double random_rmw_lines_per_s(unsigned threads, double seconds);
  /// HardwareLimits::seq_read_bytes_per_s alone, measured for about `seconds`.
  double seq_read_bytes_per_s(unsigned threads, double seconds);
  /// The latency of one 64-byte load that waits for the one before (a pointer chase through every
  /// line of the memory in one random cycle), in nanoseconds: the median of its timed rounds over
  /// about `seconds`, one thread. Rewrites the first word of every line with the chain.
  double dependent_load_ns(double seconds);

 private:
  class Buffer;
  std::unique_ptr<Buffer> buffer_;
  Timing timing_ = Timing::wall;
};

/// Measures the three rates over a freshly allocated `buffer_bytes` buffer (2 MiB pages requested,
/// as for filters) with `threads` threads, each probe running about `seconds`. Throws
/// std::invalid_argument if `buffer_bytes` < 64 or `threads` == 0, std::bad_alloc if the buffer
/// cannot be had.
HardwareLimits measure_hardware_limits(std::uint64_t buffer_bytes, unsigned threads = 1,
                                       double seconds = 0.25);

}  // namespace bulkbloom::probe
