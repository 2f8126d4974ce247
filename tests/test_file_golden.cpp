// Golden files: a filter file and a window file written by an earlier bulkbloom, kept in
// tests/golden. Today's writer must produce the same bytes from the same inputs, and today's
// reader must load them, so that a change to the header code cannot move a field unnoticed.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "bulkbloom/window.hpp"
#include "test_support.hpp"

namespace bulkbloom::test {
namespace {

namespace fs = std::filesystem;

const fs::path kGoldenDir = BULKBLOOM_GOLDEN_DIR;

FileState golden_state(std::uint64_t keys) {
  FileState state;
  state.keys_inserted = keys;
  for (int i = 0; i < 29; ++i) state.metadata.push_back(std::byte(i * 11 + 3));
  return state;
}

// The filter: every header field away from its default, so that a misplaced field shows.
Filter golden_filter() {
  Filter filter(Layout{Shape::sb256, 3, KeyHash::xxh64, 0x0123456789abcdef, BlockIndex::full64});
  filter.insert(random_keys(40, 5));
  return filter;
}

WindowConfig golden_window_config() {
  WindowConfig config;
  config.clock = WindowClock::event_time;
  config.window = 100;
  config.lateness = 7;
  config.generations = 3;
  config.generation =
      Layout{Shape::sb512, 2, KeyHash::xxh64, 0xfedcba9876543210, BlockIndex::full64};
  return config;
}

WindowedFilter golden_window() {
  WindowedFilter window(golden_window_config());
  const auto keys = random_keys(30, 6);
  std::vector<std::int64_t> times;
  for (std::size_t i = 0; i < keys.size(); ++i) times.push_back(static_cast<std::int64_t>(i * 9));
  std::vector<std::uint8_t> is_new(keys.size());
  window.insert_if_absent(keys, times, is_new);
  return window;
}

// Compares `written` with the golden file `name`; on a difference, leaves the new bytes beside
// the test's working directory as `name` + ".actual" for inspection.
void expect_same_as_golden(const fs::path& written, const std::string& name) {
  const auto golden = read_file(kGoldenDir / name);
  const auto actual = read_file(written);
  if (actual != golden) {
    fs::copy_file(written, fs::current_path() / (name + ".actual"),
                  fs::copy_options::overwrite_existing);
  }
  ASSERT_FALSE(golden.empty()) << "missing golden file " << (kGoldenDir / name);
  ASSERT_EQ(actual.size(), golden.size()) << name;
  for (std::size_t i = 0; i < golden.size(); ++i) {
    ASSERT_EQ(actual[i], golden[i]) << name << " differs first at byte " << i;
  }
}

TEST(GoldenFiles, FilterFileBytesAreUnchanged) {
  TempDir dir;
  save(golden_filter(), dir.path() / "filter.bbf", golden_state(40));
  expect_same_as_golden(dir.path() / "filter.bbf", "filter.bbf");
}

TEST(GoldenFiles, FilterFileLoads) {
  FileState state;
  const Filter loaded = load(kGoldenDir / "filter.bbf", &state);
  EXPECT_EQ(loaded.layout(), golden_filter().layout());
  EXPECT_EQ(bytes_of(loaded), bytes_of(golden_filter()));
  EXPECT_EQ(state.keys_inserted, 40u);
  EXPECT_EQ(state.metadata, golden_state(40).metadata);
}

TEST(GoldenFiles, WindowFileBytesAreUnchanged) {
  TempDir dir;
  save(golden_window(), dir.path() / "window.bbw", golden_state(30));
  expect_same_as_golden(dir.path() / "window.bbw", "window.bbw");
}

TEST(GoldenFiles, WindowFileLoads) {
  FileState state;
  const WindowedFilter loaded = load_window(kGoldenDir / "window.bbw", &state);
  const WindowedFilter expected = golden_window();
  EXPECT_EQ(loaded.config().describe(), expected.config().describe());
  for (std::uint32_t age = 0; age < expected.config().generations; ++age) {
    EXPECT_EQ(bytes_of(loaded.generation(age)), bytes_of(expected.generation(age))) << age;
  }
  EXPECT_EQ(state.keys_inserted, 30u);
  EXPECT_EQ(state.metadata, golden_state(30).metadata);
  // The clock came back too: the window goes on exactly as the one that was saved.
  WindowedFilter resumed = load_window(kGoldenDir / "window.bbw");
  WindowedFilter original = golden_window();
  const auto more = random_keys(20, 6);
  const std::vector<std::int64_t> times(more.size(), 300);
  std::vector<std::uint8_t> a(more.size()), b(more.size());
  resumed.insert_if_absent(more, times, a);
  original.insert_if_absent(more, times, b);
  EXPECT_EQ(a, b);
  for (std::uint32_t age = 0; age < expected.config().generations; ++age) {
    EXPECT_EQ(bytes_of(resumed.generation(age)), bytes_of(original.generation(age))) << age;
  }
}

}  // namespace
}  // namespace bulkbloom::test
