// What StateDirectory::save writes for a grown filter that grows through generations (#35 item 3):
// a save every BATCH new u64 keys until TOTAL, the bytes of each save that sealed a generation and
// the mean of the others, and that the directory loads the filter's bytes. Built against a
// library before #35's sealed logs it gives the "before" figures (bench/RESULTS.md).
//
//   grown_checkpoint_bytes CAPACITY BATCH TOTAL DIR   (DIR is removed first)
#include <bulkbloom/incremental.hpp>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <vector>

#include "core/splitmix64.hpp"

int main(int argc, char** argv) {
  if (argc != 5) {
    std::fprintf(stderr, "usage: grown_checkpoint_bytes CAPACITY BATCH TOTAL DIR\n");
    return 2;
  }
  const std::uint64_t capacity = std::strtoull(argv[1], nullptr, 10);
  const std::uint64_t batch = std::strtoull(argv[2], nullptr, 10);
  const std::uint64_t total = std::strtoull(argv[3], nullptr, 10);
  const std::filesystem::path dir = argv[4];
  if (capacity == 0 || batch == 0 || total < batch) {
    std::fprintf(stderr,
                 "grown_checkpoint_bytes: CAPACITY and BATCH must be >= 1, TOTAL >= BATCH\n");
    return 2;
  }
  std::filesystem::remove_all(dir);
  bulkbloom::GrownFilter filter = bulkbloom::GrownFilter::for_capacity(capacity, 0.001, "u64");
  bulkbloom::StateDirectory directory(dir);
  bulkbloom::detail::SplitMix64 rng(7);
  std::vector<std::uint64_t> keys(batch);
  std::vector<std::uint8_t> flags(batch);
  std::uint64_t written = 0, at_growth = 0, saves = 0, growth_saves = 0;
  for (std::uint64_t done = 0; done < total; done += batch) {
    for (std::uint64_t& key : keys) key = rng.next();
    const std::size_t generations = filter.generation_count();
    filter.insert_if_absent(keys, flags);
    const std::uint64_t bytes = directory.save(filter);
    written += bytes;
    ++saves;
    if (filter.generation_count() != generations) {
      at_growth += bytes;
      ++growth_saves;
      std::printf("save %llu: generation %zu started, the save wrote %llu bytes\n",
                  static_cast<unsigned long long>(saves), filter.generation_count() - 1,
                  static_cast<unsigned long long>(bytes));
    }
  }
  std::uint64_t held = 0;
  for (const auto& generation : filter.generations())
    held += generation.filter.layout().size_bytes();
  std::printf(
      "%llu saves, %zu generations (%llu bytes of bits): %llu bytes written, %llu by the %llu "
      "saves that sealed a generation, %.0f by each other on average\n",
      static_cast<unsigned long long>(saves), filter.generation_count(),
      static_cast<unsigned long long>(held), static_cast<unsigned long long>(written),
      static_cast<unsigned long long>(at_growth), static_cast<unsigned long long>(growth_saves),
      saves > growth_saves
          ? static_cast<double>(written - at_growth) / static_cast<double>(saves - growth_saves)
          : 0.0);
  const bool same =
      bulkbloom::StateDirectory(dir).load_grown().to_file_bytes() == filter.to_file_bytes();
  std::printf("the directory loads the filter's bytes: %s\n", same ? "yes" : "NO");
  return same ? 0 : 1;
}
