// Exclusive locks on the state a run carries (a --filter file, a checkpoint directory), so that
// two runs never load the same state and both save over it.
#pragma once

#include <filesystem>
#include <string>

namespace bulkbloom::cli {

/// The file or directory that the state path `path` names: where its chain of symbolic links
/// ends (even when nothing is there yet), or `path` itself. A commit replaces the state by a
/// rename, which over a link would replace the link and fork the state, and the lock beside it
/// must be the same for every name. Throws Error for a regular file with more than one hard
/// link: the rename would leave the other names holding the old state, locked apart.
std::string real_state_path(const std::string& path);

/// Where a run's carried state lives (dedup --filter): one file, replaced whole by each commit,
/// or a state directory, into which each commit writes what changed (docs/FORMAT.md "State
/// directories").
struct StatePath {
  std::string path;        ///< real_state_path(), without a trailing '/'
  bool directory = false;  ///< a state directory; else a single file
  /// Whether a state was committed there: the file exists, or the directory has a manifest.
  bool holds_state() const;
  /// Tells the committed state apart from any other commit: "none" when none was made, else
  /// a checksum of what names its content (a directory's manifest, a file's header).
  std::string fingerprint() const;
};

/// What `given`, the value of `option`, names: a state directory when it is a directory (through
/// links) or ends in '/' (a new one, created by the first commit), else a single file. Throws
/// UsageError for a name ending in '/' that is not a directory, and for a directory that holds
/// no state but other files, which a state would be mixed with.
StatePath state_path(const std::string& given, const char* option);

/// An exclusive flock() held until destruction. A file replaced by rename cannot carry the lock
/// (a lock belongs to the old inode), so a filter F is locked through the stable file "F.lock"
/// beside it (a --filter state directory D likewise through "D.lock", so that nothing is
/// created before its first commit), and a checkpoint directory through the directory itself.
class StateLock {
 public:
  /// Locks "<path>.lock" (created if missing) when `path` is a file that gets replaced, or the
  /// directory `path` itself (created if missing) when `is_directory`. When another process holds
  /// the lock: with `wait`, says so on stderr and waits; without, throws Error saying who to wait
  /// for. Throws IoError when the lock file or directory cannot be opened.
  StateLock(const std::filesystem::path& path, bool is_directory, bool wait);
  StateLock(const StateLock&) = delete;
  StateLock& operator=(const StateLock&) = delete;
  ~StateLock();

 private:
  int fd_ = -1;
};

}  // namespace bulkbloom::cli
