#include "probe/memory_probe.hpp"

#include <sys/mman.h>
#include <time.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <latch>
#include <new>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace bulkbloom::probe {
namespace {

constexpr std::uint64_t kLine = 64;
constexpr std::uint64_t kHugePage = std::uint64_t{2} << 20;
// Lines per timed pass, as many as keys in the benchmarks' small batches.
constexpr std::size_t kPassLines = std::size_t{1} << 16;

}  // namespace

// Zeroed then written memory on a 2 MiB boundary with transparent huge pages requested, or
// memory the caller owns.
class MemoryProbe::Buffer {
 public:
  explicit Buffer(std::span<std::byte> memory)
      : bytes_(memory.size() / kLine * kLine),
        mapped_(0),
        words_(reinterpret_cast<std::uint64_t*>(memory.data())) {}
  explicit Buffer(std::uint64_t bytes) : bytes_(bytes), mapped_(bytes + kHugePage) {
    void* p = mmap(nullptr, mapped_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) throw std::bad_alloc();
    mapping_ = p;
    const auto aligned = (reinterpret_cast<std::uintptr_t>(p) + kHugePage - 1) & ~(kHugePage - 1);
    madvise(reinterpret_cast<void*>(aligned), bytes, MADV_HUGEPAGE);
    words_ = reinterpret_cast<std::uint64_t*>(aligned);
    for (std::uint64_t i = 0; i < bytes / 8; ++i) words_[i] = i;  // fault every page in now
  }
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  ~Buffer() {
    if (mapping_ != nullptr) munmap(mapping_, mapped_);
  }

  std::uint64_t* words() const { return words_; }
  std::uint64_t lines() const { return bytes_ / kLine; }
  std::uint64_t bytes() const { return bytes_; }

 private:
  std::uint64_t bytes_;
  std::size_t mapped_;
  void* mapping_ = nullptr;
  std::uint64_t* words_ = nullptr;
};

namespace {

// Runs `pass(thread, lines_done)` on `threads` threads until `seconds` have passed. A pass
// returns the seconds it spent on the measured work and adds its units of work to `lines_done`;
// what it does outside that (drawing the next addresses) is not counted. Returns the units per
// second summed over the threads.
template <class Pass>
double rate(unsigned threads, double seconds, const Pass& pass) {
  std::vector<std::uint64_t> done(threads, 0);
  std::vector<double> busy(threads, 0);
  std::latch start(threads + 1);
  std::atomic<bool> stop{false};
  std::vector<std::thread> workers;
  for (unsigned t = 0; t < threads; ++t) {
    workers.emplace_back([&, t] {
      start.arrive_and_wait();
      // At least one pass each: a thread that got no core before `stop` would otherwise have no
      // time to divide its (zero) lines by.
      do {
        busy[t] += pass(t, done[t]);
      } while (!stop.load(std::memory_order_relaxed));
    });
  }
  start.arrive_and_wait();
  std::this_thread::sleep_for(std::chrono::duration<double>(seconds));
  stop = true;
  for (auto& w : workers) w.join();
  double total = 0;
  for (unsigned t = 0; t < threads; ++t) total += static_cast<double>(done[t]) / busy[t];
  return total;
}

double thread_cpu_seconds() {
  timespec t{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + 1e-9 * static_cast<double>(t.tv_nsec);
}

template <class Work>
double seconds_of(const Work& work, Timing timing = Timing::wall) {
  if (timing == Timing::cpu) {
    const double begin = thread_cpu_seconds();
    work();
    return thread_cpu_seconds() - begin;
  }
  const auto begin = std::chrono::steady_clock::now();
  work();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - begin).count();
}

// Word offsets of kPassLines random lines. Drawn afresh before every pass, outside the timing:
// generating addresses inside the loop cost the earlier probe 1.4 ns per line even in the L1,
// so it measured its own arithmetic (a third to a half of the true rate at 2 MiB), and a fixed
// list would be cached after its first pass.
class RandomLines {
 public:
  // Lines drawn from [first, first + lines).
  RandomLines(std::uint64_t seed, std::uint64_t first, std::uint64_t lines)
      : state_(seed), first_(first), lines_(lines), offsets_(kPassLines) {}

  const std::uint64_t* draw() {
    for (auto& offset : offsets_) {
      state_ = state_ * 6364136223846793005ull + 1442695040888963407ull;
      offset = (first_ + (((state_ >> 32) * lines_) >> 32)) << 3;
    }
    return offsets_.data();
  }

 private:
  std::uint64_t state_, first_, lines_;
  std::vector<std::uint64_t> offsets_;
};

// Reads (or, with kWrite, increments) one word in each of the lines at `offsets`, the lines
// kAhead further on prefetched into the L2 (PREFETCHT1, as the kernels do) unless kAhead is 0;
// returns the sum of the words read.
template <bool kWrite, std::size_t kAhead>
std::uint64_t touch_lines(std::uint64_t* words, const std::uint64_t* offsets) {
  std::uint64_t sum0 = 0, sum1 = 0;
  for (std::size_t i = 0; i < kPassLines; i += 2) {
    if constexpr (kAhead > 0) {
      const std::size_t ahead = (i + kAhead) % kPassLines;
      __builtin_prefetch(words + offsets[ahead], 0, 2);
      __builtin_prefetch(words + offsets[ahead + 1], 0, 2);
    }
    if constexpr (kWrite) {
      words[offsets[i]] += 1;
      words[offsets[i + 1]] += 1;
    } else {
      sum0 += words[offsets[i]];
      sum1 += words[offsets[i + 1]];
    }
  }
  return sum0 + sum1;
}

// Random lines per second over `buffer`: the best of relying on out-of-order execution alone and
// prefetching 32, 64 or 128 lines ahead. Which wins depends on the level the buffer lives in and
// on the minute: on the development machine 128 ahead read a 32 MiB buffer at 2.8 ns/line where
// 32 ahead gave 3.8-4.2, and 32 or 64 ahead were best for 512 MiB.
template <bool kWrite, class Buffer>  // MemoryProbe::Buffer, private to the probe
double random_lines_per_s(const Buffer& buffer, unsigned threads, double seconds, Timing timing,
                          std::vector<std::uint64_t>& sinks) {
  // Readers share the whole buffer, as threads reading a filter do. Writers each get a slice, as
  // the filter's writing threads each own a block range: lines written by two cores at once
  // would bounce between their caches, which no bulk operation does.
  std::vector<RandomLines> draws;
  for (unsigned t = 0; t < threads; ++t) {
    const std::uint64_t first = kWrite ? buffer.lines() * t / threads : 0;
    const std::uint64_t end = kWrite ? buffer.lines() * (t + 1) / threads : buffer.lines();
    draws.emplace_back(0x5EED0000 + t, first, std::max<std::uint64_t>(end - first, 1));
  }
  const auto measure = [&]<std::size_t kAhead>() {
    return rate(threads, seconds / 4, [&](unsigned t, std::uint64_t& done) {
      const std::uint64_t* offsets = draws[t].draw();
      done += kPassLines;
      return seconds_of(
          [&] { sinks[t * 8] += touch_lines<kWrite, kAhead>(buffer.words(), offsets); }, timing);
    });
  };
  return std::max({measure.template operator()<0>(), measure.template operator()<32>(),
                   measure.template operator()<64>(), measure.template operator()<128>()});
}

// Clamps a probe's thread count to the machine's hardware threads: each thread's rate is its
// lines over its own passes' time, summed, so threads beyond the cores would each time passes
// that ran while the others waited, and count a core several times.
unsigned probe_threads(unsigned threads) {
  if (threads == 0) throw std::invalid_argument("threads must be at least 1");
  return std::min(threads, std::max(1u, std::thread::hardware_concurrency()));
}

// The sums are results the compiler must keep.
void keep(const std::vector<std::uint64_t>& sinks) {
  std::atomic_signal_fence(std::memory_order_seq_cst);
  volatile std::uint64_t kept = 0;
  for (auto s : sinks) kept = kept + s;
}

}  // namespace

MemoryProbe::MemoryProbe(std::uint64_t buffer_bytes) {
  if (buffer_bytes < kLine) {
    throw std::invalid_argument("buffer_bytes " + std::to_string(buffer_bytes) +
                                " is below one 64-byte line");
  }
  buffer_ = std::make_unique<Buffer>(buffer_bytes / kLine * kLine);
}

MemoryProbe::MemoryProbe(std::span<std::byte> memory) {
  if (memory.size() < kLine) {
    throw std::invalid_argument("memory of " + std::to_string(memory.size()) +
                                " bytes is below one 64-byte line");
  }
  buffer_ = std::make_unique<Buffer>(memory);
}

MemoryProbe::~MemoryProbe() = default;

double MemoryProbe::random_read_lines_per_s(unsigned threads, double seconds) {
  threads = probe_threads(threads);
  std::vector<std::uint64_t> sinks(threads * 8, 0);  // a line per thread: no false sharing
  const double rate = random_lines_per_s<false>(*buffer_, threads, seconds, timing_, sinks);
  keep(sinks);
  return rate;
}

double MemoryProbe::random_rmw_lines_per_s(unsigned threads, double seconds) {
  threads = probe_threads(threads);
  std::vector<std::uint64_t> sinks(threads * 8, 0);
  const double rate = random_lines_per_s<true>(*buffer_, threads, seconds, timing_, sinks);
  keep(sinks);
  return rate;
}

double MemoryProbe::seq_read_bytes_per_s(unsigned threads, double seconds) {
  threads = probe_threads(threads);
  std::vector<std::uint64_t> sinks(threads * 8, 0);
  const Buffer& buffer = *buffer_;
  // Each thread streams its own slice; four sums keep the adds off the critical path.
  const double bytes_per_s = rate(threads, seconds, [&](unsigned t, std::uint64_t& done) {
    const std::uint64_t words = buffer.bytes() / 8;
    const std::uint64_t begin = words * t / threads, end = words * (t + 1) / threads;
    const std::uint64_t* w = buffer.words();
    done += (end - begin) * 8;
    return seconds_of([&] {
      std::uint64_t s0 = 0, s1 = 0, s2 = 0, s3 = 0, i = begin;
      for (; i + 4 <= end; i += 4) {
        s0 += w[i];
        s1 += w[i + 1];
        s2 += w[i + 2];
        s3 += w[i + 3];
      }
      for (; i < end; ++i) s0 += w[i];
      sinks[t * 8] += s0 + s1 + s2 + s3;
    });
  });
  keep(sinks);
  return bytes_per_s;
}

HardwareLimits MemoryProbe::measure(unsigned threads, double seconds) {
  HardwareLimits limits;
  limits.random_read_lines_per_s = random_read_lines_per_s(threads, seconds);
  limits.random_rmw_lines_per_s = random_rmw_lines_per_s(threads, seconds);
  limits.seq_read_bytes_per_s = seq_read_bytes_per_s(threads, seconds);
  return limits;
}

HardwareLimits measure_hardware_limits(std::uint64_t buffer_bytes, unsigned threads,
                                       double seconds) {
  probe_threads(threads);  // the argument check, before a buffer is allocated
  return MemoryProbe(buffer_bytes).measure(threads, seconds);
}

}  // namespace bulkbloom::probe
