// Which directories a commit flushes, seen from inside the process: this program defines fsync,
// so the library's calls come here (the library is linked in statically), are recorded by the
// device and inode of the descriptor, and then made. A directory created and never flushed into
// its parent can vanish in a crash with every file committed in it; nothing outside a crash
// would show it.
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
std::mutex synced_mutex;
std::vector<FileId> synced;  // every descriptor flushed

std::vector<FileId> take_synced() {
  const std::lock_guard lock(synced_mutex);
  return std::exchange(synced, {});
}

bool flushed(const std::vector<FileId>& files, const std::filesystem::path& dir) {
  struct stat info {};
  if (::stat(dir.c_str(), &info) != 0) return false;
  return std::find(files.begin(), files.end(), FileId{info.st_dev, info.st_ino}) != files.end();
}

}  // namespace

extern "C" int fsync(int fd) {
  struct stat info {};
  if (::fstat(fd, &info) == 0) {
    const std::lock_guard lock(synced_mutex);
    synced.emplace_back(info.st_dev, info.st_ino);
  }
  return static_cast<int>(::syscall(SYS_fsync, fd));
}

namespace bulkbloom {
namespace {

using test::TempDir;

TEST(DirectorySync, EachDirectoryCreatedIsFlushedIntoItsParent) {
  TempDir tmp;
  take_synced();
  detail::create_directories_synced(tmp.path() / "a" / "b" / "c" / "", "state directory");
  ASSERT_TRUE(std::filesystem::is_directory(tmp.path() / "a" / "b" / "c"));
  const auto paths = take_synced();
  EXPECT_TRUE(flushed(paths, tmp.path()));
  EXPECT_TRUE(flushed(paths, tmp.path() / "a"));
  EXPECT_TRUE(flushed(paths, tmp.path() / "a" / "b"));
  // Nothing to create: nothing flushed.
  detail::create_directories_synced(tmp.path() / "a" / "b" / "c", "state directory");
  EXPECT_TRUE(take_synced().empty());
}

TEST(DirectorySync, AFileInTheWayIsNamed) {
  TempDir tmp;
  std::ofstream(tmp.path() / "plain") << "not a directory";
  try {
    detail::create_directories_synced(tmp.path() / "plain" / "state", "state directory");
    FAIL() << "no error";
  } catch (const IoError& e) {
    EXPECT_EQ(e.error_number(), ENOTDIR) << e.what();
    EXPECT_NE(std::string(e.what()).find("cannot create state directory " +
                                         (tmp.path() / "plain" / "state").string()),
              std::string::npos)
        << e.what();
  }
  try {
    detail::create_directories_synced(tmp.path() / "plain", "checkpoint directory");
    FAIL() << "no error";
  } catch (const IoError& e) {
    EXPECT_EQ(e.error_number(), ENOTDIR) << e.what();
  }
}

TEST(DirectorySync, AStateDirectorysFirstCommitFlushesItsEntryWhoeverMadeIt) {
  TempDir tmp;
  GrownFilter filter(Layout{Shape::sb512, 64}, 1000, 0.01, "u64");
  const std::array<std::uint64_t, 3> keys = {1, 2, 3};
  std::array<std::uint8_t, 3> is_new{};
  filter.insert_if_absent(keys, is_new);
  // Made by the library: every level.
  take_synced();
  StateDirectory(tmp.path() / "new" / "state").save(filter);
  auto paths = take_synced();
  EXPECT_TRUE(flushed(paths, tmp.path()));
  EXPECT_TRUE(flushed(paths, tmp.path() / "new"));
  // Made by someone else (a user's mkdir, a lock taken first): its parent still flushed.
  ASSERT_EQ(::mkdir((tmp.path() / "made").c_str(), 0777), 0);
  take_synced();
  StateDirectory made(tmp.path() / "made" / "");
  made.save(filter);
  EXPECT_TRUE(flushed(take_synced(), tmp.path()));
  // A later commit has an entry already durable.
  made.save(filter);
  EXPECT_FALSE(flushed(take_synced(), tmp.path()));
}

TEST(DirectorySync, ACheckpointDirectoryIsFlushedIntoItsParent) {
  TempDir tmp;
  take_synced();
  detail::save_checkpoint_file(tmp.path() / "checkpoints" / "run", "state.bbf",
                               [](const std::filesystem::path& path) { std::ofstream(path) << 1; });
  const auto paths = take_synced();
  EXPECT_TRUE(flushed(paths, tmp.path()));
  EXPECT_TRUE(flushed(paths, tmp.path() / "checkpoints"));
}

}  // namespace
}  // namespace bulkbloom
