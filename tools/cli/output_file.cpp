#include "cli/output_file.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <utility>

#include "cli/errors.hpp"
#include "persist/file_io.hpp"
#include "persist/temporary_output.hpp"

namespace bulkbloom::cli {
namespace {

// Bytes of output between two writeback steps (see OutputFile::stream_to_disk).
constexpr std::uint64_t kWritebackWindow = std::uint64_t{64} << 20;

// Paths the signal handler deletes. Fixed storage, because a handler may not allocate.
constexpr int kCleanupSlots = 8;
constexpr std::size_t kMaxCleanupPath = 4096;
std::array<char[kMaxCleanupPath], kCleanupSlots> g_cleanup_paths;
std::array<std::atomic<bool>, kCleanupSlots> g_cleanup_used{};

// Registers `pattern`, a mkstemp() template, and creates the file from it in the registered
// storage itself, so that the handler knows the file's name from the instant it exists: a signal
// between creating the file and registering its name would leave the file behind. (A signal that
// interrupts mkstemp before the file exists makes the handler unlink a name nothing has.) Returns
// the slot, or -1 when no slot is free (the file is then created unregistered); `pattern` holds
// the name made.
int create_registered(std::string& pattern, int& fd) {
  if (pattern.size() < kMaxCleanupPath) {
    for (int i = 0; i < kCleanupSlots; ++i) {
      bool expected = false;
      if (g_cleanup_used[i].compare_exchange_strong(expected, true)) {
        // Mark unused while the template is copied so the handler never reads a torn string.
        g_cleanup_used[i] = false;
        std::memcpy(g_cleanup_paths[i], pattern.c_str(), pattern.size() + 1);
        g_cleanup_used[i] = true;
        fd = mkstemp(g_cleanup_paths[i]);
        if (fd < 0) {
          g_cleanup_used[i] = false;
          return -1;
        }
        pattern = g_cleanup_paths[i];
        return i;
      }
    }
  }
  fd = mkstemp(pattern.data());
  return -1;
}

void unregister_cleanup(int slot) {
  if (slot >= 0) g_cleanup_used[slot] = false;
}

// While a save is in progress (SignalsDeferred), a signal is noted here and acted on when the
// save is over, so that the save's own temporary file is renamed or removed first.
std::atomic<int> g_deferring = 0;
std::atomic<int> g_deferred_signal = 0;
// Set once the run has committed: a signal then ends it successfully (mark_run_committed).
std::atomic<bool> g_committed = false;

void delete_outputs_and_raise(int signal_number) {
  if (g_committed) _exit(0);
  for (int i = 0; i < kCleanupSlots; ++i) {
    if (g_cleanup_used[i]) unlink(g_cleanup_paths[i]);
  }
  std::signal(signal_number, SIG_DFL);
  std::raise(signal_number);
}

extern "C" void delete_outputs_and_die(int signal_number) {
  if (g_deferring > 0) {
    g_deferred_signal = signal_number;
    return;
  }
  delete_outputs_and_raise(signal_number);
}

}  // namespace

SignalsDeferred::SignalsDeferred() {
  ++g_deferring;
}

SignalsDeferred::~SignalsDeferred() {
  if (--g_deferring == 0) {
    if (const int signal_number = g_deferred_signal.exchange(0)) {
      delete_outputs_and_raise(signal_number);
    }
  }
}

void mark_run_committed() {
  g_committed = true;
}

void commit_with_signals_deferred(const std::function<void()>& save) {
  const SignalsDeferred deferred;
  save();
  mark_run_committed();  // before `deferred` acts on a signal that came during the save
}

std::string with_errno(const std::string& what) {
  return what + ": " + std::strerror(errno);
}

void install_output_signal_handlers() {
  struct sigaction action {};
  action.sa_handler = delete_outputs_and_die;
  sigemptyset(&action.sa_mask);
  for (int s : {SIGINT, SIGTERM, SIGHUP}) sigaction(s, &action, nullptr);
  std::signal(SIGPIPE, SIG_IGN);
}

OutputFile::OutputFile(std::string path, Staging staging, std::uint64_t resume_at)
    : path_(std::move(path)), display_(path_ == "-" ? "stdout" : path_) {
  if (path_ == "-") {
    fd_ = STDOUT_FILENO;
    return;
  }
  struct stat st {};
  const bool exists = stat(path_.c_str(), &st) == 0;
  if (exists && S_ISDIR(st.st_mode)) throw IoError("cannot write " + path_ + ": it is a directory");
  if (exists && !S_ISREG(st.st_mode)) {
    // A device or a pipe cannot be replaced by a rename: write it in place.
    fd_ = open(path_.c_str(), O_WRONLY | O_CLOEXEC);
    if (fd_ < 0) throw IoError(with_errno("cannot open " + path_));
    owns_fd_ = true;
    return;
  }
  if (staging == Staging::resumable) {
    staged_path_ = path_ + ".partial";
    fd_ = open(staged_path_.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0666);
    if (fd_ < 0) throw IoError(with_errno("cannot create " + staged_path_));
    owns_fd_ = true;
    if (ftruncate(fd_, static_cast<off_t>(resume_at)) != 0 ||
        lseek(fd_, static_cast<off_t>(resume_at), SEEK_SET) < 0) {
      throw IoError(with_errno("cannot resume " + staged_path_));
    }
    written_ = writeback_started_ = writeback_done_ = resume_at;
    return;
  }
  detail::remove_dead_temporary_outputs(path_);
  std::string pattern = detail::temporary_output_stem(path_) + std::to_string(getpid()) + "-XXXXXX";
  cleanup_slot_ = create_registered(pattern, fd_);
  if (fd_ < 0) throw IoError(with_errno("cannot create a temporary file for " + path_));
  owns_fd_ = true;
  staged_path_ = pattern;
  remove_on_failure_ = true;
  // Held until the rename, through a second descriptor of the same open file, as commit()
  // closes fd_ first to see its errors. Where the filesystem has no locks the file goes
  // unlocked: other runs then cannot take its lock either, and judge it by its pid alone.
  lock_fd_ = fcntl(fd_, F_DUPFD_CLOEXEC, 0);
  if (lock_fd_ >= 0 && flock(lock_fd_, LOCK_EX | LOCK_NB) != 0) close(std::exchange(lock_fd_, -1));
  // mkstemp creates 0600; give the output the permissions a plain creat() would.
  fchmod(fd_, 0666 & ~detail::process_umask());
}

OutputFile::~OutputFile() {
  if (owns_fd_ && fd_ >= 0) close(fd_);
  if (!committed_ && remove_on_failure_) unlink(staged_path_.c_str());
  if (lock_fd_ >= 0) close(lock_fd_);
  unregister_cleanup(cleanup_slot_);
}

void OutputFile::stream_to_disk() {
  // Large outputs otherwise pile up as dirty page cache until the kernel throttles every writer
  // and evicts the input and the filter. Start writing each window as soon as it is full, and
  // once the window before it is on disk, drop it from the cache: the output then streams at
  // the disk's pace in a bounded amount of memory.
  if (staged_path_.empty() || written_ - writeback_started_ < kWritebackWindow) return;
  sync_file_range(fd_, static_cast<off_t>(writeback_started_),
                  static_cast<off_t>(written_ - writeback_started_), SYNC_FILE_RANGE_WRITE);
  if (writeback_started_ > writeback_done_) {
    const auto begin = static_cast<off_t>(writeback_done_);
    const auto length = static_cast<off_t>(writeback_started_ - writeback_done_);
    sync_file_range(
        fd_, begin, length,
        SYNC_FILE_RANGE_WAIT_BEFORE | SYNC_FILE_RANGE_WRITE | SYNC_FILE_RANGE_WAIT_AFTER);
    posix_fadvise(fd_, begin, length, POSIX_FADV_DONTNEED);
    writeback_done_ = writeback_started_;
  }
  writeback_started_ = written_;
}

void OutputFile::write(std::string_view bytes) {
  if (!staged_path_.empty()) detail::fault_point("write");
  const char* p = bytes.data();
  std::size_t left = bytes.size();
  while (left > 0) {
    const ssize_t n = ::write(fd_, p, left);
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno == EPIPE && path_ == "-") throw ReaderGone("stdout was closed");
      throw IoError(with_errno("cannot write " + display_));
    }
    p += n;
    left -= static_cast<std::size_t>(n);
    written_ += static_cast<std::uint64_t>(n);
  }
  stream_to_disk();
}

void OutputFile::sync() {
  if (staged_path_.empty()) return;
  detail::fault_point("fsync");
  if (fsync(fd_) != 0) throw IoError(with_errno("cannot sync " + staged_path_));
}

void OutputFile::commit() {
  if (staged_path_.empty()) {
    committed_ = true;
    return;
  }
  const int fd = std::exchange(fd_, -1);
  if (close(fd) != 0) throw IoError(with_errno("cannot write " + path_));
  detail::fault_point("rename");
  if (rename(staged_path_.c_str(), path_.c_str()) != 0) {
    throw IoError(with_errno("cannot rename " + staged_path_ + " to " + path_));
  }
  committed_ = true;
  if (lock_fd_ >= 0) close(std::exchange(lock_fd_, -1));
  detail::sync_directory(std::filesystem::path(path_).parent_path());
}

}  // namespace bulkbloom::cli
