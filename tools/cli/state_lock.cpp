#include "cli/state_lock.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <bulkbloom/incremental.hpp>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <vector>

#include "cli/args.hpp"
#include "cli/errors.hpp"
#include "persist/file_io.hpp"

namespace bulkbloom::cli {

std::string real_state_path(const std::string& path) {
  namespace fs = std::filesystem;
  constexpr int kMaxLinks = 40;  // as the kernel's limit: a loop ends in an error
  fs::path real = path;
  std::error_code error;
  for (int hops = 0; fs::is_symlink(fs::symlink_status(real, error)); ++hops) {
    if (hops == kMaxLinks) throw Error(path + ": too many levels of symbolic links");
    const fs::path target = fs::read_symlink(real, error);
    if (error) throw IoError("cannot read the link " + real.string() + ": " + error.message());
    real = target.is_absolute() ? target : real.parent_path() / target;
  }
  struct stat st {};
  if (stat(real.c_str(), &st) == 0 && S_ISREG(st.st_mode) && st.st_nlink > 1) {
    throw Error(path + (real == path ? "" : " (" + real.string() + ")") + " has " +
                std::to_string(st.st_nlink) +
                " hard links: a run replaces it by renaming a new file over it, after which the "
                "other names would keep the old state, and runs through them would neither see "
                "its keys nor wait for its lock; remove the other names (find -samefile " +
                real.string() + " lists them), or make them symbolic links");
  }
  return real.string();
}

bool StatePath::holds_state() const {
  return directory ? StateDirectory::holds_state(path) : std::filesystem::exists(path);
}

std::string StatePath::fingerprint() const {
  if (!holds_state()) return "none";
  // A manifest names each file of the state with its checksum; a state file's header holds the
  // checksum of everything after it, within its first 4 KiB in every kind (docs/FORMAT.md).
  constexpr std::uint64_t kFileHeadBytes = 4096;
  const std::filesystem::path file =
      directory ? std::filesystem::path(path) / "MANIFEST" : std::filesystem::path(path);
  const detail::File in(file, O_RDONLY);
  const std::uint64_t size = in.regular_file_size();
  std::vector<std::byte> head(directory ? size : std::min(size, kFileHeadBytes));
  in.read_exactly(head.data(), head.size(), 0);
  detail::DataChecksum checksum;
  checksum.update(head);
  char text[48];
  std::snprintf(text, sizeof text, "%016llx-%llu",
                static_cast<unsigned long long>(checksum.digest()),
                static_cast<unsigned long long>(size));
  return text;
}

StatePath state_path(const std::string& given, const char* option) {
  namespace fs = std::filesystem;
  std::string name = given;
  const bool ends_in_slash = name.size() > 1 && name.ends_with('/');
  // Stripped before the links are followed: "D/" reads through a link D as its target, and the
  // lock must be the same for both names.
  while (name.size() > 1 && name.ends_with('/')) name.pop_back();
  StatePath where{real_state_path(name), false};
  std::error_code error;
  const fs::file_status status = fs::status(where.path, error);
  where.directory = ends_in_slash || fs::is_directory(status);
  if (ends_in_slash && fs::exists(status) && !fs::is_directory(status)) {
    throw UsageError(std::string(option) + " " + given +
                     ": ends in '/', which names a state directory, but " + where.path +
                     " is a file (drop the '/' to carry the state in that file)");
  }
  if (where.directory && StateDirectory::holds_other_files(where.path)) {
    throw UsageError(std::string(option) + " " + given + ": " + where.path +
                     " is a directory that holds no bulkbloom state but other files; a state "
                     "directory must start empty (name a new one, e.g. " +
                     name + ".state/)");
  }
  return where;
}

StateLock::StateLock(const std::filesystem::path& path, bool is_directory, bool wait) {
  std::filesystem::path target = path;
  if (is_directory) {
    detail::create_directories_synced(path, "directory");
    fd_ = open(path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  } else {
    target += ".lock";
    fd_ = open(target.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0666);
  }
  if (fd_ < 0) throw IoError(with_errno("cannot open " + target.string() + " to lock it"));
  if (flock(fd_, LOCK_EX | LOCK_NB) == 0) return;
  const int why = errno;
  if (why != EWOULDBLOCK) {
    close(fd_);
    errno = why;
    throw IoError(with_errno("cannot lock " + target.string()));
  }
  const std::string what = path.string() +
                           " is in use by another bulkbloom run (it holds the lock on " +
                           target.string() + ")";
  if (!wait) {
    close(fd_);
    throw Error(what + "; wait for it to end, or pass --wait-lock to wait");
  }
  std::fprintf(stderr, "bulkbloom: %s; waiting for it\n", what.c_str());
  while (flock(fd_, LOCK_EX) != 0) {
    if (errno == EINTR) continue;
    const int failure = errno;
    close(fd_);
    errno = failure;
    throw IoError(with_errno("cannot lock " + target.string()));
  }
}

StateLock::~StateLock() {
  close(fd_);  // releases the lock
}

}  // namespace bulkbloom::cli
