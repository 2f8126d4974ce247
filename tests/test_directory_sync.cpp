// Which directories a commit flushes, and when, seen from inside the process: this program
// defines fsync and mkdir, so the library's calls come here (the library is linked in
// statically), are recorded in order by the device and inode of what they touch, and then made.
// A directory created and never flushed into its parent can vanish in a crash with every file
// committed in it; nothing outside a crash would show it.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <bulkbloom/grown_filter.hpp>
#include <bulkbloom/incremental.hpp>

#include <algorithm>
#include <array>
#include <cerrno>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "persist/file_io.hpp"
#include "test_support.hpp"

namespace {

using FileId = std::pair<dev_t, ino_t>;
struct Event {
  bool made;  // a mkdir, else an fsync
  FileId file;
};
std::mutex events_mutex;
std::vector<Event> events;

void record(bool made, const struct stat& info) {
  const std::lock_guard lock(events_mutex);
  events.push_back({made, {info.st_dev, info.st_ino}});
}

std::vector<Event> take_events() {
  const std::lock_guard lock(events_mutex);
  return std::exchange(events, {});
}

FileId id_of(const std::filesystem::path& path) {
  struct stat info {};
  EXPECT_EQ(::stat(path.c_str(), &info), 0) << path;
  return {info.st_dev, info.st_ino};
}

// Where `file` was flushed, in event order (none: empty).
std::vector<std::size_t> flushes_of(const std::vector<Event>& seen,
                                    const std::filesystem::path& file) {
  const FileId id = id_of(file);
  std::vector<std::size_t> at;
  for (std::size_t i = 0; i < seen.size(); ++i) {
    if (!seen[i].made && seen[i].file == id) at.push_back(i);
  }
  return at;
}

// Where `dir` was made, in event order (never: seen.size()).
std::size_t made_at(const std::vector<Event>& seen, const std::filesystem::path& dir) {
  const FileId id = id_of(dir);
  return static_cast<std::size_t>(
      std::find_if(seen.begin(), seen.end(),
                   [&](const Event& e) { return e.made && e.file == id; }) -
      seen.begin());
}

// Whether `dir` was made, and `parent` flushed after it.
bool made_then_flushed(const std::vector<Event>& seen, const std::filesystem::path& dir,
                       const std::filesystem::path& parent) {
  const std::size_t made = made_at(seen, dir);
  if (made == seen.size()) return false;
  const auto flushed = flushes_of(seen, parent);
  return std::any_of(flushed.begin(), flushed.end(), [&](std::size_t i) { return i > made; });
}

}  // namespace

extern "C" int fsync(int fd) {
  struct stat info {};
  if (::fstat(fd, &info) == 0) record(false, info);
  return static_cast<int>(::syscall(SYS_fsync, fd));
}

extern "C" int mkdir(const char* path, mode_t mode) {
  const auto made = static_cast<int>(::syscall(SYS_mkdirat, AT_FDCWD, path, mode));
  struct stat info {};
  if (made == 0 && ::stat(path, &info) == 0) record(true, info);
  return made;
}

namespace bulkbloom {
namespace {

using test::TempDir;

TEST(DirectorySync, EachDirectoryMadeIsFlushedIntoItsParentBeforeTheNextIsMadeInIt) {
  TempDir tmp;
  take_events();
  detail::create_directories_synced(tmp.path() / "a" / "b" / "c" / "", "state directory");
  const auto seen = take_events();
  ASSERT_TRUE(std::filesystem::is_directory(tmp.path() / "a" / "b" / "c"));
  EXPECT_TRUE(made_then_flushed(seen, tmp.path() / "a", tmp.path()));
  EXPECT_TRUE(made_then_flushed(seen, tmp.path() / "a" / "b", tmp.path() / "a"));
  EXPECT_TRUE(made_then_flushed(seen, tmp.path() / "a" / "b" / "c", tmp.path() / "a" / "b"));
  // a's entry flushed before b was made in it.
  ASSERT_FALSE(flushes_of(seen, tmp.path()).empty());
  EXPECT_LT(flushes_of(seen, tmp.path()).front(), made_at(seen, tmp.path() / "a" / "b"));
  // There already (its maker may have died before flushing it): its entry alone is flushed.
  detail::create_directories_synced(tmp.path() / "a" / "b" / "c", "state directory");
  const auto again = take_events();
  ASSERT_EQ(again.size(), 1u);
  EXPECT_EQ(flushes_of(again, tmp.path() / "a" / "b").size(), 1u);
}

// A run killed between making a level and flushing it leaves that level unflushed, the deepest
// it made; the next run finds it in place.
TEST(DirectorySync, TheDeepestLevelFoundInPlaceIsFlushedBeforeAnythingIsMadeInIt) {
  TempDir tmp;
  ASSERT_EQ(::mkdir((tmp.path() / "a").c_str(), 0777), 0);  // never flushed
  take_events();
  detail::create_directories_synced(tmp.path() / "a" / "b", "checkpoint directory");
  const auto seen = take_events();
  const std::size_t b_made = made_at(seen, tmp.path() / "a" / "b");
  ASSERT_NE(b_made, seen.size());
  const auto a_entry = flushes_of(seen, tmp.path());
  ASSERT_EQ(a_entry.size(), 1u);
  EXPECT_LT(a_entry.front(), b_made);
  EXPECT_TRUE(made_then_flushed(seen, tmp.path() / "a" / "b", tmp.path() / "a"));
  // A new level named with "." after it: flushed once, not again for the ".".
  take_events();
  detail::create_directories_synced(tmp.path() / "c" / ".", "state directory");
  EXPECT_EQ(flushes_of(take_events(), tmp.path()).size(), 1u);
}

TEST(DirectorySync, DotDotAndLinksMeanWhatTheyMeanToTheKernel) {
  TempDir tmp;
  // "x/../y" with x missing makes x, then y beside it, as the kernel reads the path.
  detail::create_directories_synced(tmp.path() / "x" / ".." / "y", "state directory");
  EXPECT_TRUE(std::filesystem::is_directory(tmp.path() / "x"));
  EXPECT_TRUE(std::filesystem::is_directory(tmp.path() / "y"));
  // Through a link, ".." is the parent of the link's target, not of the link.
  std::filesystem::create_directories(tmp.path() / "volume" / "data");
  std::filesystem::create_directory(tmp.path() / "work");
  std::filesystem::create_directory_symlink(tmp.path() / "volume" / "data",
                                            tmp.path() / "work" / "data");
  take_events();
  detail::create_directories_synced(tmp.path() / "work" / "data" / ".." / "s", "state directory");
  const auto seen = take_events();
  EXPECT_TRUE(std::filesystem::is_directory(tmp.path() / "volume" / "s"));
  EXPECT_FALSE(std::filesystem::exists(tmp.path() / "work" / "s"));
  EXPECT_TRUE(made_then_flushed(seen, tmp.path() / "volume" / "s", tmp.path() / "volume"));
  // "DIR/." names DIR: its parent is flushed.
  take_events();
  detail::create_directories_synced(tmp.path() / "y" / ".", "state directory");
  EXPECT_EQ(flushes_of(take_events(), tmp.path()).size(), 1u);
}

TEST(DirectorySync, WhatIsInTheWayIsNamed) {
  TempDir tmp;
  std::ofstream(tmp.path() / "plain") << "not a directory";
  const auto error_of = [](const std::filesystem::path& dir) {
    try {
      detail::create_directories_synced(dir, "state directory");
    } catch (const IoError& e) {
      return std::pair{e.error_number(), std::string(e.what())};
    }
    return std::pair{0, std::string("no error")};
  };
  auto [number, what] = error_of(tmp.path() / "plain" / "state");
  EXPECT_EQ(number, ENOTDIR) << what;
  EXPECT_NE(what.find("cannot create state directory " + (tmp.path() / "plain" / "state").string()),
            std::string::npos)
      << what;
  std::tie(number, what) = error_of(tmp.path() / "plain");
  EXPECT_EQ(number, ENOTDIR) << what;
  // A link to nothing is not "not a directory".
  std::filesystem::create_directory_symlink(tmp.path() / "gone", tmp.path() / "dangling");
  std::tie(number, what) = error_of(tmp.path() / "dangling");
  EXPECT_EQ(number, ENOENT) << what;
  std::tie(number, what) = error_of("");
  EXPECT_EQ(number, ENOENT) << what;
  EXPECT_NE(what.find("the path is empty"), std::string::npos) << what;
}

TEST(DirectorySync, EveryStateDirectoryCommitFlushesItsEntryBeforeItsManifest) {
  TempDir tmp;
  GrownFilter filter(Layout{Shape::sb512, 64}, 1000, 0.01, "u64");
  const std::array<std::uint64_t, 3> keys = {1, 2, 3};
  std::array<std::uint8_t, 3> is_new{};
  filter.insert_if_absent(keys, is_new);
  const auto manifest_after_entry = [&](const std::filesystem::path& dir) {
    const auto seen = take_events();
    const auto entry = flushes_of(seen, dir / "..");
    const auto manifest = flushes_of(seen, dir / "MANIFEST");
    return !entry.empty() && !manifest.empty() && entry.front() < manifest.front();
  };
  // Made by the library: every level.
  take_events();
  StateDirectory(tmp.path() / "new" / "state").save(filter);
  EXPECT_TRUE(manifest_after_entry(tmp.path() / "new" / "state"));
  // Made by someone else (a user's mkdir, a lock taken first, a run killed before flushing it),
  // and each later commit too.
  ASSERT_EQ(::mkdir((tmp.path() / "made").c_str(), 0777), 0);
  take_events();
  StateDirectory made(tmp.path() / "made" / "");
  made.save(filter);
  EXPECT_TRUE(manifest_after_entry(tmp.path() / "made"));
  made.save(filter);
  EXPECT_TRUE(manifest_after_entry(tmp.path() / "made"));
}

TEST(DirectorySync, ACheckpointDirectoryIsFlushedIntoItsParent) {
  TempDir tmp;
  take_events();
  detail::save_checkpoint_file(tmp.path() / "checkpoints" / "run", "state.bbf",
                               [](const std::filesystem::path& path) { std::ofstream(path) << 1; });
  const auto seen = take_events();
  EXPECT_TRUE(made_then_flushed(seen, tmp.path() / "checkpoints", tmp.path()));
  EXPECT_TRUE(
      made_then_flushed(seen, tmp.path() / "checkpoints" / "run", tmp.path() / "checkpoints"));
}

}  // namespace
}  // namespace bulkbloom
