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
  const int fd = ::open(file.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
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
  const std::string directory = directory_of(output.native());
  return (directory == "/" ? "" : directory) + "/." + base_name_of(output.native()) + ".bulkbloom-";
}

void remove_dead_temporary_outputs(const std::filesystem::path& output) {
  const std::string prefix = "." + base_name_of(output.native()) + ".bulkbloom-";
  std::error_code error;
  for (const auto& entry :
       std::filesystem::directory_iterator(directory_of(output.native()), error)) {
    const std::string name = entry.path().filename().string();
    if (!name.starts_with(prefix)) continue;
    const std::optional<pid_t> pid = pid_of(std::string_view(name).substr(prefix.size()));
    if (!pid) continue;
    const bool gone = ::kill(*pid, 0) != 0 && errno == ESRCH;
    if (gone || abandoned(entry.path())) std::filesystem::remove(entry.path(), error);
  }
}

}  // namespace bulkbloom::detail
