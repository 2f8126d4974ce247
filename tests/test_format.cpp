// File format v1, save/load/map, checkpoints and Parquet interop.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>
#include <string>

#define XXH_INLINE_ALL
#include <xxhash.h>

#include "persist/temporary_output.hpp"
#include "test_support.hpp"

namespace bulkbloom::test {
namespace {

namespace fs = std::filesystem;

FileState some_state() {
  FileState state;
  state.keys_inserted = 123456789;
  for (int i = 0; i < 37; ++i) state.metadata.push_back(std::byte(i * 7));
  return state;
}

Filter filled(const Layout& layout, std::size_t keys = 5000) {
  Filter f(layout);
  f.insert(random_keys(keys, 99));
  return f;
}

TEST(Format, RoundTripsEveryShapeWithState) {
  TempDir dir;
  for (Shape s : kAllShapes) {
    for (KeyHash hash : {KeyHash::xxh64, KeyHash::identity}) {
      const Layout layout{s, 1001, hash, 42};
      const Filter original = filled(layout);
      const auto path = dir.path() / ("f-" + shape_name(s) + ".bbf");
      save(original, path, some_state());
      FileState state;
      const Filter loaded = load(path, &state);
      EXPECT_EQ(loaded.layout(), layout);
      EXPECT_EQ(bytes_of(loaded), bytes_of(original));
      EXPECT_EQ(state.keys_inserted, some_state().keys_inserted);
      EXPECT_EQ(state.metadata, some_state().metadata);

      FileState mapped_state;
      const Filter mapped = map(path, &mapped_state);
      EXPECT_EQ(bytes_of(mapped), bytes_of(original));
      EXPECT_EQ(mapped_state.metadata, some_state().metadata);

      const auto image = to_file_bytes(original, some_state());
      EXPECT_EQ(image, read_file(path));
      EXPECT_EQ(bytes_of(load(image)), bytes_of(original));

      const FileInfo info = read_info(path);
      EXPECT_EQ(info.version, kFormatVersion);
      EXPECT_EQ(info.layout, layout);
      EXPECT_EQ(info.metadata_bytes, 37u);
      EXPECT_EQ(info.payload_offset % 4096, 0u);
      EXPECT_EQ(info.file_bytes, info.payload_offset + layout.size_bytes());
    }
  }
}

// The block index travels in header byte 18: full64 filters come back with their index and bits,
// and high32 files keep the bytes every earlier version wrote there (0).
TEST(Format, RoundTripsTheBlockIndex) {
  TempDir dir;
  for (BlockIndex index : {BlockIndex::high32, BlockIndex::full64}) {
    const Layout layout{Shape::sb512, 1001, KeyHash::xxh64, 0, index};
    const Filter original = filled(layout);
    const auto path = dir.path() / ("f-" + std::string(to_string(index)) + ".bbf");
    save(original, path);
    EXPECT_EQ(read_file(path)[18], std::byte{static_cast<std::uint8_t>(index)});
    for (const Filter& loaded : {load(path), map(path)}) {
      EXPECT_EQ(loaded.layout(), layout);
      EXPECT_EQ(bytes_of(loaded), bytes_of(original));
    }
  }
}

TEST(Format, SaveReplacesAtomicallyAndLeavesNoTemporaryFiles) {
  TempDir dir;
  const auto path = dir.path() / "filter.bbf";
  const Layout layout{Shape::sb512, 64};
  save(filled(layout, 10), path);
  const Filter second = filled(layout, 3000);
  save(second, path);
  EXPECT_EQ(bytes_of(load(path)), bytes_of(second));
  std::size_t entries = 0;
  for (const auto& entry : fs::directory_iterator(dir.path())) {
    ++entries;
    EXPECT_EQ(entry.path().filename(), "filter.bbf");
  }
  EXPECT_EQ(entries, 1u);
  EXPECT_THROW(save(second, dir.path() / "missing-dir" / "f.bbf"), IoError);
}

TEST(Format, MappedFilterIsCopyOnWrite) {
  TempDir dir;
  const auto path = dir.path() / "filter.bbf";
  const Filter original = filled(Layout{Shape::sb512, 4096});
  save(original, path);
  const auto file_before = read_file(path);
  MapOptions options;
  options.verify = false;
  Filter mapped = map(path, nullptr, options);
  for (auto k : random_keys(5000, 99)) ASSERT_TRUE(mapped.contains(k));
  mapped.insert(random_keys(1000, 7));
  EXPECT_TRUE(mapped.contains(random_keys(1, 7)[0]));
  EXPECT_EQ(read_file(path), file_before);
  EXPECT_NE(bytes_of(mapped), bytes_of(original));
}

TEST(Format, CheckpointsKeepFilterAndMetadataTogether) {
  TempDir dir;
  const auto checkpoints = dir.path() / "ckpt";
  EXPECT_FALSE(load_checkpoint(checkpoints).has_value());
  // What a save killed mid-write leaves behind is cleared by the next one.
  fs::create_directories(checkpoints);
  write_file(checkpoints / "checkpoint.bbf.tmp.AbC123", std::vector<std::byte>(10));
  Filter filter(Layout{Shape::sb256, 300});
  for (std::uint64_t offset = 1000; offset <= 3000; offset += 1000) {
    filter.insert(random_keys(1000, offset));
    FileState state;
    state.keys_inserted = offset;
    state.metadata.resize(8);
    std::memcpy(state.metadata.data(), &offset, 8);
    save_checkpoint(checkpoints, filter, state);
  }
  EXPECT_FALSE(fs::exists(checkpoints / "checkpoint.bbf.tmp.AbC123"));
  auto restored = load_checkpoint(checkpoints);
  ASSERT_TRUE(restored.has_value());
  std::uint64_t offset = 0;
  std::memcpy(&offset, restored->metadata.data(), 8);
  EXPECT_EQ(offset, 3000u);
  EXPECT_EQ(restored->keys_inserted, 3000u);
  EXPECT_EQ(bytes_of(restored->filter), bytes_of(filter));
}

TEST(Format, UnsearchableCheckpointDirectoryIsAnErrorNotAnAbsentCheckpoint) {
  TempDir dir;
  // A symbolic link to itself: looking inside fails with ELOOP, also for root.
  const auto loop = dir.path() / "loop";
  fs::create_symlink(loop, loop);
  EXPECT_THROW(load_checkpoint(loop), IoError);
  // A regular file where the directory should be: below it the checkpoint reads as "not found".
  const auto plain = dir.path() / "plain";
  std::ofstream(plain) << "not a directory";
  try {
    load_checkpoint(plain);
    ADD_FAILURE() << "a regular file read as a directory without a checkpoint";
  } catch (const IoError& e) {
    EXPECT_EQ(e.error_number(), ENOTDIR);
    EXPECT_EQ(e.path(), plain);
  }
  EXPECT_THROW(load_window_checkpoint(plain), IoError);
}

TEST(TemporaryOutputs, StemIsBesideTheOutput) {
  EXPECT_EQ(detail::temporary_output_stem("dir/out.csv"), "dir/.out.csv.bulkbloom-");
  EXPECT_EQ(detail::temporary_output_stem("out"), "./.out.bulkbloom-");
  EXPECT_EQ(detail::temporary_output_stem("/out"), "/.out.bulkbloom-");
}

// The rule both frontends apply before staging an output (docs/FORMAT.md): a name whose pid is
// gone goes, however young; a name whose pid is alive goes only when its lock is free and it is
// past the grace; anything else stays: other outputs' names, names that do not read as
// stem + pid + '-', and what is not a regular file.
TEST(TemporaryOutputs, OnlyThoseOfEndedRunsAreRemoved) {
  TempDir dir;
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) ::_exit(0);
  ASSERT_EQ(::waitpid(child, nullptr, 0), child);  // reaped: its pid is gone
  const std::string dead = std::to_string(child), alive = std::to_string(::getpid());
  const std::string stem = ".out.bulkbloom-";
  // Names with "fresh" in them keep their creation time; the others are made an hour old.
  const std::set<std::string> removed = {stem + dead + "-fresh1", stem + alive + "-stale1"};
  const std::set<std::string> kept = {
      "out",
      stem + alive + "-fresh2",                // unlocked, but within the grace
      stem + alive + "-held01",                // old, but a live run holds its lock
      ".other.bulkbloom-" + dead + "-abc123",  // another output's
      stem + "+" + dead + "-abc123",           // not a pid: signs,
      stem + " " + dead + "-abc123",           // spaces,
      stem + dead + "abc123",                  // no '-' after it,
      stem + "0-abc123",                       // zero,
      stem + "-" + dead + "-abc123",           // negative,
      stem + "99999999999999999999-abc123",    // too large,
      stem + "-abc123"};                       // missing
  const std::string directory = stem + dead + "-dir123", link = stem + dead + "-lnk123";
  const auto hour_ago = fs::file_time_type::clock::now() - std::chrono::hours(1);
  for (const auto& names : {removed, kept}) {
    for (const auto& name : names) {
      std::ofstream(dir.path() / name) << "left by a run";
      if (name.find("fresh") == std::string::npos) fs::last_write_time(dir.path() / name, hour_ago);
    }
  }
  fs::create_directory(dir.path() / directory);
  fs::create_symlink("out", dir.path() / link);
  const int held = ::open((dir.path() / (stem + alive + "-held01")).c_str(), O_RDONLY | O_CLOEXEC);
  ASSERT_GE(held, 0);
  ASSERT_EQ(::flock(held, LOCK_EX), 0);
  detail::remove_dead_temporary_outputs(dir.path() / "out");
  std::set<std::string> left;
  for (const auto& entry : fs::directory_iterator(dir.path())) {
    left.insert(entry.path().filename().string());
  }
  std::set<std::string> expected = kept;
  expected.insert({directory, link});
  EXPECT_EQ(left, expected);
  ::close(held);  // its run is over: the next run removes it
  detail::remove_dead_temporary_outputs(dir.path() / "out");
  EXPECT_FALSE(fs::exists(dir.path() / (stem + alive + "-held01")));
}

// Damaged files. Patches that must get past the header checksum recompute it the way
// docs/FORMAT.md specifies: XXH3-64 of header bytes 0..87, stored at 88.
class BadFiles : public testing::Test {
 protected:
  void SetUp() override { good_ = to_file_bytes(filled(Layout{Shape::sb512, 100}), some_state()); }
  std::vector<std::byte> patched(std::size_t at, std::uint64_t value, int width) const {
    auto image = good_;
    std::memcpy(image.data() + at, &value, width);
    const std::uint64_t checksum = XXH3_64bits(image.data(), 88);
    std::memcpy(image.data() + 88, &checksum, 8);
    return image;
  }
  std::string error_loading(std::span<const std::byte> image) const {
    const auto path = dir_.path() / "bad.bbf";
    write_file(path, image);
    const std::string from_file = message_of<FormatError>([&] { load(path); });
    EXPECT_EQ(message_of<FormatError>([&] { map(path); }), from_file);
    const std::string from_memory = message_of<FormatError>([&] { load(image); });
    // The same problem is reported whatever the source; only the source name differs.
    EXPECT_EQ(from_file.substr(from_file.find(": ")), from_memory.substr(from_memory.find(": ")));
    return from_file;
  }

  TempDir dir_;
  std::vector<std::byte> good_;
};

TEST_F(BadFiles, TruncatedAtAnyPoint) {
  for (std::size_t size : {std::size_t{0}, std::size_t{7}, std::size_t{95}, std::size_t{96},
                           std::size_t{4096}, good_.size() - 1}) {
    const auto msg = error_loading(std::span(good_).first(size));
    EXPECT_NE(msg.find("truncated"), std::string::npos) << size << ": " << msg;
  }
}

TEST_F(BadFiles, EachHeaderProblemIsNamed) {
  auto wrong_magic = good_;
  wrong_magic[1] = std::byte{'X'};
  EXPECT_NE(error_loading(wrong_magic).find("bad magic"), std::string::npos);

  EXPECT_NE(error_loading(patched(8, 2, 4)).find("version 2 is not supported"), std::string::npos);
  auto corrupt_header = good_;
  corrupt_header[30] ^= std::byte{1};
  EXPECT_NE(error_loading(corrupt_header).find("header checksum"), std::string::npos);
  EXPECT_NE(error_loading(patched(80, 5, 8)).find("reserved"), std::string::npos);
  EXPECT_NE(error_loading(patched(12, 128, 4))
                .find("header_bytes 128 is not the 96 this bulkbloom filter header has"),
            std::string::npos);
  EXPECT_NE(error_loading(patched(16, 7, 1)).find("unknown shape"), std::string::npos);
  // Byte 18 is the block index (0 high32, 1 full64); an unknown mode is not guessed at, and byte
  // 19 stays reserved.
  EXPECT_NE(error_loading(patched(18, 2, 1)).find("unknown block index code 2"), std::string::npos);
  EXPECT_NE(error_loading(patched(19, 1, 1)).find("reserved"), std::string::npos);
  EXPECT_NE(error_loading(patched(24, 1ull << 40, 8)).find("num_blocks"), std::string::npos);
  EXPECT_NE(error_loading(patched(24, 0, 8)).find("num_blocks"), std::string::npos);
  EXPECT_NE(error_loading(patched(64, 6400 + 64, 8)).find("disagree"), std::string::npos);
  // A block count that the payload would match but the file does not hold.
  auto absurd = patched(24, 1ull << 31, 8);
  std::uint64_t payload = (1ull << 31) * 64;
  std::memcpy(absurd.data() + 64, &payload, 8);
  const std::uint64_t checksum = XXH3_64bits(absurd.data(), 88);
  std::memcpy(absurd.data() + 88, &checksum, 8);
  EXPECT_NE(error_loading(absurd).find("truncated"), std::string::npos);
  EXPECT_NE(error_loading(patched(56, 8192, 8)).find("payload offset"), std::string::npos);
  EXPECT_NE(error_loading(patched(48, ~0ull, 8)).find("payload offset"), std::string::npos);
}

TEST_F(BadFiles, PayloadAndMetadataCorruptionFailTheChecksum) {
  auto flipped_payload = good_;
  flipped_payload[good_.size() - 10] ^= std::byte{0x10};
  EXPECT_NE(error_loading(flipped_payload).find("payload checksum"), std::string::npos);
  auto flipped_metadata = good_;
  flipped_metadata[100] ^= std::byte{0x01};
  EXPECT_NE(error_loading(flipped_metadata).find("payload checksum"), std::string::npos);
  auto trailing = good_;
  trailing.push_back(std::byte{0});
  EXPECT_NE(error_loading(trailing).find("unexpected bytes"), std::string::npos);
}

TEST_F(BadFiles, NotARegularFile) {
  EXPECT_NE(message_of<FormatError>([&] { load(dir_.path()); }).find("directory"),
            std::string::npos);
  EXPECT_NE(message_of<FormatError>([] { load("/dev/null"); }).find("not a regular file"),
            std::string::npos);
  EXPECT_THROW(load(dir_.path() / "does-not-exist"), IoError);
  EXPECT_THROW(read_info(dir_.path() / "does-not-exist"), IoError);
}

TEST_F(BadFiles, IoErrorsCarryErrnoAndPath) {
  const auto missing = dir_.path() / "does-not-exist";
  try {
    load(missing);
    FAIL() << "loaded a missing file";
  } catch (const IoError& e) {
    EXPECT_EQ(e.error_number(), ENOENT);
    EXPECT_EQ(e.path(), missing);
  }
}

// Parquet's split-block filter written out from the Parquet specification, independently of the
// library: block = ((h >> 32) * blocks) >> 32, word i |= 1 << ((uint32(h) * SALT[i]) >> 27).
std::vector<std::uint32_t> parquet_bitset_from_spec(std::span<const std::uint64_t> values,
                                                    std::size_t blocks) {
  constexpr std::uint32_t kParquetSalt[8] = {0x47b6137b, 0x44974d91, 0x8824ad5b, 0xa2b7289d,
                                             0x705495c7, 0x2df1424b, 0x9efc4947, 0x5c6bfb31};
  std::vector<std::uint32_t> words(blocks * 8);
  for (std::uint64_t v : values) {
    unsigned char plain[8];  // PLAIN encoding of an INT64 value
    for (int i = 0; i < 8; ++i) plain[i] = static_cast<unsigned char>(v >> (8 * i));
    const std::uint64_t h = XXH64(plain, 8, 0);
    const std::uint64_t block = ((h >> 32) * blocks) >> 32;
    for (int i = 0; i < 8; ++i) {
      words[block * 8 + i] |= 1u << ((static_cast<std::uint32_t>(h) * kParquetSalt[i]) >> 27);
    }
  }
  return words;
}

TEST(Parquet, ExportMatchesTheSpecificationAndImportsBack) {
  const std::size_t blocks = 1024;  // 32 KiB bitset
  const auto values = random_keys(3000, 5);
  Filter filter(Layout{Shape::sb256, blocks});
  filter.insert(values);
  const auto exported = to_parquet(filter);

  // Thrift compact BloomFilterHeader: numBytes = 32768 as a zigzag varint, then the three
  // single-member unions, then the stop byte.
  const std::vector<std::uint8_t> expected_header = {0x15, 0x80, 0x80, 0x04, 0x1c, 0x1c,
                                                     0x00, 0x00, 0x1c, 0x1c, 0x00, 0x00,
                                                     0x1c, 0x1c, 0x00, 0x00, 0x00};
  ASSERT_EQ(exported.size(), expected_header.size() + blocks * 32);
  for (std::size_t i = 0; i < expected_header.size(); ++i) {
    EXPECT_EQ(std::to_integer<std::uint8_t>(exported[i]), expected_header[i]) << i;
  }
  const auto spec_words = parquet_bitset_from_spec(values, blocks);
  EXPECT_EQ(std::memcmp(exported.data() + expected_header.size(), spec_words.data(), blocks * 32),
            0);

  const Filter imported = from_parquet(exported);
  EXPECT_EQ(imported.layout(), filter.layout());
  EXPECT_EQ(bytes_of(imported), bytes_of(filter));
}

TEST(Parquet, RejectsWhatItCannotRepresent) {
  EXPECT_THROW(to_parquet(Filter(Layout{Shape::sb512, 10})), std::invalid_argument);
  EXPECT_THROW(to_parquet(Filter(Layout{Shape::sb256, 10, KeyHash::xxh64, 1})),
               std::invalid_argument);
  // Parquet readers place keys with high32: a full64 filter's bits would miss some of its keys.
  EXPECT_THROW(to_parquet(Filter(Layout{Shape::sb256, 10, KeyHash::xxh64, 0, BlockIndex::full64})),
               std::invalid_argument);
  const auto good = to_parquet(Filter(Layout{Shape::sb256, 4}));
  EXPECT_NO_THROW(from_parquet(good));
  EXPECT_THROW(from_parquet(std::span(good).first(good.size() - 1)), FormatError);
  EXPECT_THROW(from_parquet(std::span(good).first(5)), FormatError);
  auto other_hash = good;
  other_hash[8] = std::byte{0x2c};  // hash union member 2 instead of XXHASH
  EXPECT_THROW(from_parquet(other_hash), FormatError);
  // Found by fuzzing: a list of 2^59 bools once looped without consuming input.
  const std::vector<std::uint8_t> endless_list = {0x59, 0xf1, 0xff, 0xff, 0xff,
                                                  0xff, 0xff, 0xff, 0xff, 0x0f};
  EXPECT_THROW(from_parquet(std::as_bytes(std::span(endless_list))), FormatError);
  auto odd_size = good;
  odd_size[1] = std::byte{0x82};  // numBytes 129 (zigzag 258 = 0x82 0x02)
  EXPECT_THROW(from_parquet(odd_size), FormatError);
}

}  // namespace
}  // namespace bulkbloom::test
