// Side by side with Apache Arrow's Parquet split-block Bloom filter
// (parquet::BlockSplitBloomFilter), an existing blocked filter with exactly the bit layout of
// bulkbloom's sb256 under XXH64 and seed 0 (DESIGN.md section 1).
//
//   compare_arrow --check   both libraries build byte-identical filters from the same keys and
//                           answer every lookup the same way, and each reads the Parquet bytes
//                           (header and bitset) the other writes; exits 1 on any difference
//   compare_arrow [--sizes KIB,...] [--reps N]
//                           ns/key of insert and contains for Arrow, bulkbloom sb256 (the same
//                           bits) and bulkbloom sb512, one thread, 64Ki-key batches, beside this
//                           machine's random 64-byte read rate over a buffer of the same size
//
// Arrow has no batched lookup, so its contains is Hashes() for the batch and then FindHash() per
// key; its insert is Hashes() and InsertHashes(), its batched calls.
#include <arrow/buffer.h>
#include <arrow/io/memory.h>
#include <parquet/bloom_filter.h>
#include <parquet/properties.h>

#include <algorithm>
#include <bulkbloom/filter.hpp>
#include <bulkbloom/format.hpp>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "probe/memory_probe.hpp"

namespace {

constexpr std::size_t kBatchKeys = 65536;

std::vector<std::uint64_t> random_keys(std::size_t count, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<std::uint64_t> keys(count);
  for (auto& key : keys) key = rng();
  return keys;
}

bulkbloom::Filter make_bulkbloom(bulkbloom::Shape shape, std::uint64_t bytes,
                                 const std::string& implementation) {
  bulkbloom::Layout layout{};
  layout.shape = shape;
  layout.num_blocks =
      static_cast<std::uint32_t>(bytes / (shape == bulkbloom::Shape::sb256 ? 32 : 64));
  layout.hash = bulkbloom::KeyHash::xxh64;
  layout.seed = 0;
  bulkbloom::Options options;
  options.implementation = implementation;
  options.threads = 1;
  return bulkbloom::Filter(layout, options);
}

// What Arrow writes into a Parquet file for the filter: its Thrift header, then the bitset.
std::vector<std::uint8_t> arrow_serialized(const parquet::BlockSplitBloomFilter& filter) {
  auto sink = arrow::io::BufferOutputStream::Create().ValueOrDie();
  filter.WriteTo(sink.get());
  const auto buffer = sink->Finish().ValueOrDie();
  if (static_cast<std::size_t>(buffer->size()) < filter.GetBitsetSize())
    throw std::runtime_error("Arrow wrote fewer bytes than its bitset");
  return {buffer->data(), buffer->data() + buffer->size()};
}

std::vector<std::uint8_t> arrow_bitset(const parquet::BlockSplitBloomFilter& filter) {
  auto serialized = arrow_serialized(filter);
  serialized.erase(serialized.begin(), serialized.end() - filter.GetBitsetSize());
  return serialized;
}

parquet::BlockSplitBloomFilter arrow_deserialize(std::span<const std::byte> parquet_bytes) {
  arrow::io::BufferReader reader(
      std::make_shared<arrow::Buffer>(reinterpret_cast<const std::uint8_t*>(parquet_bytes.data()),
                                      static_cast<std::int64_t>(parquet_bytes.size())));
  return parquet::BlockSplitBloomFilter::Deserialize(
      parquet::default_reader_properties(), &reader,
      static_cast<std::int64_t>(parquet_bytes.size()));
}

std::vector<std::uint8_t> bitset_of(const bulkbloom::Filter& filter) {
  std::vector<std::uint8_t> bytes(filter.layout().size_bytes());
  filter.copy_bytes_to(std::as_writable_bytes(std::span(bytes)));
  return bytes;
}

void arrow_hash(const parquet::BlockSplitBloomFilter& filter, std::span<const std::uint64_t> keys,
                std::vector<std::uint64_t>& hashes) {
  hashes.resize(keys.size());
  filter.Hashes(reinterpret_cast<const std::int64_t*>(keys.data()), static_cast<int>(keys.size()),
                hashes.data());
}

// Inserts the same keys into Arrow's filter and a bulkbloom sb256 filter of every given
// implementation, then compares bytes and lookups. Returns the number of differences reported.
int check(std::uint64_t bytes, std::size_t key_count,
          const std::vector<std::string>& implementations) {
  const auto inserted = random_keys(key_count, bytes);
  const auto probes = random_keys(key_count, bytes + 1);
  parquet::BlockSplitBloomFilter arrow_filter;
  arrow_filter.Init(static_cast<std::uint32_t>(bytes));
  std::vector<std::uint64_t> hashes;
  arrow_hash(arrow_filter, inserted, hashes);
  arrow_filter.InsertHashes(hashes.data(), static_cast<int>(hashes.size()));
  const auto arrow_bytes = arrow_bitset(arrow_filter);

  std::vector<std::uint8_t> arrow_found(2 * key_count);
  for (std::size_t i = 0; i < inserted.size(); ++i)
    arrow_found[i] = arrow_filter.FindHash(hashes[i]);
  arrow_hash(arrow_filter, probes, hashes);
  for (std::size_t i = 0; i < probes.size(); ++i)
    arrow_found[key_count + i] = arrow_filter.FindHash(hashes[i]);

  int differences = 0;
  for (const auto& implementation : implementations) {
    auto filter = make_bulkbloom(bulkbloom::Shape::sb256, bytes, implementation);
    filter.insert(inserted);
    const auto ours = bitset_of(filter);
    const auto mismatch = std::mismatch(ours.begin(), ours.end(), arrow_bytes.begin());
    if (arrow_bytes.size() != ours.size() || mismatch.first != ours.end()) {
      std::printf("DIFFERENT BYTES: %s, %llu-byte filter, %zu keys, first at byte %td\n",
                  implementation.c_str(), static_cast<unsigned long long>(bytes), key_count,
                  mismatch.first - ours.begin());
      ++differences;
      continue;
    }
    std::vector<std::uint8_t> found(2 * key_count);
    filter.contains(inserted, std::span(found).first(key_count));
    filter.contains(probes, std::span(found).subspan(key_count));
    for (std::size_t i = 0; i < found.size(); ++i) {
      if (found[i] != arrow_found[i]) {
        std::printf("DIFFERENT ANSWER: %s, key %zu: bulkbloom %d, Arrow %d\n",
                    implementation.c_str(), i, found[i], arrow_found[i]);
        ++differences;
        break;
      }
    }
    // Each side reads what the other writes into a Parquet file.
    const auto arrow_file = arrow_serialized(arrow_filter);
    if (bitset_of(bulkbloom::from_parquet(std::as_bytes(std::span(arrow_file)))) != ours) {
      std::printf("DIFFERENT BITSET read back from Arrow's Parquet bytes: %s\n",
                  implementation.c_str());
      ++differences;
    }
    if (arrow_bitset(arrow_deserialize(bulkbloom::to_parquet(filter))) != arrow_bytes) {
      std::printf("DIFFERENT BITSET when Arrow reads bulkbloom's Parquet bytes: %s\n",
                  implementation.c_str());
      ++differences;
    }
    std::size_t positives = 0;
    for (std::size_t i = key_count; i < found.size(); ++i) positives += found[i];
    std::printf(
        "same bytes and answers: %-14s %9llu-byte filter, %8zu keys, %zu of %zu absent "
        "keys reported present by both\n",
        implementation.c_str(), static_cast<unsigned long long>(bytes), key_count, positives,
        key_count);
  }
  return differences;
}

template <class Pass>
double best_ns_per_key(int reps, std::size_t key_count, Pass&& pass) {
  double best = 1e300;
  for (int rep = 0; rep < reps; ++rep) {
    const auto start = std::chrono::steady_clock::now();
    pass();
    const std::chrono::duration<double, std::nano> took = std::chrono::steady_clock::now() - start;
    best = std::min(best, took.count() / static_cast<double>(key_count));
  }
  return best;
}

struct Timings {
  double insert = 0;
  double contains = 0;
};

Timings time_arrow(std::uint64_t bytes, const std::vector<std::uint64_t>& keys, int reps) {
  parquet::BlockSplitBloomFilter filter;
  filter.Init(static_cast<std::uint32_t>(bytes));
  std::vector<std::uint64_t> hashes;
  std::vector<std::uint8_t> found(kBatchKeys);
  Timings timings;
  timings.insert = best_ns_per_key(reps, keys.size(), [&] {
    for (std::size_t begin = 0; begin < keys.size(); begin += kBatchKeys) {
      const auto batch = std::span(keys).subspan(begin, std::min(kBatchKeys, keys.size() - begin));
      arrow_hash(filter, batch, hashes);
      filter.InsertHashes(hashes.data(), static_cast<int>(batch.size()));
    }
  });
  std::uint64_t hits = 0;
  timings.contains = best_ns_per_key(reps, keys.size(), [&] {
    for (std::size_t begin = 0; begin < keys.size(); begin += kBatchKeys) {
      const auto batch = std::span(keys).subspan(begin, std::min(kBatchKeys, keys.size() - begin));
      arrow_hash(filter, batch, hashes);
      for (std::size_t i = 0; i < batch.size(); ++i) found[i] = filter.FindHash(hashes[i]);
      hits += found[0];
    }
  });
  if (hits == 0) throw std::runtime_error("Arrow lost an inserted key");
  return timings;
}

Timings time_bulkbloom(bulkbloom::Shape shape, std::uint64_t bytes,
                       const std::vector<std::uint64_t>& keys, int reps) {
  auto filter = make_bulkbloom(shape, bytes, "");
  std::vector<std::uint8_t> found(kBatchKeys);
  Timings timings;
  timings.insert = best_ns_per_key(reps, keys.size(), [&] {
    for (std::size_t begin = 0; begin < keys.size(); begin += kBatchKeys)
      filter.insert(std::span(keys).subspan(begin, std::min(kBatchKeys, keys.size() - begin)));
  });
  std::uint64_t hits = 0;
  timings.contains = best_ns_per_key(reps, keys.size(), [&] {
    for (std::size_t begin = 0; begin < keys.size(); begin += kBatchKeys) {
      const auto batch = std::span(keys).subspan(begin, std::min(kBatchKeys, keys.size() - begin));
      filter.contains(batch, std::span(found).first(batch.size()));
      hits += found[0];
    }
  });
  if (hits == 0) throw std::runtime_error("bulkbloom lost an inserted key");
  return timings;
}

std::vector<std::uint64_t> parse_sizes_kib(const char* text) {
  std::vector<std::uint64_t> sizes;
  for (const char* cursor = text; *cursor != '\0';) {
    char* end = nullptr;
    const auto kib = std::strtoull(cursor, &end, 10);
    if (end == cursor || kib == 0 || (kib & (kib - 1)) != 0)
      throw std::invalid_argument(
          std::string("--sizes wants powers of two in KiB, comma-separated: ") + text);
    sizes.push_back(kib);
    cursor = *end == ',' ? end + 1 : end;
  }
  return sizes;
}

int run(int argc, char** argv) {
  std::vector<std::uint64_t> sizes_kib = {256, 2048, 32768, 131072};
  int reps = 5;
  bool check_only = false;
  for (int i = 1; i < argc; ++i) {
    const std::string_view arg = argv[i];
    if (arg == "--check") {
      check_only = true;
    } else if (arg == "--sizes" && i + 1 < argc) {
      sizes_kib = parse_sizes_kib(argv[++i]);
    } else if (arg == "--reps" && i + 1 < argc) {
      reps = std::max(1, std::atoi(argv[++i]));
    } else {
      std::fprintf(stderr,
                   "usage: compare_arrow --check\n"
                   "       compare_arrow [--sizes KIB,KIB,...] [--reps N]\n");
      return 2;
    }
  }

  if (check_only) {
    const auto implementations = bulkbloom::available_implementations();
    int differences = 0;
    // Below, at and far above the filters' capacity, and a batch that is not a multiple of any
    // vector width.
    differences += check(32, 3, implementations);
    differences += check(64 * 1024, 1000, implementations);
    differences += check(64 * 1024, 32771, implementations);
    differences += check(1 << 20, 1 << 20, implementations);
    differences += check(16 << 20, 1 << 20, implementations);
    std::printf(differences == 0 ? "bulkbloom sb256 matches Arrow's Parquet filter\n"
                                 : "%d differences from Arrow's Parquet filter\n",
                differences);
    return differences == 0 ? 0 : 1;
  }

  std::printf("one thread, 64Ki-key batches, best of %d passes, ns/key; bulkbloom runs %s\n", reps,
              make_bulkbloom(bulkbloom::Shape::sb256, 1024, "").implementation().c_str());
  std::printf(
      "| filter | keys | probe read ns/line | Arrow insert | sb256 insert | sb512 insert | "
      "Arrow contains | sb256 contains | sb512 contains | sb256 vs Arrow, insert / "
      "contains |\n|---|---|---|---|---|---|---|---|---|---|\n");
  for (const auto kib : sizes_kib) {
    const std::uint64_t bytes = kib * 1024;
    if (bytes > parquet::BloomFilter::kMaximumBloomFilterBytes)
      throw std::invalid_argument("Arrow's filters stop at 128 MiB (131072 KiB)");
    // Filled to about 16 bits per key, at most 16Mi keys (128 MiB of keys).
    const std::size_t key_count = std::min<std::uint64_t>(bytes / 2, std::uint64_t{1} << 24);
    const auto keys = random_keys(key_count, kib);
    const auto limits = bulkbloom::probe::measure_hardware_limits(bytes, 1);
    const auto arrow = time_arrow(bytes, keys, reps);
    const auto sb256 = time_bulkbloom(bulkbloom::Shape::sb256, bytes, keys, reps);
    const auto sb512 = time_bulkbloom(bulkbloom::Shape::sb512, bytes, keys, reps);
    std::printf(
        "| %llu KiB | %zu | %.2f | %.2f | %.2f | %.2f | %.2f | %.2f | %.2f | %.1f× / %.1f× |\n",
        static_cast<unsigned long long>(kib), key_count, 1e9 / limits.random_read_lines_per_s,
        arrow.insert, sb256.insert, sb512.insert, arrow.contains, sb256.contains, sb512.contains,
        arrow.insert / sb256.insert, arrow.contains / sb256.contains);
    std::fflush(stdout);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const std::exception& error) {
    std::fprintf(stderr, "compare_arrow: %s\n", error.what());
    return 1;
  }
}
