#include "cli/hardware_probe.hpp"

#include <sys/mman.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <functional>
#include <thread>
#include <vector>

#include "bulkbloom/error.hpp"

namespace bulkbloom::cli {
namespace {

__extension__ typedef unsigned __int128 Uint128;

constexpr std::size_t kLine = 64;

// The lines a probe touches: a multiply-xorshift sequence, cheap enough that the loads, not the
// index arithmetic, bound the loop, and independent so that many misses are in flight at once.
inline std::uint64_t line_index(std::uint64_t i, std::uint64_t lines) {
  std::uint64_t z = (i + 1) * 0x9E3779B97F4A7C15ull;
  z ^= z >> 29;
  return static_cast<std::uint64_t>((static_cast<Uint128>(z) * lines) >> 64);
}

// Runs `work(thread_index)` on `threads` threads at once; returns the wall seconds.
double timed_parallel(unsigned threads, const std::function<void(unsigned)>& work) {
  std::vector<std::thread> pool;
  const auto start = std::chrono::steady_clock::now();
  for (unsigned t = 0; t < threads; ++t) pool.emplace_back(work, t);
  for (auto& thread : pool) thread.join();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

class LineBuffer {
 public:
  explicit LineBuffer(std::uint64_t bytes) : bytes_(bytes / kLine * kLine) {
    void* p = mmap(nullptr, bytes_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) {
      throw AllocationError("cannot map a " + std::to_string(bytes_) + "-byte probe buffer");
    }
    madvise(p, bytes_, MADV_HUGEPAGE);  // like the filter, avoid measuring TLB misses
    data_ = static_cast<std::uint64_t*>(p);
    std::memset(data_, 1, bytes_);
  }
  ~LineBuffer() { munmap(data_, bytes_); }
  LineBuffer(const LineBuffer&) = delete;
  LineBuffer& operator=(const LineBuffer&) = delete;

  std::uint64_t* data() const { return data_; }
  std::uint64_t lines() const { return bytes_ / kLine; }
  std::uint64_t bytes() const { return bytes_; }

 private:
  std::uint64_t bytes_;
  std::uint64_t* data_;
};

}  // namespace

MemoryLimits measure_memory_limits(std::uint64_t buffer_bytes, unsigned threads,
                                   std::uint64_t accesses) {
  LineBuffer buffer(std::max<std::uint64_t>(buffer_bytes, kLine));
  std::uint64_t* const words = buffer.data();
  const std::uint64_t lines = buffer.lines();
  std::atomic<std::uint64_t> sink = 0;  // keeps the reads from being optimised away
  MemoryLimits limits;

  const double read_s = timed_parallel(threads, [&](unsigned t) {
    std::uint64_t sum = 0;
    const std::uint64_t base = t * accesses;
    for (std::uint64_t i = 0; i < accesses; ++i) sum += words[line_index(base + i, lines) * 8];
    sink += sum;
  });
  limits.random_reads_per_s = static_cast<double>(accesses) * threads / read_s;

  const double rmw_s = timed_parallel(threads, [&](unsigned t) {
    const std::uint64_t base = (threads + t) * accesses;
    for (std::uint64_t i = 0; i < accesses; ++i) {
      const std::uint64_t at = line_index(base + i, lines) * 8;
      // A plain load and store (relaxed atomics compile to exactly that): threads may share a
      // line, and a lost update does not matter to a rate.
      const std::uint64_t v = __atomic_load_n(&words[at], __ATOMIC_RELAXED);
      __atomic_store_n(&words[at], v | (i | 1), __ATOMIC_RELAXED);
    }
  });
  limits.random_rmw_per_s = static_cast<double>(accesses) * threads / rmw_s;

  // Stream at least 1 GiB in all, so that a small buffer is timed over many passes.
  const std::uint64_t per_thread = buffer.bytes() / 8 / threads;
  const std::uint64_t passes =
      std::max<std::uint64_t>(1, (std::uint64_t{1} << 30) / buffer.bytes());
  const double seq_s = timed_parallel(threads, [&](unsigned t) {
    const std::uint64_t* p = words + t * per_thread;
    std::uint64_t sum = 0;
    for (std::uint64_t pass = 0; pass < passes; ++pass) {
      for (std::uint64_t i = 0; i < per_thread; ++i) sum += p[i];
    }
    sink += sum;
  });
  limits.sequential_bytes_per_s = static_cast<double>(per_thread * threads * 8 * passes) / seq_s;
  return limits;
}

}  // namespace bulkbloom::cli
