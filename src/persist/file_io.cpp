#include "persist/file_io.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cerrno>
#include <csignal>
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

#define XXH_INLINE_ALL
#include <xxhash.h>

#include "bulkbloom/format.hpp"
#include "core/filter_access.hpp"
#include "core/tuning.hpp"

namespace bulkbloom::detail {
namespace {

XXH3_state_t* state_of(void* state) {
  return static_cast<XXH3_state_t*>(state);
}

// The fault point BULKBLOOM_FAULT_INJECT names (0: none) and whether it kills the process.
struct FaultPlan {
  std::uint64_t point = 0;
  bool kill = false;
  bool signal = false;  // SIGTERM to itself, then carry on (the handler decides)
};

FaultPlan fault_plan() {
  FaultPlan plan;
  const char* text = std::getenv("BULKBLOOM_FAULT_INJECT");
  if (text == nullptr) return plan;
  char* end = nullptr;
  plan.point = std::strtoull(text, &end, 10);
  plan.kill = std::string(end) == ":kill";
  plan.signal = std::string(end) == ":signal";
  return plan;
}

}  // namespace

void fault_point(const char* what) {
  static const FaultPlan plan = fault_plan();
  static std::atomic<std::uint64_t> reached = 0;
  if (plan.point == 0 || ++reached != plan.point) return;
  if (plan.kill) std::raise(SIGKILL);
  if (plan.signal) {
    std::raise(SIGTERM);
    return;
  }
  throw IoError(std::string("injected fault at point ") + std::to_string(plan.point) + " (" + what +
                ")");
}

DataChecksum::DataChecksum() : state_(XXH3_createState()) {
  if (state_ == nullptr) throw AllocationError("cannot allocate a checksum state");
  XXH3_64bits_reset(state_of(state_));
}

DataChecksum::~DataChecksum() {
  XXH3_freeState(state_of(state_));
}

void DataChecksum::update(const std::byte* data, std::size_t n) {
  XXH3_64bits_update(state_of(state_), data, n);
}

std::uint64_t DataChecksum::digest() const {
  return XXH3_64bits_digest(state_of(state_));
}

namespace {

// The IoError for the call on `path` that just failed: "cannot VERB PATH: reason", with errno.
IoError errno_error(const std::string& verb, const std::filesystem::path& path) {
  const int number = errno;
  return IoError("cannot " + verb + " " + path.string() + ": " + std::strerror(number), number,
                 path);
}

}  // namespace

File::File(const std::filesystem::path& path, int flags, mode_t mode) : path_(path) {
  fd_ = ::open(path.c_str(), flags | O_CLOEXEC, mode);
  if (fd_ < 0) throw errno_error("open", path);
}

File::File(File&& other) noexcept
    : path_(std::move(other.path_)), fd_(std::exchange(other.fd_, -1)) {}

File::~File() {
  if (fd_ >= 0) ::close(fd_);
}

void File::close() {
  const int fd = fd_;
  fd_ = -1;
  if (::close(fd) != 0) throw errno_error("close", path_);
}

std::uint64_t File::regular_file_size() const {
  struct stat st {};
  if (::fstat(fd_, &st) != 0) throw errno_error("stat", path_);
  if (!S_ISREG(st.st_mode)) {
    throw FormatError(path_.string() + ": not a regular file" +
                      (S_ISDIR(st.st_mode) ? " (a directory)" : ""));
  }
  return static_cast<std::uint64_t>(st.st_size);
}

void File::read_exactly(std::byte* out, std::uint64_t n, std::uint64_t offset) const {
  while (n > 0) {
    const ssize_t got =
        ::pread(fd_, out, std::min<std::uint64_t>(n, tuning::kIoChunk), static_cast<off_t>(offset));
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) throw errno_error("read", path_);
    if (got == 0) throw FormatError(path_.string() + ": truncated while reading");
    out += got;
    n -= static_cast<std::uint64_t>(got);
    offset += static_cast<std::uint64_t>(got);
  }
}

void File::write_all(const std::byte* data, std::uint64_t n) {
  fault_point("write");
  while (n > 0) {
    const ssize_t put = ::write(fd_, data, std::min<std::uint64_t>(n, tuning::kIoChunk));
    if (put < 0 && errno == EINTR) continue;
    if (put < 0) throw errno_error("write", path_);
    data += put;
    n -= static_cast<std::uint64_t>(put);
  }
}

void File::write_at(std::span<const std::byte> data, std::uint64_t offset) {
  if (::lseek(fd_, static_cast<off_t>(offset), SEEK_SET) < 0) throw errno_error("seek in", path_);
  write_all(data);
}

void File::sync() {
  fault_point("fsync");
  if (::fsync(fd_) != 0) throw errno_error("flush", path_);
}

void sync_directory(const std::filesystem::path& dir) {
  File directory(dir.empty() ? "." : dir, O_RDONLY | O_DIRECTORY);
  directory.sync();
}

namespace {

// Flushes the directory that holds `dir`'s entry: "dir/..", as the kernel resolves it (through
// links and "..", as it resolved `dir`). A parent this process may write but not read (a drop
// directory, mode 1733) cannot be opened to be flushed; nothing could flush it from here, so the
// commit goes on without.
void flush_entry_of(const std::filesystem::path& dir) {
  try {
    sync_directory(dir / "..");
  } catch (const IoError& e) {
    if (e.error_number() != EACCES) throw;
  }
}

}  // namespace

void create_directories_synced(const std::filesystem::path& dir, const std::string& what) {
  if (dir.empty()) throw IoError("cannot create " + what + ": the path is empty", ENOENT, dir);
  // Level by level as given, so that "..", links and a relative path mean what they mean to the
  // kernel.
  std::vector<std::filesystem::path> levels;
  for (const auto& part : dir) {
    if (part.empty()) continue;  // a trailing separator
    levels.push_back(levels.empty() ? part : levels.back() / part);
  }
  const auto fail = [&](const std::filesystem::path& level, int number) {
    const std::string where = level == levels.back() ? "" : " (making " + level.string() + ")";
    throw IoError(
        "cannot create " + what + " " + dir.string() + where + ": " + std::strerror(number), number,
        level);
  };
  // Each level made here is flushed into its parent before anything is made in it, so a run
  // killed in between leaves at most one level unflushed, the deepest it made: the deepest level
  // found in place has its entry flushed before anything is made below it, and the directory's
  // own when every level is in place (also one a user made).
  // Every level ends the loop checked to be a directory (a link to one included).
  const std::filesystem::path* deepest_found = nullptr;
  bool made = false;
  for (const auto& level : levels) {
    struct stat info {};
    if (!made && ::stat(level.c_str(), &info) == 0) {
      if (!S_ISDIR(info.st_mode)) fail(level, ENOTDIR);
      deepest_found = &level;
      continue;
    }
    if (!made && deepest_found != nullptr) flush_entry_of(*deepest_found);
    made = true;
    if (::mkdir(level.c_str(), 0777) == 0) {
      flush_entry_of(level);
      continue;
    }
    const int number = errno;
    if (number != EEXIST) fail(level, number);
    // There after all: "." or ".." below a level made here, one another process made (and
    // flushes), a link to nothing or a loop (stat fails), or something in the way.
    if (::stat(level.c_str(), &info) != 0) fail(level, errno);
    if (!S_ISDIR(info.st_mode)) fail(level, ENOTDIR);
  }
  if (!made) flush_entry_of(dir);
}

mode_t process_umask() {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.starts_with("Umask:"))
      return static_cast<mode_t>(std::stoul(line.substr(6), nullptr, 8));
  }
  // No /proc (a bare chroot): read it by setting it, racy as that is.
  const mode_t mask = ::umask(0);
  ::umask(mask);
  return mask;
}

namespace {

// The permissions of a file written to replace `path`: those of the file it replaces, else what
// creat(path, 0666) would give.
mode_t replacement_mode(const std::filesystem::path& path) {
  struct stat existing {};
  if (::stat(path.c_str(), &existing) == 0) return existing.st_mode & 07777;
  return 0666 & ~process_umask();
}

}  // namespace

void write_file_atomically(const std::filesystem::path& path,
                           const std::function<void(File&)>& write) {
  std::string temp_name = path.string() + ".tmp.XXXXXX";
  const int fd = ::mkstemp(temp_name.data());
  if (fd < 0) throw errno_error("create a temporary file beside", path);
  // mkstemp makes the file 0600, which would leave a shared filter readable by its owner alone.
  // Best effort: a file system without permissions refuses, and the file keeps what it has.
  (void)::fchmod(fd, replacement_mode(path));
  ::close(fd);
  const std::filesystem::path temp(temp_name);
  try {
    File out(temp, O_WRONLY | O_TRUNC);
    write(out);
    out.sync();
    out.close();
    fault_point("rename");
    if (::rename(temp.c_str(), path.c_str()) != 0) {
      throw errno_error("rename " + temp.string() + " to", path);
    }
  } catch (...) {
    std::error_code ignored;
    std::filesystem::remove(temp, ignored);
    throw;
  }
  sync_directory(path.parent_path());
}

void save_checkpoint_file(const std::filesystem::path& dir, const std::string& file_name,
                          const std::function<void(const std::filesystem::path&)>& save) {
  create_directories_synced(dir, "checkpoint directory");
  // A save killed mid-write leaves its temporary file behind; the directory has one writer, so
  // any such file is stale.
  remove_stale_saves(dir / file_name);
  save(dir / file_name);
}

std::optional<std::filesystem::path> find_checkpoint_file(const std::filesystem::path& dir,
                                                          const std::string& file_name) {
  // Below a regular file the checkpoint's path reads as "not found"; a resumed run must not take
  // that for a directory that never held a checkpoint.
  std::error_code error;
  const auto dir_status = std::filesystem::status(dir, error);
  if (std::filesystem::exists(dir_status) && !std::filesystem::is_directory(dir_status)) {
    throw IoError("cannot look for a checkpoint in " + dir.string() + ": " + std::strerror(ENOTDIR),
                  ENOTDIR, dir);
  }
  auto path = dir / file_name;
  const bool exists = std::filesystem::exists(path, error);
  if (error)
    throw IoError("cannot look for a checkpoint at " + path.string() + ": " + error.message(),
                  error.value(), path);
  if (!exists) return std::nullopt;
  return path;
}

void remove_stale_saves(const std::filesystem::path& path) {
  // Exactly the names write_file_atomically() gives: mkstemp's six letters or digits after the
  // prefix, so that a user's "F.tmp.csv" beside F stays.
  const std::string stale_prefix = path.filename().string() + ".tmp.";
  const auto is_save_temporary = [&](const std::string& name) {
    return name.size() == stale_prefix.size() + 6 && name.starts_with(stale_prefix) &&
           std::all_of(name.begin() + static_cast<std::ptrdiff_t>(stale_prefix.size()), name.end(),
                       [](char c) { return std::isalnum(static_cast<unsigned char>(c)) != 0; });
  };
  const std::filesystem::path dir = path.parent_path().empty() ? "." : path.parent_path();
  std::error_code error;
  for (const auto& entry : std::filesystem::directory_iterator(dir, error)) {
    if (is_save_temporary(entry.path().filename().string())) {
      std::filesystem::remove(entry.path(), error);
    }
  }
}

HostBits::HostBits(const Filter& filter) {
  const std::byte* host = FilterAccess::engine(filter).host_bytes();
  if (host == nullptr) {
    copy_.resize(filter.layout().size_bytes());
    filter.copy_bytes_to(copy_);
    host = copy_.data();
  }
  bits_ = {host, filter.layout().size_bytes()};
}

void fill_filter_bits(Filter& filter, const std::function<void(std::span<std::byte>)>& fill) {
  const std::uint64_t bytes = filter.layout().size_bytes();
  const std::byte* host = FilterAccess::engine(filter).host_bytes();
  if (host != nullptr) {
    fill({const_cast<std::byte*>(host), bytes});  // the engine's own, writable memory
    return;
  }
  std::vector<std::byte> staging(bytes);
  fill(staging);
  filter.copy_bytes_from(staging);
}

void read_filter_bits(const File& file, std::uint64_t offset, Filter& filter,
                      DataChecksum& checksum) {
  const std::uint64_t bytes = filter.layout().size_bytes();
  const std::byte* host = FilterAccess::engine(filter).host_bytes();
  if (host != nullptr) {
    auto* bits = const_cast<std::byte*>(host);  // the engine's own, writable memory
    for (std::uint64_t done = 0; done < bytes; done += tuning::kIoChunk) {
      const std::uint64_t n = std::min<std::uint64_t>(tuning::kIoChunk, bytes - done);
      file.read_exactly(bits + done, n, offset + done);
      checksum.update(bits + done, n);
    }
  } else {
    std::vector<std::byte> staging(bytes);
    file.read_exactly(staging.data(), staging.size(), offset);
    checksum.update(staging);
    filter.copy_bytes_from(staging);
  }
}

}  // namespace bulkbloom::detail
