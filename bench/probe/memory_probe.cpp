#include "probe/memory_probe.hpp"

#include <sys/mman.h>
#include <time.h>

#include <algorithm>
#include <atomic>
#include <barrier>
#include <chrono>
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
// Rounds a probe times at least, however long they take: a median needs a few.
constexpr std::size_t kMinRounds = 3;

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

// Runs rounds of one pass per thread on `threads` threads until `seconds` have passed (and at
// least kMinRounds rounds). Each thread first calls `prepare(thread)` (untimed: drawing the next
// addresses), then all start together and each times `pass(thread)`, which returns its units of
// work. A round's rate is the units of all threads over the time of the slowest: the wall time
// the round took (or, by CPU time, the most CPU time one thread spent), so threads that share a
// core are never counted as if each had one. Returns every round's rate, in order.
template <class Prepare, class Pass>
std::vector<double> round_rates(unsigned threads, double seconds, Timing timing,
                                const Prepare& prepare, const Pass& pass) {
  using Clock = std::chrono::steady_clock;
  std::vector<double> units(threads, 0), times(threads, 0), rates;
  bool stop = false;
  const auto start = Clock::now();
  // Runs on the last thread to arrive at the end of a round, while the others wait.
  const auto end_round = [&]() noexcept {
    double total = 0, slowest = 0;
    for (unsigned t = 0; t < threads; ++t) {
      total += units[t];
      slowest = std::max(slowest, times[t]);
    }
    if (slowest > 0) rates.push_back(total / slowest);
    stop = rates.size() >= kMinRounds &&
           std::chrono::duration<double>(Clock::now() - start).count() >= seconds;
  };
  std::barrier<decltype(end_round)> round_end(threads, end_round);
  std::barrier<> round_start(threads);
  const auto work = [&](unsigned t) {
    do {
      prepare(t);
      round_start.arrive_and_wait();
      times[t] = seconds_of([&] { units[t] = static_cast<double>(pass(t)); }, timing);
      round_end.arrive_and_wait();
    } while (!stop);
  };
  std::vector<std::thread> workers;
  for (unsigned t = 1; t < threads; ++t) workers.emplace_back(work, t);
  work(0);
  for (auto& w : workers) w.join();
  return rates;
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

// The median and quartiles of a probe's round rates.
ProbeRate summarize(std::vector<double> rates) {
  ProbeRate r;
  r.passes = rates.size();
  if (rates.empty()) return r;
  std::sort(rates.begin(), rates.end());
  const auto at = [&](double q) { return rates[static_cast<std::size_t>(q * (rates.size() - 1))]; };
  const std::size_t n = rates.size();
  r.per_s = n % 2 == 1 ? rates[n / 2] : (rates[n / 2 - 1] + rates[n / 2]) / 2;
  r.low = at(0.25);
  r.high = at(0.75);
  return r;
}

// Random lines per second over `buffer`: the best of relying on out-of-order execution alone and
// prefetching 32, 64 or 128 lines ahead, each variant run for a quarter of `seconds` and read as
// the median of its passes. Which wins depends on the level the buffer lives in and on the
// minute: on the development machine 128 ahead read a 32 MiB buffer at 2.8 ns/line where 32
// ahead gave 3.8-4.2, and 32 or 64 ahead were best for 512 MiB.
template <bool kWrite, class Buffer>  // MemoryProbe::Buffer, private to the probe
ProbeRate random_lines(const Buffer& buffer, unsigned threads, double seconds, Timing timing,
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
  std::vector<const std::uint64_t*> offsets(threads);
  const auto measure = [&]<std::size_t kAhead>() {
    return summarize(round_rates(
        threads, seconds / 4, timing, [&](unsigned t) { offsets[t] = draws[t].draw(); },
        [&](unsigned t) {
          sinks[t * 8] += touch_lines<kWrite, kAhead>(buffer.words(), offsets[t]);
          return kPassLines;
        }));
  };
  const ProbeRate variants[] = {measure.template operator()<0>(), measure.template operator()<32>(),
                                measure.template operator()<64>(),
                                measure.template operator()<128>()};
  return *std::max_element(
      std::begin(variants), std::end(variants),
      [](const ProbeRate& a, const ProbeRate& b) { return a.per_s < b.per_s; });
}

unsigned checked_threads(unsigned threads) {
  if (threads == 0) throw std::invalid_argument("threads must be at least 1");
  return threads;
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

const void* MemoryProbe::data() const {
  return buffer_->words();
}

std::uint64_t MemoryProbe::bytes() const {
  return buffer_->bytes();
}

ProbeRate MemoryProbe::random_read(unsigned threads, double seconds) {
  threads = checked_threads(threads);
  std::vector<std::uint64_t> sinks(threads * 8, 0);  // a line per thread: no false sharing
  const ProbeRate rate = random_lines<false>(*buffer_, threads, seconds, timing_, sinks);
  keep(sinks);
  return rate;
}

ProbeRate MemoryProbe::random_rmw(unsigned threads, double seconds) {
  threads = checked_threads(threads);
  std::vector<std::uint64_t> sinks(threads * 8, 0);
  const ProbeRate rate = random_lines<true>(*buffer_, threads, seconds, timing_, sinks);
  keep(sinks);
  return rate;
}

double MemoryProbe::random_read_lines_per_s(unsigned threads, double seconds) {
  return random_read(threads, seconds).per_s;
}

double MemoryProbe::random_rmw_lines_per_s(unsigned threads, double seconds) {
  return random_rmw(threads, seconds).per_s;
}

double MemoryProbe::seq_read_bytes_per_s(unsigned threads, double seconds) {
  threads = checked_threads(threads);
  std::vector<std::uint64_t> sinks(threads * 8, 0);
  const Buffer& buffer = *buffer_;
  // Each thread streams its own slice; four sums keep the adds off the critical path.
  const auto pass = [&](unsigned t) {
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
  };
  const double bytes_per_s = summarize(round_rates(
                                           threads, seconds, timing_, [](unsigned) {}, pass))
                                 .per_s;
  keep(sinks);
  return bytes_per_s;
}

double MemoryProbe::dependent_load_ns(double seconds) {
  std::uint64_t* words = buffer_->words();
  const std::uint64_t lines = buffer_->lines();
  // Sattolo's shuffle in place: the first word of each line names the next line of one cycle
  // through them all, in random order, so no prefetcher guesses the next address and every line
  // is visited before any is again.
  for (std::uint64_t i = 0; i < lines; ++i) words[i * 8] = i * 8;
  std::uint64_t state = 0xC4A5E;
  for (std::uint64_t i = lines - 1; i > 0; --i) {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    const std::uint64_t j = ((state >> 32) * i) >> 32;  // in [0, i) while i < 2^32 lines
    std::swap(words[i * 8], words[j * 8]);
  }
  // Short rounds (0.2-0.4 ms in DRAM): on a shared machine most of them run without the
  // scheduler taking the CPU away, so the median round is one that ran throughout; rounds of
  // kPassLines loads read 1 us a load at 16 MiB with the machine 10 times oversubscribed.
  constexpr std::size_t kChaseLoads = 2048;
  std::uint64_t at = 0;
  const ProbeRate loads = summarize(round_rates(
      1, seconds, timing_, [](unsigned) {},
      [&](unsigned) {
        for (std::size_t k = 0; k < kChaseLoads; ++k) at = words[at];
        return kChaseLoads;
      }));
  keep({at});
  return 1e9 / loads.per_s;
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
  checked_threads(threads);  // the argument check, before a buffer is allocated
  return MemoryProbe(buffer_bytes).measure(threads, seconds);
}

}  // namespace bulkbloom::probe
