// The C++ side of bench_python.py's batch comparison: the same Filter calls, on the same keys in
// the same batches, made from C++, so the Python binding's cost per call reads as a ratio.
//
//   batch_call KEYS.u64 BATCH_KEYS REPEATS
//
// For each of insert, contains and insert_if_absent: REPEATS runs over every batch of KEYS (a
// fresh one-thread filter sized for the keys at 0.1% each run; contains runs on a filled one);
// prints "op seconds_per_run" with the fastest run.
#include <bulkbloom/bulkbloom.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <span>
#include <string>
#include <vector>

namespace {

std::vector<std::uint64_t> read_keys(const char* path) {
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  if (!in) {
    std::fprintf(stderr, "cannot read %s\n", path);
    std::exit(1);
  }
  std::vector<std::uint64_t> keys(static_cast<std::size_t>(in.tellg()) / 8);
  in.seekg(0);
  in.read(reinterpret_cast<char*>(keys.data()), static_cast<std::streamsize>(keys.size() * 8));
  return keys;
}

template <typename Call>
double fastest_run(const std::vector<std::uint64_t>& keys, std::size_t batch, int repeats,
                   bool filled, Call call) {
  double best = 1e300;
  std::vector<std::uint8_t> flags(batch);
  for (int r = 0; r < repeats; ++r) {
    bulkbloom::Options options;
    options.threads = 1;
    auto filter = bulkbloom::Filter::for_capacity(keys.size(), 0.001, options);
    if (filled) filter.insert(keys);
    const auto start = std::chrono::steady_clock::now();
    for (std::size_t at = 0; at < keys.size(); at += batch) {
      const std::size_t count = std::min(batch, keys.size() - at);
      call(filter, std::span(keys.data() + at, count), std::span(flags.data(), count));
    }
    const std::chrono::duration<double> took = std::chrono::steady_clock::now() - start;
    best = std::min(best, took.count());
  }
  return best;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 4) {
    std::fprintf(stderr, "usage: batch_call KEYS.u64 BATCH_KEYS REPEATS\n");
    return 2;
  }
  const auto keys = read_keys(argv[1]);
  const std::size_t batch = std::stoull(argv[2]);
  const int repeats = std::stoi(argv[3]);
  using Keys = std::span<const std::uint64_t>;
  using Flags = std::span<std::uint8_t>;
  std::printf("insert %.6f\n",
              fastest_run(keys, batch, repeats, false,
                          [](bulkbloom::Filter& f, Keys k, Flags) { f.insert(k); }));
  std::printf("contains %.6f\n",
              fastest_run(keys, batch, repeats, true,
                          [](bulkbloom::Filter& f, Keys k, Flags out) { f.contains(k, out); }));
  std::printf("insert_if_absent %.6f\n",
              fastest_run(keys, batch, repeats, false, [](bulkbloom::Filter& f, Keys k, Flags out) {
                f.insert_if_absent(k, out);
              }));
}
