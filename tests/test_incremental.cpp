// Carried state taken apart and put together again (bulkbloom/incremental.hpp): a caller that
// keeps each sealed part once and the open part as base + logs restores, at every checkpoint,
// the bytes of the uninterrupted state (the oracle) — windows of every shape, both block indices,
// both clocks, with rotations, jumps and per-period growth inside the logged intervals; window
// shards; grown filters that grow and merge. A caller that also holds the parts that closed as
// base + logs (StateSnapshot::closed) restores the same bytes without writing them again.
#include <bulkbloom/incremental.hpp>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <tuple>
#include <type_traits>
#include <vector>

#include "test_support.hpp"

#define XXH_INLINE_ALL
#include <sys/mman.h>
#include <unistd.h>
#include <xxhash.h>

namespace bulkbloom {
namespace {

using test::message_of;
using test::random_keys;

// What a checkpointing caller keeps: each sealed part's bits once, by identity; the open part's
// base (nullopt: all zero) and the logs taken since; the latest metadata.
struct Saved {
  std::map<std::string, std::vector<std::byte>> sealed;
  std::optional<PartId> open;
  std::optional<std::vector<std::byte>> base;
  std::vector<std::vector<std::uint64_t>> logs;
  std::vector<std::byte> metadata;
  std::vector<PartId> parts;
  std::size_t sealed_writes = 0;
  std::size_t logged_hashes = 0;
};

std::vector<std::byte> copy_of(std::span<const std::byte> bits) {
  return {bits.begin(), bits.end()};
}

// One checkpoint of `state`: the sealed parts not kept yet (a kept one must not have changed),
// the open part's log appended, or its bits as a new base when `materialise` or the log cannot
// tell.
template <typename State>
void checkpoint(State& state, Saved& saved, StateSnapshot snapshot, bool materialise) {
  ASSERT_FALSE(snapshot.parts.empty());
  const std::size_t open = snapshot.parts.size() - 1;
  for (std::size_t i = 0; i < open; ++i) {
    const std::string name = snapshot.parts[i].name();
    with_part_bits(state, i, [&](std::span<const std::byte> bits) {
      if (const auto kept = saved.sealed.find(name); kept != saved.sealed.end()) {
        EXPECT_EQ(kept->second, copy_of(bits)) << "sealed part " << name << " changed";
      } else {
        saved.sealed[name] = copy_of(bits);
        ++saved.sealed_writes;
      }
    });
  }
  const PartId& id = snapshot.parts[open];
  const auto current_bits = [&] {
    std::vector<std::byte> bits;
    with_part_bits(state, open, [&](std::span<const std::byte> b) { bits = copy_of(b); });
    return bits;
  };
  switch (snapshot.change) {
    case OpenChange::since_taken:
      if (!saved.open) {  // logging since a moment of which the caller kept nothing
        saved.base = current_bits();
        saved.logs.clear();
        break;
      }
      ASSERT_EQ(*saved.open, id) << "the open part changed without restarting the log";
      saved.logs.push_back(std::move(snapshot.log));
      break;
    case OpenChange::since_empty:
      saved.base.reset();
      saved.logs = {std::move(snapshot.log)};
      break;
    case OpenChange::rewritten:
      EXPECT_TRUE(snapshot.log.empty());
      saved.base = current_bits();
      saved.logs.clear();
      break;
  }
  saved.logged_hashes += saved.logs.empty() ? 0 : saved.logs.back().size();
  if (materialise) {
    saved.base = current_bits();
    saved.logs.clear();
  }
  saved.open = id;
  saved.metadata = std::move(snapshot.metadata);
  saved.parts = std::move(snapshot.parts);
}

// Fills `bits` with `base`, all zero for none.
void fill_base(const std::optional<std::vector<std::byte>>& base, std::span<std::byte> bits) {
  if (!base) {
    std::fill(bits.begin(), bits.end(), std::byte{0});
    return;
  }
  ASSERT_EQ(base->size(), bits.size());
  std::copy(base->begin(), base->end(), bits.begin());
}

// The fill of restore_*() from `saved`.
PartFill fill_from(const Saved& saved) {
  return [&saved](std::size_t index, const PartId& id, std::span<std::byte> bits) {
    ASSERT_LT(index, saved.parts.size());
    EXPECT_EQ(id, saved.parts[index]);
    if (index + 1 == saved.parts.size()) {
      fill_base(saved.base, bits);
      return;
    }
    const std::vector<std::byte>& kept = saved.sealed.at(id.name());
    ASSERT_EQ(kept.size(), bits.size());
    std::copy(kept.begin(), kept.end(), bits.begin());
  };
}

template <typename State>
void replay_all(State& state, const Saved& saved) {
  for (const auto& log : saved.logs) replay_log(state, log);
}

// A caller that also keeps the parts that closed as base + logs (StateSnapshot::closed),
// completing each with its final log: it writes a part's bits only when no log tells them (a part
// it never held, a dropped log) or when it chooses to fold a base.

// Each part by identity: its base (nullopt: all zero) and the logs taken since.
struct HeldPart {
  std::optional<std::vector<std::byte>> base;
  std::vector<std::vector<std::uint64_t>> logs;
};

struct HeldParts {
  std::map<std::string, HeldPart> parts;
  std::optional<PartId> open;
  std::vector<std::byte> metadata;
  std::vector<PartId> order;
  std::size_t closed = 0;        // closed parts completed by their log
  std::size_t closed_taken = 0;  // of which held as base + logs before they closed
};

template <typename State>
std::vector<std::byte> bits_of(const State& state, std::size_t index) {
  std::vector<std::byte> bits;
  with_part_bits(state, index, [&](std::span<const std::byte> b) { bits = copy_of(b); });
  return bits;
}

// Takes `change` and `log` of part `id` into `held`; false when the caller must write its bits.
bool take_log_of(HeldParts& held, const PartId& id, OpenChange change,
                 std::vector<std::uint64_t> log) {
  switch (change) {
    case OpenChange::since_taken:
      EXPECT_TRUE(held.open && *held.open == id)
          << "a log continues part " << id.name() << ", which was not the open part";
      if (!held.open || *held.open != id) return false;
      held.parts.at(id.name()).logs.push_back(std::move(log));
      return true;
    case OpenChange::since_empty:
      held.parts[id.name()] = HeldPart{std::nullopt, {std::move(log)}};
      return true;
    case OpenChange::rewritten:
      EXPECT_TRUE(log.empty());
      return false;
  }
  return false;
}

// One checkpoint: the closed parts completed by their logs, the open part's log appended, the
// bits of what no log tells, and when `fold` a base folded for one part (chosen by `pick`).
template <typename State>
void checkpoint_held(State& state, HeldParts& held, StateSnapshot snapshot, bool fold,
                     std::uint64_t pick) {
  ASSERT_FALSE(snapshot.parts.empty());
  const std::size_t open = snapshot.parts.size() - 1;
  const PartId& open_id = snapshot.parts[open];
  for (ClosedPart& closed : snapshot.closed) {
    ASSERT_NE(closed.id, open_id) << "the open part is listed as closed";
    const bool was_open = held.open && *held.open == closed.id;
    if (take_log_of(held, closed.id, closed.change, std::move(closed.log))) {
      ++held.closed;
      held.closed_taken += was_open ? 1 : 0;
    } else {
      held.parts.erase(closed.id.name());  // its bits, below
    }
  }
  if (!take_log_of(held, open_id, snapshot.change, std::move(snapshot.log))) {
    held.parts[open_id.name()] = HeldPart{bits_of(state, open), {}};
  }
  std::map<std::string, HeldPart> kept;
  for (std::size_t i = 0; i < snapshot.parts.size(); ++i) {
    const std::string name = snapshot.parts[i].name();
    auto it = held.parts.find(name);
    if (it == held.parts.end()) {  // never held: a part from before logging, or a dropped log
      kept[name] = HeldPart{bits_of(state, i), {}};
      continue;
    }
    kept[name] = std::move(it->second);
  }
  if (fold) {
    const std::size_t i = pick % snapshot.parts.size();
    kept[snapshot.parts[i].name()] = HeldPart{bits_of(state, i), {}};
  }
  held.parts = std::move(kept);
  held.open = open_id;
  held.metadata = std::move(snapshot.metadata);
  held.order = std::move(snapshot.parts);
}

PartFill fill_from(const HeldParts& held) {
  return [&held](std::size_t index, const PartId& id, std::span<std::byte> bits) {
    ASSERT_LT(index, held.order.size());
    EXPECT_EQ(id, held.order[index]);
    fill_base(held.parts.at(id.name()).base, bits);
  };
}

template <typename State>
void replay_all(State& state, const HeldParts& held) {
  for (std::size_t i = 0; i < held.order.size(); ++i) {
    for (const auto& log : held.parts.at(held.order[i].name()).logs) replay_log(state, i, log);
  }
}

// ---------------------------------------------------------------------------------------------
// Windows.

// Adversarial batches of keys and event times: empty, hot keys, all equal, sizes around powers of
// two, repeats of earlier keys, late times, and jumps of one, several and more than G periods.
struct Batch {
  std::vector<std::uint64_t> keys;
  std::vector<std::int64_t> times;
};

std::vector<Batch> window_stream(std::uint64_t period, std::uint64_t lateness, std::uint64_t seed) {
  test::SplitMix64 rng(seed);
  std::vector<Batch> stream;
  std::vector<std::uint64_t> seen;
  std::int64_t now = -37;
  for (std::size_t b = 0; b < 90; ++b) {
    Batch batch;
    switch (b % 9) {
      case 0:
        break;  // empty
      case 1:
        batch.keys = test::hot_key_batch(4, 25, 10, seed + b);
        break;
      case 2:
        batch.keys.assign(40, 42 + b % 2);
        break;
      case 3:
        for (std::size_t i = 0; i < seen.size(); i += 5) batch.keys.push_back(seen[i]);
        break;
      default:
        batch.keys = random_keys(std::size_t{1} << (b % 8), seed * 1000 + b);
        break;
    }
    if (b == 30) now += static_cast<std::int64_t>(period);           // one period
    if (b == 50) now += 3 * static_cast<std::int64_t>(period) + 1;   // several
    if (b == 70) now += 11 * static_cast<std::int64_t>(period) + 2;  // more than G
    for (std::size_t i = 0; i < batch.keys.size(); ++i) {
      const std::uint64_t roll = rng.next() % 10;
      if (roll < 6) now += static_cast<std::int64_t>(rng.next() % 3);
      const bool late = roll >= 8 && lateness != 0;
      batch.times.push_back(late ? now - static_cast<std::int64_t>(rng.next() % (lateness + 1))
                                 : now);
    }
    seen.insert(seen.end(), batch.keys.begin(), batch.keys.end());
    stream.push_back(std::move(batch));
  }
  return stream;
}

std::uint64_t dedup(WindowedFilter& window, const Batch& batch, std::vector<std::uint8_t>& flags) {
  flags.assign(batch.keys.size(), 0);
  if (window.config().clock == WindowClock::records) {
    return window.insert_if_absent(batch.keys, flags);
  }
  return window.insert_if_absent(batch.keys, batch.times, flags);
}

// A window small enough to rotate many times in the stream, crowded so that generations share
// blocks. `sized`: the promise is known, so that generations are sized per period (they grow
// after a period that brought more keys) and set_sizing() seals and grows the newest.
WindowConfig test_window(WindowClock clock, Shape shape, BlockIndex index, bool sized) {
  WindowConfig config;
  config.clock = clock;
  config.generations = 4;
  config.window = 60;
  config.lateness = clock == WindowClock::event_time ? 9 : 0;
  config.generation = Layout{shape, 5, KeyHash::xxh64, 7, index};
  config.fpr = sized ? 0.05 : 0.0;
  return config;
}

class WindowIncremental
    : public ::testing::TestWithParam<std::tuple<WindowClock, Shape, BlockIndex, bool>> {};

// Checkpoints after irregular runs of batches (so that rotations, jumps and growth fall inside
// the logged intervals), sometimes materialising the base; at each, the state restored from what
// the caller kept has the uninterrupted window's file bytes. Every third checkpoint the restored
// window takes over (a resumed run), logging from where it was restored.
TEST_P(WindowIncremental, RestoresTheUninterruptedBytesAtEveryCheckpoint) {
  const auto [clock, shape, index, sized] = GetParam();
  const WindowConfig config = test_window(clock, shape, index, sized);
  const auto stream = window_stream(config.period(), config.lateness, 11);
  WindowedFilter oracle(config);
  WindowedFilter live(config);
  enable_change_log(live);
  Saved saved;
  HeldParts held;
  StateSnapshot first = take_snapshot(live);
  checkpoint_held(live, held, first, false, 0);
  checkpoint(live, saved, std::move(first), false);
  test::SplitMix64 rng(5);
  std::size_t next_checkpoint = 1;
  std::size_t checkpoints = 0;
  std::vector<std::uint8_t> expected, got;
  for (std::size_t b = 0; b < stream.size(); ++b) {
    if (sized && b % 13 == 7) {  // a run that expects more keys: the newest is sealed and grown
      const WindowSizing sizing{static_cast<std::uint64_t>(20 * (b + 1)), 0};
      oracle.set_sizing(sizing);
      live.set_sizing(sizing);
    }
    dedup(oracle, stream[b], expected);
    dedup(live, stream[b], got);
    ASSERT_EQ(expected, got) << "batch " << b;
    if (clock == WindowClock::event_time && b % 17 == 16) {  // an idle source's progress
      const std::int64_t to = *oracle.clock_time() + static_cast<std::int64_t>(config.period());
      oracle.advance_to(to);
      live.advance_to(to);
    }
    if (b + 1 != next_checkpoint) continue;
    next_checkpoint += 1 + rng.next() % 9;
    const FileState state{b, {std::byte{1}, std::byte(b)}};
    StateSnapshot snapshot = take_snapshot(live, state);
    ASSERT_NO_FATAL_FAILURE(checkpoint_held(live, held, snapshot, rng.next() % 5 == 0, rng.next()));
    ASSERT_NO_FATAL_FAILURE(checkpoint(live, saved, std::move(snapshot), rng.next() % 4 == 0));
    WindowedFilter from_held = restore_window(held.metadata, fill_from(held));
    replay_all(from_held, held);
    ASSERT_EQ(to_file_bytes(from_held, state), to_file_bytes(oracle, state))
        << "bases and logs, checkpoint after batch " << b;
    FileState restored_state;
    WindowedFilter restored = restore_window(saved.metadata, fill_from(saved), &restored_state);
    replay_all(restored, saved);
    EXPECT_EQ(restored_state.keys_inserted, state.keys_inserted);
    EXPECT_EQ(restored_state.metadata, state.metadata);
    ASSERT_EQ(to_file_bytes(restored, state), to_file_bytes(oracle, state))
        << "checkpoint after batch " << b;
    EXPECT_EQ(snapshot_parts(saved.metadata), saved.parts);
    if (++checkpoints % 3 == 0) {  // a resumed run sets its sizing again, as the CLI does
      live = std::move(restored);
      live.set_sizing(oracle.sizing());
      enable_change_log(live);
    }
  }
  EXPECT_GT(checkpoints, 10u);
  EXPECT_GT(saved.logged_hashes, 0u);
  EXPECT_GT(held.closed_taken, 0u) << "no part held as base + logs closed; closed " << held.closed;
  if (sized) {
    EXPECT_GT(oracle.memory_bytes(), config.memory_bytes()) << "the stream never grew the window";
  }
}

std::string window_case_name(
    const testing::TestParamInfo<std::tuple<WindowClock, Shape, BlockIndex, bool>>& info) {
  const auto [clock, shape, index, sized] = info.param;
  return std::string(clock == WindowClock::records ? "records" : "event_time") + "_" +
         test::shape_name(shape) + "_" + (index == BlockIndex::high32 ? "high32" : "full64") +
         (sized ? "_sized" : "_fixed");
}

INSTANTIATE_TEST_SUITE_P(
    AllShapes, WindowIncremental,
    ::testing::Combine(::testing::Values(WindowClock::records, WindowClock::event_time),
                       ::testing::ValuesIn(test::kAllShapes),
                       ::testing::Values(BlockIndex::high32, BlockIndex::full64),
                       ::testing::Bool()),
    window_case_name);

// The log holds only what changed bits: a key the open part held already is not logged, so a
// batch of repeats costs nothing, and a batch of n new keys costs n hashes.
TEST(WindowIncrementalLog, HoldsTheKeysNewToTheOpenPartOnly) {
  WindowedFilter window(WindowConfig::for_records(1'000'000, 0.001));
  enable_change_log(window);
  const auto keys = random_keys(1000, 3);
  std::vector<std::uint8_t> flags(keys.size());
  window.insert_if_absent(keys, flags);
  EXPECT_EQ(take_snapshot(window).log.size(), 1000u);
  window.insert_if_absent(keys, flags);
  const StateSnapshot repeats = take_snapshot(window);
  EXPECT_EQ(repeats.change, OpenChange::since_taken);
  EXPECT_TRUE(repeats.log.empty());
}

// A window that never enabled the log keeps none: its snapshots say the open part must be
// written whole.
TEST(WindowIncrementalLog, WithoutTheLogTheOpenPartIsRewritten) {
  WindowedFilter window(WindowConfig::for_records(100, 0.01));
  const auto keys = random_keys(50, 4);
  std::vector<std::uint8_t> flags(keys.size());
  window.insert_if_absent(keys, flags);
  const StateSnapshot snapshot = take_snapshot(window);
  EXPECT_EQ(snapshot.change, OpenChange::rewritten);
  EXPECT_TRUE(snapshot.log.empty());
  EXPECT_EQ(snapshot.parts.size(), window.config().generations);
}

// A log that passes its open part's bytes between two takes is dropped, as a state directory
// writes the part whole then anyway: it would only hold memory (8 bytes a key, against ~1.2 of
// the part at 1e-2). The snapshot says so, and a directory still restores the uninterrupted bytes.
template <typename State>
void expect_long_log_dropped(State& state, std::uint64_t part_bytes,
                             const std::function<void(const std::vector<std::uint64_t>&)>& insert) {
  test::TempDir tmp;
  enable_change_log(state);
  insert(random_keys(100, 11));
  StateDirectory directory(tmp.path());
  directory.save(state);
  insert(random_keys(100, 12));
  StateSnapshot kept = take_snapshot(state);
  EXPECT_EQ(kept.change, OpenChange::since_taken);
  EXPECT_EQ(kept.log.size(), 100u);
  insert(random_keys(part_bytes / 8 + 100, 13));
  const StateSnapshot dropped = take_snapshot(state);
  EXPECT_EQ(dropped.change, OpenChange::rewritten);
  EXPECT_TRUE(dropped.log.empty());
  insert(random_keys(100, 14));  // logging goes on from the take
  EXPECT_EQ(take_snapshot(state).log.size(), 100u);
  insert(random_keys(part_bytes / 8 + 100, 15));
  directory.save(state);
  StateDirectory reader(tmp.path());
  if constexpr (std::is_same_v<State, GrownFilter>) {
    EXPECT_EQ(reader.load_grown().to_file_bytes(), state.to_file_bytes());
  } else {
    EXPECT_EQ(to_file_bytes(reader.load_window()), to_file_bytes(state));
  }
}

TEST(WindowIncrementalLog, PastThePartsBytesTheLogIsDropped) {
  WindowedFilter window(WindowConfig::for_records(1'000'000, 0.01));  // periods of 333,334
  std::vector<std::uint8_t> flags;
  expect_long_log_dropped(window, window.generation(0).layout().size_bytes(),
                          [&](const std::vector<std::uint64_t>& keys) {
                            flags.assign(keys.size(), 0);
                            window.insert_if_absent(keys, flags);
                          });
  EXPECT_EQ(window.rotations(), 0u) << "the keys passed a period: the part was not the same";
}

TEST(GrownIncrementalLog, PastThePartsBytesTheLogIsDropped) {
  GrownFilter filter = GrownFilter::for_capacity(200'000, 0.01, "u64");
  std::vector<std::uint8_t> flags;
  expect_long_log_dropped(filter, filter.newest().layout().size_bytes(),
                          [&](const std::vector<std::uint64_t>& keys) {
                            flags.assign(keys.size(), 0);
                            filter.insert_if_absent(keys, flags);
                          });
  EXPECT_EQ(filter.generation_count(), 1u) << "the filter grew: the part was not the same";
}

TEST(WindowIncrementalErrors, DamagedMetadataIsAFormatErrorNamingTheSource) {
  WindowedFilter window(WindowConfig::for_records(100, 0.01));
  const StateSnapshot snapshot = take_snapshot(window, {7, {std::byte{9}}});
  const PartFill zero = [](std::size_t, const PartId&, std::span<std::byte> bits) {
    std::fill(bits.begin(), bits.end(), std::byte{0});
  };
  for (std::size_t at :
       {std::size_t{3}, std::size_t{20}, std::size_t{130}, snapshot.metadata.size() - 1}) {
    std::vector<std::byte> damaged = snapshot.metadata;
    damaged[at] ^= std::byte{0x10};
    const std::string what =
        message_of<FormatError>([&] { restore_window(damaged, zero, nullptr, {}, "snap"); });
    EXPECT_TRUE(what.starts_with("snap")) << what;
  }
  std::vector<std::byte> longer = snapshot.metadata;
  longer.push_back(std::byte{0});
  EXPECT_NE(message_of<FormatError>([&] { restore_window(longer, zero); }).find("bytes"),
            std::string::npos);
  // A window file is not a snapshot's metadata, nor the other way round.
  EXPECT_THROW(restore_window(to_file_bytes(window), zero), FormatError);
  EXPECT_THROW(load_window(snapshot.metadata), FormatError);
  GrownFilter grown = GrownFilter::for_capacity(100, 0.01);
  EXPECT_THROW(restore_window(take_snapshot(grown).metadata, zero), FormatError);
  EXPECT_THROW(restore_grown(snapshot.metadata, zero), FormatError);
  EXPECT_THROW(with_part_bits(window, snapshot.parts.size(), [](auto) {}), std::out_of_range);
}

TEST(PartIdName, IsFileNameSafeAndTellsPeriodsApart) {
  EXPECT_EQ((PartId{42, 0, 65536}.name()), "p42-0-b65536");
  EXPECT_EQ((PartId{-3, 1, 5}.name()), "pm3-1-b5");
  EXPECT_EQ((PartId{INT64_MIN, 0, 1}.name()), "pm9223372036854775808-0-b1");
  EXPECT_NE((PartId{-3, 0, 5}.name()), (PartId{3, 0, 5}.name()));
  EXPECT_EQ((PartId{-3, 1, 5, true}.name()), "upm3-1-b5");
  EXPECT_NE((PartId{0, 0, 5, true}.name()), (PartId{0, 0, 5}.name()));
  EXPECT_NE((PartId{0, 0, 5, true}), (PartId{0, 0, 5}));
}

// ---------------------------------------------------------------------------------------------
// Window shards: each shard's local window taken apart and restored, its file bytes those of
// the uninterrupted shard, while the shards are fed with the whole window's clock. Sized: shards
// of a shardable window with a promise, whose generations grow per period (each filter takes the
// hashes moved into its own blocks, so the log must hold them as moved).

// Feeds batches to the shards of a whole window `wide`, an oracle's and a live set, with the
// whole window's clock (records: each record's position; event time: the largest time so far),
// and checks that they answer alike.
struct ShardFeed {
  WindowConfig wide;
  std::uint32_t shards;
  std::int64_t position = 0;
  std::optional<std::int64_t> max_time;

  void batch(const Batch& batch, std::vector<WindowShard>& oracle, std::vector<WindowShard>& live) {
    const bool records = wide.clock == WindowClock::records;
    std::vector<std::uint32_t> owner(batch.keys.size());
    shard_of(wide.generation, batch.keys, shards, owner);
    std::vector<std::vector<std::uint64_t>> keys(shards);
    std::vector<std::vector<std::int64_t>> clocks(shards);
    for (std::size_t i = 0; i < batch.keys.size(); ++i) {
      max_time = max_time ? std::max(*max_time, batch.times[i]) : batch.times[i];
      keys[owner[i]].push_back(batch.keys[i]);
      clocks[owner[i]].push_back(records ? position++ : *max_time);
    }
    std::vector<std::uint8_t> expected, got;
    for (std::uint32_t s = 0; s < shards; ++s) {
      expected.assign(keys[s].size(), 0);
      got.assign(keys[s].size(), 0);
      oracle[s].insert_if_absent(keys[s], clocks[s], expected);
      live[s].insert_if_absent(keys[s], clocks[s], got);
      ASSERT_EQ(expected, got);
      const std::optional<std::int64_t> now =
          records ? std::optional<std::int64_t>(position) : max_time;
      if (now) {
        oracle[s].advance_to(*now);
        live[s].advance_to(*now);
      }
    }
  }
};

class ShardIncremental
    : public ::testing::TestWithParam<std::tuple<WindowClock, BlockIndex, bool>> {};

TEST_P(ShardIncremental, EachShardRestoresItsUninterruptedBytes) {
  constexpr std::uint32_t kShards = 3;
  const auto [clock, index, sized] = GetParam();
  WindowConfig wide = test_window(clock, Shape::sb256, index, sized);
  wide.generation.num_blocks = 61;
  if (sized) wide = wide.shardable_by(kShards);
  std::vector<WindowShard> oracle = split(WindowedFilter(wide), kShards);
  std::vector<WindowShard> live = split(WindowedFilter(wide), kShards);
  std::vector<Saved> saved(kShards);
  std::vector<HeldParts> held(kShards);
  for (WindowShard& shard : live) enable_change_log(shard);
  const auto stream = window_stream(wide.period(), wide.lateness, 23);
  ShardFeed feed{wide, kShards};
  for (std::size_t b = 0; b < stream.size(); ++b) {
    ASSERT_NO_FATAL_FAILURE(feed.batch(stream[b], oracle, live));
    if (b % 2 != 1) continue;
    for (std::uint32_t s = 0; s < kShards; ++s) {
      StateSnapshot snapshot = take_snapshot(live[s]);
      ASSERT_NO_FATAL_FAILURE(checkpoint_held(live[s], held[s], snapshot, b % 9 == 7, b));
      ASSERT_NO_FATAL_FAILURE(checkpoint(live[s], saved[s], std::move(snapshot), b % 21 == 19));
      WindowShard from_held = restore_window_shard(held[s].metadata, fill_from(held[s]));
      replay_all(from_held, held[s]);
      ASSERT_EQ(to_file_bytes(from_held), to_file_bytes(oracle[s]))
          << "bases and logs, shard " << s << " after batch " << b;
      WindowShard restored = restore_window_shard(saved[s].metadata, fill_from(saved[s]));
      replay_all(restored, saved[s]);
      EXPECT_EQ(restored.index(), s);
      ASSERT_EQ(to_file_bytes(restored), to_file_bytes(oracle[s]))
          << "shard " << s << " after batch " << b;
    }
  }
  for (const HeldParts& shard : held) EXPECT_GT(shard.closed_taken, 1u) << shard.closed;
  // A shard's snapshot is not a whole window's.
  EXPECT_THROW(restore_window(saved[1].metadata, fill_from(saved[1])), FormatError);
}

INSTANTIATE_TEST_SUITE_P(
    BothClocks, ShardIncremental,
    ::testing::Combine(::testing::Values(WindowClock::records, WindowClock::event_time),
                       ::testing::Values(BlockIndex::high32, BlockIndex::full64),
                       ::testing::Bool()));

// ---------------------------------------------------------------------------------------------
// Parts named before the clock starts (#35). An event-time window taken apart before its first
// record has no period yet; its first records may fall in any period, those just before 0 too, so
// that the parts it seals afterwards have periods near 0. Two different parts must never share an
// identity while a caller can hold both: one that keeps sealed parts once by identity would
// restore the empty part of the earlier save in place of the keys of the later one.

// Only the parts of an event-time window that has seen no record are marked before_clock; a
// records clock runs from the start.
TEST(PartsBeforeTheClock, OnlyAWindowWithoutAClockMarksItsParts) {
  const auto marked = [](const StateSnapshot& snapshot) {
    EXPECT_EQ(snapshot_parts(snapshot.metadata), snapshot.parts);
    std::size_t n = 0;
    for (const PartId& id : snapshot.parts) n += id.before_clock ? 1 : 0;
    return n;
  };
  WindowedFilter records(
      test_window(WindowClock::records, Shape::sb256, BlockIndex::high32, false));
  EXPECT_EQ(marked(take_snapshot(records)), 0u);
  WindowedFilter window(
      test_window(WindowClock::event_time, Shape::sb256, BlockIndex::high32, false));
  const StateSnapshot before = take_snapshot(window);
  EXPECT_EQ(marked(before), window.config().generations);
  EXPECT_EQ(before.parts.back(), (PartId{0, 0, 5, true}));
  window.advance_to(-1);
  const StateSnapshot after = take_snapshot(window);
  EXPECT_EQ(marked(after), 0u);
  EXPECT_EQ(after.parts.back(), (PartId{-1, 0, 5}));
}

// Batches of new keys two to a period from period `first` on, so that the parts sealed after a
// few of them hold keys (and, for a sized window, a period with several filters).
std::vector<Batch> periods_from(std::int64_t first, std::uint64_t period, std::size_t batches,
                                std::uint64_t seed) {
  std::vector<Batch> stream;
  const auto p = static_cast<std::int64_t>(period);
  for (std::size_t b = 0; b < batches; ++b) {
    Batch batch{random_keys(30, seed + b), {}};
    for (std::size_t i = 0; i < batch.keys.size(); ++i) {
      batch.times.push_back(first * p + static_cast<std::int64_t>(b) * p / 2 +
                            static_cast<std::int64_t>(i % 3));
    }
    stream.push_back(std::move(batch));
  }
  return stream;
}

// The first periods of the records, and how many batches come between the save before the clock
// and the next one (the parts sealed in between are never seen open by a caller).
constexpr std::int64_t kFirstPeriods[] = {-7, -4, -3, -2, -1, 0, 1, 2};
constexpr std::size_t kFirstGaps[] = {1, 3, 6};
constexpr std::size_t kNearZeroBatches = 14;

TEST(PartsBeforeTheClock, NoLaterPartTakesTheIdentityOfOneSavedBeforeTheClock) {
  for (const bool sized : {false, true}) {
    const WindowConfig config =
        test_window(WindowClock::event_time, Shape::sb256, BlockIndex::high32, sized);
    for (const std::int64_t first : kFirstPeriods) {
      for (const std::size_t gap : kFirstGaps) {
        SCOPED_TRACE("first period " + std::to_string(first) + ", first save after " +
                     std::to_string(gap) + " batches" + (sized ? ", sized" : ""));
        WindowedFilter oracle(config);
        WindowedFilter live(config);
        enable_change_log(live);
        Saved saved;
        HeldParts held;
        StateSnapshot before = take_snapshot(live);
        ASSERT_NO_FATAL_FAILURE(checkpoint_held(live, held, before, false, 0));
        ASSERT_NO_FATAL_FAILURE(checkpoint(live, saved, std::move(before), false));
        const auto stream = periods_from(first, config.period(), kNearZeroBatches, 70);
        std::vector<std::uint8_t> expected, got;
        for (std::size_t b = 0; b < stream.size(); ++b) {
          if (sized && b == 1) {  // the open part is sealed and a larger one takes its period
            oracle.set_sizing({500, 0});
            live.set_sizing({500, 0});
          }
          dedup(oracle, stream[b], expected);
          dedup(live, stream[b], got);
          ASSERT_EQ(expected, got) << "batch " << b;
          if (b + 1 < gap) continue;
          StateSnapshot snapshot = take_snapshot(live);
          ASSERT_NO_FATAL_FAILURE(checkpoint_held(live, held, snapshot, false, 0));
          ASSERT_NO_FATAL_FAILURE(checkpoint(live, saved, std::move(snapshot), false));
          WindowedFilter from_held = restore_window(held.metadata, fill_from(held));
          replay_all(from_held, held);
          ASSERT_EQ(to_file_bytes(from_held), to_file_bytes(oracle))
              << "bases and logs, checkpoint after batch " << b;
          WindowedFilter restored = restore_window(saved.metadata, fill_from(saved));
          replay_all(restored, saved);
          ASSERT_EQ(to_file_bytes(restored), to_file_bytes(oracle))
              << "checkpoint after batch " << b;
        }
        if (sized) EXPECT_GT(oracle.memory_bytes(), config.memory_bytes());
      }
    }
  }
}

// The same through state directories (the command line's and Python's carried windows), for a
// window and for its shards, each loaded by a new reader after each save (the first after the
// clock started, then every third batch: a directory keeps only what its last commit named).
TEST(PartsBeforeTheClock, StateDirectoriesLoadTheUninterruptedBytes) {
  constexpr std::uint32_t kShards = 2;
  WindowConfig config =
      test_window(WindowClock::event_time, Shape::sb256, BlockIndex::high32, true);
  config.generation.num_blocks = 61;
  config = config.shardable_by(kShards);
  // A directory forgets what its last commit did not name: only the periods a save before the
  // clock names (0 and the G - 1 before it) can meet again.
  for (const std::int64_t first : {-4, -2, -1, 0, 1}) {
    for (const std::size_t gap : kFirstGaps) {
      SCOPED_TRACE("first period " + std::to_string(first) + ", first save after " +
                   std::to_string(gap) + " batches");
      test::TempDir tmp;
      WindowedFilter oracle(config);
      WindowedFilter live(config);
      std::vector<WindowShard> shard_oracle = split(WindowedFilter(config), kShards);
      std::vector<WindowShard> shard_live = split(WindowedFilter(config), kShards);
      StateDirectory directory(tmp.path() / "window");
      std::vector<StateDirectory> shard_directories;
      for (std::uint32_t s = 0; s < kShards; ++s) {
        shard_directories.emplace_back(tmp.path() / ("shard" + std::to_string(s)));
      }
      const auto save_all = [&] {
        directory.save(live);
        for (std::uint32_t s = 0; s < kShards; ++s) shard_directories[s].save(shard_live[s]);
      };
      save_all();
      ShardFeed feed{config, kShards};
      const auto stream = periods_from(first, config.period(), kNearZeroBatches, 90);
      std::vector<std::uint8_t> expected, got;
      for (std::size_t b = 0; b < stream.size(); ++b) {
        dedup(oracle, stream[b], expected);
        dedup(live, stream[b], got);
        ASSERT_EQ(expected, got) << "batch " << b;
        ASSERT_NO_FATAL_FAILURE(feed.batch(stream[b], shard_oracle, shard_live));
        if (b + 1 < gap || (b + 1 - gap) % 3 != 0) continue;
        save_all();
        ASSERT_EQ(to_file_bytes(StateDirectory(directory.path()).load_window()),
                  to_file_bytes(oracle))
            << "window saved after batch " << b;
        for (std::uint32_t s = 0; s < kShards; ++s) {
          ASSERT_EQ(to_file_bytes(StateDirectory(shard_directories[s].path()).load_window_shard()),
                    to_file_bytes(shard_oracle[s]))
              << "shard " << s << " saved after batch " << b;
        }
      }
    }
  }
}

// A state directory committed before the clock started by bulkbloom before the mark
// (tests/golden/window-before-clock, written at commit a92c672: test_window(event_time, sb256,
// high32, unsized), caller metadata "b", nothing else; manifest version 1). The directory loads
// (the mark is not stored: the clock in the metadata gives it) and goes on through periods -2 to 0
// with the uninterrupted bytes.
TEST(PartsBeforeTheClock, ADirectorySavedBeforeTheMarkLoadsAndGoesOn) {
  const WindowConfig config =
      test_window(WindowClock::event_time, Shape::sb256, BlockIndex::high32, false);
  const std::filesystem::path golden =
      std::filesystem::path(BULKBLOOM_GOLDEN_DIR) / "window-before-clock";
  const FileState state{0, {std::byte{'b'}}};
  test::TempDir tmp;
  WindowedFilter oracle(config);
  std::filesystem::copy(golden, tmp.path() / "old");
  StateDirectory directory(tmp.path() / "old");
  FileState loaded;
  WindowedFilter live = directory.load_window(&loaded);
  EXPECT_EQ(loaded.metadata, state.metadata);
  ASSERT_EQ(to_file_bytes(live, state), to_file_bytes(oracle, state));
  const auto stream = periods_from(-2, config.period(), 6, 110);
  std::vector<std::uint8_t> expected, got;
  for (const Batch& batch : stream) {
    dedup(oracle, batch, expected);
    dedup(live, batch, got);
    ASSERT_EQ(expected, got);
  }
  directory.save(live, state);
  EXPECT_EQ(to_file_bytes(StateDirectory(tmp.path() / "old").load_window(), state),
            to_file_bytes(oracle, state));
}

// ---------------------------------------------------------------------------------------------
// Grown filters: growth (a new generation, or an empty one resized) inside the logged interval,
// integer and byte-string keys, resumed runs, and a merge, which the log cannot tell. The first
// generation has each shape and block index; later ones have the layout growth gives them.

class GrownIncremental : public ::testing::TestWithParam<std::tuple<Shape, BlockIndex>> {};

TEST_P(GrownIncremental, RestoresTheUninterruptedBytesThroughGrowthAndMerge) {
  const auto [shape, index] = GetParam();
  const Layout first{shape, 5, KeyHash::xxh64, 7, index};
  GrownFilter oracle(first, 200, 0.01, "u64");
  GrownFilter live(first, 200, 0.01, "u64");
  enable_change_log(live);
  Saved saved;
  HeldParts held;
  StateSnapshot start = take_snapshot(live);
  checkpoint_held(live, held, start, false, 0);
  checkpoint(live, saved, std::move(start), false);
  const std::vector<std::byte> caller = {std::byte{'x'}};
  test::SplitMix64 rng(9);
  std::size_t checkpoints = 0;
  std::vector<std::uint8_t> expected, got;
  for (std::size_t b = 0; b < 60; ++b) {
    const auto keys = b % 5 == 2 ? test::hot_key_batch(3, 30, 20, b)
                                 : random_keys(std::size_t{1} << (b % 9), 100 + b);
    expected.assign(keys.size(), 0);
    got.assign(keys.size(), 0);
    if (b % 2 == 0) {
      oracle.insert_if_absent(keys, expected);
      live.insert_if_absent(keys, got);
    } else {
      std::vector<std::string> text;
      for (std::uint64_t k : keys) text.push_back("key-" + std::to_string(k % 5000));
      const std::vector<std::string_view> views(text.begin(), text.end());
      oracle.insert_if_absent(views, expected);
      live.insert_if_absent(views, got);
    }
    ASSERT_EQ(expected, got);
    if (b % 4 != 3 && b % 7 != 5) continue;  // some intervals hold no growth, some several
    StateSnapshot snapshot = take_snapshot(live, caller);
    ASSERT_NO_FATAL_FAILURE(checkpoint_held(live, held, snapshot, rng.next() % 6 == 0, b));
    ASSERT_NO_FATAL_FAILURE(checkpoint(live, saved, std::move(snapshot), rng.next() % 4 == 0));
    GrownFilter from_held = restore_grown(held.metadata, fill_from(held));
    replay_all(from_held, held);
    ASSERT_EQ(from_held.to_file_bytes(caller), oracle.to_file_bytes(caller))
        << "bases and logs, after batch " << b;
    std::vector<std::byte> restored_caller;
    GrownFilter restored = restore_grown(saved.metadata, fill_from(saved), &restored_caller);
    replay_all(restored, saved);
    EXPECT_EQ(restored_caller, caller);
    ASSERT_EQ(restored.to_file_bytes(caller), oracle.to_file_bytes(caller)) << "after batch " << b;
    EXPECT_EQ(snapshot_parts(saved.metadata), saved.parts);
    if (++checkpoints % 3 == 0) {  // a resumed run, from either caller's state
      live = std::move(checkpoints % 2 == 0 ? from_held : restored);
      enable_change_log(live);
    }
  }
  EXPECT_GT(oracle.generation_count(), 3u) << "the filter never grew";
  EXPECT_GT(saved.logged_hashes, 0u);
  EXPECT_GT(held.closed_taken, 1u)
      << "no generation held as base + logs was sealed; sealed " << held.closed;
}

std::string grown_case_name(const testing::TestParamInfo<std::tuple<Shape, BlockIndex>>& info) {
  const auto [shape, index] = info.param;
  return test::shape_name(shape) + "_" + (index == BlockIndex::high32 ? "high32" : "full64");
}

INSTANTIATE_TEST_SUITE_P(AllShapes, GrownIncremental,
                         ::testing::Combine(::testing::ValuesIn(test::kAllShapes),
                                            ::testing::Values(BlockIndex::high32,
                                                              BlockIndex::full64)),
                         grown_case_name);

TEST(GrownIncrementalMerge, AMergedOpenPartIsRewritten) {
  // A merged filter's open part is written whole.
  GrownFilter one = GrownFilter::for_capacity(1000, 0.01);
  GrownFilter other = GrownFilter::for_capacity(1000, 0.01);
  enable_change_log(one);
  const auto keys = random_keys(100, 77);
  std::vector<std::uint8_t> flags(keys.size());
  other.insert_if_absent(keys, flags);
  one.merge(other);
  StateSnapshot merged = take_snapshot(one);
  EXPECT_EQ(merged.change, OpenChange::rewritten);
  Saved after_merge;
  after_merge.open = merged.parts.back();  // the caller held the part before the merge
  ASSERT_NO_FATAL_FAILURE(checkpoint(one, after_merge, std::move(merged), false));
  GrownFilter restored = restore_grown(after_merge.metadata, fill_from(after_merge));
  EXPECT_EQ(restored.to_file_bytes(), one.to_file_bytes());
  EXPECT_EQ(take_snapshot(one).change, OpenChange::since_taken);  // logging goes on
}

// ---------------------------------------------------------------------------------------------
// Closed parts (StateSnapshot::closed): a caller that holds every part as a base plus logs,
// completing a part that stopped being open with its final log, restores the uninterrupted bytes
// and writes a part's bits only when a log cannot tell them (a part it never held, a dropped log)
// or when it chooses to fold a base.

// A part whose log passed its bytes before it closed comes without a log: the caller writes its
// bits. A caller that ignores `closed` sees what it saw before.
// Inserts `n` random keys of seed `seed` into `state`.
template <typename State>
void insert_random(State& state, std::size_t n, std::uint64_t seed) {
  const auto keys = random_keys(n, seed);
  std::vector<std::uint8_t> flags(keys.size());
  state.insert_if_absent(keys, flags);
}

TEST(WindowClosedPartsLog, ADroppedLogClosesRewritten) {
  WindowedFilter window(WindowConfig::for_records(1'000'000, 0.01));  // periods of 333,334
  enable_change_log(window);
  const auto insert = [&](std::size_t n, std::uint64_t seed) { insert_random(window, n, seed); };
  insert(100, 1);
  EXPECT_TRUE(take_snapshot(window).closed.empty());
  insert(100, 2);  // the open part keeps its log across the period's end
  insert(333'334 - 200 + 50, 3);
  StateSnapshot rotated = take_snapshot(window);
  ASSERT_EQ(rotated.closed.size(), 1u);
  EXPECT_EQ(rotated.closed[0].id, rotated.parts[rotated.parts.size() - 2]);
  EXPECT_EQ(rotated.closed[0].change, OpenChange::rewritten) << "a log past the part's bytes";
  EXPECT_TRUE(rotated.closed[0].log.empty());
  EXPECT_EQ(rotated.change, OpenChange::since_empty);
  EXPECT_EQ(rotated.log.size(), 50u);
  insert(100, 4);
  EXPECT_TRUE(take_snapshot(window).closed.empty()) << "a closed part is handed over once";
}

// Rotations with no take between them: the closed parts' logs count against the open part's
// bytes, so every log the window holds stays within one part's bytes however many rotations pass
// (a Flink job whose checkpoints are not taken), and a caller holding parts as base + logs still
// restores the window's bytes.
TEST(WindowClosedPartsLog, AllTheLogsHeldStayWithinOnePartsBytes) {
  WindowedFilter window(WindowConfig::for_records(1'000'000, 0.01));  // periods of 333,334
  const std::uint64_t part_bytes = window.generation(0).layout().size_bytes();
  const std::uint64_t period = window.config().period();
  enable_change_log(window);
  HeldParts held;
  checkpoint_held(window, held, take_snapshot(window), false, 0);
  // Each period: 0.6 of a part's bytes of new keys, then one of them repeated to the period's end
  // (records that set no bit and log nothing).
  for (std::uint64_t p = 0; p < 3; ++p) {
    auto keys = random_keys(static_cast<std::size_t>(part_bytes * 6 / 10 / 8), 40 + p);
    keys.resize(static_cast<std::size_t>(period), keys.front());
    std::vector<std::uint8_t> flags(keys.size());
    window.insert_if_absent(keys, flags);
  }
  ASSERT_EQ(window.rotations(), 2u);
  StateSnapshot snapshot = take_snapshot(window);
  std::uint64_t hashes = snapshot.log.size();
  for (const ClosedPart& part : snapshot.closed) hashes += part.log.size();
  EXPECT_LE(hashes * 8, part_bytes) << "logs of " << snapshot.closed.size() << " closed parts";
  ASSERT_EQ(snapshot.closed.size(), 2u);
  EXPECT_EQ(snapshot.closed[0].change, OpenChange::since_taken) << "the first log fits";
  EXPECT_EQ(snapshot.closed[1].change, OpenChange::rewritten) << "the second does not beside it";
  EXPECT_EQ(snapshot.change, OpenChange::rewritten);
  ASSERT_NO_FATAL_FAILURE(checkpoint_held(window, held, std::move(snapshot), false, 0));
  WindowedFilter restored = restore_window(held.metadata, fill_from(held));
  replay_all(restored, held);
  EXPECT_EQ(to_file_bytes(restored), to_file_bytes(window));
}

// A grown filter's generation sealed by growth comes with its final log; one whose log passed its
// bytes, or whose bits a merge changed, without.
TEST(GrownClosedPartsLog, ASealedGenerationComesWithItsLogUnlessDroppedOrMerged) {
  // Logs 100 keys, takes, runs `between`, logs `logged` more keys, then a batch that grows.
  const auto grow_and_take = [](GrownFilter& filter, std::size_t logged,
                                const std::function<void()>& between) {
    enable_change_log(filter);
    filter.expect_keys(5'000'000, 0);  // the next generation's log stays under its bytes
    const auto insert = [&](std::size_t n, std::uint64_t seed) { insert_random(filter, n, seed); };
    insert(100, 1);
    EXPECT_TRUE(take_snapshot(filter).closed.empty());
    between();
    insert(logged, 2);   // logged across the growth
    insert(220'000, 3);  // new keys past the first generation's target
    EXPECT_EQ(filter.generation_count(), 2u);
    return take_snapshot(filter);
  };
  GrownFilter logged = GrownFilter::for_capacity(200'000, 0.01, "u64");
  StateSnapshot grown = grow_and_take(logged, 100, [] {});
  ASSERT_EQ(grown.closed.size(), 1u);
  EXPECT_EQ(grown.closed[0].id, grown.parts[0]);
  EXPECT_EQ(grown.closed[0].change, OpenChange::since_taken);
  EXPECT_EQ(grown.closed[0].log.size(), 100u);
  EXPECT_EQ(grown.change, OpenChange::since_empty);
  EXPECT_EQ(grown.log.size(), 220'000u);
  EXPECT_TRUE(take_snapshot(logged).closed.empty()) << "a sealed part is handed over once";

  GrownFilter dropped = GrownFilter::for_capacity(200'000, 0.01, "u64");
  grown = grow_and_take(dropped, dropped.newest().layout().size_bytes() / 8 + 100, [] {});
  ASSERT_EQ(grown.closed.size(), 1u);
  EXPECT_EQ(grown.closed[0].change, OpenChange::rewritten) << "a log past the part's bytes";
  EXPECT_TRUE(grown.closed[0].log.empty());

  GrownFilter merged = GrownFilter::for_capacity(200'000, 0.01, "u64");
  GrownFilter other = GrownFilter::for_capacity(200'000, 0.01, "u64");
  insert_random(other, 100, 77);
  grown = grow_and_take(merged, 100, [&] { merged.merge(other); });
  ASSERT_EQ(grown.closed.size(), 1u);
  EXPECT_EQ(grown.closed[0].change, OpenChange::rewritten) << "the merge is not in the log";

  GrownFilter unlogged = GrownFilter::for_capacity(1000, 0.01, "u64");
  for (std::uint64_t seed = 0; unlogged.generation_count() < 3; ++seed) {
    insert_random(unlogged, 1000, 100 + seed);
  }
  EXPECT_TRUE(take_snapshot(unlogged).closed.empty()) << "a filter that keeps no log";
}

// ---------------------------------------------------------------------------------------------
// State directories: saves that write what changed, loads that give the uninterrupted bytes.

std::size_t files_in(const std::filesystem::path& dir) {
  std::size_t n = 0;
  for ([[maybe_unused]] const auto& entry : std::filesystem::directory_iterator(dir)) ++n;
  return n;
}

TEST(StateDirectoryWindow, SavesWhatChangedAndLoadsTheUninterruptedBytes) {
  test::TempDir tmp;
  WindowConfig config = test_window(WindowClock::records, Shape::sb512, BlockIndex::high32, true);
  config.window = 6000;  // period 2000 records: several saves per period
  config.generation.num_blocks = 2048;
  WindowedFilter oracle(config);
  auto live = std::make_unique<WindowedFilter>(config);
  auto directory = std::make_unique<StateDirectory>(tmp.path() / "state");
  EXPECT_FALSE(StateDirectory::holds_state(tmp.path() / "state"));
  std::uint64_t written = 0;
  std::size_t saves = 0;
  std::vector<std::uint8_t> expected, got;
  for (std::size_t b = 0; b < 60; ++b) {
    Batch batch{random_keys(250, 500 + b), {}};
    if (b % 3 == 0) batch.keys.resize(100);  // repeats of the previous batch below
    if (b > 0 && b % 4 == 1) batch.keys = random_keys(250, 500 + b - 1);
    dedup(oracle, batch, expected);
    dedup(*live, batch, got);
    ASSERT_EQ(expected, got) << "batch " << b;
    const FileState state{b, {std::byte(b)}};
    written += directory->save(*live, state);
    ++saves;
    // A generation that a rotation or a growth sealed keeps its base and logs, completed by its
    // final log: no part's bits are written as a sealed part's file.
    for (const auto& entry : std::filesystem::directory_iterator(tmp.path() / "state")) {
      EXPECT_FALSE(entry.path().extension() == ".part") << entry.path() << ", batch " << b;
    }
    if (b % 7 == 6) {  // a restart: a new object loads what was committed and goes on
      directory = std::make_unique<StateDirectory>(tmp.path() / "state");
      FileState loaded_state;
      live = std::make_unique<WindowedFilter>(directory->load_window(&loaded_state));
      live->set_sizing(oracle.sizing());
      EXPECT_EQ(loaded_state.metadata, state.metadata);
      ASSERT_EQ(to_file_bytes(*live, state), to_file_bytes(oracle, state)) << "after batch " << b;
    }
  }
  // Whole window files each time would have written saves × its size.
  const std::uint64_t whole = saves * to_file_bytes(oracle).size();
  EXPECT_LT(written, whole / 3) << written << " of " << whole;
  StateDirectory reader(tmp.path() / "state");
  EXPECT_EQ(to_file_bytes(reader.load_window()), to_file_bytes(oracle));
  // Only what the manifest names is left: a base or parts, logs, the manifest.
  EXPECT_LE(files_in(tmp.path() / "state"), 1 + 8 * config.generations + 2);
  EXPECT_THROW(reader.load_grown(), FormatError);
}

TEST(StateDirectoryWindow, ADirectoryRemovedBetweenSavesGetsEveryFileAgain) {
  // The object's last commit named files that are gone (the directory was removed, or a relative
  // path names another one after a chdir): keeping them would commit a manifest naming nothing.
  test::TempDir tmp;
  WindowConfig config = test_window(WindowClock::records, Shape::sb512, BlockIndex::high32, true);
  config.window = 6000;
  config.generation.num_blocks = 2048;
  WindowedFilter window(config);
  const std::filesystem::path dir = tmp.path() / "state";
  StateDirectory directory(dir);
  std::vector<std::uint8_t> flags;
  for (std::size_t b = 0; b < 30; ++b) {
    dedup(window, Batch{random_keys(250, 900 + b), {}}, flags);
    directory.save(window);
    if (b == 19) std::filesystem::remove_all(dir);
    if (b == 24) {  // another directory under the same name, holding another state
      std::filesystem::remove_all(dir);
      WindowedFilter other(config);
      dedup(other, Batch{random_keys(100, 7), {}}, flags);
      StateDirectory(dir).save(other);
    }
  }
  EXPECT_EQ(to_file_bytes(StateDirectory(dir).load_window()), to_file_bytes(window));
}

TEST(StateDirectoryFiles, OnlyNamesItsOwnSavesGiveAreRemovedOrAccepted) {
  test::TempDir tmp;
  const std::filesystem::path dir = tmp.path() / "state";
  std::filesystem::create_directories(dir);
  const auto touch = [&](const std::string& name) { std::ofstream(dir / name) << "user data"; };
  // Names that end like a state directory's files but are not of its making.
  const std::vector<std::string> users = {
      "app.log",         "x.part",        "notes.base",          "1-p0-0-b64.logx",
      "1-q0-0-b64.part", "p0-0-b64.base", "MANIFESTO.tmp.a1b2c3"};
  for (const std::string& name : users) {
    touch(name);
    EXPECT_TRUE(StateDirectory::holds_other_files(dir)) << name;
    std::filesystem::remove(dir / name);
  }
  constexpr std::string_view kLegacy[] = {"checkpoint.bbf"};
  touch("checkpoint.bbf");
  EXPECT_TRUE(StateDirectory::holds_other_files(dir));
  EXPECT_FALSE(StateDirectory::holds_other_files(dir, kLegacy));
  std::filesystem::remove(dir / "checkpoint.bbf");
  // What a killed save leaves: its own names, removed by the next commit with nothing else.
  const std::vector<std::string> debris = {"3-p0-0-b2048.base", "12-upm3-1-b64.part",
                                           "4-pm2-0-b128.log", "MANIFEST.tmp.Q2xYz9",
                                           "5-p7-0-b2048.log.tmp.abcdef"};
  for (const std::string& name : debris) touch(name);
  EXPECT_FALSE(StateDirectory::holds_other_files(dir));
  for (const std::string& name : users) touch(name);
  WindowConfig config = test_window(WindowClock::records, Shape::sb512, BlockIndex::high32, true);
  WindowedFilter window(config);
  StateDirectory(dir).save(window);
  for (const std::string& name : users) EXPECT_TRUE(std::filesystem::exists(dir / name)) << name;
  for (const std::string& name : debris) EXPECT_FALSE(std::filesystem::exists(dir / name)) << name;
}

TEST(StateDirectoryWindow, DamagedFilesAreFormatErrorsNamingThem) {
  test::TempDir tmp;
  WindowedFilter window(WindowConfig::for_records(3000, 0.01));
  const auto keys = random_keys(500, 8);
  std::vector<std::uint8_t> flags(keys.size());
  window.insert_if_absent(keys, flags);
  StateDirectory directory(tmp.path());
  directory.save(window);
  for (const auto& entry : std::filesystem::directory_iterator(tmp.path())) {
    if (entry.path().filename() == "MANIFEST") continue;
    std::vector<std::byte> bytes = test::read_file(entry.path());
    bytes[bytes.size() / 2] ^= std::byte{1};
    test::write_file(entry.path(), bytes);
    const std::string what =
        message_of<FormatError>([&] { StateDirectory(tmp.path()).load_window(); });
    EXPECT_NE(what.find(entry.path().filename().string()), std::string::npos) << what;
    EXPECT_NE(what.find("corrupt"), std::string::npos) << what;
    return;
  }
  ADD_FAILURE() << "the save wrote no file besides its manifest";
}

std::set<std::string> file_names(const std::filesystem::path& dir) {
  std::set<std::string> names;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    names.insert(entry.path().filename().string());
  }
  return names;
}

// A part that closed with a log the directory cannot complete it from (dropped past its bytes)
// is written whole: the save counts its bytes, the file holds its bits (the load has the
// window's bytes), and a save by an object that did not write it keeps that file (its bits are
// the file's).
TEST(StateDirectoryWindow, AClosedPartItsLogCannotCompleteIsWrittenWhole) {
  test::TempDir tmp;
  WindowedFilter window(WindowConfig::for_records(1'000'000, 0.01));  // periods of 333,334
  auto directory = std::make_unique<StateDirectory>(tmp.path());
  insert_random(window, 100, 1);
  directory->save(window);
  insert_random(window, 333'334 - 100 + 50, 2);  // the open part's log passes its bytes; it closes
  const std::set<std::string> before = file_names(tmp.path());
  const std::uint64_t written = directory->save(window);
  std::vector<std::string> parts;
  for (const std::string& name : file_names(tmp.path())) {
    if (!before.contains(name) && name.ends_with(".part")) parts.push_back(name);
  }
  ASSERT_EQ(parts.size(), 1u) << "the closed part's bits, and nothing else, as a sealed part";
  EXPECT_NE(parts[0].find("-p0-0-"), std::string::npos) << parts[0] << " is not period 0's";
  const std::uint64_t part_bytes = std::filesystem::file_size(tmp.path() / parts[0]);
  EXPECT_GE(written, part_bytes);
  EXPECT_EQ(to_file_bytes(StateDirectory(tmp.path()).load_window()), to_file_bytes(window));

  directory = std::make_unique<StateDirectory>(tmp.path());  // saves, no load: checks the bits
  insert_random(window, 10, 3);
  const std::set<std::string> kept = file_names(tmp.path());
  directory->save(window);
  for (const std::string& name : file_names(tmp.path())) {
    EXPECT_TRUE(kept.contains(name) || !name.ends_with(".part")) << name << " written again";
  }
  EXPECT_TRUE(std::filesystem::exists(tmp.path() / parts[0]));
  EXPECT_EQ(to_file_bytes(StateDirectory(tmp.path()).load_window()), to_file_bytes(window));
}

// Saves through several growths, the saving object sometimes replaced by one that loads what was
// committed, once by one that saves without loading: a sealed generation is never written again
// (its base and logs stay, completed by its final log), and every load has the uninterrupted
// bytes.
TEST(StateDirectoryGrown, SavesWhatChangedAndLoadsTheUninterruptedBytes) {
  test::TempDir tmp;
  GrownFilter oracle = GrownFilter::for_capacity(1000, 0.01, "u64");
  GrownFilter live = GrownFilter::for_capacity(1000, 0.01, "u64");
  auto directory = std::make_unique<StateDirectory>(tmp.path());
  const std::vector<std::byte> caller = {std::byte{'c'}};
  std::vector<std::uint8_t> expected, got;
  std::size_t growths = 0;
  std::size_t final_logs = 0;
  for (std::size_t b = 0; b < 60; ++b) {
    const std::size_t generations = live.generation_count();
    for (std::uint64_t half = 0; half < 2; ++half) {  // a growth in the second leaves a final log
      const auto keys = random_keys(150, 900 + 2 * b + half);
      expected.assign(keys.size(), 0);
      got.assign(keys.size(), 0);
      oracle.insert_if_absent(keys, expected);
      live.insert_if_absent(keys, got);
      ASSERT_EQ(expected, got);
    }
    const std::set<std::string> before = file_names(tmp.path());
    if (b == 23) directory = std::make_unique<StateDirectory>(tmp.path());  // saves, no load
    directory->save(live, caller);
    // What the save wrote: the manifest, the open part's base or log, the final log of the part
    // open before; never the bits of a sealed generation.
    const std::string open = PartId{static_cast<std::int64_t>(live.generation_count() - 1), 0,
                                    live.newest().layout().num_blocks}
                                 .name();
    for (const std::string& name : file_names(tmp.path())) {
      if (before.contains(name) || name == "MANIFEST" || name.find(open) != std::string::npos) {
        continue;
      }
      EXPECT_TRUE(name.ends_with(".log")) << name << " written by the save after batch " << b;
      ++final_logs;
    }
    growths += live.generation_count() - generations;
    std::vector<std::byte> loaded_caller;
    GrownFilter loaded = StateDirectory(tmp.path()).load_grown(&loaded_caller);
    EXPECT_EQ(loaded_caller, caller);
    ASSERT_EQ(loaded.to_file_bytes(caller), oracle.to_file_bytes(caller)) << "after batch " << b;
    if (b % 9 == 8) {  // a restart: a new object loads what was committed and goes on
      directory = std::make_unique<StateDirectory>(tmp.path());
      live = directory->load_grown();
    }
  }
  EXPECT_GE(growths, 3u);
  EXPECT_GE(final_logs, 1u) << "no generation sealed with a final log to complete it";
}

// The manifest of `dir` rewritten as version 1 (bulkbloom before per-part logs) wrote it: no bits
// checksums, no part index before each log (every log was the open part's).
void rewrite_manifest_as_version_1(const std::filesystem::path& dir) {
  const std::vector<std::byte> v2 = test::read_file(dir / "MANIFEST");
  const auto u64 = [&](std::size_t at) {
    std::uint64_t value;
    std::memcpy(&value, v2.data() + at, 8);
    return value;
  };
  const auto u32 = [&](std::size_t at) { return static_cast<std::uint32_t>(u64(at)); };
  std::vector<std::byte> v1(v2.begin(), v2.begin() + 40 + static_cast<std::ptrdiff_t>(u64(24)));
  const std::uint32_t version = 1;
  std::memcpy(v1.data() + 8, &version, 4);
  std::size_t at = v1.size();
  const auto copy_entry = [&](std::size_t skip) {
    at += skip;
    std::uint16_t name_bytes;
    std::memcpy(&name_bytes, v2.data() + at + 16, 2);
    v1.insert(v1.end(), v2.begin() + static_cast<std::ptrdiff_t>(at),
              v2.begin() + static_cast<std::ptrdiff_t>(at + 18 + name_bytes));
    at += 18 + name_bytes;
  };
  for (std::uint32_t i = 0; i < u32(32); ++i) copy_entry(8);
  for (std::uint32_t i = 0; i < u32(36); ++i) {
    ASSERT_EQ(u32(at), u32(32) - 1) << "version 1 holds the open part's logs only";
    copy_entry(4);
  }
  ASSERT_EQ(at + 8, v2.size());
  const std::uint64_t checksum = XXH3_64bits(v1.data(), v1.size());
  const auto* bytes = reinterpret_cast<const std::byte*>(&checksum);
  v1.insert(v1.end(), bytes, bytes + 8);
  test::write_file(dir / "MANIFEST", v1);
}

// A directory that an older bulkbloom committed (manifest version 1) loads, and a save into it
// goes on from it: the open part's base and logs kept, a log added.
TEST(StateDirectoryGrown, AVersion1ManifestStillLoads) {
  test::TempDir tmp;
  GrownFilter filter = GrownFilter::for_capacity(100'000, 0.01, "u64");
  insert_random(filter, 300, 1);
  StateDirectory(tmp.path()).save(filter);
  StateDirectory writer(tmp.path());
  filter = writer.load_grown();
  insert_random(filter, 100, 2);
  writer.save(filter);  // the open part's base and a log
  ASSERT_NO_FATAL_FAILURE(rewrite_manifest_as_version_1(tmp.path()));
  StateDirectory directory(tmp.path());
  GrownFilter loaded = directory.load_grown();
  ASSERT_EQ(loaded.to_file_bytes(), filter.to_file_bytes());
  insert_random(loaded, 100, 3);
  insert_random(filter, 100, 3);
  EXPECT_LT(directory.save(loaded), filter.newest().layout().size_bytes()) << "only a log";
  EXPECT_EQ(StateDirectory(tmp.path()).load_grown().to_file_bytes(), filter.to_file_bytes());
}

// Pages of `bits` that are resident (mincore), counting only the pages wholly inside it.
std::size_t resident_pages(std::span<const std::byte> bits) {
  const auto page = static_cast<std::uintptr_t>(sysconf(_SC_PAGESIZE));
  const auto begin = (reinterpret_cast<std::uintptr_t>(bits.data()) + page - 1) / page * page;
  const auto end = (reinterpret_cast<std::uintptr_t>(bits.data()) + bits.size()) / page * page;
  if (end <= begin) return 0;
  std::vector<unsigned char> in_core((end - begin) / page);
  EXPECT_EQ(mincore(reinterpret_cast<void*>(begin), end - begin, in_core.data()), 0);
  return static_cast<std::size_t>(
      std::count_if(in_core.begin(), in_core.end(), [](unsigned char c) { return (c & 1) != 0; }));
}

// A fill that copies each part of `source` (oldest first) into the restored part, after
// counting the restored part's pages that something wrote before it.
PartFill copy_counting_written(const std::vector<const std::vector<std::byte>*>& source,
                               std::size_t& written_before) {
  return [&source, &written_before](std::size_t index, const PartId&, std::span<std::byte> bits) {
    ASSERT_LT(index, source.size());
    ASSERT_EQ(source[index]->size(), bits.size());
    written_before += resident_pages(bits);
    std::copy(source[index]->begin(), source[index]->end(), bits.begin());
  };
}

// A restore writes each page of the window once, in the fill (#35: a restored window was zeroed
// when made, zeroed again as each generation started, then filled: three writes of every byte
// of a window of a GiB or more), and the restored window is resident, as a new one is.
TEST(RestoreMemory, EachPageIsWrittenOnceByTheFill) {
  const WindowConfig config = WindowConfig::for_event_time(1000, 3600, 0.001, 4);
  WindowedFilter window(config);
  std::vector<std::uint64_t> keys(20'000);
  std::vector<std::int64_t> times(keys.size());
  for (std::size_t i = 0; i < keys.size(); ++i) {
    keys[i] = i * 0x9E3779B97F4A7C15ULL;
    times[i] = static_cast<std::int64_t>(i * 9000 / keys.size());
  }
  std::vector<std::uint8_t> is_new(keys.size());
  window.insert_if_absent(keys, times, is_new);
  ASSERT_GE(window.memory_bytes(), std::uint64_t{8} << 20);
  const StateSnapshot whole = take_snapshot(window);
  std::vector<std::vector<std::byte>> bits(whole.parts.size());
  for (std::size_t i = 0; i < bits.size(); ++i) {
    with_part_bits(window, i,
                   [&](std::span<const std::byte> b) { bits[i].assign(b.begin(), b.end()); });
  }
  std::vector<const std::vector<std::byte>*> parts;
  for (const auto& b : bits) parts.push_back(&b);
  std::size_t written_before = 0;
  const WindowedFilter restored =
      restore_window(whole.metadata, copy_counting_written(parts, written_before));
  EXPECT_EQ(written_before, 0u) << "pages of the restored window written before its fill";
  EXPECT_EQ(to_file_bytes(restored), to_file_bytes(window));
  std::size_t resident = 0;
  for (std::size_t i = 0; i < bits.size(); ++i) {
    with_part_bits(restored, i,
                   [&](std::span<const std::byte> b) { resident += resident_pages(b); });
  }
  const auto page = static_cast<std::uint64_t>(sysconf(_SC_PAGESIZE));
  EXPECT_GE(resident * page, restored.memory_bytes() * 9 / 10);

  // A shard of it, restored from its snapshot, likewise.
  std::vector<WindowShard> shards = split(window, 2);
  const StateSnapshot shard = take_snapshot(shards[1]);
  std::vector<std::vector<std::byte>> shard_bits(shard.parts.size());
  for (std::size_t i = 0; i < shard_bits.size(); ++i) {
    with_part_bits(shards[1], i,
                   [&](std::span<const std::byte> b) { shard_bits[i].assign(b.begin(), b.end()); });
  }
  parts.clear();
  for (const auto& b : shard_bits) parts.push_back(&b);
  const WindowShard restored_shard =
      restore_window_shard(shard.metadata, copy_counting_written(parts, written_before));
  EXPECT_EQ(written_before, 0u) << "pages of the restored shard written before its fill";
  EXPECT_EQ(to_file_bytes(restored_shard), to_file_bytes(shards[1]));
}

}  // namespace
}  // namespace bulkbloom
