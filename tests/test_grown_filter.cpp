// The grown filter (bulkbloom/grown_filter.hpp): growth keeps every key and the promise, its
// files round-trip byte for byte (the golden one of an earlier bulkbloom included), the sizing
// record a plain filter is saved with is read back, and readers name a file of another kind.
#include <gtest/gtest.h>
#define XXH_INLINE_ALL
#include <xxhash.h>

#include <cstring>
#include <filesystem>
#include <stdexcept>
#include <string>

#include "bulkbloom/grown_filter.hpp"
#include "bulkbloom/window.hpp"
#include "test_support.hpp"

namespace bulkbloom::test {
namespace {

namespace fs = std::filesystem;

const fs::path kGoldenGrown = fs::path(BULKBLOOM_GOLDEN_DIR) / "grown.bbf";

std::vector<std::uint8_t> answers(const GrownFilter& filter,
                                  const std::vector<std::uint64_t>& keys) {
  std::vector<std::uint8_t> out(keys.size());
  filter.contains(keys, out);
  return out;
}

// A filter sized for 10000 keys at 1% that took `keys` in batches of 5000 (large enough that the
// rate from the bits stays near the model's).
GrownFilter grown_twice(const std::vector<std::uint64_t>& keys) {
  GrownFilter filter = GrownFilter::for_capacity(10000, 0.01, "u64");
  for (std::size_t at = 0; at < keys.size(); at += 5000) {
    const std::span<const std::uint64_t> batch(keys.data() + at, 5000);
    std::vector<std::uint8_t> is_new(batch.size());
    filter.insert_if_absent(batch, is_new);
  }
  return filter;
}

TEST(GrownFilter, GrowsInsteadOfPassingItsPromiseAndKeepsEveryKey) {
  const auto keys = random_keys(100000, 41);
  const GrownFilter filter = grown_twice(keys);
  EXPECT_GT(filter.generation_count(), 2u);
  EXPECT_LE(filter.current_fpr(), 0.01);
  EXPECT_EQ(answers(filter, keys), std::vector<std::uint8_t>(keys.size(), 1));
  EXPECT_EQ(filter.capacity(), 10000u);
  // A key an older generation holds is not new, and goes into no newer generation.
  GrownFilter again = grown_twice(keys);
  std::vector<std::uint8_t> is_new(keys.size());
  EXPECT_EQ(again.insert_if_absent(keys, is_new), 0u);
  EXPECT_EQ(again.keys(), filter.keys());
}

// The most keys `filter`'s newest generation takes before its model passes its target.
std::uint64_t room_of(const GrownFilter& filter) {
  const GrownFilter::Generation& newest = filter.generations().back();
  std::uint64_t full = newest.keys;
  while (newest.filter.expected_fpr(full + 1) <= newest.target) ++full;
  return full - newest.keys;
}

TEST(GrownFilter, GrowsOnlyWhenABatchsNewKeysWouldPassTheTarget) {
  // Filled to a little under its target, then given a batch of fewer new keys than it has room
  // for, each three times: its records not held are three times its new keys, past the room.
  GrownFilter filter = GrownFilter::for_capacity(10000, 0.2, "u64");
  const auto fill = random_keys(9800, 43);
  std::vector<std::uint8_t> is_new(fill.size());
  filter.insert_if_absent(fill, is_new);
  const std::uint64_t room = room_of(filter);
  ASSERT_GT(room, 100u);
  const auto fresh = random_keys(room - 10, 44);
  std::vector<std::uint64_t> batch;
  for (int copy = 0; copy < 3; ++copy) batch.insert(batch.end(), fresh.begin(), fresh.end());
  is_new.assign(batch.size(), 0);
  const std::uint64_t taken = filter.insert_if_absent(batch, is_new);
  // Within its target: one generation, as one filter of its layout deciding every key would be
  // (so whether it grows does not depend on where its batches begin).
  EXPECT_EQ(filter.generation_count(), 1u);
  EXPECT_LE(taken, room - 10);
  Filter alone(filter.newest().layout());
  std::vector<std::uint8_t> alone_new(fill.size());
  alone.insert_if_absent(fill, alone_new);
  alone_new.assign(batch.size(), 0);
  alone.insert_if_absent(batch, alone_new);
  EXPECT_EQ(is_new, alone_new);
  EXPECT_EQ(bytes_of(filter.newest()), bytes_of(alone));
  // A batch whose new keys would pass it (twice the room, a sixth of them at most taken for
  // held at a rate of 0.15) grows the filter first.
  const auto more = random_keys(2 * room_of(filter), 45);
  is_new.assign(more.size(), 0);
  filter.insert_if_absent(more, is_new);
  EXPECT_EQ(filter.generation_count(), 2u);
}

TEST(GrownFilter, FileAndBytesRoundTrip) {
  TempDir dir;
  const auto keys = random_keys(100000, 42);
  const GrownFilter filter = grown_twice(keys);
  const std::vector<std::byte> caller = {std::byte{7}, std::byte{8}};
  filter.save(dir.path() / "g.bbf", caller);
  EXPECT_EQ(read_file(dir.path() / "g.bbf"), filter.to_file_bytes(caller));
  EXPECT_EQ(file_kind(dir.path() / "g.bbf"), FileKind::grown_filter);

  std::vector<std::byte> loaded_caller;
  const GrownFilter loaded = GrownFilter::load(dir.path() / "g.bbf", {}, &loaded_caller);
  EXPECT_EQ(loaded_caller, caller);
  EXPECT_EQ(loaded.generation_count(), filter.generation_count());
  EXPECT_EQ(loaded.promised_fpr(), 0.01);
  EXPECT_EQ(loaded.key_format(), "u64");
  EXPECT_EQ(loaded.keys(), filter.keys());
  const auto probes = random_keys(5000, 43);
  EXPECT_EQ(answers(loaded, probes), answers(filter, probes));
  EXPECT_EQ(GrownFilter::load(filter.to_file_bytes(caller)).to_file_bytes(caller),
            filter.to_file_bytes(caller));
}

TEST(GrownFilter, GoldenGrownFileLoadsAndSavesByteForByte) {
  const auto golden = read_file(kGoldenGrown);
  ASSERT_FALSE(golden.empty()) << "missing golden file " << kGoldenGrown;
  std::vector<std::byte> caller;
  const GrownFilter loaded = GrownFilter::load(kGoldenGrown, {}, &caller);
  EXPECT_EQ(loaded.generation_count(), 3u);
  EXPECT_EQ(loaded.key_format(), "hex");
  EXPECT_EQ(loaded.to_file_bytes(caller), golden);
  TempDir dir;
  loaded.save(dir.path() / "again.bbf", caller);
  EXPECT_EQ(read_file(dir.path() / "again.bbf"), golden);
}

TEST(GrownFilter, AGrowthCheckThatThrowsLeavesTheFilterAsItWas) {
  GrownFilter filter = GrownFilter::for_capacity(100, 0.01);
  filter.set_growth_check([](const GrownFilter&, std::uint64_t absent, bool at_limit) {
    EXPECT_FALSE(at_limit);
    throw std::runtime_error("refused " + std::to_string(absent));
  });
  const auto keys = random_keys(1000, 44);
  std::vector<std::uint8_t> is_new(keys.size());
  EXPECT_THROW(filter.insert_if_absent(keys, is_new), std::runtime_error);
  EXPECT_EQ(filter.generation_count(), 1u);
  EXPECT_EQ(filter.keys(), 0u);
  EXPECT_EQ(filter.newest().popcount(), 0u);
}

TEST(GrownFilter, APlainFilterSavedWithASizingRecordKeepsItsPromise) {
  TempDir dir;
  // Sized as for_capacity sizes a first generation: 10000 keys at 3/4 of 0.02.
  Filter plain = Filter::for_capacity(10000, GrownFilter::generation_target(0.02, 0));
  plain.insert(random_keys(10000, 45));
  const std::vector<std::byte> caller = {std::byte{1}};
  save(plain, dir.path() / "p.bbf", {10000, sizing_record_bytes({0.02, "", 10000}, caller)});
  EXPECT_EQ(file_kind(dir.path() / "p.bbf"), FileKind::filter);

  std::vector<std::byte> loaded_caller;
  GrownFilter carried = GrownFilter::load(dir.path() / "p.bbf", {}, &loaded_caller);
  EXPECT_EQ(carried.promised_fpr(), 0.02);
  EXPECT_EQ(carried.capacity(), 10000u);
  EXPECT_EQ(loaded_caller, caller);
  EXPECT_FALSE(carried.loaded_past_promise());
  EXPECT_EQ(GrownFilter::for_capacity(10000, 0.02).newest().layout(), plain.layout());

  // Without the record, the rate is the one load() is told, the capacity where the model
  // reaches it.
  save(plain, dir.path() / "bare.bbf");
  const GrownFilter bare = GrownFilter::load(dir.path() / "bare.bbf", {}, nullptr, 0.5);
  EXPECT_EQ(bare.promised_fpr(), 0.5);
  EXPECT_GT(bare.capacity(), 10000u);
}

TEST(GrownFilter, ReadersNameAFileOfAnotherKind) {
  TempDir dir;
  grown_twice(random_keys(100000, 46)).save(dir.path() / "g.bbf");
  try {
    load(dir.path() / "g.bbf");
    ADD_FAILURE() << "a grown filter file loaded as a filter";
  } catch (const FormatError& e) {
    EXPECT_NE(std::string(e.what()).find("it is a bulkbloom grown filter"), std::string::npos)
        << e.what();
  }
  WindowedFilter window(WindowConfig::for_records(1000, 0.01));
  save(window, dir.path() / "w.bbw");
  EXPECT_EQ(file_kind(dir.path() / "w.bbw"), FileKind::window);
  try {
    GrownFilter::load(dir.path() / "w.bbw");
    ADD_FAILURE() << "a window file loaded as a grown filter";
  } catch (const FormatError& e) {
    EXPECT_NE(std::string(e.what()).find("sliding window's file"), std::string::npos) << e.what();
  }
  try {
    load_window(dir.path() / "g.bbf");
    ADD_FAILURE() << "a grown filter file loaded as a window";
  } catch (const FormatError& e) {
    EXPECT_NE(std::string(e.what()).find("it is a bulkbloom grown filter"), std::string::npos)
        << e.what();
  }
}

TEST(GrownFilter, ALengthThatWrapsPast2To64IsAFormatError) {
  // A crafted image of two generations (checksums recomputed): generation 0's length wraps
  // offset + length around 2^64 to 0, where the table then says generation 1 starts and runs to
  // the end of the file. A reader that sums them would slice 2^64 - 4096 bytes.
  GrownFilter filter = GrownFilter::for_capacity(10000, 0.01);
  const auto keys = random_keys(30000, 47);
  std::vector<std::uint8_t> is_new(10000);
  for (std::size_t at = 0; at < keys.size(); at += 10000) {
    filter.insert_if_absent(std::span(keys.data() + at, 10000), is_new);
  }
  ASSERT_EQ(filter.generation_count(), 2u);
  std::vector<std::byte> image = filter.to_file_bytes();
  const auto u64_at = [&](std::size_t at) {
    std::uint64_t v;
    std::memcpy(&v, image.data() + at, 8);
    return v;
  };
  const auto set_u64 = [&](std::size_t at, std::uint64_t v) {
    std::memcpy(image.data() + at, &v, 8);
  };
  set_u64(72, std::uint64_t{0} - u64_at(64));  // offset 0 + length 0 = 2^64
  set_u64(80, 0);
  set_u64(88, image.size());
  std::uint32_t generations;
  std::memcpy(&generations, image.data() + 16, 4);
  const std::size_t covered = 16 * generations + u64_at(32);
  set_u64(40, XXH3_64bits(image.data() + 64, covered));
  set_u64(56, XXH3_64bits(image.data(), 56));
  try {
    GrownFilter::load(image);
    ADD_FAILURE() << "a wrapped length was accepted";
  } catch (const FormatError& e) {
    EXPECT_NE(std::string(e.what()).find("generation 0 lies outside"), std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace bulkbloom::test
