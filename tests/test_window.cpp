// The sliding window (docs/WINDOW.md): exactness against a sequential reference, zero leaks
// within T against an exact map, forgetting after the bound, FPR against the model, persistence
// and kill-and-resume.
#include <gtest/gtest.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <thread>
#include <unordered_map>

#define XXH_INLINE_ALL
#include <xxhash.h>

#include "test_support.hpp"
#include "window_stream.hpp"

extern char** environ;

namespace bulkbloom::test {
namespace {

namespace fs = std::filesystem;

// The sequential meaning, written from docs/WINDOW.md one record at a time with the plain filter
// API: rotate when the record's period (records clock: its index; event time: the largest time
// seen) lies after the newest generation's; new = no generation contains the key; insert it into
// the newest generation.
class ReferenceWindow {
 public:
  explicit ReferenceWindow(const WindowConfig& config) : config_(config) {
    Options scalar;
    scalar.implementation = "cpu/scalar";
    for (std::uint32_t g = 0; g < config.generations; ++g)
      generations_.emplace_back(config.generation, scalar);
  }

  bool insert_if_absent(std::uint64_t key, std::int64_t time) {
    const auto period = static_cast<std::int64_t>(config_.period());
    std::int64_t epoch;
    if (config_.clock == WindowClock::records) {
      epoch = static_cast<std::int64_t>(records_) / period;
    } else {
      clock_ = started_ ? std::max(clock_, time) : time;
      epoch = static_cast<std::int64_t>(std::floor(double(clock_) / double(period)));
    }
    if (!started_) {
      started_ = true;
      newest_epoch_ = epoch;
    }
    for (; newest_epoch_ < epoch; ++newest_epoch_) {
      std::rotate(generations_.rbegin(), generations_.rbegin() + 1, generations_.rend());
      generations_.front().clear();  // front = newest
    }
    ++records_;
    bool present = false;
    for (const Filter& g : generations_) present = present || g.contains(key);
    generations_.front().insert(key);
    return !present;
  }

  const Filter& generation(std::uint32_t age) const { return generations_[age]; }

 private:
  WindowConfig config_;
  std::vector<Filter> generations_;
  bool started_ = false;
  std::int64_t newest_epoch_ = 0;
  std::int64_t clock_ = 0;
  std::uint64_t records_ = 0;
};

// Feeds `stream` to `window` in batches of the given sizes (cycled) and returns the flags.
std::vector<std::uint8_t> feed(WindowedFilter& window, const WindowStream& stream,
                               const std::vector<std::size_t>& batch_sizes, std::size_t from = 0,
                               std::size_t to = SIZE_MAX) {
  to = std::min(to, stream.keys.size());
  std::vector<std::uint8_t> flags(to - from);
  std::size_t b = 0;
  for (std::size_t at = from; at < to; ++b) {
    const std::size_t n = std::min(batch_sizes[b % batch_sizes.size()], to - at);
    const auto keys = std::span(stream.keys).subspan(at, n);
    const auto out = std::span(flags).subspan(at - from, n);
    const std::uint64_t fresh =
        window.config().clock == WindowClock::records
            ? window.insert_if_absent(keys, out)
            : window.insert_if_absent(keys, std::span(stream.times).subspan(at, n), out);
    EXPECT_EQ(fresh, static_cast<std::uint64_t>(std::count(out.begin(), out.end(), 1)));
    at += n;
  }
  return flags;
}

void expect_same_generations(const WindowedFilter& window, const ReferenceWindow& reference) {
  for (std::uint32_t age = 0; age < window.config().generations; ++age) {
    EXPECT_EQ(bytes_of(window.generation(age)), bytes_of(reference.generation(age)))
        << "generation of age " << age;
  }
}

void expect_same_generations(const WindowedFilter& a, const WindowedFilter& b) {
  ASSERT_EQ(a.config().generations, b.config().generations);
  for (std::uint32_t age = 0; age < a.config().generations; ++age) {
    EXPECT_EQ(bytes_of(a.generation(age)), bytes_of(b.generation(age))) << "age " << age;
  }
}

// A small window whose generations are crowded (so that generations share blocks and false
// positives occur) with period 5: T = 12, L = 3, G = 4.
WindowConfig small_config(WindowClock clock, Shape shape, std::uint64_t num_blocks = 64) {
  WindowConfig config;
  config.clock = clock;
  config.window = 12;
  config.lateness = clock == WindowClock::event_time ? 3 : 0;
  config.generations = 4;
  config.generation = Layout{shape, num_blocks};
  return config;
}

const std::vector<std::uint64_t> kDistances = {1, 2, 4, 5, 6, 11, 12, 13, 19, 20, 21, 40};

struct Case {
  std::string implementation;
  WindowClock clock;
};

void PrintTo(const Case& c, std::ostream* os) {
  *os << c.implementation << (c.clock == WindowClock::records ? " records" : " event_time");
}

std::vector<Case> all_cases() {
  std::vector<Case> cases;
  for (const auto& impl : available_implementations()) {
    for (WindowClock clock : {WindowClock::records, WindowClock::event_time})
      cases.push_back({impl, clock});
  }
  return cases;
}

std::string case_name(const testing::TestParamInfo<Case>& info) {
  std::string name = info.param.implementation +
                     (info.param.clock == WindowClock::records ? "_records" : "_event_time");
  std::replace(name.begin(), name.end(), '/', '_');
  return name;
}

class WindowContract : public testing::TestWithParam<Case> {
 protected:
  Options options() const {
    Options o;
    o.implementation = GetParam().implementation;
    return o;
  }
  WindowClock clock() const { return GetParam().clock; }
};

TEST_P(WindowContract, MatchesTheSequentialReferenceForAnyBatchSplit) {
  for (Shape shape : kAllShapes) {
    const WindowConfig config = small_config(clock(), shape);
    const WindowStream stream = make_window_stream(6000, 5, kDistances, config.lateness);
    ReferenceWindow reference(config);
    std::vector<std::uint8_t> expected;
    for (std::size_t i = 0; i < stream.keys.size(); ++i)
      expected.push_back(reference.insert_if_absent(stream.keys[i], stream.times[i]) ? 1 : 0);
    // Batches of one record, batches that straddle rotations, and one batch for everything.
    for (const auto& sizes : std::vector<std::vector<std::size_t>>{
             {1}, {3, 7, 1, 16, 5}, {999}, {stream.keys.size()}}) {
      WindowedFilter window(config, options());
      EXPECT_EQ(feed(window, stream, sizes), expected)
          << to_string(shape) << ", first batch size " << sizes[0];
      expect_same_generations(window, reference);
      EXPECT_EQ(window.records_seen(), stream.keys.size());
    }
  }
}

// Segments of tens of thousands of records, whose lookups in the older generations are cut into
// one slice per thread: every thread count gives the sequential reference's flags and bytes,
// with repeats crossing slices, segments and generations, and contains agrees with the
// reference's generations.
TEST_P(WindowContract, LookupsSplitBetweenThreadsMatchTheReference) {
  WindowConfig config;
  config.clock = clock();
  config.window = 90'000;
  config.lateness = clock() == WindowClock::event_time ? 3 : 0;
  config.generations = 4;  // a period of 30,000 (30,001 with lateness) records or time units
  config.generation = Layout{Shape::sb512, 2048};  // crowded: false positives occur
  const WindowStream stream = make_window_stream(
      200'000, 21, {1, 5, 1000, 16'384, 29'999, 30'001, 45'000, 89'999, 90'001}, config.lateness);
  ReferenceWindow reference(config);
  std::vector<std::uint8_t> expected;
  for (std::size_t i = 0; i < stream.keys.size(); ++i)
    expected.push_back(reference.insert_if_absent(stream.keys[i], stream.times[i]) ? 1 : 0);
  const auto probes = std::span(stream.keys).last(70'000);
  std::vector<std::uint8_t> want_found(probes.size());
  for (std::size_t i = 0; i < probes.size(); ++i) {
    want_found[i] = 0;
    for (std::uint32_t age = 0; age < config.generations; ++age)
      want_found[i] |= reference.generation(age).contains(probes[i]) ? 1 : 0;
  }
  for (unsigned threads : {1u, 2u, 3u}) {
    for (std::size_t batch : {std::size_t{65'536}, stream.keys.size()}) {
      SCOPED_TRACE(std::to_string(threads) + " threads, batches of " + std::to_string(batch));
      Options o = options();
      o.threads = threads;
      WindowedFilter window(config, o);
      ASSERT_EQ(feed(window, stream, {batch}), expected);
      expect_same_generations(window, reference);
      std::vector<std::uint8_t> found(probes.size());
      window.contains(probes, found);
      ASSERT_EQ(found, want_found);
    }
  }
}

TEST_P(WindowContract, RepeatsWithinTheWindowAreAlwaysDropped) {
  // A crowded window: many false positives, but never a leak.
  const WindowConfig config = small_config(clock(), Shape::sb256, 16);
  const WindowStream stream = make_window_stream(20000, 9, kDistances, config.lateness);
  WindowedFilter window(config, options());
  const auto flags = feed(window, stream, {3, 7, 1, 16, 5});
  // Records clock: "within T" counts records; event time: a key's largest earlier time.
  std::unordered_map<std::uint64_t, std::int64_t> last;
  std::size_t checked = 0;
  for (std::size_t i = 0; i < flags.size(); ++i) {
    const std::int64_t now = clock() == WindowClock::records ? std::int64_t(i) : stream.times[i];
    const auto it = last.find(stream.keys[i]);
    if (it != last.end() && now - it->second <= std::int64_t(config.window)) {
      ASSERT_EQ(flags[i], 0) << "record " << i << " repeats its key after " << now - it->second
                             << " <= T";
      ++checked;
    }
    auto& latest = last[stream.keys[i]];
    latest = it == last.end() ? now : std::max(latest, now);
  }
  EXPECT_GT(checked, 4000u);
}

TEST_P(WindowContract, KeysOlderThanTheBoundAreForgotten) {
  // The state after the bound is independent of older keys: two streams that differ only in keys
  // last seen more than forget_after() ago leave identical generations and decisions.
  const WindowConfig config = small_config(clock(), Shape::sb512, 256);
  const std::uint64_t bound = config.forget_after();  // 20
  WindowStream recent = make_window_stream(600, 3, kDistances, config.lateness);
  auto run = [&](std::uint64_t old_seed) {
    WindowStream old = make_window_stream(300, old_seed, kDistances, 0);
    WindowStream all;
    const std::int64_t gap_end = old.times.back() + std::int64_t(bound);
    all.keys = old.keys;
    all.times = old.times;
    // Records clock: `bound` filler records separate the phases; event time: a clock jump.
    if (clock() == WindowClock::records) {
      const auto filler = random_keys(bound, 1234);
      all.keys.insert(all.keys.end(), filler.begin(), filler.end());
      all.times.insert(all.times.end(), bound, gap_end);
    }
    const std::size_t recent_from = all.keys.size();
    for (std::size_t i = 0; i < recent.keys.size(); ++i) {
      all.keys.push_back(recent.keys[i]);
      all.times.push_back(recent.times[i] - recent.times.front() + gap_end);
    }
    WindowedFilter window(config, options());
    auto flags = feed(window, all, {7}, 0, recent_from);
    if (clock() == WindowClock::event_time) {
      window.advance_to(gap_end);
      EXPECT_EQ(window.clock_time(), gap_end);
    }
    flags = feed(window, all, {7}, recent_from);
    return std::make_pair(std::move(window), flags);
  };
  const auto [a, flags_a] = run(100);
  const auto [b, flags_b] = run(200);
  EXPECT_EQ(flags_a, flags_b);
  expect_same_generations(a, b);
  // And an old key is not in the window after the bound (up to false positives: none here).
  const WindowStream old = make_window_stream(300, 100, kDistances, 0);
  std::vector<std::uint8_t> found(old.keys.size());
  a.contains(old.keys, found);
  EXPECT_LE(std::count(found.begin(), found.end(), 1), 3);
}

TEST_P(WindowContract, RepeatsAtTAreDroppedAndCountAsArrivals) {
  // A key at every offset within a period; repeated at exactly T (dropped), again T later
  // (dropped: the dropped repeat was an arrival too), then forget_after() later (new).
  const WindowConfig config = small_config(clock(), Shape::sb512, 4096);
  const std::int64_t period = std::int64_t(config.period());
  const std::int64_t T = std::int64_t(config.window);
  const std::int64_t bound = std::int64_t(config.forget_after());
  for (std::int64_t offset = 0; offset < period; ++offset) {
    WindowedFilter window(config, options());
    const std::uint64_t key = 77 + std::uint64_t(offset);
    // One record per clock unit: record t has time t, so both clocks read the same.
    const auto filler = random_keys(std::size_t(2 * T + bound + period), std::uint64_t(offset) + 1);
    std::int64_t t = 0;
    auto record = [&](std::uint64_t k) {
      std::uint8_t flag = 0;
      if (clock() == WindowClock::records) {
        window.insert_if_absent(std::span(&k, 1), std::span(&flag, 1));
      } else {
        window.insert_if_absent(std::span(&k, 1), std::span(&t, 1), std::span(&flag, 1));
      }
      ++t;
      return flag;
    };
    auto fill_until = [&](std::int64_t end) {
      while (t < end) record(filler[std::size_t(t)]);
    };
    fill_until(offset);
    ASSERT_EQ(record(key), 1);
    fill_until(offset + T);
    EXPECT_EQ(record(key), 0) << "offset " << offset << ": repeat at exactly T";
    fill_until(offset + 2 * T);
    EXPECT_EQ(record(key), 0) << "offset " << offset << ": T after a dropped repeat";
    fill_until(offset + 2 * T + bound);
    EXPECT_EQ(record(key), 1) << "offset " << offset << ": forget_after() after the last arrival";
  }
}

TEST_P(WindowContract, PersistsAndResumesExactly) {
  const WindowConfig config = small_config(clock(), Shape::sb256x4, 128);
  const WindowStream stream = make_window_stream(5000, 21, kDistances, config.lateness);
  TempDir dir;
  for (std::size_t cut : {0, 1, 2345}) {
    WindowedFilter original(config, options());
    feed(original, stream, {13}, 0, cut);
    const FileState state{cut, {std::byte{1}, std::byte{2}, std::byte{3}}};
    save(original, dir.path() / "w.bbw", state);
    std::vector<WindowedFilter> loaded;
    std::vector<std::vector<std::uint8_t>> tails;
    for (const auto& impl : available_implementations()) {
      Options other;
      other.implementation = impl;
      FileState loaded_state;
      loaded.push_back(load_window(dir.path() / "w.bbw", &loaded_state, other));
      EXPECT_EQ(loaded_state.keys_inserted, cut);
      EXPECT_EQ(loaded_state.metadata, state.metadata);
      EXPECT_EQ(loaded.back().records_seen(), original.records_seen());
      EXPECT_EQ(loaded.back().rotations(), original.rotations());
      EXPECT_EQ(loaded.back().clock_time(), original.clock_time());
      expect_same_generations(loaded.back(), original);
      tails.push_back(feed(loaded.back(), stream, {13}, cut));
    }
    // Resumed and uninterrupted runs decide alike and end in the same state.
    const auto rest = feed(original, stream, {13}, cut);
    for (std::size_t i = 0; i < loaded.size(); ++i) {
      EXPECT_EQ(tails[i], rest) << "cut at " << cut;
      expect_same_generations(loaded[i], original);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(AllImplementations, WindowContract, testing::ValuesIn(all_cases()),
                         case_name);

TEST(WindowFpr, UnionOfFullGenerationsMatchesTheModel) {
  const double p = 0.01;
  const WindowConfig config = WindowConfig::for_records(30000, p, 4);
  ASSERT_EQ(config.period(), 10000u);
  WindowedFilter window(config);
  // Exactly 6 periods of distinct keys: the newest generation has just filled, so all four hold
  // period() keys each.
  const auto keys = random_keys(6 * config.period(), 1);
  std::vector<std::uint8_t> is_new(keys.size());
  window.insert_if_absent(keys, is_new);
  const double model = config.expected_fpr(config.period());
  EXPECT_LE(model, p);
  EXPECT_GT(model, 0.8 * p);  // sized close to the target, not far under it
  const std::size_t probes = 400000;
  const auto fresh = random_keys(probes, 2);
  std::vector<std::uint8_t> found(probes);
  window.contains(fresh, found);
  const double measured = double(std::count(found.begin(), found.end(), 1)) / probes;
  const double sigma = std::sqrt(model * (1 - model) / probes);
  EXPECT_NEAR(measured, model, 5 * sigma + 0.02 * model);
  EXPECT_NEAR(window.current_fpr(), model, 0.1 * model);
  // Keys of the last G periods are all held; the cleared one's keys are only false positives.
  std::vector<std::uint8_t> held(4 * config.period());
  window.contains(std::span(keys).last(held.size()), held);
  EXPECT_EQ(std::count(held.begin(), held.end(), 0), 0);
  std::vector<std::uint8_t> dropped(config.period());
  window.contains(std::span(keys).subspan(config.period(), config.period()), dropped);
  EXPECT_LT(double(std::count(dropped.begin(), dropped.end(), 1)) / config.period(), 2 * model);
}

TEST(WindowSizing, FollowsTheDocumentedMath) {
  // 10^9 records a day, T = 36 h in seconds, p = 0.001, G = 4: a period of 12 h.
  const double per_second = 1e9 / 86400;
  const WindowConfig config = WindowConfig::for_event_time(per_second, 36 * 3600, 0.001, 4);
  EXPECT_EQ(config.period(), 12u * 3600);
  EXPECT_EQ(config.forget_after(), 48u * 3600);
  const auto per_generation = std::uint64_t(std::ceil(per_second * 12 * 3600));
  const double generation_fpr = 1 - std::pow(1 - 0.001, 0.25);
  EXPECT_EQ(config.generation, Layout::for_capacity(per_generation, generation_fpr));
  EXPECT_LE(config.expected_fpr(per_generation), 0.001);
  EXPECT_EQ(config.memory_bytes(), 4 * config.generation.size_bytes());
  // Lateness widens the period so that T + L fits in G - 1 periods.
  EXPECT_EQ(WindowConfig::for_event_time(1, 100, 0.01, 3, 21).period(), 61u);
  EXPECT_EQ(WindowConfig::for_records(100, 0.01, 2).period(), 100u);
  EXPECT_NE(config.describe().find("forgotten after 172800"), std::string::npos)
      << config.describe();
}

TEST(WindowErrors, BadParametersNameTheValueAndTheLimit) {
  const auto bad = [](auto change) {
    WindowConfig config = small_config(WindowClock::records, Shape::sb512);
    change(config);
    return message_of<std::invalid_argument>([&] { WindowedFilter w(config); });
  };
  EXPECT_NE(bad([](WindowConfig& c) { c.generations = 1; }).find("generations 1"),
            std::string::npos);
  EXPECT_NE(bad([](WindowConfig& c) { c.generations = 65; }).find("2 to 64"), std::string::npos);
  EXPECT_NE(bad([](WindowConfig& c) { c.window = 0; }).find("window length 0"), std::string::npos);
  EXPECT_NE(bad([](WindowConfig& c) { c.lateness = 5; }).find("lateness 5"), std::string::npos);
  EXPECT_NE(bad([](WindowConfig& c) {
              c.clock = WindowClock::event_time;
              c.window = std::uint64_t{1} << 62;
            }).find("exceeds the limit"),
            std::string::npos);
  EXPECT_THROW(WindowConfig::for_records(100, 1.5), std::invalid_argument);
  EXPECT_THROW(WindowConfig::for_event_time(-1, 100, 0.01), std::invalid_argument);

  WindowedFilter records(small_config(WindowClock::records, Shape::sb512));
  WindowedFilter timed(small_config(WindowClock::event_time, Shape::sb512));
  std::vector<std::uint64_t> keys(3);
  std::vector<std::int64_t> times(3);
  std::vector<std::uint8_t> flags(3), short_flags(2);
  EXPECT_THROW(records.insert_if_absent(keys, times, flags), std::invalid_argument);
  EXPECT_THROW(records.advance_to(5), std::invalid_argument);
  EXPECT_THROW(timed.insert_if_absent(keys, flags), std::invalid_argument);
  EXPECT_THROW(timed.insert_if_absent(keys, times, short_flags), std::invalid_argument);
  EXPECT_THROW(records.generation(4), std::invalid_argument);
  const std::vector<std::string_view> words = {"a", "b"};
  WindowConfig identity = small_config(WindowClock::records, Shape::sb512);
  identity.generation.hash = KeyHash::identity;
  WindowedFilter prehashed(identity);
  EXPECT_THROW(prehashed.insert_if_absent(words, short_flags), std::invalid_argument);
}

TEST(WindowErrors, AMovedFromWindowThrowsUntilAssignedTo) {
  WindowedFilter records(small_config(WindowClock::records, Shape::sb512));
  WindowedFilter timed(small_config(WindowClock::event_time, Shape::sb512));
  WindowedFilter records_now = std::move(records);
  WindowedFilter timed_now = std::move(timed);
  std::vector<std::uint64_t> keys = {1, 2, 3};
  std::vector<std::int64_t> times = {1, 2, 3};
  std::vector<std::uint8_t> flags(3);
  const auto says_moved = [](auto call) {
    return message_of<std::logic_error>(call).find("moved from") != std::string::npos;
  };
  EXPECT_TRUE(says_moved([&] { records.insert_if_absent(keys, flags); }));
  EXPECT_TRUE(says_moved([&] { timed.insert_if_absent(keys, times, flags); }));
  EXPECT_TRUE(says_moved([&] { timed.advance_to(9); }));
  EXPECT_TRUE(says_moved([&] { records.contains(std::uint64_t{1}); }));
  EXPECT_TRUE(says_moved([&] { records.generation(0); }));
  EXPECT_TRUE(says_moved([&] { records.current_fpr(); }));
  EXPECT_TRUE(says_moved([&] { records.implementation(); }));
  EXPECT_TRUE(says_moved([&] { to_file_bytes(records); }));
  records = std::move(records_now);
  EXPECT_EQ(records.insert_if_absent(keys, flags), 3u);
}

TEST(WindowKeys, ByteStringsDedupLikeTheirHashes) {
  // A byte-string key is placed by its XXH64, as in the plain filter.
  WindowConfig config = small_config(WindowClock::records, Shape::sb256, 512);
  config.window = 1000;  // the whole batch stays in the window
  WindowedFilter window(config);
  WindowedFilter by_hash([&] {
    WindowConfig c = config;
    c.generation.hash = KeyHash::identity;
    return c;
  }());
  std::vector<std::string> words;
  for (int i = 0; i < 300; ++i) words.push_back("id-" + std::to_string(i % 170));
  const std::vector<std::string_view> views(words.begin(), words.end());
  std::vector<std::uint64_t> hashes;
  for (const auto& w : words) hashes.push_back(XXH64(w.data(), w.size(), 0));
  std::vector<std::uint8_t> a(words.size()), b(words.size());
  window.insert_if_absent(views, a);
  by_hash.insert_if_absent(hashes, b);
  EXPECT_EQ(a, b);
  std::vector<std::uint8_t> found(words.size());
  window.contains(views, found);
  EXPECT_EQ(std::count(found.begin(), found.end(), 0), 0);
}

TEST(WindowFile, RejectsDamagedFilesNamingTheProblem) {
  TempDir dir;
  const auto path = dir.path() / "w.bbw";
  WindowedFilter window(small_config(WindowClock::event_time, Shape::sb512, 100));
  const WindowStream stream = make_window_stream(500, 4, kDistances, 3);
  feed(window, stream, {50});
  save(window, path, {7, {std::byte{9}}});
  const auto good = read_file(path);
  EXPECT_EQ(good.size(), 4096u + 4 * 8192u);

  auto load_bad = [&](std::vector<std::byte> bytes) {
    write_file(path, bytes);
    return message_of<FormatError>([&] { load_window(path); });
  };
  EXPECT_NE(load_bad({good.begin(), good.begin() + 100}).find("truncated"), std::string::npos);
  EXPECT_NE(load_bad({good.begin(), good.end() - 1}).find("truncated"), std::string::npos);
  auto extra = good;
  extra.push_back(std::byte{0});
  EXPECT_NE(load_bad(extra).find("unexpected bytes"), std::string::npos);
  auto payload = good;
  payload[4096 + 3 * 8192 + 5] ^= std::byte{1};
  EXPECT_NE(load_bad(payload).find("checksum"), std::string::npos);
  auto header = good;
  header[40] ^= std::byte{1};
  EXPECT_NE(load_bad(header).find("header checksum"), std::string::npos);
  // An unreachable clock with a valid header checksum.
  auto clock = good;
  clock[56] ^= std::byte{1};
  const std::uint64_t sum = XXH3_64bits(clock.data(), 120);
  std::memcpy(clock.data() + 120, &sum, sizeof sum);
  EXPECT_NE(load_bad(clock).find("cannot occur"), std::string::npos);
  // Byte 112 is the generations' block index; an unknown mode is rejected. 113..119 hold the shard
  // fields (docs/FORMAT.md "Window shards"): 2^24 shards of this window cannot exist.
  const auto with_header_byte = [&](std::size_t at, std::uint8_t value) {
    auto bytes = good;
    bytes[at] = std::byte{value};
    const std::uint64_t checksum = XXH3_64bits(bytes.data(), 120);
    std::memcpy(bytes.data() + 120, &checksum, sizeof checksum);
    return bytes;
  };
  EXPECT_NE(load_bad(with_header_byte(112, 2)).find("unknown block index code 2"),
            std::string::npos);
  EXPECT_NE(load_bad(with_header_byte(119, 1)).find("bad shard"), std::string::npos);
  // A plain filter file is not a window file.
  save(Filter(Layout{Shape::sb512, 10}), path);
  EXPECT_NE(message_of<FormatError>([&] { load_window(path); }).find("not a bulkbloom window"),
            std::string::npos);
}

// The generations' block index travels in header byte 112 and comes back with the same bits.
TEST(WindowFile, RoundTripsTheBlockIndex) {
  TempDir dir;
  const auto path = dir.path() / "w.bbw";
  WindowConfig config = small_config(WindowClock::records, Shape::sb512, 100);
  config.generation.index = BlockIndex::full64;
  WindowedFilter window(config);
  feed(window, make_window_stream(500, 4, kDistances, 0), {50});
  save(window, path);
  EXPECT_EQ(read_file(path)[112], std::byte{1});
  const WindowedFilter loaded = load_window(path);
  EXPECT_EQ(loaded.config().generation, config.generation);
  expect_same_generations(loaded, window);
}

TEST(WindowFile, RandomHeaderValuesGiveAWindowOrAFormatError) {
  // Header fields set at random, with the header checksum made to match so that the reader's
  // later checks run: nothing but a window or a FormatError may come out (no crash, no huge
  // allocation from an unchecked size).
  TempDir dir;
  const auto path = dir.path() / "w.bbw";
  WindowedFilter window(small_config(WindowClock::event_time, Shape::sb256, 40));
  feed(window, make_window_stream(200, 6, kDistances, 3), {50});
  save(window, path, {1, {std::byte{5}, std::byte{6}}});
  const auto good = read_file(path);
  SplitMix64 rng(3);
  std::size_t loaded = 0;
  for (int round = 0; round < 400; ++round) {
    auto bytes = good;
    for (int changes = 1 + int(rng.next() % 3); changes > 0; --changes) {
      bytes[8 + rng.next() % 112] = std::byte(rng.next() % 4 == 0 ? 0xFF : rng.next() % 3);
    }
    const std::uint64_t sum = XXH3_64bits(bytes.data(), 120);
    std::memcpy(bytes.data() + 120, &sum, sizeof sum);
    write_file(path, bytes);
    try {
      load_window(path);
      ++loaded;
    } catch (const FormatError&) {
    }
  }
  EXPECT_LT(loaded, 400u);
}

TEST(WindowCheckpoint, KeepsTheWindowAndMetadataTogether) {
  TempDir dir;
  const auto checkpoints = dir.path() / "ckpt";
  EXPECT_FALSE(load_window_checkpoint(checkpoints).has_value());
  WindowedFilter window(small_config(WindowClock::records, Shape::sb512));
  const WindowStream stream = make_window_stream(300, 8, kDistances, 0);
  feed(window, stream, {64});
  save_checkpoint(checkpoints, window, {300, {std::byte{42}}});
  auto restored = load_window_checkpoint(checkpoints);
  ASSERT_TRUE(restored.has_value());
  EXPECT_EQ(restored->keys_inserted, 300u);
  EXPECT_EQ(restored->metadata, std::vector<std::byte>{std::byte{42}});
  expect_same_generations(restored->window, window);
}

TEST(WindowCheckpoint, UnsearchableDirectoryIsAnErrorNotAnAbsentCheckpoint) {
  TempDir dir;
  const auto loop = dir.path() / "loop";  // a link to itself: ELOOP, also for root
  std::filesystem::create_symlink(loop, loop);
  EXPECT_THROW(load_window_checkpoint(loop), IoError);
}

// Runs the resume worker in `dir` and returns its exit status, killing it with SIGKILL once a
// checkpoint exists and `kill_after` has passed (never, if negative).
int run_worker(const fs::path& dir, std::chrono::milliseconds kill_after) {
  const std::string worker = BULKBLOOM_WINDOW_RESUME_WORKER;
  const std::string dir_arg = dir.string();
  const std::string batch = "1000";
  char* argv[] = {const_cast<char*>(worker.c_str()), const_cast<char*>(dir_arg.c_str()),
                  const_cast<char*>(batch.c_str()), nullptr};
  pid_t pid = 0;
  if (posix_spawn(&pid, worker.c_str(), nullptr, nullptr, argv, environ) != 0) {
    ADD_FAILURE() << "cannot start " << worker;
    return -1;
  }
  if (kill_after.count() >= 0) {
    int status = 0;
    while (!fs::exists(dir / "window.bbw") && waitpid(pid, &status, WNOHANG) == 0)
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    std::this_thread::sleep_for(kill_after);
    kill(pid, SIGKILL);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  return status;
}

TEST(WindowCheckpoint, KillAndResumeGivesTheUninterruptedDecisions) {
  const WindowStream stream = resume_test_stream();
  WindowedFilter uninterrupted(resume_test_config());
  const auto expected = feed(uninterrupted, stream, {500});
  for (int delay_ms : {0, 15, 40}) {
    TempDir dir;
    run_worker(dir.path(), std::chrono::milliseconds(delay_ms));
    const auto killed_at = load_window_checkpoint(dir.path());
    ASSERT_TRUE(killed_at.has_value());
    EXPECT_EQ(run_worker(dir.path(), std::chrono::milliseconds(-1)), 0);
    const auto decisions = read_file(dir.path() / "decisions");
    ASSERT_EQ(decisions.size(), expected.size()) << "killed at record " << killed_at->keys_inserted;
    EXPECT_TRUE(std::equal(expected.begin(), expected.end(), decisions.begin(),
                           [](std::uint8_t e, std::byte d) { return e == std::uint8_t(d); }))
        << "killed at record " << killed_at->keys_inserted;
    const auto final_state = load_window_checkpoint(dir.path());
    expect_same_generations(final_state->window, uninterrupted);
  }
}

// Resident bytes of this process, from /proc/self/statm.
std::uint64_t resident_bytes() {
  std::ifstream statm("/proc/self/statm");
  std::uint64_t pages = 0, resident = 0;
  statm >> pages >> resident;
  return resident * static_cast<std::uint64_t>(sysconf(_SC_PAGESIZE));
}

// A window's generations are resident once it is made: no rotation is the first write of a
// generation's pages (faulting them in there stalled the crossing call for ~1 s a GiB), and the
// window holds what memory_bytes() says from the start.
TEST(WindowMemory, GenerationsAreResidentWhenTheWindowIsMade) {
  const WindowConfig config = WindowConfig::for_event_time(1000, 3600, 0.001, 4);
  const std::uint64_t before = resident_bytes();
  const WindowedFilter window(config);
  ASSERT_GE(window.memory_bytes(), std::uint64_t{8} << 20);
  EXPECT_GE(resident_bytes() - before, window.memory_bytes() * 9 / 10);
}

}  // namespace
}  // namespace bulkbloom::test
