// What an incremental checkpoint of a window costs (bulkbloom/incremental.hpp, docs/FORMAT.md
// "Incremental state"): for intervals of new keys into the open generation of a window of the
// given size, the bytes of the change log (8 per key new to the open part) against the bytes of
// the 64-byte lines that changed (64 + an 8-byte index each); then the rate at which a log is
// replayed against the rate at which the open part's base is read back from disk, which decide
// how much log a state directory keeps before writing a new base.
//
//   incremental_costs [WINDOW_MIB] [DIR]   (default 1024 MiB, /tmp)
#include <fcntl.h>
#include <unistd.h>

#include <bulkbloom/incremental.hpp>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <vector>

#include "core/splitmix64.hpp"

namespace {

using bulkbloom::WindowConfig;
using bulkbloom::WindowedFilter;
using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// The open generation's bits (the window never grows here: its promise sizes every generation).
std::vector<std::byte> open_bits(const WindowedFilter& window) {
  const bulkbloom::Filter& open = window.generation(0);
  std::vector<std::byte> bits(open.layout().size_bytes());
  open.copy_bytes_to(bits);
  return bits;
}

std::uint64_t changed_lines(std::span<const std::byte> before, std::span<const std::byte> after) {
  std::uint64_t lines = 0;
  for (std::size_t at = 0; at < before.size(); at += 64) {
    lines += std::memcmp(before.data() + at, after.data() + at, 64) != 0 ? 1 : 0;
  }
  return lines;
}

// Inserts `n` fresh keys (records clock, within one period) and returns the flags' count.
void insert_fresh(WindowedFilter& window, std::uint64_t n, std::uint64_t& next_key) {
  constexpr std::size_t kBatch = std::size_t{1} << 20;
  std::vector<std::uint64_t> keys(kBatch);
  std::vector<std::uint8_t> flags(kBatch);
  for (std::uint64_t done = 0; done < n;) {
    const std::size_t b = static_cast<std::size_t>(std::min<std::uint64_t>(kBatch, n - done));
    for (std::size_t i = 0; i < b; ++i) keys[i] = bulkbloom::detail::splitmix64_mix(next_key++);
    window.insert_if_absent(std::span(keys).first(b), std::span(flags).first(b));
    done += b;
  }
}

}  // namespace

int main(int argc, char** argv) {
  const double mib = argc > 1 ? std::atof(argv[1]) : 1024.0;
  const std::filesystem::path dir = argc > 2 ? argv[2] : "/tmp";
  // 4 generations at p = 0.001: find the records window whose generations add up to `mib`.
  std::uint64_t records = 1'000'000;
  while (WindowConfig::for_records(records * 2, 0.001).memory_bytes() <= mib * (1 << 20)) {
    records *= 2;
  }
  const WindowConfig config = WindowConfig::for_records(records, 0.001);
  std::printf("window: %s\n", config.describe().c_str());
  std::printf("period %llu records; generation %.1f MiB\n",
              static_cast<unsigned long long>(config.period()),
              config.generation.size_bytes() / double(1 << 20));

  std::printf("\n%-14s %-12s %14s %14s %8s\n", "open part at", "interval", "log bytes",
              "line bytes", "lines/log");
  for (const double fill : {0.0, 0.5}) {
    for (const std::uint64_t interval : {100'000ull, 1'000'000ull, 10'000'000ull, 30'000'000ull}) {
      if (static_cast<double>(interval) + fill * config.period() >= config.period()) continue;
      WindowedFilter window(config);
      std::uint64_t next_key = 1;
      insert_fresh(window, static_cast<std::uint64_t>(fill * config.period()), next_key);
      bulkbloom::enable_change_log(window);
      const std::vector<std::byte> before = open_bits(window);
      insert_fresh(window, interval, next_key);
      const bulkbloom::StateSnapshot snapshot = bulkbloom::take_snapshot(window);
      const std::vector<std::byte> after = open_bits(window);
      const double log_bytes = 8.0 * snapshot.log.size();
      const double line_bytes = 72.0 * changed_lines(before, after);
      std::printf("%5.0f%% full    %-12llu %14.0f %14.0f %8.2f\n", fill * 100,
                  static_cast<unsigned long long>(interval), log_bytes, line_bytes,
                  line_bytes / log_bytes);
    }
  }

  // Replay against reading the base: the open generation half full, its log of a quarter of
  // the period, replayed into a copy of the base.
  WindowedFilter window(config);
  std::uint64_t next_key = 1;
  insert_fresh(window, config.period() / 2, next_key);
  bulkbloom::enable_change_log(window);
  const std::vector<std::byte> base = open_bits(window);
  insert_fresh(window, config.period() / 4, next_key);
  const bulkbloom::StateSnapshot snapshot = bulkbloom::take_snapshot(window);
  const std::filesystem::path path = dir / "incremental_costs.base";
  {
    const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    const auto start = Clock::now();
    std::size_t done = 0;
    while (done < base.size())
      done += static_cast<std::size_t>(::write(fd, base.data() + done, base.size() - done));
    ::fsync(fd);
    std::printf("\nwrite+fsync of the %.0f MiB base: %.2f s (%.0f MiB/s)\n",
                base.size() / double(1 << 20), seconds_since(start),
                base.size() / double(1 << 20) / seconds_since(start));
    ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
    ::close(fd);
  }
  std::vector<std::byte> read_back(base.size());
  {
    const int fd = ::open(path.c_str(), O_RDONLY);
    ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
    const auto start = Clock::now();
    std::size_t done = 0;
    while (done < read_back.size())
      done +=
          static_cast<std::size_t>(::read(fd, read_back.data() + done, read_back.size() - done));
    const double s = seconds_since(start);
    std::printf("read of the base from disk: %.2f s (%.0f MiB/s)\n", s,
                base.size() / double(1 << 20) / s);
    ::close(fd);
  }
  std::filesystem::remove(path);
  const auto restore_start = Clock::now();
  WindowedFilter restored = bulkbloom::restore_window(
      snapshot.metadata, [&](std::size_t i, const bulkbloom::PartId&, std::span<std::byte> bits) {
        if (i + 1 == snapshot.parts.size()) {
          std::memcpy(bits.data(), read_back.data(), bits.size());
        } else {
          std::memset(bits.data(), 0, bits.size());
        }
      });
  const double restore_s = seconds_since(restore_start);
  const auto replay_start = Clock::now();
  bulkbloom::replay_log(restored, snapshot.log);
  const double replay_s = seconds_since(replay_start);
  const double log_mib = 8.0 * snapshot.log.size() / double(1 << 20);
  std::printf(
      "restore from memory: %.2f s; replay of %zu hashes (%.0f MiB of log): %.2f s (%.1f M "
      "hashes/s, %.0f MiB of log/s)\n",
      restore_s, snapshot.log.size(), log_mib, replay_s, snapshot.log.size() / replay_s / 1e6,
      log_mib / replay_s);
  const bool same = bulkbloom::to_file_bytes(restored) == bulkbloom::to_file_bytes(window);
  std::printf("restored bytes identical: %s\n", same ? "yes" : "NO");
  return same ? 0 : 1;
}
