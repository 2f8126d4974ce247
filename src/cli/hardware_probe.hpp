// This machine's memory limits for random cache-line work, measured the way a filter touches
// memory: self-contained so that it can be unified with the benchmark suite's probes later.
#pragma once

#include <cstddef>
#include <cstdint>

namespace bulkbloom::cli {

/// Rates measured over one buffer.
struct MemoryLimits {
  double random_reads_per_s = 0;      ///< Independent random 64-byte line reads.
  double random_rmw_per_s = 0;        ///< Independent random 64-byte line read-modify-writes.
  double sequential_bytes_per_s = 0;  ///< Streaming read bandwidth.
};

/// Measures over a `buffer_bytes` buffer (rounded down to whole 64-byte lines) with `threads`
/// threads, each making `accesses` random accesses (streaming reads at least 1 GiB). Throws
/// AllocationError without memory.
MemoryLimits measure_memory_limits(std::uint64_t buffer_bytes, unsigned threads,
                                   std::uint64_t accesses);

}  // namespace bulkbloom::cli
