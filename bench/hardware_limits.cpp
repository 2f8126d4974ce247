#include "hardware_limits.hpp"

#include <sys/mman.h>

#include <atomic>
#include <chrono>
#include <latch>
#include <new>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace bulkbloom::bench {
namespace {

constexpr std::uint64_t kLine = 64;
constexpr std::uint64_t kHugePage = std::uint64_t{2} << 20;
// Lines whose addresses are generated and prefetched together, one group ahead of their use:
// the same pipelining the filter kernels use, so the probe shows what that access pattern allows.
constexpr int kGroup = 64;
// Work between clock reads.
constexpr std::uint64_t kLinesPerRound = std::uint64_t{1} << 14;

// Zeroed then written memory on a 2 MiB boundary with transparent huge pages requested.
class ProbeBuffer {
 public:
  explicit ProbeBuffer(std::uint64_t bytes) : bytes_(bytes), mapped_(bytes + kHugePage) {
    void* p = mmap(nullptr, mapped_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) throw std::bad_alloc();
    mapping_ = p;
    const auto aligned = (reinterpret_cast<std::uintptr_t>(p) + kHugePage - 1) & ~(kHugePage - 1);
    madvise(reinterpret_cast<void*>(aligned), bytes, MADV_HUGEPAGE);
    words_ = reinterpret_cast<std::uint64_t*>(aligned);
    for (std::uint64_t i = 0; i < bytes / 8; ++i) words_[i] = i;  // fault every page in now
  }
  ProbeBuffer(const ProbeBuffer&) = delete;
  ProbeBuffer& operator=(const ProbeBuffer&) = delete;
  ~ProbeBuffer() { munmap(mapping_, mapped_); }

  std::uint64_t* words() const { return words_; }
  std::uint64_t lines() const { return bytes_ / kLine; }
  std::uint64_t bytes() const { return bytes_; }

 private:
  std::uint64_t bytes_;
  std::size_t mapped_;
  void* mapping_ = nullptr;
  std::uint64_t* words_ = nullptr;
};

// Four interleaved 64-bit LCGs: one multiply-add per address, and the four dependency chains
// overlap, so that it is the memory system, not the address generator, that sets the rate. (A
// single chain costs a multiply and an add of latency per address, ~1.5 ns, which capped the
// probe in the caches.)
struct AddressStreams {
  static constexpr int kStreams = 4;
  std::uint64_t state[kStreams];

  std::uint64_t next(int stream) {
    std::uint64_t& s = state[stream];
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    return s;
  }
};

// Runs `round(thread, state)` (returning units of work done) on `threads` threads until `seconds`
// have passed; returns total units per second.
template <class Round>
double rate(unsigned threads, double seconds, const Round& round) {
  std::vector<std::uint64_t> done(threads, 0);
  std::latch start(threads + 1);
  std::atomic<bool> stop{false};
  std::vector<std::thread> workers;
  for (unsigned t = 0; t < threads; ++t) {
    workers.emplace_back([&, t] {
      AddressStreams state{};
      for (int s = 0; s < AddressStreams::kStreams; ++s) state.state[s] = 0x5EED0000 + 16 * t + s;
      start.arrive_and_wait();
      while (!stop.load(std::memory_order_relaxed)) done[t] += round(t, state);
    });
  }
  start.arrive_and_wait();
  const auto begin = std::chrono::steady_clock::now();
  std::this_thread::sleep_for(std::chrono::duration<double>(seconds));
  stop = true;
  for (auto& w : workers) w.join();
  const double elapsed =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - begin).count();
  std::uint64_t total = 0;
  for (auto d : done) total += d;
  return static_cast<double>(total) / elapsed;
}

// Random lines, generated a group ahead and prefetched one at a time between the touches of the
// current group (as the filter kernels do); `touch` reads or updates a line and returns a value
// to sum into `sink`. The sum is a local: summing into memory costs a store-to-load round trip
// per line, which capped the probe in the caches.
template <bool kWrite, class Touch>
std::uint64_t random_lines_round(const ProbeBuffer& buffer, AddressStreams& state,
                                 std::uint64_t& sink, const Touch& touch) {
  std::uint64_t* words = buffer.words();
  const std::uint64_t lines = buffer.lines();
  std::uint64_t line[2][kGroup];
  const auto prepare = [&](int slot) {
    // A local copy indexed by constants: the states stay in registers instead of going through
    // memory (the stores to `line` could alias them).
    AddressStreams local = state;
    for (int i = 0; i < kGroup; i += AddressStreams::kStreams) {
      for (int s = 0; s < AddressStreams::kStreams; ++s) {
        line[slot][i + s] = ((local.next(s) >> 32) * lines) >> 32;
      }
    }
    state = local;
  };
  prepare(0);
  for (int i = 0; i < kGroup; ++i) __builtin_prefetch(words + line[0][i] * 8, kWrite ? 1 : 0, 3);
  int slot = 0;
  std::uint64_t sum = 0;
  for (std::uint64_t done = 0; done < kLinesPerRound; done += kGroup, slot ^= 1) {
    prepare(slot ^ 1);
    for (int i = 0; i < kGroup; ++i) {
      __builtin_prefetch(words + line[slot ^ 1][i] * 8, kWrite ? 1 : 0, 3);
      sum += touch(words + line[slot][i] * 8);
    }
  }
  sink += sum;
  return kLinesPerRound;
}

}  // namespace

HardwareLimits measure_hardware_limits(std::uint64_t buffer_bytes, unsigned threads,
                                       double seconds) {
  if (buffer_bytes < kLine) {
    throw std::invalid_argument("buffer_bytes " + std::to_string(buffer_bytes) +
                                " is below one 64-byte line");
  }
  if (threads == 0) throw std::invalid_argument("threads must be at least 1");
  const ProbeBuffer buffer(buffer_bytes / kLine * kLine);
  HardwareLimits limits;
  std::vector<std::uint64_t> sinks(threads * 8, 0);  // a line per thread: no false sharing

  limits.random_read_lines_per_s = rate(threads, seconds, [&](unsigned t, AddressStreams& state) {
    return random_lines_round<false>(buffer, state, sinks[t * 8],
                                     [](const std::uint64_t* w) { return *w; });
  });
  limits.random_rmw_lines_per_s = rate(threads, seconds, [&](unsigned t, AddressStreams& state) {
    return random_lines_round<true>(buffer, state, sinks[t * 8], [](std::uint64_t* w) {
      *w += 1;
      return std::uint64_t{0};
    });
  });
  // Each thread streams its own slice; four sums keep the adds off the critical path.
  limits.seq_read_bytes_per_s = rate(threads, seconds, [&](unsigned t, AddressStreams&) {
    const std::uint64_t words = buffer.bytes() / 8;
    const std::uint64_t begin = words * t / threads, end = words * (t + 1) / threads;
    const std::uint64_t* w = buffer.words();
    std::uint64_t s0 = 0, s1 = 0, s2 = 0, s3 = 0, i = begin;
    for (; i + 4 <= end; i += 4) {
      s0 += w[i];
      s1 += w[i + 1];
      s2 += w[i + 2];
      s3 += w[i + 3];
    }
    for (; i < end; ++i) s0 += w[i];
    sinks[t * 8] += s0 + s1 + s2 + s3;
    return (end - begin) * 8;
  });
  // The sums are results the compiler must keep.
  std::atomic_signal_fence(std::memory_order_seq_cst);
  volatile std::uint64_t keep = 0;
  for (auto s : sinks) keep = keep + s;
  return limits;
}

}  // namespace bulkbloom::bench
