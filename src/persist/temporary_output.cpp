#include "persist/temporary_output.hpp"

#include <fcntl.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <chrono>
#include <filesystem>
#include <optional>
#include <string_view>

namespace bulkbloom::detail {
namespace {

// A temporary output younger than this may be one whose run has created it and not yet locked
// it (two separate calls), so only its pid can say it is dead.
constexpr auto kUnlockedGrace = std::chrono::seconds(10);

std::string directory_of(const std::string& path) {
  const auto slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  return slash == 0 ? "/" : path.substr(0, slash);
}

std::string base_name_of(const std::string& path) {
  const auto slash = path.rfind('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

// The start of the names of `output`'s temporaries in its directory: ".NAME.bulkbloom-". Appended
// piece by piece: GCC 12 warns (-Wrestrict, wrongly) on "." + std::string.
std::string name_prefix(const std::string& output) {
  std::string prefix = ".";
  prefix += base_name_of(output);
  prefix += ".bulkbloom-";
  return prefix;
}

// The pid of a temporary name's rest "PID-XXXXXX": ASCII digits only, then '-'.
std::optional<pid_t> pid_of(std::string_view rest) {
  pid_t pid = 0;
  const auto [end, error] = std::from_chars(rest.data(), rest.data() + rest.size(), pid);
  if (error != std::errc() || end == rest.data() || end == rest.data() + rest.size() ||
      *end != '-' || pid <= 0) {
    return std::nullopt;
  }
  return pid;
}

// Whether no live run holds the temporary output `file` (its run locks it from creation until
// the rename, and the kernel drops the lock however the run ends) and it is past the grace.
bool abandoned(const std::filesystem::path& file) {
  // Not blocking: a FIFO swapped in after the caller saw a regular file would wait for a writer.
  const int fd = ::open(file.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
  if (fd < 0) return false;
  struct stat st {};
  const bool unlocked = ::flock(fd, LOCK_EX | LOCK_NB) == 0;
  const bool old =
      ::fstat(fd, &st) == 0 && std::chrono::system_clock::now() - kUnlockedGrace >
                                   std::chrono::system_clock::from_time_t(st.st_mtim.tv_sec) +
                                       std::chrono::nanoseconds(st.st_mtim.tv_nsec);
  ::close(fd);
  return unlocked && old;
}

}  // namespace

std::string temporary_output_stem(const std::filesystem::path& output) {
  std::string stem = directory_of(output.native());
  if (stem != "/") stem += '/';
  return stem + name_prefix(output.native());
}

void remove_dead_temporary_outputs(const std::filesystem::path& output) {
  const std::string prefix = name_prefix(output.native());
  // An unreadable directory, or one that fails part-way, only leaves files behind: the run's own
  // temporary is what must succeed, and its creation reports the directory's error.
  std::error_code error;
  for (std::filesystem::directory_iterator entry(directory_of(output.native()), error), end;
       !error && entry != end; entry.increment(error)) {
    const std::string name = entry->path().filename().string();
    if (!name.starts_with(prefix)) continue;
    const std::optional<pid_t> pid = pid_of(std::string_view(name).substr(prefix.size()));
    // A run's temporary is a regular file; a directory or a link of the same name is not one.
    std::error_code status_error;  // the entry itself, not what a link names
    if (!pid || entry->symlink_status(status_error).type() != std::filesystem::file_type::regular) {
      continue;
    }
    const bool gone = ::kill(*pid, 0) != 0 && errno == ESRCH;
    std::error_code remove_error;  // another run may remove it first
    if (gone || abandoned(entry->path())) std::filesystem::remove(entry->path(), remove_error);
  }
}

}  // namespace bulkbloom::detail
