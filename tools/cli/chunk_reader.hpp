// Streams inputs (files or stdin) in large chunks of whole records on a background thread, so
// that reading overlaps the filter work and memory stays fixed whatever the input's size.
#pragma once

#include <cstddef>
#include <cstdint>
#include <exception>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "cli/errors.hpp"
#include "cli/input_window.hpp"
#include "cli/record_format.hpp"
#include "cli/work_queue.hpp"

namespace bulkbloom::detail {
class DataChecksum;
}

namespace bulkbloom::cli {

/// A place in the list of inputs: byte `offset` of input number `input`.
struct InputPosition {
  std::size_t input = 0;
  std::uint64_t offset = 0;
};

/// The bytes of an input as a reader read them: how many, and their XXH3-64 (seed 0).
struct InputContent {
  std::uint64_t bytes = 0;
  std::uint64_t hash = 0;
};

/// Whole records from one input: a window of a mapped regular file, or bytes read into storage.
/// Storage is 64-bit words so u64 keys are read into place (a window's u64 records are aligned
/// too: they start at a multiple of 8 in the file, and a mapping at a page).
struct Chunk {
  std::vector<std::uint64_t> storage;
  std::optional<InputWindow> window;  ///< When set, the records are its bytes, not storage's.
  std::size_t size = 0;               ///< Bytes of records.
  InputPosition position;             ///< Where byte 0 came from.

  char* bytes() { return reinterpret_cast<char*>(storage.data()); }
  std::size_t capacity() const { return storage.size() * sizeof(std::uint64_t); }
  const char* data() const {
    return window ? window->data() : reinterpret_cast<const char*>(storage.data());
  }
  std::string_view text() const { return {data(), size}; }
  std::span<const std::uint64_t> words() const {
    return {reinterpret_cast<const std::uint64_t*>(data()), size / 8};
  }
};

/// Reads inputs in order from `start`. Every input is checked (readable, and non-empty when it is
/// a regular file) by the constructor, so a missing file fails before any output exists; each is
/// opened only while it is read.
class ChunkReader {
 public:
  /// `inputs` are paths, "-" for stdin. Throws IoError / DataError naming the input.
  /// With `skip_empty` (--skip-bad), an empty input is skipped with a note on stderr instead.
  /// With `hash_contents`, each regular file is hashed as it is read (see contents()).
  ChunkReader(std::vector<std::string> inputs, RecordFormat format, std::size_t chunk_bytes,
              InputPosition start = {}, bool skip_empty = false, bool hash_contents = false);
  ChunkReader(const ChunkReader&) = delete;
  ChunkReader& operator=(const ChunkReader&) = delete;
  ~ChunkReader();

  /// The next chunk in input order; null after the last. Rethrows a read or format error.
  std::unique_ptr<Chunk> next();
  /// Returns a chunk's buffer for reuse. Throws IoError naming the input when the chunk was a
  /// window of a file that shrank (or could not be read) while the window was in use: what was
  /// read through it is not the file's, and nothing made from it may be committed.
  void recycle(std::unique_ptr<Chunk> chunk);

  /// "stdin" or the path.
  const std::string& input_name(std::size_t input) const { return names_[input]; }
  /// Total bytes of all inputs, if every input is a regular file.
  bool total_known() const;
  std::uint64_t total_bytes() const;
  /// Once next() has returned null: what was read of each input, when the reader was made with
  /// `hash_contents`, started at the beginning and the input is a regular file (a pipe cannot be
  /// read again to compare); nothing otherwise. A file that grew while it was read counts the
  /// bytes read, not those it had at the start.
  const std::vector<std::optional<InputContent>>& contents() const { return contents_; }
  /// Up to `limit` bytes from the start of the first non-empty input without consuming them, for
  /// sizing estimates; empty when every input is empty or the inputs before the first non-empty
  /// one include one that is not a regular file.
  std::string sample_first_input(std::size_t limit) const;

 private:
  void run();
  void read_input(std::size_t input, std::uint64_t offset, std::unique_ptr<Chunk>& current);
  // Hands out windows of the file `fd` from `offset` while more than a chunk of it is left;
  // returns the offset where the rest is to be read (a file that grows is read to its end).
  std::uint64_t map_windows(std::size_t input, int fd, std::uint64_t offset,
                            std::unique_ptr<Chunk>& current,
                            std::optional<detail::DataChecksum>& checksum);
  // Throws IoError when `window`'s file is now shorter than the window, or a thread found one
  // of its pages missing: the window does not hold the file's bytes.
  void check_window(std::size_t input, const InputWindow& window) const;
  // The error for a regular input found `size` bytes long, shorter than when the run began.
  IoError shrank(std::size_t input, std::uint64_t size) const;
  std::unique_ptr<Chunk> take_free_chunk();

  // An input's descriptor while it is read (stdin stays open).
  struct OpenInput {
    OpenInput(const std::string& path, const std::string& name);
    OpenInput(const OpenInput&) = delete;
    OpenInput& operator=(const OpenInput&) = delete;
    ~OpenInput();
    int fd;
  };

  std::vector<std::string> paths_;  // as given, "-" for stdin
  std::vector<std::string> names_;
  std::vector<bool> regular_;
  // A regular file's size when the reader was made (stdin's from where it stood), else 0.
  std::vector<std::uint64_t> sizes_;
  RecordFormat format_;
  InputPosition start_;
  bool skip_empty_;
  bool hash_contents_;
  std::size_t chunk_bytes_;
  std::vector<std::optional<InputContent>> contents_;  // written by the reader thread

  WorkQueue<std::unique_ptr<Chunk>> filled_;
  WorkQueue<std::unique_ptr<Chunk>> free_;
  std::exception_ptr error_;
  int stop_pipe_[2] = {-1, -1};  // written by the destructor to stop a reader waiting for input
  std::thread thread_;
};

}  // namespace bulkbloom::cli
