// Window shards (DESIGN §9, docs/WINDOW.md "Shards"): shards given the whole window's clock
// against the one window, flag for flag and byte for byte, through split/concat/reshard, files
// and in-memory file bytes.
#include <bulkbloom/window_shard.hpp>

// The header checksum of patched files, computed as docs/FORMAT.md specifies.
#define XXH_INLINE_ALL
#include <xxhash.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <string>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "test_support.hpp"

namespace bulkbloom {
namespace {

using test::message_of;
using test::random_keys;
using test::TempDir;

constexpr std::uint32_t kShardCounts[] = {1, 2, 3, 7};

// A window small enough that a test stream rotates it many times, over a block count that no
// shard count here divides.
WindowConfig small_window(WindowClock clock, std::uint32_t generations, Shape shape,
                          BlockIndex index) {
  WindowConfig config;
  config.clock = clock;
  config.generations = generations;
  config.window = 60;
  config.lateness = clock == WindowClock::event_time ? 9 : 0;
  config.generation = Layout{shape, 61, KeyHash::xxh64, 5, index};
  return config;
}

// A record of the test stream: its key and (event time) its own time.
struct Record {
  std::uint64_t key;
  std::int64_t time;
};
using Batch = std::vector<Record>;

// Keys whose block of `layout` is `block`, from a seeded stream.
std::vector<std::uint64_t> keys_of_block(const Layout& layout, std::uint32_t block, std::size_t n,
                                         std::uint64_t seed) {
  std::vector<std::uint64_t> out;
  const auto blocks = static_cast<std::uint32_t>(layout.num_blocks);
  while (out.size() < n) {
    const auto candidates = random_keys(4096, seed++);
    std::vector<std::uint32_t> owner(candidates.size());
    shard_of(layout, candidates, blocks, owner);  // one block a shard: the block itself
    for (std::size_t i = 0; i < candidates.size() && out.size() < n; ++i) {
      if (owner[i] == block) out.push_back(candidates[i]);
    }
  }
  return out;
}

// Adversarial batches: empty, hot keys, all equal, one block (long enough that the other shards
// get no record for several periods and then jump where the single window stepped), 2^k ± 1
// sizes, repeats of earlier keys; event times mostly rising, some late within the lateness, one
// jump of many periods.
std::vector<Batch> test_stream(const WindowConfig& config, std::uint64_t seed) {
  test::SplitMix64 rng(seed);
  std::vector<std::vector<std::uint64_t>> key_batches;
  key_batches.push_back({});
  key_batches.push_back(test::hot_key_batch(5, 20, 30, seed));
  key_batches.push_back(std::vector<std::uint64_t>(33, 42));
  key_batches.push_back(keys_of_block(config.generation, 17, 400, seed));
  for (std::size_t size : {31, 33, 63, 65, 127, 129, 1, 255, 257}) {
    key_batches.push_back(random_keys(size, seed + size));
  }
  key_batches.push_back({});
  // Repeats of keys seen one, a few and many periods ago.
  std::vector<std::uint64_t> repeats;
  for (const auto& b : key_batches) {
    for (std::size_t i = 0; i < b.size(); i += 3) repeats.push_back(b[i]);
  }
  key_batches.push_back(repeats);
  key_batches.push_back(test::hot_key_batch(3, 50, 10, seed + 9));

  std::vector<Batch> stream;
  std::int64_t now = -25;  // negative times too
  for (std::size_t b = 0; b < key_batches.size(); ++b) {
    Batch batch;
    if (b == key_batches.size() - 2) now += 7 * static_cast<std::int64_t>(config.period());
    for (std::uint64_t key : key_batches[b]) {
      std::int64_t time = now;
      const std::uint64_t roll = rng.next() % 10;
      if (roll < 6) {
        now += static_cast<std::int64_t>(rng.next() % 3);
        time = now;
      } else if (roll < 9) {
        time = now - static_cast<std::int64_t>(rng.next() % (config.lateness + 1));
      }
      batch.push_back({key, time});
    }
    stream.push_back(std::move(batch));
  }
  return stream;
}

// The whole window's clock at each record of `stream`: its position (records clock) or the
// running maximum of the times (event time), as the single window computes it.
std::vector<std::vector<std::int64_t>> global_clocks(const WindowConfig& config,
                                                     const std::vector<Batch>& stream) {
  std::vector<std::vector<std::int64_t>> clocks;
  std::int64_t position = 0;
  std::optional<std::int64_t> max_time;
  for (const Batch& batch : stream) {
    auto& out = clocks.emplace_back();
    for (const Record& r : batch) {
      if (config.clock == WindowClock::records) {
        out.push_back(position++);
      } else {
        max_time = max_time ? std::max(*max_time, r.time) : r.time;
        out.push_back(*max_time);
      }
    }
  }
  return clocks;
}

// Dedups a batch in the single window.
std::vector<std::uint8_t> dedup_whole(WindowedFilter& window, const Batch& batch) {
  std::vector<std::uint64_t> keys;
  std::vector<std::int64_t> times;
  for (const Record& r : batch) {
    keys.push_back(r.key);
    times.push_back(r.time);
  }
  std::vector<std::uint8_t> flags(batch.size());
  if (window.config().clock == WindowClock::records) {
    window.insert_if_absent(keys, flags);
  } else {
    window.insert_if_absent(keys, times, flags);
  }
  return flags;
}

// Routes a batch to the shards with shard_of(), gives each its records with `clocks` (one value
// per record), and gathers the flags in record order.
std::vector<std::uint8_t> dedup_sharded(std::vector<WindowShard>& shards, const Batch& batch,
                                        std::span<const std::int64_t> clocks) {
  const WindowConfig& config = shards.front().config();
  const auto num_shards = static_cast<std::uint32_t>(shards.size());
  std::vector<std::uint64_t> keys;
  for (const Record& r : batch) keys.push_back(r.key);
  std::vector<std::uint32_t> owner(keys.size());
  shard_of(config.generation, keys, num_shards, owner);
  std::vector<std::uint8_t> flags(batch.size(), 2);
  for (std::uint32_t s = 0; s < num_shards; ++s) {
    std::vector<std::uint64_t> mine;
    std::vector<std::int64_t> mine_clocks;
    std::vector<std::size_t> where;
    for (std::size_t i = 0; i < keys.size(); ++i) {
      if (owner[i] != s) continue;
      mine.push_back(keys[i]);
      mine_clocks.push_back(clocks[i]);
      where.push_back(i);
    }
    std::vector<std::uint8_t> mine_flags(mine.size());
    const std::uint64_t fresh = shards[s].insert_if_absent(mine, mine_clocks, mine_flags);
    EXPECT_EQ(fresh,
              static_cast<std::uint64_t>(std::count(mine_flags.begin(), mine_flags.end(), 1)));
    for (std::size_t j = 0; j < where.size(); ++j) flags[where[j]] = mine_flags[j];
  }
  return flags;
}

// Moves every shard to the whole window's clock: event time, `time`; records clock, the count.
void advance_all(std::vector<WindowShard>& shards, std::int64_t clock) {
  for (WindowShard& shard : shards) shard.advance_to(clock);
}

// After a batch: every shard to the single window's clock, if it has one yet.
void advance_all_to(std::vector<WindowShard>& shards, const WindowedFilter& single) {
  if (single.config().clock == WindowClock::records) {
    advance_all(shards, static_cast<std::int64_t>(single.records_seen()));
  } else if (single.clock_time()) {
    advance_all(shards, *single.clock_time());
  }
}

// Each key's shard (shard_of) answers contains() for it as the single window does.
void expect_same_answers(const WindowedFilter& single, const std::vector<WindowShard>& shards,
                         const std::vector<std::uint64_t>& probes) {
  std::vector<std::uint8_t> want(probes.size());
  single.contains(probes, want);
  std::vector<std::uint32_t> owner(probes.size());
  shard_of(single.config().generation, probes, static_cast<std::uint32_t>(shards.size()), owner);
  for (std::size_t i = 0; i < probes.size(); ++i) {
    std::uint8_t got = 2;
    shards[owner[i]].contains(std::span<const std::uint64_t>(&probes[i], 1), {&got, 1});
    ASSERT_EQ(got, want[i]) << "probe " << i;
  }
}

std::string param_name(WindowClock clock, std::uint32_t generations, Shape shape,
                       BlockIndex index) {
  return std::string(clock == WindowClock::records ? "records" : "event_time") + "_G" +
         std::to_string(generations) + "_" + test::shape_name(shape) + "_" +
         (index == BlockIndex::high32 ? "high32" : "full64");
}

class WindowShardExactness
    : public ::testing::TestWithParam<std::tuple<WindowClock, std::uint32_t, Shape, BlockIndex>> {
 protected:
  WindowConfig config() const {
    const auto [clock, generations, shape, index] = GetParam();
    return small_window(clock, generations, shape, index);
  }
};

// The shards, each given its records with the whole window's clock, every shard moved to the
// whole window's clock at the start of each batch and at the end: the single window's flags
// record for record, and its bytes (concat) after every batch.
TEST_P(WindowShardExactness, ShardsGivenTheGlobalClockAreTheSingleWindow) {
  const WindowConfig cfg = config();
  const auto stream = test_stream(cfg, 101);
  const auto clocks = global_clocks(cfg, stream);
  for (std::uint32_t num_shards : kShardCounts) {
    SCOPED_TRACE("shards " + std::to_string(num_shards));
    WindowedFilter single(cfg);
    std::vector<WindowShard> shards;
    for (std::uint32_t s = 0; s < num_shards; ++s) shards.emplace_back(cfg, s, num_shards);
    for (std::size_t b = 0; b < stream.size(); ++b) {
      SCOPED_TRACE("batch " + std::to_string(b));
      if (cfg.clock == WindowClock::event_time && !stream[b].empty()) {
        advance_all(shards, clocks[b].front());
      }
      const auto want = dedup_whole(single, stream[b]);
      const auto got = dedup_sharded(shards, stream[b], clocks[b]);
      ASSERT_EQ(got, want);
      advance_all_to(shards, single);
      if (!single.clock_time() && cfg.clock == WindowClock::event_time) continue;
      const auto joined = to_file_bytes(concat(shards));
      const auto want_bytes = to_file_bytes(single);
      ASSERT_EQ(joined.size(), want_bytes.size());
      const auto differ = std::mismatch(joined.begin(), joined.end(), want_bytes.begin());
      ASSERT_TRUE(differ.first == joined.end())
          << "first differing byte at " << (differ.first - joined.begin());
    }
    EXPECT_GT(single.rotations(), cfg.generations);  // the stream rotates, and jumps
    // Pure reads agree too, for keys seen and unseen.
    std::vector<std::uint64_t> probes = random_keys(300, 7);
    for (const Batch& batch : stream) {
      for (const Record& r : batch) probes.push_back(r.key);
    }
    expect_same_answers(single, shards, probes);
  }
}

// split, reshard and concat carry bytes and clock: a window cut, re-cut and joined is the window,
// and the re-cut shards go on deduping exactly as the window does.
TEST_P(WindowShardExactness, SplitReshardConcatAreByteCopiesThatKeepDeduping) {
  const WindowConfig cfg = config();
  const auto stream = test_stream(cfg, 202);
  const auto clocks = global_clocks(cfg, stream);
  const std::size_t half = stream.size() / 2;
  WindowedFilter single(cfg);
  for (std::size_t b = 0; b < half; ++b) dedup_whole(single, stream[b]);
  const auto single_bytes = to_file_bytes(single);
  for (std::uint32_t from : kShardCounts) {
    std::vector<WindowShard> shards = split(single, from);
    ASSERT_EQ(to_file_bytes(concat(shards)), single_bytes) << from;
    for (std::uint32_t to : kShardCounts) {
      SCOPED_TRACE(std::to_string(from) + " -> " + std::to_string(to));
      std::vector<WindowShard> resharded = reshard(shards, to);
      ASSERT_EQ(to_file_bytes(concat(resharded)), single_bytes);
      // Going on from here: the same flags as the window.
      WindowedFilter copy = load_window(std::span<const std::byte>(single_bytes));
      for (std::size_t b = half; b < stream.size(); ++b) {
        if (cfg.clock == WindowClock::event_time && !stream[b].empty()) {
          advance_all(resharded, clocks[b].front());
        }
        const auto want = dedup_whole(copy, stream[b]);
        ASSERT_EQ(dedup_sharded(resharded, stream[b], clocks[b]), want) << "batch " << b;
        advance_all_to(resharded, copy);
      }
      ASSERT_EQ(to_file_bytes(concat(resharded)), to_file_bytes(copy));
    }
  }
}

std::string exactness_name(const ::testing::TestParamInfo<WindowShardExactness::ParamType>& info) {
  return param_name(std::get<0>(info.param), std::get<1>(info.param), std::get<2>(info.param),
                    std::get<3>(info.param));
}

INSTANTIATE_TEST_SUITE_P(
    AllShapes, WindowShardExactness,
    ::testing::Combine(::testing::Values(WindowClock::records, WindowClock::event_time),
                       ::testing::Values(2u, 4u), ::testing::ValuesIn(test::kAllShapes),
                       ::testing::Values(BlockIndex::high32, BlockIndex::full64)),
    exactness_name);

// The daily-dump case: every record of a dump carries the dump's time, every shard is moved to
// each dump's time (also a shard with no record that day).
TEST(WindowShard, DumpTimesAreTheGlobalClock) {
  WindowConfig cfg = small_window(WindowClock::event_time, 4, Shape::sb256, BlockIndex::high32);
  cfg.window = 36;
  cfg.lateness = 0;
  WindowedFilter single(cfg);
  std::vector<WindowShard> shards;
  for (std::uint32_t s = 0; s < 7; ++s) shards.emplace_back(cfg, s, 7);
  std::vector<std::uint64_t> previous;
  for (std::int64_t day = 0; day < 6; ++day) {
    const std::int64_t time = day * 24;
    auto keys = random_keys(day == 3 ? 1 : 200, 50 + static_cast<std::uint64_t>(day));
    // Day 3 has one record, so all shards but one get none and only advance_to() moves them.
    if (day != 3) keys.insert(keys.end(), previous.begin(), previous.end());
    previous.assign(keys.begin(), keys.begin() + std::min<std::size_t>(keys.size(), 40));
    Batch batch;
    for (std::uint64_t k : keys) batch.push_back({k, time});
    advance_all(shards, time);
    const std::vector<std::int64_t> times(batch.size(), time);
    ASSERT_EQ(dedup_sharded(shards, batch, times), dedup_whole(single, batch)) << day;
    ASSERT_EQ(to_file_bytes(concat(shards)), to_file_bytes(single)) << day;
  }
}

// A shard that is not given the whole window's clock diverges, and concat says where.
TEST(WindowShard, ConcatNamesTheClockFieldThatDiffers) {
  const WindowConfig cfg =
      small_window(WindowClock::event_time, 4, Shape::sb512, BlockIndex::high32);
  std::vector<WindowShard> shards;
  for (std::uint32_t s = 0; s < 3; ++s) shards.emplace_back(cfg, s, 3);
  advance_all(shards, 5);
  shards[2].advance_to(6);
  EXPECT_NE(message_of<std::invalid_argument>([&] { concat(shards); }).find("clock time"),
            std::string::npos);
  shards[1].advance_to(500);
  const std::string rotations = message_of<std::invalid_argument>([&] { concat(shards); });
  EXPECT_NE(rotations.find("shard 1 has"), std::string::npos) << rotations;

  const WindowConfig records =
      small_window(WindowClock::records, 2, Shape::sb256, BlockIndex::high32);
  std::vector<WindowShard> counted;
  for (std::uint32_t s = 0; s < 2; ++s) counted.emplace_back(records, s, 2);
  counted[0].advance_to(10);
  EXPECT_NE(message_of<std::invalid_argument>([&] { concat(counted); }).find("records seen"),
            std::string::npos);
  counted.pop_back();
  EXPECT_NE(message_of<std::invalid_argument>([&] { concat(counted); }).find("need all"),
            std::string::npos);
}

// Bad calls throw before anything changes.
TEST(WindowShard, BadBatchesChangeNothing) {
  for (WindowClock clock : {WindowClock::records, WindowClock::event_time}) {
    const WindowConfig cfg = small_window(clock, 4, Shape::sb256, BlockIndex::full64);
    WindowShard shard(cfg, 1, 3);
    const auto keys = random_keys(2000, 3);
    std::vector<std::uint32_t> owner(keys.size());
    shard_of(cfg.generation, keys, 3, owner);
    std::vector<std::uint64_t> mine;
    std::uint64_t foreign = 0;
    for (std::size_t i = 0; i < keys.size(); ++i) {
      if (owner[i] == 1) mine.push_back(keys[i]);
      if (owner[i] == 2) foreign = keys[i];
    }
    std::vector<std::int64_t> clocks(mine.size());
    for (std::size_t i = 0; i < clocks.size(); ++i) clocks[i] = static_cast<std::int64_t>(3 * i);
    std::vector<std::uint8_t> flags(mine.size());
    shard.insert_if_absent(std::span(mine).first(mine.size() / 2),
                           std::span<const std::int64_t>(clocks).first(mine.size() / 2),
                           std::span(flags).first(mine.size() / 2));
    const auto before = to_file_bytes(shard);
    for (std::int64_t& c : clocks) c += 10000;  // after the records of the first half

    auto with_foreign = mine;
    with_foreign.back() = foreign;
    const std::string message = message_of<std::invalid_argument>(
        [&] { shard.insert_if_absent(with_foreign, clocks, flags); });
    EXPECT_NE(message.find("belongs to shard 2 of 3"), std::string::npos) << message;
    EXPECT_EQ(to_file_bytes(shard), before);

    if (clock == WindowClock::records) {
      auto backwards = clocks;
      backwards.back() = backwards[backwards.size() - 2];
      EXPECT_NE(message_of<std::invalid_argument>([&] {
                  shard.insert_if_absent(mine, backwards, flags);
                }).find("increasing"),
                std::string::npos);
      EXPECT_NE(message_of<std::invalid_argument>([&] { shard.advance_to(-1); }).find("negative"),
                std::string::npos);
      EXPECT_EQ(to_file_bytes(shard), before);
    }
    const std::vector<std::int64_t> short_clocks(1);
    EXPECT_THROW(shard.insert_if_absent(mine, short_clocks, flags), std::invalid_argument);
    EXPECT_EQ(to_file_bytes(shard), before);
  }
  const WindowConfig cfg = small_window(WindowClock::records, 4, Shape::sb256, BlockIndex::high32);
  EXPECT_THROW(WindowShard(cfg, 3, 3), std::invalid_argument);
  EXPECT_THROW(WindowShard(cfg, 0, 62), std::invalid_argument);
}

// Files: a shard file is the in-memory bytes; it loads back as the same shard; a whole window's
// file reads as shard 0 of 1; a shard file of S > 1 is not a whole window; its shard fields are
// where older readers require zeros, and are checked.
TEST(WindowShard, FilesAndFileBytesRoundTrip) {
  TempDir dir;
  for (WindowClock clock : {WindowClock::records, WindowClock::event_time}) {
    const WindowConfig cfg = small_window(clock, 4, Shape::sb512x16, BlockIndex::full64);
    WindowedFilter single(cfg);
    const auto stream = test_stream(cfg, 303);
    for (const Batch& batch : stream) dedup_whole(single, batch);
    const FileState state{99, {std::byte{1}, std::byte{2}, std::byte{3}}};

    const auto whole_path = dir.path() / "whole.bbw";
    save(single, whole_path, state);
    const auto whole_bytes = to_file_bytes(single, state);
    ASSERT_EQ(test::read_file(whole_path), whole_bytes);
    FileState loaded_state;
    const WindowedFilter from_bytes =
        load_window(std::span<const std::byte>(whole_bytes), &loaded_state);
    EXPECT_EQ(to_file_bytes(from_bytes, loaded_state), whole_bytes);
    const WindowShard as_shard = load_window_shard(whole_path);
    EXPECT_EQ(as_shard.index(), 0u);
    EXPECT_EQ(as_shard.num_shards(), 1u);
    EXPECT_EQ(to_file_bytes(concat(std::span(&as_shard, 1))), to_file_bytes(single));

    const auto shards = split(single, 7);
    std::vector<WindowShard> loaded;
    for (const WindowShard& shard : shards) {
      const auto path = dir.path() / ("shard" + std::to_string(shard.index()) + ".bbw");
      save(shard, path, state);
      const auto bytes = to_file_bytes(shard, state);
      ASSERT_EQ(test::read_file(path), bytes);
      // Bytes 113..119 were reserved (zero) before shards: older readers reject shard files.
      EXPECT_TRUE(std::any_of(bytes.begin() + 113, bytes.begin() + 120,
                              [](std::byte b) { return b != std::byte{0}; }));
      FileState shard_state;
      loaded.push_back(load_window_shard(path, &shard_state));
      EXPECT_EQ(shard_state.keys_inserted, 99u);
      EXPECT_EQ(to_file_bytes(loaded.back(), shard_state), bytes);
      EXPECT_EQ(to_file_bytes(load_window_shard(std::span<const std::byte>(bytes)), state), bytes);
    }
    EXPECT_EQ(to_file_bytes(concat(loaded)), to_file_bytes(single));
    const auto shard_path = dir.path() / "shard3.bbw";
    EXPECT_NE(message_of<FormatError>([&] { load_window(shard_path); }).find("shard 3 of 7"),
              std::string::npos);

    // A shard file whose shard index is out of range, with a valid header checksum.
    auto bad = test::read_file(shard_path);
    bad[113] = std::byte{7};
    const std::uint64_t checksum = XXH3_64bits(bad.data(), 120);
    std::memcpy(bad.data() + 120, &checksum, 8);
    EXPECT_NE(message_of<FormatError>([&] {
                load_window_shard(std::span<const std::byte>(bad));
              }).find("bad shard"),
              std::string::npos);
    // Truncated bytes are a FormatError, not a read past the end.
    const auto cut = std::span<const std::byte>(whole_bytes).first(whole_bytes.size() - 1);
    EXPECT_THROW(load_window(cut), FormatError);
    EXPECT_THROW(load_window_shard(cut.first(100)), FormatError);
  }
}

// A stream that leaves shards idle: shard 2's key X at the start, then only shard 0's records
// for a while, X again late (its own time long past, within the window), a jump of five periods
// (>= G) on shard 0's records alone, X late again, an empty batch, then shard 1's first record
// ever, after the whole window has rotated many times.
std::vector<Batch> idle_shard_stream(const WindowConfig& config) {
  const Layout& layout = config.generation;
  const std::uint64_t x = keys_of_block(layout, 50, 1, 11).front();  // shard 2 of 3
  const std::uint64_t y = keys_of_block(layout, 30, 1, 12).front();  // shard 1 of 3
  const auto filler = keys_of_block(layout, 5, 400, 13);             // shard 0 of 3
  const auto p = static_cast<std::int64_t>(config.period());
  std::vector<Batch> stream(7);
  stream[0].push_back({x, 0});
  for (std::size_t i = 0; i < 40; ++i) stream[0].push_back({filler[i], static_cast<int>(i / 4)});
  for (std::size_t i = 40; i < 80; ++i) {
    stream[1].push_back({filler[i], static_cast<std::int64_t>(i) - 40 + p / 2});
  }
  stream[2].push_back({x, 5});
  for (std::size_t i = 80; i < 380; ++i) stream[3].push_back({filler[i], 6 * p});
  stream[4].push_back({x, 6 * p - 3});
  stream[6].push_back({y, 6 * p + 1});
  stream[6].push_back({x, 2});
  stream[6].push_back({y, 6 * p + 2});
  stream[6].push_back({filler[0], 6 * p + 2});
  return stream;
}

// Shards that see no record for several periods, then a late record or their first one, are
// exact given only the whole window's clock with each record (no advance_to at all); advanced to
// the whole window's clock before and after each batch, they are also its bytes.
TEST(WindowShard, IdleShardsMeetLateRecordsAndJumpsExactly) {
  for (WindowClock clock : {WindowClock::records, WindowClock::event_time}) {
    SCOPED_TRACE(clock == WindowClock::records ? "records" : "event_time");
    const WindowConfig cfg = small_window(clock, 3, Shape::sb256, BlockIndex::high32);
    const auto stream = idle_shard_stream(cfg);
    const auto clocks = global_clocks(cfg, stream);
    for (bool advance : {false, true}) {
      SCOPED_TRACE(advance ? "advanced" : "never advanced");
      WindowedFilter single(cfg);
      std::vector<WindowShard> shards;
      for (std::uint32_t s = 0; s < 3; ++s) shards.emplace_back(cfg, s, 3);
      std::vector<std::uint8_t> all_flags;
      for (std::size_t b = 0; b < stream.size(); ++b) {
        SCOPED_TRACE("batch " + std::to_string(b));
        if (advance && cfg.clock == WindowClock::event_time && !stream[b].empty()) {
          advance_all(shards, clocks[b].front());
        }
        const auto want = dedup_whole(single, stream[b]);
        ASSERT_EQ(dedup_sharded(shards, stream[b], clocks[b]), want);
        all_flags.insert(all_flags.end(), want.begin(), want.end());
        if (!advance) continue;
        advance_all_to(shards, single);
        ASSERT_EQ(to_file_bytes(concat(shards)), to_file_bytes(single));
      }
      // X: new, then a repeat within the window, then new again after the jump; then Y new, X a
      // repeat of the one just before, Y a repeat.
      EXPECT_EQ(all_flags[0], 1);
      EXPECT_EQ(all_flags[81], 0);
      EXPECT_EQ(all_flags[382], 1);
      EXPECT_EQ(std::vector<std::uint8_t>(all_flags.end() - 4, all_flags.end() - 1),
                (std::vector<std::uint8_t>{1, 0, 0}));
      EXPECT_GE(single.rotations(), 6u);
      for (const WindowShard& shard : shards) {
        if (advance) EXPECT_EQ(shard.rotations(), single.rotations());
      }
    }
  }
}

// The condition is needed: a shard given a late record's own time, not the whole window's clock,
// keeps a generation the whole window has cleared and calls a key seen that the window calls new.
TEST(WindowShard, ARecordsOwnTimeIsNotTheClock) {
  const WindowConfig cfg =
      small_window(WindowClock::event_time, 3, Shape::sb256, BlockIndex::high32);
  const auto p = static_cast<std::int64_t>(cfg.period());
  const std::uint64_t x = keys_of_block(cfg.generation, 50, 1, 11).front();
  const std::uint64_t filler = keys_of_block(cfg.generation, 5, 1, 13).front();
  const std::vector<Batch> stream = {{{x, 0}}, {{filler, 3 * p}}, {{x, 2 * p}}};
  WindowedFilter single(cfg);
  std::vector<WindowShard> shards;
  for (std::uint32_t s = 0; s < 3; ++s) shards.emplace_back(cfg, s, 3);
  std::vector<std::uint8_t> want;
  std::vector<std::uint8_t> got;
  for (const Batch& batch : stream) {
    const auto w = dedup_whole(single, batch);
    want.insert(want.end(), w.begin(), w.end());
    const std::vector<std::int64_t> own_times{batch.front().time};
    const auto g = dedup_sharded(shards, batch, own_times);
    got.insert(got.end(), g.begin(), g.end());
  }
  EXPECT_EQ(want, (std::vector<std::uint8_t>{1, 1, 1}));
  EXPECT_EQ(got, (std::vector<std::uint8_t>{1, 1, 0}));
}

// An empty batch changes nothing: an unstarted event-time shard stays unstarted, a records-clock
// shard's count stays where it was.
TEST(WindowShard, EmptyBatchesChangeNothing) {
  for (WindowClock clock : {WindowClock::records, WindowClock::event_time}) {
    const WindowConfig cfg = small_window(clock, 2, Shape::sb512, BlockIndex::full64);
    WindowShard shard(cfg, 1, 2);
    const auto before = to_file_bytes(shard);
    std::uint8_t none = 0;
    EXPECT_EQ(shard.insert_if_absent(std::span<const std::uint64_t>{},
                                     std::span<const std::int64_t>{}, std::span(&none, 0)),
              0u);
    EXPECT_EQ(shard.insert_if_absent(std::span<const std::string_view>{},
                                     std::span<const std::int64_t>{}, std::span(&none, 0)),
              0u);
    EXPECT_EQ(to_file_bytes(shard), before);
    EXPECT_EQ(shard.records_seen(), 0u);
    EXPECT_FALSE(shard.clock_time().has_value());
  }
}

// Every CPU implementation and thread count gives a window shard the flags and bytes of
// cpu/scalar on one thread, with batches large enough for the threaded lookups.
TEST(WindowShard, EveryCpuImplementationAndThreadCountGivesTheSameFlagsAndBytes) {
  for (WindowClock clock : {WindowClock::records, WindowClock::event_time}) {
    SCOPED_TRACE(clock == WindowClock::records ? "records" : "event_time");
    WindowConfig cfg = small_window(clock, 3, Shape::sb512, BlockIndex::full64);
    cfg.window = clock == WindowClock::records ? 90000 : 200;
    cfg.lateness = clock == WindowClock::records ? 0 : 20;
    cfg.generation.num_blocks = 30011;
    // Three batches of 2^16 + 1 records, a third of them repeats of the batch before, with event
    // times over about two periods a batch.
    std::vector<Batch> stream;
    std::vector<std::uint64_t> last;
    for (std::uint64_t b = 0; b < 3; ++b) {
      auto keys = random_keys(65537, 500 + b);
      for (std::size_t i = 0; i < last.size(); i += 3) keys[i] = last[i];
      Batch batch;
      for (std::size_t i = 0; i < keys.size(); ++i) {
        batch.push_back({keys[i], static_cast<std::int64_t>(b * 220 + i / 300)});
      }
      last = keys;
      stream.push_back(std::move(batch));
    }
    const auto clocks = global_clocks(cfg, stream);
    std::vector<std::uint8_t> want_flags;
    std::vector<std::vector<std::byte>> want_bytes;
    std::vector<std::pair<std::string, unsigned>> runs{{"cpu/scalar", 1}};
    for (const std::string& impl : available_implementations()) {
      if (impl.rfind("cpu", 0) != 0) continue;
      for (unsigned threads : {1u, 2u}) runs.emplace_back(impl, threads);
    }
    for (const auto& [impl, threads] : runs) {
      SCOPED_TRACE(impl + " threads " + std::to_string(threads));
      Options options;
      options.implementation = impl;
      options.threads = threads;
      std::vector<WindowShard> shards;
      for (std::uint32_t s = 0; s < 2; ++s) shards.emplace_back(cfg, s, 2, options);
      EXPECT_EQ(shards.front().implementation(), impl);
      std::vector<std::uint8_t> flags;
      std::vector<std::vector<std::byte>> bytes;
      for (std::size_t b = 0; b < stream.size(); ++b) {
        if (cfg.clock == WindowClock::event_time) advance_all(shards, clocks[b].front());
        const auto f = dedup_sharded(shards, stream[b], clocks[b]);
        flags.insert(flags.end(), f.begin(), f.end());
        for (const WindowShard& shard : shards) bytes.push_back(to_file_bytes(shard));
      }
      if (want_flags.empty()) {
        want_flags = flags;
        want_bytes = bytes;
        const auto fresh = std::count(flags.begin(), flags.end(), 1);
        EXPECT_GT(fresh, 100000);  // mostly new keys, and the repeats found
        EXPECT_LT(fresh, 190000);
        continue;
      }
      ASSERT_EQ(flags, want_flags);
      ASSERT_EQ(bytes, want_bytes);
    }
  }
}

// File bytes in memory are checked as a file is: every damage gives the same FormatError, naming
// what is wrong, from bytes as from the file.
TEST(WindowShard, BytesAreVerifiedAsFilesAre) {
  TempDir dir;
  const WindowConfig cfg =
      small_window(WindowClock::event_time, 3, Shape::sb256, BlockIndex::high32);
  WindowedFilter single(cfg);
  for (const Batch& batch : test_stream(cfg, 404)) dedup_whole(single, batch);
  const auto shards = split(single, 3);
  const auto good = to_file_bytes(shards[1], FileState{5, {std::byte{9}}});
  const auto with_header = [&](std::size_t at, std::uint8_t value) {
    auto bytes = good;
    bytes[at] = std::byte{value};
    const std::uint64_t checksum = XXH3_64bits(bytes.data(), 120);
    std::memcpy(bytes.data() + 120, &checksum, 8);
    return bytes;
  };
  auto flipped_data = good;
  flipped_data[4096 + 3] ^= std::byte{1};
  auto flipped_header = good;
  flipped_header[60] ^= std::byte{1};
  auto longer = good;
  longer.push_back(std::byte{0});
  const std::vector<std::pair<std::vector<std::byte>, std::string>> damages = {
      {std::vector<std::byte>(good.begin(), good.end() - 1), "truncated"},
      {std::vector<std::byte>(good.begin(), good.begin() + 100), "truncated"},
      {longer, "unexpected bytes"},
      {flipped_data, "data checksum"},
      {flipped_header, "header checksum"},
      {with_header(116, 62), "shard 1 of 62 over 61 blocks"},
      {with_header(116, 0), "shard 1 of 0"},
      {with_header(113, 3), "shard 3 of 3"},
      {with_header(19, 2), "started flag 2"},
      {with_header(12, 64), "header_bytes 64"},
  };
  for (const auto& [bytes, problem] : damages) {
    SCOPED_TRACE(problem);
    const auto path = dir.path() / "damaged.bbw";
    test::write_file(path, bytes);
    const std::string from_file = message_of<FormatError>([&] { load_window_shard(path); });
    EXPECT_NE(from_file.find(problem), std::string::npos) << from_file;
    EXPECT_EQ(message_of<FormatError>([&] {
                load_window_shard(std::span<const std::byte>(bytes), nullptr, {}, path.string());
              }),
              from_file);
  }
  EXPECT_EQ(to_file_bytes(load_window_shard(std::span<const std::byte>(good)),
                          FileState{5, {std::byte{9}}}),
            good);
}

// Shards that size per period (docs/WINDOW.md "Sizing shards").

// Every shard count here divides 240, so one sized window cuts into each of them.
constexpr std::uint32_t kSizedShardCounts[] = {1, 2, 3, 5, 16};

// A window with a promise and block multiple 240, small enough that its periods outgrow it.
WindowConfig sized_window(WindowClock clock, Shape shape, BlockIndex index) {
  WindowConfig config = small_window(clock, 4, shape, index);
  if (clock == WindowClock::records) config.window = 6000;  // periods of 2000 records
  config.fpr = 1e-4;
  config.generation.num_blocks = 1;
  return config.shardable_by(240);
}

// floor(clock / period), as the window computes the period of a clock value.
std::int64_t period_number(std::int64_t clock, std::uint64_t period) {
  const auto p = static_cast<std::int64_t>(period);
  return clock >= 0 ? clock / p : -((-clock + p - 1) / p);
}

// Gives every shard the whole window's keys: the sum of all shards' filter_keys().
void share_window_keys(std::vector<WindowShard>& shards) {
  std::vector<std::uint64_t> sum = shards.front().filter_keys();
  for (std::size_t s = 1; s < shards.size(); ++s) {
    const auto keys = shards[s].filter_keys();
    ASSERT_EQ(keys.size(), sum.size()) << "shard " << s;
    for (std::size_t i = 0; i < sum.size(); ++i) sum[i] += keys[i];
  }
  for (WindowShard& shard : shards) shard.set_window_keys(sum);
}

// Dedups `batch` through shards that size per period: before each stretch of the batch within
// one period of the whole window's clock (the single window rotates only where a stretch
// begins), every shard is given the whole window's keys and, on event time, moved to the clock.
std::vector<std::uint8_t> dedup_sized(std::vector<WindowShard>& shards, const Batch& batch,
                                      std::span<const std::int64_t> clocks) {
  const WindowConfig& config = shards.front().config();
  std::vector<std::uint8_t> flags;
  std::size_t begin = 0;
  while (begin < batch.size()) {
    const std::int64_t epoch = period_number(clocks[begin], config.period());
    std::size_t end = begin + 1;
    while (end < batch.size() && period_number(clocks[end], config.period()) == epoch) ++end;
    share_window_keys(shards);
    if (config.clock == WindowClock::event_time) advance_all(shards, clocks[begin]);
    const Batch piece(batch.begin() + static_cast<std::ptrdiff_t>(begin),
                      batch.begin() + static_cast<std::ptrdiff_t>(end));
    const auto got = dedup_sharded(shards, piece, clocks.subspan(begin, end - begin));
    flags.insert(flags.end(), got.begin(), got.end());
    begin = end;
  }
  return flags;
}

// Periods of 10x more keys than the configured size holds, fewer, an idle jump of many periods,
// with the adversarial batches of test_stream inside, and min_keys given before some batches (a
// run's start: the newest generation grows, sealing the filter before it).
struct SizedStream {
  std::vector<Batch> batches;
  std::vector<std::uint64_t> min_keys;  // per batch, 0: set_sizing not called
};

SizedStream growth_stream(const WindowConfig& config, std::uint64_t seed) {
  SizedStream stream;
  const auto period = static_cast<std::int64_t>(config.period());
  const auto base = test_stream(config, seed);
  std::int64_t now = 0;
  std::uint64_t next_key = seed << 32;
  std::vector<std::uint64_t> earlier;
  // Distinct keys per period; the records clock takes `period` records a period whatever they
  // are, repeats filling the rest.
  const std::size_t distinct[] = {300, 1800, 9000, 120, 0, 1500, 40};
  for (std::size_t p = 0; p < std::size(distinct); ++p) {
    Batch batch;
    if (p == 4) now += 9 * period;  // idle: every generation leaves the window
    const std::size_t records =
        config.clock == WindowClock::records ? static_cast<std::size_t>(period) : distinct[p] * 5;
    for (std::size_t r = 0; r < records; ++r) {
      const bool fresh = r % 5 == 0 && r / 5 < distinct[p];
      const std::uint64_t key =
          fresh || earlier.empty() ? next_key++ : earlier[(r * 7919) % earlier.size()];
      if (fresh) earlier.push_back(key);
      const std::int64_t time =
          now + static_cast<std::int64_t>(r) * period / static_cast<std::int64_t>(records + 1);
      batch.push_back({key, time - static_cast<std::int64_t>(r % 3 == 1 ? config.lateness : 0)});
    }
    stream.batches.push_back(std::move(batch));
    stream.min_keys.push_back(p == 1 || p == 5 ? 40'000 : 0);
    // An adversarial batch of test_stream within the period's last clock unit.
    Batch extra = base[1 + p % (base.size() - 1)];
    for (Record& r : extra) r.time = now + period - 1;
    stream.batches.push_back(std::move(extra));
    stream.min_keys.push_back(0);
    now += period;
  }
  return stream;
}

class SizedWindowShards : public WindowShardExactness {};

// Shards given the whole window's keys before each period choose the single window's sizes,
// through growth at rotations and at a run's start: its flags record for record, and its bytes
// (concat) after every batch, for every shard count, shape and index.
TEST_P(SizedWindowShards, GivenTheWholeWindowsKeysTheyAreTheSingleWindow) {
  const auto [clock, generations, shape, index] = GetParam();
  const WindowConfig cfg = sized_window(clock, shape, index);
  const SizedStream stream = growth_stream(cfg, 404);
  const auto clocks = global_clocks(cfg, stream.batches);
  for (std::uint32_t num_shards : kSizedShardCounts) {
    SCOPED_TRACE("shards " + std::to_string(num_shards));
    WindowedFilter single(cfg);
    std::vector<WindowShard> shards;
    for (std::uint32_t s = 0; s < num_shards; ++s) shards.emplace_back(cfg, s, num_shards);
    ASSERT_TRUE(shards.front().sizes_per_period());
    bool resized = false, sealed = false;
    for (std::size_t b = 0; b < stream.batches.size(); ++b) {
      SCOPED_TRACE("batch " + std::to_string(b));
      if (stream.min_keys[b] != 0) {
        share_window_keys(shards);
        single.set_sizing({stream.min_keys[b], 0});
        for (WindowShard& shard : shards) shard.set_sizing({stream.min_keys[b], 0});
      }
      const auto want = dedup_whole(single, stream.batches[b]);
      ASSERT_EQ(dedup_sized(shards, stream.batches[b], clocks[b]), want);
      advance_all_to(shards, single);
      const auto joined = to_file_bytes(concat(shards));
      const auto want_bytes = to_file_bytes(single);
      ASSERT_EQ(joined.size(), want_bytes.size());
      ASSERT_TRUE(joined == want_bytes);
      const auto blocks = shards.back().filter_blocks();
      sealed |= blocks.size() > cfg.generations;
      resized |= std::any_of(blocks.begin(), blocks.end(),
                             [&](std::uint64_t n) { return n > cfg.generation.num_blocks; });
    }
    EXPECT_TRUE(resized);
    EXPECT_TRUE(sealed);
    // Sized generations: shards hold their share, every count a multiple of S.
    for (const std::uint64_t n : shards.front().filter_blocks()) EXPECT_EQ(n % num_shards, 0u);
  }
}

INSTANTIATE_TEST_SUITE_P(
    AllShapes, SizedWindowShards,
    ::testing::Combine(::testing::Values(WindowClock::records, WindowClock::event_time),
                       ::testing::Values(4u), ::testing::ValuesIn(test::kAllShapes),
                       ::testing::Values(BlockIndex::high32, BlockIndex::full64)),
    exactness_name);

// The moved hash of a generation of any size that S divides lands in the block and bit pattern
// the whole layout gives it, for both indexes and every shape: shards of one routing hold the
// same bits as the whole filter of every size (checked through the bytes of split filters of
// sizes the sizing can take, S up to 16).
TEST(WindowShard, SizedGenerationsKeepEveryKeysBlockAndBits) {
  for (Shape shape : test::kAllShapes) {
    for (BlockIndex index : {BlockIndex::high32, BlockIndex::full64}) {
      WindowConfig cfg = sized_window(WindowClock::event_time, shape, index);
      WindowedFilter single(cfg);
      // Grow the newest generation to sizes that are multiples of 240 but not of the
      // configured count's other factors.
      Batch batch;
      for (std::uint64_t k : random_keys(3000, 9)) batch.push_back({k, 0});
      single.set_sizing({50'000, 0});
      dedup_whole(single, batch);
      single.set_sizing({900'000, 0});
      dedup_whole(single, batch);
      for (std::uint32_t num_shards : kSizedShardCounts) {
        std::vector<WindowShard> shards = split(single, num_shards);
        ASSERT_EQ(to_file_bytes(concat(shards)), to_file_bytes(single));
        // The shards answer as the whole window for every key, in every filter.
        SCOPED_TRACE(test::shape_name(shape) + " " + std::to_string(num_shards));
        expect_same_answers(single, shards, random_keys(5000, 77));
        // Inserting through the shards sets the whole window's bits.
        WindowedFilter copy = load_window(std::span<const std::byte>(to_file_bytes(single)));
        Batch more;
        for (std::uint64_t k : random_keys(2000, 10)) more.push_back({k, 1});
        const std::vector<std::int64_t> ones(more.size(), 1);
        ASSERT_EQ(dedup_sharded(shards, more, ones), dedup_whole(copy, more));
        ASSERT_EQ(to_file_bytes(concat(shards)), to_file_bytes(copy));
      }
    }
  }
}

// split, reshard and concat of a window whose generations were resized are byte copies, and the
// re-cut shards go on as the window; a window without a block multiple that S divides, and shards
// that sized apart, are refused with the reason.
TEST(WindowShard, ResizedWindowsSplitReshardAndConcat) {
  const WindowConfig cfg = sized_window(WindowClock::event_time, Shape::sb512, BlockIndex::high32);
  const SizedStream stream = growth_stream(cfg, 505);
  const auto clocks = global_clocks(cfg, stream.batches);
  const std::size_t half = 5;
  WindowedFilter single(cfg);
  for (std::size_t b = 0; b < half; ++b) {
    if (stream.min_keys[b] != 0) single.set_sizing({stream.min_keys[b], 0});
    dedup_whole(single, stream.batches[b]);
  }
  const auto single_bytes = to_file_bytes(single);
  ASSERT_GT(single.memory_bytes(), cfg.memory_bytes());
  for (std::uint32_t from : kSizedShardCounts) {
    std::vector<WindowShard> shards = split(single, from);
    ASSERT_EQ(to_file_bytes(concat(shards)), single_bytes) << from;
    for (std::uint32_t to : kSizedShardCounts) {
      SCOPED_TRACE(std::to_string(from) + " -> " + std::to_string(to));
      std::vector<WindowShard> resharded = reshard(shards, to);
      ASSERT_EQ(to_file_bytes(concat(resharded)), single_bytes);
      WindowedFilter copy = load_window(std::span<const std::byte>(single_bytes));
      for (std::size_t b = half; b < stream.batches.size(); ++b) {
        if (stream.min_keys[b] != 0) {
          share_window_keys(resharded);
          copy.set_sizing({stream.min_keys[b], 0});
          for (WindowShard& shard : resharded) shard.set_sizing({stream.min_keys[b], 0});
        }
        const auto want = dedup_whole(copy, stream.batches[b]);
        ASSERT_EQ(dedup_sized(resharded, stream.batches[b], clocks[b]), want) << "batch " << b;
        advance_all_to(resharded, copy);
      }
      ASSERT_EQ(to_file_bytes(concat(resharded)), to_file_bytes(copy));
    }
  }
  // 7 does not divide 240.
  EXPECT_NE(
      message_of<std::invalid_argument>([&] { split(single, 7); }).find("block multiple, 240"),
      std::string::npos);
  // A window sized per period without a block multiple cuts into one shard only.
  WindowConfig plain = cfg;
  plain.block_multiple = 1;
  WindowedFilter unshardable(plain);
  unshardable.set_sizing({50'000, 0});
  dedup_whole(unshardable, stream.batches[0]);
  EXPECT_EQ(to_file_bytes(concat(split(unshardable, 1))), to_file_bytes(unshardable));
  const std::string refused = message_of<std::invalid_argument>([&] { split(unshardable, 2); });
  EXPECT_NE(refused.find("shardable_by"), std::string::npos) << refused;
  // Shards not given the whole window's keys size from their own, apart: 1,000 keys of shard 0
  // stand for 16,000 of the window in it, the other shards saw none.
  std::vector<WindowShard> apart;
  for (std::uint32_t s = 0; s < 16; ++s) apart.emplace_back(cfg, s, 16);
  const auto candidates = random_keys(20'000, 31);
  std::vector<std::uint32_t> owner(candidates.size());
  shard_of(cfg.generation, candidates, 16, owner);
  Batch skewed;
  for (std::size_t i = 0; i < candidates.size() && skewed.size() < 1000; ++i) {
    if (owner[i] == 0) skewed.push_back({candidates[i], 0});
  }
  advance_all(apart, 0);
  dedup_sharded(apart, skewed, std::vector<std::int64_t>(skewed.size(), 0));
  advance_all(apart, static_cast<std::int64_t>(cfg.period()));
  EXPECT_GT(apart[0].filter_blocks().back(), cfg.generation.num_blocks);
  EXPECT_EQ(apart[1].filter_blocks().back(), cfg.generation.num_blocks);
  const std::string differ = message_of<std::invalid_argument>([&] { concat(apart); });
  EXPECT_NE(differ.find("sized their generations differently"), std::string::npos) << differ;
  EXPECT_THROW(apart.front().set_window_keys(std::vector<std::uint64_t>(3)), std::invalid_argument);
}

// A shard file of resized generations records each filter's size in the whole window and the
// whole window's keys (version 3), reads back to the same bytes, and the shards join to the
// window; a shard file of the old kind (configured sizes, version 2) loads as before.
TEST(WindowShard, SizedShardFilesRoundTrip) {
  TempDir dir;
  const WindowConfig cfg = sized_window(WindowClock::event_time, Shape::sb256, BlockIndex::full64);
  const SizedStream stream = growth_stream(cfg, 606);
  WindowedFilter single(cfg);
  for (std::size_t b = 0; b < 6; ++b) {
    if (stream.min_keys[b] != 0) single.set_sizing({stream.min_keys[b], 0});
    dedup_whole(single, stream.batches[b]);
  }
  const auto whole_bytes = to_file_bytes(single);
  EXPECT_EQ(whole_bytes[8], std::byte{3});  // the version, after the 8 magic bytes
  EXPECT_EQ(to_file_bytes(load_window(std::span<const std::byte>(whole_bytes))), whole_bytes);
  std::vector<WindowShard> loaded;
  for (const WindowShard& shard : split(single, 5)) {
    const auto path = dir.path() / ("s" + std::to_string(shard.index()) + ".bbw");
    save(shard, path, {7, {}});
    const auto bytes = test::read_file(path);
    ASSERT_EQ(bytes, to_file_bytes(shard, {7, {}}));
    loaded.push_back(load_window_shard(path));
    ASSERT_EQ(to_file_bytes(loaded.back(), {7, {}}), bytes);
    EXPECT_EQ(loaded.back().filter_blocks(), shard.filter_blocks());
    EXPECT_TRUE(loaded.back().sizes_per_period());
  }
  EXPECT_EQ(to_file_bytes(concat(loaded)), whole_bytes);

  // The old kind: a promise, no block multiple, generations of the configured size.
  WindowConfig old = small_window(WindowClock::event_time, 4, Shape::sb512, BlockIndex::high32);
  old.fpr = 0.01;
  WindowedFilter old_window(old);
  dedup_whole(old_window, stream.batches[0]);
  for (const WindowShard& shard : split(old_window, 3)) {
    const auto bytes = to_file_bytes(shard);
    EXPECT_EQ(bytes[8], std::byte{2});
    const WindowShard back = load_window_shard(std::span<const std::byte>(bytes));
    EXPECT_FALSE(back.sizes_per_period());
    EXPECT_EQ(to_file_bytes(back), bytes);
  }
}

// The 10x day: day 1 brings 30,000 distinct keys over 24 h, day 2 300,000 new ones over the next
// 24 h, a tenth of each day's records repeating a key of the last hours; a 36 h window at a
// promise of 0.1 %, every shard told each day's records at the day's start (set_sizing, as the
// command line does). Checked against an exact window: no repeat within T is ever kept, and day
// 2 keeps at least 99.7 % of its unique records, through shards given the whole window's keys
// (then byte for byte the single window) and through shards that size from their own.
TEST(WindowShard, TheTenfoldDayKeepsItsUniqueRecordsThroughShards) {
  constexpr std::int64_t kDay = 86'400;
  WindowConfig cfg =
      WindowConfig::for_event_time(30'000.0 / kDay, 129'600, 0.001).shardable_by(240);
  struct Day {
    Batch records;
    std::vector<std::uint8_t> unique;  // by the exact window
  };
  std::vector<Day> days(2);
  std::unordered_map<std::uint64_t, std::int64_t> last_seen;  // the exact window
  std::uint64_t next_key = 1;
  test::SplitMix64 rng(8);
  for (std::size_t d = 0; d < 2; ++d) {
    const std::size_t distinct = d == 0 ? 30'000 : 300'000;
    std::vector<std::uint64_t> recent;
    for (std::size_t i = 0; i < distinct * 10 / 9; ++i) {
      const std::int64_t time = static_cast<std::int64_t>(d) * kDay +
                                static_cast<std::int64_t>(i * kDay / (distinct * 10 / 9));
      const bool repeat = i % 10 == 9 && !recent.empty();
      const std::uint64_t key =
          repeat
              ? recent[recent.size() - 1 - rng.next() % std::min<std::size_t>(recent.size(), 500)]
              : test::random_keys(1, next_key++).front();
      if (!repeat) recent.push_back(key);
      const auto seen = last_seen.find(key);
      const bool unique = seen == last_seen.end() || time - seen->second > 129'600;
      last_seen[key] = time;
      days[d].records.push_back({key, time});
      days[d].unique.push_back(unique ? 1 : 0);
    }
  }
  for (const bool given : {false, true}) {
    for (std::uint32_t num_shards : {2u, 5u, 16u}) {
      SCOPED_TRACE(std::string(given ? "given" : "own") + " keys, shards " +
                   std::to_string(num_shards));
      WindowedFilter single(cfg);
      std::vector<WindowShard> shards;
      for (std::uint32_t s = 0; s < num_shards; ++s) shards.emplace_back(cfg, s, num_shards);
      for (std::size_t d = 0; d < days.size(); ++d) {
        const Batch& batch = days[d].records;
        if (given) share_window_keys(shards);
        single.set_sizing({batch.size(), 0});
        for (WindowShard& shard : shards) shard.set_sizing({batch.size(), 0});
        std::vector<std::int64_t> clocks;
        for (const Record& r : batch) clocks.push_back(r.time);  // times rise: the clock
        const auto flags =
            given ? dedup_sized(shards, batch, clocks) : dedup_sharded(shards, batch, clocks);
        advance_all(shards, clocks.back());
        std::uint64_t unique = 0, kept_unique = 0;
        for (std::size_t i = 0; i < batch.size(); ++i) {
          ASSERT_FALSE(flags[i] && !days[d].unique[i])
              << "a repeat within T was kept, record " << i;
          unique += days[d].unique[i];
          kept_unique += flags[i] & days[d].unique[i];
        }
        const double kept = static_cast<double>(kept_unique) / static_cast<double>(unique);
        std::printf("    day %zu, %s keys, %u shards: %llu of %llu unique records kept (%.4f %%)\n",
                    d + 1, given ? "given" : "own", num_shards,
                    static_cast<unsigned long long>(kept_unique),
                    static_cast<unsigned long long>(unique), 100.0 * kept);
        EXPECT_GE(kept, 0.997);
        const auto want = dedup_whole(single, batch);
        if (given) {
          ASSERT_EQ(flags, want);
          ASSERT_EQ(to_file_bytes(concat(shards)), to_file_bytes(single));
        }
      }
    }
  }
}

}  // namespace
}  // namespace bulkbloom
