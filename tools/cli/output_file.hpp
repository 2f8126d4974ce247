// Output that never leaves a half-written file behind: regular files are written under a
// temporary name in the same directory and renamed into place only by commit().
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>

namespace bulkbloom::cli {

/// A destination for records: "-" (stdout), a regular file (written atomically), or an existing
/// non-regular file such as a device or a pipe (written directly, as nothing can replace it).
class OutputFile {
 public:
  /// How a regular file is staged before commit().
  enum class Staging {
    /// A fresh temporary file ".NAME.bulkbloom-PID-XXXXXX", deleted on destruction or on
    /// SIGINT/SIGTERM unless committed; those of dead processes are deleted when a new one is
    /// made.
    temporary,
    /// "<path>.partial", kept when the process dies so that a resumed run can continue it.
    resumable,
  };

  /// Opens `path` for writing. For Staging::resumable, `resume_at` is the length to truncate an
  /// existing partial file to (0 starts afresh). Throws IoError naming the path.
  explicit OutputFile(std::string path, Staging staging = Staging::temporary,
                      std::uint64_t resume_at = 0);
  OutputFile(const OutputFile&) = delete;
  OutputFile& operator=(const OutputFile&) = delete;
  ~OutputFile();

  /// Writes all of `bytes`. Throws IoError (disk full, closed pipe, ...) naming the path.
  void write(std::string_view bytes);
  /// Forces written bytes to stable storage (no-op for stdout and devices).
  void sync();
  /// Makes the output visible under its final name: renames it into place and flushes the
  /// directory (call sync() first for the bytes to be durable too). Throws IoError.
  void commit();

  /// Bytes written so far, including those kept from a resumed partial file.
  std::uint64_t bytes_written() const { return written_; }
  /// The name people know it by ("stdout" for "-").
  const std::string& display_name() const { return display_; }

 private:
  void stream_to_disk();

  std::string path_;
  std::string display_;
  std::string staged_path_;  // empty when writing in place
  int fd_ = -1;
  bool owns_fd_ = false;
  bool committed_ = false;
  bool remove_on_failure_ = false;
  int cleanup_slot_ = -1;
  int lock_fd_ = -1;  // holds the temporary's lock, which tells reruns the file is in use
  std::uint64_t written_ = 0;
  std::uint64_t writeback_started_ = 0;  // bytes handed to the disk with sync_file_range
  std::uint64_t writeback_done_ = 0;     // bytes known on disk and dropped from the cache
};

/// While one exists, SIGINT / SIGTERM / SIGHUP wait: the handler notes the signal, and the
/// last SignalsDeferred to end acts on it (deletes the outputs, dies of it). A save of the carried
/// state runs under one, so that a signal never leaves its temporary file behind.
class SignalsDeferred {
 public:
  SignalsDeferred();
  SignalsDeferred(const SignalsDeferred&) = delete;
  SignalsDeferred& operator=(const SignalsDeferred&) = delete;
  ~SignalsDeferred();
};

/// Marks the run committed (its outputs and state are in place): from then on a SIGINT / SIGTERM
/// / SIGHUP, also one that a SignalsDeferred still holds back, ends the process at once with
/// status 0. The work a signal would stop is done, and dying of it would tell a script otherwise.
void mark_run_committed();

/// Runs `save`, the write that commits the run, under a SignalsDeferred, and marks the run
/// committed before the signals are let go: a signal during the save neither leaves its
/// temporary file behind nor makes a committed run exit as failed.
void commit_with_signals_deferred(const std::function<void()>& save);

/// Installs SIGINT / SIGTERM / SIGHUP handlers that delete uncommitted temporary outputs before
/// the process dies of the signal, and makes a closed pipe an EPIPE write error, not a silent
/// SIGPIPE death.
void install_output_signal_handlers();

}  // namespace bulkbloom::cli
