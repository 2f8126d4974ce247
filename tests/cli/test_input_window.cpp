// The CLI's mapped input windows: their bytes are the file's, and a file that shrinks under a
// window gives a fault its owner can see instead of killing the process with SIGBUS.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <csignal>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <numeric>
#include <string>
#include <vector>

#include "cli/input_window.hpp"

namespace bulkbloom::cli {
namespace {

class InputWindowTest : public ::testing::Test {
 protected:
  void SetUp() override {
    path_ = std::filesystem::temp_directory_path() /
            ("bulkbloom-input-window-" + std::to_string(getpid()));
    words_.resize(kWords);
    std::iota(words_.begin(), words_.end(), std::uint64_t{1});
    fd_ = open(path_.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    ASSERT_GE(fd_, 0);
    const auto bytes = static_cast<ssize_t>(words_.size() * sizeof(std::uint64_t));
    ASSERT_EQ(write(fd_, words_.data(), static_cast<std::size_t>(bytes)), bytes);
  }
  void TearDown() override {
    close(fd_);
    std::filesystem::remove(path_);
  }

  // Sums `window`'s words, touching every page.
  static std::uint64_t sum(const InputWindow& window) {
    const auto* words = reinterpret_cast<const std::uint64_t*>(window.data());
    return std::accumulate(words, words + window.size() / 8, std::uint64_t{0});
  }

  std::uint64_t first_page_sum() const {
    return std::accumulate(words_.begin(), words_.begin() + 4096 / 8, std::uint64_t{0});
  }

  static constexpr std::size_t kWords = 64 * 1024;  // 512 KiB: 128 pages of 4 KiB
  std::filesystem::path path_;
  std::vector<std::uint64_t> words_;
  int fd_ = -1;
};

TEST_F(InputWindowTest, HoldsTheFilesBytesFromAnyOffset) {
  // Offsets off the page: the window maps from the page before and starts inside it.
  for (const std::uint64_t offset : {0, 8, 4096, 4104, 40000}) {
    const std::size_t length = 100000;
    auto window = InputWindow::map(fd_, offset, length);
    ASSERT_TRUE(window);
    EXPECT_EQ(window->size(), length);
    EXPECT_EQ(
        std::memcmp(window->data(), reinterpret_cast<const char*>(words_.data()) + offset, length),
        0)
        << "offset " << offset;
    EXPECT_FALSE(window->fault_offset());
  }
}

TEST_F(InputWindowTest, AFileCutShortUnderTheWindowReadsZerosAndReportsWhere) {
  auto window = InputWindow::map(fd_, 8192, kWords * 8 - 8192);
  ASSERT_TRUE(window);
  // Cut after the window's first 10 pages: their bytes stay, the rest is gone.
  const std::uint64_t cut = 8192 + 10 * 4096;
  ASSERT_EQ(ftruncate(fd_, static_cast<off_t>(cut)), 0);
  const std::uint64_t kept =
      std::accumulate(words_.begin() + 8192 / 8, words_.begin() + cut / 8, std::uint64_t{0});
  EXPECT_EQ(sum(*window), kept);  // what a thread reads past the cut is zeros, and it lives
  ASSERT_TRUE(window->fault_offset());
  EXPECT_EQ(*window->fault_offset(), cut);
  // Another window's faults are its own.
  auto other = InputWindow::map(fd_, 0, 4096);
  ASSERT_TRUE(other);
  EXPECT_EQ(sum(*other), first_page_sum());
  EXPECT_FALSE(other->fault_offset());
}

TEST_F(InputWindowTest, AFaultIsReportedAtItsFileOffsetFromAnyWindowOffset) {
  for (const std::uint64_t offset : {8200, 4096 + 4000}) {
    ASSERT_EQ(ftruncate(fd_, static_cast<off_t>(kWords * 8)), 0);
    auto window = InputWindow::map(fd_, offset, 20 * 4096);
    ASSERT_TRUE(window);
    const std::uint64_t cut = 5 * 4096;
    ASSERT_EQ(ftruncate(fd_, static_cast<off_t>(cut)), 0);
    EXPECT_EQ(sum(*window),
              std::accumulate(words_.begin() + offset / 8, words_.begin() + cut / 8, 0ULL));
    ASSERT_TRUE(window->fault_offset()) << "offset " << offset;
    EXPECT_EQ(*window->fault_offset(), cut) << "offset " << offset;
  }
}

TEST_F(InputWindowTest, ACutInItsLastPageShowsInTheFileSizeNotAsAFault) {
  const std::uint64_t offset = 0;
  const std::size_t length = 3 * 4096;
  auto window = InputWindow::map(fd_, offset, length);
  ASSERT_TRUE(window);
  EXPECT_EQ(window->end_offset(), offset + length);
  EXPECT_EQ(window->file_size(), kWords * 8);
  // The page holding the new end stays mapped, zeros past the end: no SIGBUS, no fault noted.
  const std::uint64_t cut = offset + length - 1000;
  ASSERT_EQ(ftruncate(fd_, static_cast<off_t>(cut)), 0);
  const std::uint64_t kept =
      std::accumulate(words_.begin(), words_.begin() + cut / 8, std::uint64_t{0});
  EXPECT_EQ(sum(*window), kept);
  EXPECT_FALSE(window->fault_offset());
  EXPECT_EQ(window->file_size(), cut);
}

TEST_F(InputWindowTest, NoWindowPastTheFilesEnd) {
  ASSERT_EQ(ftruncate(fd_, 4096), 0);
  EXPECT_FALSE(InputWindow::map(fd_, 8192, 4096));
  EXPECT_FALSE(InputWindow::map(fd_, 0, 3 * 4096));
}

TEST_F(InputWindowTest, ASlotIsCleanForTheNextWindow) {
  {
    auto window = InputWindow::map(fd_, 0, kWords * 8);
    ASSERT_TRUE(window);
    ASSERT_EQ(ftruncate(fd_, 4096), 0);
    EXPECT_EQ(sum(*window), first_page_sum());
    ASSERT_TRUE(window->fault_offset());
  }
  // Many windows after the faulted one, more than there are slots at once: none inherits it.
  for (int i = 0; i < 64; ++i) {
    auto window = InputWindow::map(fd_, 0, 4096);
    ASSERT_TRUE(window);
    EXPECT_EQ(sum(*window), first_page_sum());
    EXPECT_FALSE(window->fault_offset()) << "window " << i;
  }
}

TEST_F(InputWindowTest, ASigbusOutsideEveryWindowStillKills) {
  auto window = InputWindow::map(fd_, 0, 4096);  // installs the handler
  ASSERT_TRUE(window);
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    // A mapping of the program's own, not a window: touching its lost page must still kill.
    void* mapping = mmap(nullptr, kWords * 8, PROT_READ, MAP_SHARED, fd_, 0);
    if (mapping == MAP_FAILED) _exit(2);
    if (ftruncate(fd_, 0) != 0) _exit(3);
    volatile std::uint64_t sink = static_cast<const volatile std::uint64_t*>(mapping)[4096];
    static_cast<void>(sink);
    _exit(0);
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFSIGNALED(status)) << "exit status " << status;
  EXPECT_EQ(WTERMSIG(status), SIGBUS);
}

}  // namespace
}  // namespace bulkbloom::cli
