// File helpers shared by the file kinds (format.cpp, window_file.cpp, the CLI's grown filter):
// owned descriptors, the streaming data checksum, atomic replacement of a file, the checkpoint
// file of a directory, and moving a filter's bits between a file and its engine.
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "bulkbloom/filter.hpp"
#include "bulkbloom/format.hpp"
#include "persist/file_header.hpp"

namespace bulkbloom::detail {

inline std::uint64_t round_up(std::uint64_t v, std::uint64_t to) {
  return (v + to - 1) / to * to;
}

/// Filter payloads start at multiples of this, so that files can be mapped.
inline constexpr std::uint64_t kPayloadAlignment = 4096;

/// Streaming XXH3-64 (seed 0): the formats' data checksum.
class DataChecksum {
 public:
  DataChecksum();
  DataChecksum(const DataChecksum&) = delete;
  DataChecksum& operator=(const DataChecksum&) = delete;
  ~DataChecksum();
  void update(const std::byte* data, std::size_t n);
  void update(std::span<const std::byte> data) { update(data.data(), data.size()); }
  std::uint64_t digest() const;

 private:
  void* state_;
};

/// The process's umask, read from /proc where it can be: umask() reads it only by setting it,
/// which races with other threads creating files.
mode_t process_umask();

/// An owned file descriptor whose errors name the path.
class File {
 public:
  File(const std::filesystem::path& path, int flags, mode_t mode = 0);
  File(File&& other) noexcept;
  File(const File&) = delete;
  File& operator=(const File&) = delete;
  ~File();
  int fd() const { return fd_; }

  void close();
  /// The size of a regular file; anything else (a directory, a device) is a FormatError.
  std::uint64_t regular_file_size() const;
  /// Reads exactly `n` bytes at `offset`; end of file first is a FormatError (truncated).
  void read_exactly(std::byte* out, std::uint64_t n, std::uint64_t offset) const;
  void write_all(const std::byte* data, std::uint64_t n);
  void write_all(std::span<const std::byte> data) { write_all(data.data(), data.size()); }
  /// Writes `data` at `offset` (e.g. a header whose checksum is known last); later writes go on
  /// from its end.
  void write_at(std::span<const std::byte> data, std::uint64_t offset);
  void sync();

 private:
  std::filesystem::path path_;
  int fd_ = -1;
};

/// Flushes directory `dir` (its entries: a rename in it becomes durable). Throws IoError.
void sync_directory(const std::filesystem::path& dir);

/// Creates directory `dir` and its missing parents, each flushed into its parent before anything
/// is made in it; the deepest level found in place has its entry flushed too (`dir`'s own when
/// all are), as a run killed between a mkdir and its flush leaves that one: a directory whose
/// entry was never flushed can vanish in a crash with everything committed in it. A parent that
/// may be written but not read is not flushed. Throws IoError ("cannot create `what` DIR: ...")
/// naming the level that could not be made; an empty path is refused.
void create_directories_synced(const std::filesystem::path& dir, const std::string& what);

/// Replaces `path` atomically with what `write` writes into a new file: a temporary file in the
/// same directory is written, flushed and renamed over `path`, then the directory is flushed.
/// Throws IoError; the temporary file never outlives a failure.
void write_file_atomically(const std::filesystem::path& path,
                           const std::function<void(File&)>& write);

/// Saves checkpoint `file_name` in `dir` with `save` (an atomic save of the path it is given),
/// after creating `dir` and its parents if missing and removing the temporary files that a killed
/// save left there (a checkpoint directory has a single writer). Throws IoError.
void save_checkpoint_file(const std::filesystem::path& dir, const std::string& file_name,
                          const std::function<void(const std::filesystem::path&)>& save);

/// The path of checkpoint `file_name` in `dir`, or nullopt when it is known to be absent. A
/// directory that cannot be searched, or a `dir` that is not a directory, is an IoError, or a
/// resumed run would silently start over.
std::optional<std::filesystem::path> find_checkpoint_file(const std::filesystem::path& dir,
                                                          const std::string& file_name);

/// Removes the temporary files "<path>.tmp.XXXXXX" (six letters or digits, as mkstemp makes them)
/// that saves of `path` killed mid-write left. Only for a file with a single writer (held under a
/// lock): the files of a save in progress would go too.
void remove_stale_saves(const std::filesystem::path& path);

/// A filter's bits as host memory: the CPU engine's own, or a copy from a device.
class HostBits {
 public:
  explicit HostBits(const Filter& filter);
  std::span<const std::byte> bytes() const { return bits_; }

 private:
  std::vector<std::byte> copy_;
  std::span<const std::byte> bits_;
};

/// Reads layout().size_bytes() bytes at `offset` of `file` into `filter`'s bits, adding them to
/// `checksum` as they pass.
void read_filter_bits(const File& file, std::uint64_t offset, Filter& filter,
                      DataChecksum& checksum);

/// Hands `fill` the writable host memory of `filter`'s bits (a staging copy for a device's, copied
/// in afterwards) to fill.
void fill_filter_bits(Filter& filter, const std::function<void(std::span<std::byte>)>& fill);

/// Bytes of the filter file (format v1) that save() writes for `layout` and `metadata_bytes`.
std::uint64_t filter_image_bytes(const Layout& layout, std::uint64_t metadata_bytes);
/// Writes the filter file image of `filter` and `state` at the current position of `out`.
void write_filter_image(File& out, const Filter& filter, const FileState& state);
/// Reads and fully verifies the filter file image of `bytes` bytes at `offset` of `file`, as
/// load() does for a whole file; `source` names it in errors.
Filter read_filter_image(const File& file, std::uint64_t offset, std::uint64_t bytes,
                         const std::string& source, FileState* state, const Options& options);

/// A point where a durable write can fail: each write, flush and rename of a file that a run
/// commits, and each flush of a directory. Test hook: when the environment variable
/// BULKBLOOM_FAULT_INJECT is "N" or "N:error", the N-th point (from 1) of the process fails as an
/// I/O error (IoError naming `what`); with "N:kill" the process kills itself with SIGKILL there,
/// and with "N:signal" it sends itself SIGTERM and goes on (the handler decides what happens).
/// Without the variable it does nothing.
void fault_point(const char* what);

}  // namespace bulkbloom::detail
