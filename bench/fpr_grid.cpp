// The false-positive model (Layout::expected_fpr, DESIGN §2) against counts, for the layouts the
// Spark module makes (a layout sized for CAPACITY keys at FPR, seed SPARK_SEED 42, cut into
// SHARDS shards) and the keys its benchmark feeds (bench/spark/gen_dump.py). Counts only: nothing
// here is timed, so the figures hold on a loaded machine.
//
//   fpr_grid probe KIND CAPACITY FPR N SHARDS PROBES [THREADS]
//   fpr_grid dedup KIND CAPACITY FPR N RUNS [THREADS]
//
// KIND: `random` (SplitMix64 outputs), `int64` (the dump's event ids: the i-th first occurrence
// is i * 0x9E3779B97F4A7C15 mod 2^63) or `uuid` (the dump's UUID strings of those ids, hashed as
// byte keys, as Spark's xxhash64 with seed 42 hashes them).
//
// probe: inserts keys 0 .. N-1 of KIND into one Filter and into SHARDS FilterShards (routed by
// shard_of), checks that the shards' bytes are the whole filter's, then asks the whole filter
// about keys N .. N+PROBES-1 (never inserted; the first 2^22 also through the shards, which must
// answer alike) and prints the false positives against the model, with two spreads: the binomial
// one of the probes around the filter's own rate, and the one of that rate between filters (from
// the spread of the per-block rates). `own` is the filter's own rate, the mean over its blocks of
// the product of each word's share of set bits: measured vs own tests the in-block lanes, own vs
// model the block loads.
//
// dedup: what the Spark benchmark counts. RUNS times, dedups keys r*N .. (r+1)*N-1 (distinct, in
// order) through a fresh filter with insert_if_absent; every key reported present is a false drop.
// The expected false drops are the benchmark's: the model's rate integrated over 0 .. N keys
// (trapezoids over 2001 points, as bench/spark/run_bench.py), summed over runs; the spread is the
// binomial one of those independent trials.
#include <bulkbloom/bulkbloom.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "core/own_rate.hpp"
#include "core/splitmix64.hpp"

namespace {

using bulkbloom::Filter;
using bulkbloom::FilterShard;
using bulkbloom::Layout;

constexpr std::uint64_t kSparkSeed = 42;
constexpr std::uint64_t kBatch = std::uint64_t{1} << 20;
constexpr std::uint64_t kShardCheckProbes = std::uint64_t{1} << 22;

enum class Kind { random, int64, uuid };

Kind parse_kind(std::string_view name) {
  if (name == "random") return Kind::random;
  if (name == "int64") return Kind::int64;
  if (name == "uuid") return Kind::uuid;
  throw std::invalid_argument("unknown key kind '" + std::string(name) +
                              "': expected random, int64 or uuid");
}

// gen_dump.py's event id of the i-th first occurrence.
std::uint64_t dump_id(std::uint64_t i) {
  return (i * bulkbloom::detail::kSplitMix64Gamma) & ((std::uint64_t{1} << 63) - 1);
}

// gen_dump.py's UUID string of an id: the 128 bits (id, id * 0xBF58476D1CE4E5B9) in hex, dashes
// after the 8th, 12th, 16th and 20th digit.
void dump_uuid(std::uint64_t id, char* out) {
  static constexpr char kHex[] = "0123456789abcdef";
  const std::uint64_t halves[2] = {id, id * 0xBF58476D1CE4E5B9ull};
  int at = 0;
  for (int digit = 0; digit < 32; ++digit) {
    if (digit == 8 || digit == 12 || digit == 16 || digit == 20) out[at++] = '-';
    out[at++] = kHex[(halves[digit / 16] >> (60 - 4 * (digit % 16))) & 15];
  }
}

// Keys first .. first+count-1 of a kind, as u64 keys or as UUID strings (held in `text`).
struct KeyBatch {
  Kind kind;
  std::vector<std::uint64_t> ints;
  std::string text;
  std::vector<std::string_view> strings;

  void fill(std::uint64_t first, std::uint64_t count) {
    ints.resize(count);
    strings.clear();
    for (std::uint64_t i = 0; i < count; ++i) {
      ints[i] =
          kind == Kind::random ? bulkbloom::detail::splitmix64_mix(first + i) : dump_id(first + i);
    }
    if (kind != Kind::uuid) return;
    text.resize(36 * count);
    for (std::uint64_t i = 0; i < count; ++i) {
      dump_uuid(ints[i], text.data() + 36 * i);
      strings.emplace_back(text.data() + 36 * i, 36);
    }
  }
};

// Calls `f(batch, first)` over keys first .. first+count-1 in batches of kBatch.
template <typename F>
void over_keys(Kind kind, std::uint64_t first, std::uint64_t count, const F& f) {
  KeyBatch batch{kind};
  for (std::uint64_t done = 0; done < count; done += kBatch) {
    batch.fill(first + done, std::min(kBatch, count - done));
    f(batch, first + done);
  }
}

// Runs `call(keys)` with the batch's keys in their kind's type.
template <typename F>
void with_keys(const KeyBatch& batch, const F& call) {
  if (batch.kind == Kind::uuid) {
    call(std::span<const std::string_view>(batch.strings));
  } else {
    call(std::span<const std::uint64_t>(batch.ints));
  }
}

std::uint64_t count_ones(const std::vector<std::uint8_t>& flags, std::size_t n) {
  return static_cast<std::uint64_t>(std::count(flags.begin(), flags.begin() + n, 1));
}

Layout spark_layout(std::uint64_t capacity, double fpr) {
  Layout layout = Layout::for_capacity(capacity, fpr);
  layout.seed = kSparkSeed;
  return layout;
}

std::vector<std::byte> bytes_of(const Filter& filter) {
  std::vector<std::byte> bytes(filter.layout().size_bytes());
  filter.copy_bytes_to(bytes);
  return bytes;
}

int probe(Kind kind, const char* kind_name, std::uint64_t capacity, double fpr, std::uint64_t n,
          std::uint32_t num_shards, std::uint64_t probes, unsigned threads) {
  const Layout layout = spark_layout(capacity, fpr);
  bulkbloom::Options options;
  options.threads = threads;
  Filter whole(layout, options);
  std::vector<FilterShard> shards;
  for (std::uint32_t s = 0; s < num_shards; ++s)
    shards.emplace_back(layout, s, num_shards, options);

  // Each shard's share of a batch, in order, and where it came from.
  std::vector<std::uint32_t> owner(kBatch);
  std::vector<std::vector<std::size_t>> members(num_shards);
  std::vector<std::uint64_t> shard_keys(num_shards, 0);
  const auto route = [&](const KeyBatch& batch) {
    const std::size_t count = batch.ints.size();
    const auto out = std::span(owner).first(count);
    if (kind == Kind::uuid) {
      bulkbloom::shard_of(layout, std::span<const std::string_view>(batch.strings), num_shards,
                          out);
    } else {
      bulkbloom::shard_of(layout, std::span<const std::uint64_t>(batch.ints), num_shards, out);
    }
    for (auto& m : members) m.clear();
    for (std::size_t i = 0; i < count; ++i) members[owner[i]].push_back(i);
  };
  // Calls `call(shard, keys)` with each shard's share of the batch.
  const auto per_shard = [&](const KeyBatch& batch, const auto& call) {
    route(batch);
    for (std::uint32_t s = 0; s < num_shards; ++s) {
      KeyBatch part{kind};
      for (std::size_t i : members[s]) part.ints.push_back(batch.ints[i]);
      for (std::size_t i : members[s]) {
        if (kind == Kind::uuid) part.strings.push_back(batch.strings[i]);
      }
      call(s, part);
    }
  };

  over_keys(kind, 0, n, [&](const KeyBatch& batch, std::uint64_t) {
    with_keys(batch, [&](auto keys) { whole.insert(keys); });
    per_shard(batch, [&](std::uint32_t s, const KeyBatch& part) {
      shard_keys[s] += part.ints.size();
      with_keys(part, [&](auto keys) { shards[s].insert(keys); });
    });
  });
  const std::vector<std::byte> bytes = bytes_of(whole);
  const auto block_bytes = static_cast<std::uint64_t>(bulkbloom::block_bytes(layout.shape));
  for (const FilterShard& shard : shards) {
    std::vector<std::byte> own(shard.size_bytes());
    shard.copy_bytes_to(own);
    if (!std::equal(own.begin(), own.end(), bytes.begin() + shard.blocks().begin * block_bytes)) {
      std::fprintf(stderr, "shard %u's bytes differ from the whole filter's\n", shard.index());
      return 1;
    }
  }

  std::uint64_t hits = 0, shard_hits = 0, whole_checked_hits = 0;
  std::vector<std::uint8_t> flags(kBatch), part_flags(kBatch);
  over_keys(kind, n, probes, [&](const KeyBatch& batch, std::uint64_t first) {
    const std::size_t count = batch.ints.size();
    with_keys(batch, [&](auto keys) { whole.contains(keys, std::span(flags).first(count)); });
    const std::uint64_t batch_hits = count_ones(flags, count);
    hits += batch_hits;
    if (first - n >= kShardCheckProbes) return;
    whole_checked_hits += batch_hits;
    per_shard(batch, [&](std::uint32_t s, const KeyBatch& part) {
      const std::size_t m = part.ints.size();
      with_keys(part, [&](auto keys) { shards[s].contains(keys, std::span(part_flags).first(m)); });
      shard_hits += count_ones(part_flags, m);
    });
  });
  if (shard_hits != whole_checked_hits) {
    std::fprintf(stderr, "the shards found %llu false positives, the whole filter %llu\n",
                 static_cast<unsigned long long>(shard_hits),
                 static_cast<unsigned long long>(whole_checked_hits));
    return 1;
  }

  const double model = layout.expected_fpr(n);
  const bulkbloom::detail::OwnRate own = bulkbloom::detail::own_rate(layout, bytes);
  const double p = static_cast<double>(probes);
  const double measured = static_cast<double>(hits) / p;
  const double binomial = std::sqrt(model * (1.0 - model) / p);
  const double total = std::hypot(binomial, own.sigma);
  const auto [fewest, most] = std::minmax_element(shard_keys.begin(), shard_keys.end());
  std::printf(
      "probe %-6s %s n=%llu shards=%u (keys %llu..%llu) probes=%llu hits=%llu | model %.5e "
      "measured %.5e ratio %.4f z %+.2f (binomial %.2e, between filters %.2e) | own %.5e "
      "measured/own %.4f z %+.2f own/model %.4f z %+.2f\n",
      kind_name, layout.describe().c_str(), static_cast<unsigned long long>(n), num_shards,
      static_cast<unsigned long long>(*fewest), static_cast<unsigned long long>(*most),
      static_cast<unsigned long long>(probes), static_cast<unsigned long long>(hits), model,
      measured, measured / model, (measured - model) / total, binomial, own.sigma, own.mean,
      measured / own.mean, (measured - own.mean) / std::sqrt(own.mean * (1 - own.mean) / p),
      own.mean / model, (own.mean - model) / own.sigma);
  return 0;
}

// The benchmark's expected false drops of `n` distinct keys: the model's rate integrated over
// 0 .. n keys by trapezoids over 2001 points.
double expected_false_drops(const Layout& layout, std::uint64_t n) {
  std::vector<std::uint64_t> points;
  for (int i = 0; i <= 2000; ++i) points.push_back(n * static_cast<std::uint64_t>(i) / 2000);
  points.erase(std::unique(points.begin(), points.end()), points.end());
  double sum = 0.0;
  for (std::size_t i = 1; i < points.size(); ++i) {
    sum += 0.5 * (layout.expected_fpr(points[i - 1]) + layout.expected_fpr(points[i])) *
           static_cast<double>(points[i] - points[i - 1]);
  }
  return sum;
}

int dedup(Kind kind, const char* kind_name, std::uint64_t capacity, double fpr, std::uint64_t n,
          std::uint64_t runs, unsigned threads) {
  const Layout layout = spark_layout(capacity, fpr);
  bulkbloom::Options options;
  options.threads = threads;
  std::uint64_t drops = 0;
  std::vector<std::uint8_t> fresh(kBatch);
  for (std::uint64_t r = 0; r < runs; ++r) {
    Filter filter(layout, options);
    over_keys(kind, r * n, n, [&](const KeyBatch& batch, std::uint64_t) {
      const std::size_t count = batch.ints.size();
      with_keys(batch, [&](auto keys) {
        drops += count - filter.insert_if_absent(keys, std::span(fresh).first(count));
      });
    });
  }
  const double expected = static_cast<double>(runs) * expected_false_drops(layout, n);
  const double end_rate = layout.expected_fpr(n);
  std::printf(
      "dedup %-6s %s n=%llu runs=%llu false_drops=%llu expected %.1f ratio %.4f z %+.2f "
      "(model rate at n: %.3e)\n",
      kind_name, layout.describe().c_str(), static_cast<unsigned long long>(n),
      static_cast<unsigned long long>(runs), static_cast<unsigned long long>(drops), expected,
      static_cast<double>(drops) / expected,
      (static_cast<double>(drops) - expected) / std::sqrt(expected), end_rate);
  return 0;
}

std::uint64_t parse_count(const char* text, const char* what) {
  char* end = nullptr;
  const double value = std::strtod(text, &end);
  if (end == text || *end != '\0' || !(value >= 1) || value > 1e15 || value != std::floor(value)) {
    throw std::invalid_argument(std::string(what) + " must be a whole number >= 1, got '" + text +
                                "'");
  }
  return static_cast<std::uint64_t>(value);
}

double parse_rate(const char* text) {
  char* end = nullptr;
  const double value = std::strtod(text, &end);
  if (end == text || *end != '\0' || !(value > 0 && value < 1)) {
    throw std::invalid_argument(std::string("FPR must be in (0, 1), got '") + text + "'");
  }
  return value;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string_view mode = argc > 1 ? argv[1] : "";
  const bool is_probe = mode == "probe" && (argc == 8 || argc == 9);
  const bool is_dedup = mode == "dedup" && (argc == 7 || argc == 8);
  if (!is_probe && !is_dedup) {
    std::fprintf(stderr,
                 "usage: fpr_grid probe KIND CAPACITY FPR N SHARDS PROBES [THREADS]\n"
                 "       fpr_grid dedup KIND CAPACITY FPR N RUNS [THREADS]\n"
                 "KIND: random, int64 or uuid\n");
    return 2;
  }
  try {
    const Kind kind = parse_kind(argv[2]);
    const std::uint64_t capacity = parse_count(argv[3], "CAPACITY");
    const double fpr = parse_rate(argv[4]);
    const std::uint64_t n = parse_count(argv[5], "N");
    const int last = is_probe ? 8 : 7;
    const auto threads =
        static_cast<unsigned>(argc > last ? parse_count(argv[last], "THREADS") : 2);
    if (is_probe) {
      const std::uint64_t shards = parse_count(argv[6], "SHARDS");
      if (shards > 4096) throw std::invalid_argument("SHARDS must be at most 4096");
      return probe(kind, argv[2], capacity, fpr, n, static_cast<std::uint32_t>(shards),
                   parse_count(argv[7], "PROBES"), threads);
    }
    return dedup(kind, argv[2], capacity, fpr, n, parse_count(argv[6], "RUNS"), threads);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "fpr_grid: %s\n", e.what());
    return 2;
  }
}
