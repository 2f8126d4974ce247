#include "cli/chunk_reader.hpp"

#include <fcntl.h>
#include <poll.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <numeric>

#include "cli/errors.hpp"
#include "persist/file_io.hpp"

namespace bulkbloom::cli {
namespace {

static_assert(std::endian::native == std::endian::little,
              "u64 inputs are little-endian and are used in place");

// Chunks in flight between the reader and the consumer: one being filled, one being worked
// on, one waiting.
constexpr int kChunksInFlight = 3;

// Thrown on the reader thread when the consumer stops it while it waits for input.
struct ReaderStopped {};

struct ReadResult {
  std::size_t bytes;
  bool at_end;  // the input has ended
};

// Waits until `fd` has input (or its end) and returns true, or returns false once `stop_fd` is
// readable. `timeout_ms` as for poll(2); false too when it expires.
bool wait_for_input(int fd, int stop_fd, int timeout_ms, const std::string& name) {
  pollfd fds[2] = {{fd, POLLIN, 0}, {stop_fd, POLLIN, 0}};
  for (;;) {
    const int ready = poll(fds, 2, timeout_ms);
    if (ready < 0) {
      if (errno == EINTR) continue;
      throw IoError(with_errno("cannot wait for " + name));
    }
    if (fds[1].revents != 0) throw ReaderStopped{};
    return ready > 0;
  }
}

// Reads into `buffer` until it is full or the input ends. From a pipe or terminal it also returns
// once the bytes that have arrived are taken, so that a live stream is worked on as it comes
// rather than when megabytes have piled up, and waits for more input only in poll(2), where the
// consumer can stop it (`stop_fd`) at any time.
ReadResult read_some(int fd, bool regular, int stop_fd, char* buffer, std::size_t length,
                     const std::string& name) {
  std::size_t got = 0;
  while (got < length) {
    if (!regular && !wait_for_input(fd, stop_fd, got == 0 ? -1 : 0, name)) break;
    const ssize_t n = read(fd, buffer + got, length - got);
    if (n < 0) {
      if (errno == EINTR) continue;
      throw IoError(with_errno("cannot read " + name));
    }
    if (n == 0) return {got, true};
    got += static_cast<std::size_t>(n);
  }
  return {got, false};
}

}  // namespace

ChunkReader::ChunkReader(std::vector<std::string> inputs, RecordFormat format,
                         std::size_t chunk_bytes, InputPosition start, bool skip_empty,
                         bool hash_contents)
    : format_(format),
      start_(start),
      skip_empty_(skip_empty),
      hash_contents_(hash_contents && start.input == 0 && start.offset == 0),
      chunk_bytes_(chunk_bytes) {
  if (inputs.empty()) inputs.push_back("-");
  // Each input is checked here, so that a missing one fails before any output exists, but
  // opened only when its turn comes: thousands of inputs need one descriptor, not thousands.
  for (const std::string& path : inputs) {
    const bool is_stdin = path == "-";
    const std::string name = is_stdin ? "stdin" : path;
    struct stat st {};
    const int status = is_stdin ? fstat(STDIN_FILENO, &st) : stat(path.c_str(), &st);
    if (status != 0 || (!is_stdin && access(path.c_str(), R_OK) != 0)) {
      throw IoError(with_errno("cannot open input " + name));
    }
    paths_.push_back(path);
    names_.push_back(name);
    if (S_ISDIR(st.st_mode)) throw IoError("cannot read input " + name + ": it is a directory");
    regular_.push_back(S_ISREG(st.st_mode));
    if (S_ISREG(st.st_mode)) {
      // Stdin may stand anywhere in its file ({ read -r header; bulkbloom ...; } < file): what
      // is left from there is the input.
      const off_t at = is_stdin ? std::max<off_t>(lseek(STDIN_FILENO, 0, SEEK_CUR), 0) : 0;
      const std::uint64_t size = st.st_size > at ? static_cast<std::uint64_t>(st.st_size - at) : 0;
      sizes_.push_back(size);
      if (size == 0 && !skip_empty_) throw DataError("input " + name + " is empty");
      if (size == 0) std::fprintf(stderr, "bulkbloom: skipping empty input %s\n", name.c_str());
      if (format_.kind == FormatKind::u64 && size % 8 != 0) {
        throw DataError("input " + name + " has " + std::to_string(size) +
                        " bytes, not a multiple of 8: it is not a u64 file");
      }
    } else {
      sizes_.push_back(0);
    }
  }
  if (start_.input > paths_.size()) throw DataError("resume position is past the last input");
  contents_.resize(paths_.size());
  if (pipe2(stop_pipe_, O_CLOEXEC) != 0) throw IoError(with_errno("cannot create a pipe"));
  for (int i = 0; i < kChunksInFlight; ++i) {
    auto chunk = std::make_unique<Chunk>();
    chunk->storage.resize(chunk_bytes / sizeof(std::uint64_t));
    free_.push(std::move(chunk));
  }
  thread_ = std::thread([this] { run(); });
}

ChunkReader::~ChunkReader() {
  // Wakes the reader wherever it waits: for input (the stop pipe), for a free chunk or for room
  // (the queues). Without the pipe, an error here would wait for an idle stdin's next byte.
  const char stop = 0;
  while (write(stop_pipe_[1], &stop, 1) < 0 && errno == EINTR) {
  }
  free_.close();
  filled_.close();
  thread_.join();
  close(stop_pipe_[0]);
  close(stop_pipe_[1]);
}

ChunkReader::OpenInput::OpenInput(const std::string& path, const std::string& name)
    : fd(path == "-" ? STDIN_FILENO : open(path.c_str(), O_RDONLY | O_CLOEXEC)) {
  if (fd < 0) throw IoError(with_errno("cannot open input " + name));
}

ChunkReader::OpenInput::~OpenInput() {
  if (fd != STDIN_FILENO) close(fd);
}

bool ChunkReader::total_known() const {
  return std::all_of(regular_.begin(), regular_.end(), [](bool regular) { return regular; });
}

std::uint64_t ChunkReader::total_bytes() const {
  return std::accumulate(sizes_.begin(), sizes_.end(), std::uint64_t{0});
}

std::string ChunkReader::sample_first_input(std::size_t limit) const {
  for (std::size_t i = 0; i < paths_.size() && regular_[i]; ++i) {
    const OpenInput input(paths_[i], names_[i]);
    std::string sample(limit, '\0');
    const ssize_t n = pread(input.fd, sample.data(), limit, 0);
    if (n > 0) {
      sample.resize(static_cast<std::size_t>(n));
      return sample;
    }
  }
  return {};
}

std::unique_ptr<Chunk> ChunkReader::take_free_chunk() {
  auto chunk = free_.pop();
  return chunk ? std::move(*chunk) : nullptr;
}

void ChunkReader::run() {
  try {
    std::unique_ptr<Chunk> current = take_free_chunk();
    for (std::size_t input = start_.input; current && input < paths_.size(); ++input) {
      read_input(input, input == start_.input ? start_.offset : 0, current);
    }
  } catch (const ReaderStopped&) {
    // The consumer is gone: nothing to report.
  } catch (...) {
    error_ = std::current_exception();
  }
  filled_.close();
}

void ChunkReader::read_input(std::size_t input, std::uint64_t offset,
                             std::unique_ptr<Chunk>& current) {
  const std::string& name = names_[input];
  const OpenInput opened(paths_[input], name);
  const int fd = opened.fd;
  if (regular_[input]) posix_fadvise(fd, 0, 0, POSIX_FADV_SEQUENTIAL);
  if (offset > 0 && lseek(fd, static_cast<off_t>(offset), SEEK_SET) < 0) {
    throw IoError(with_errno("cannot seek in " + name + " to resume"));
  }
  std::optional<detail::DataChecksum> checksum;
  if (hash_contents_ && regular_[input]) checksum.emplace();
  const std::uint64_t start_offset = offset;
  // A file, not stdin: stdin may start anywhere in a file (a shell's `read` leaves it after a
  // line), and is read from there.
  const bool file = regular_[input] && paths_[input] != "-";
  if (file) {
    offset = map_windows(input, fd, offset, current, checksum);
    if (!current) return;  // the consumer has stopped
    if (offset != start_offset && lseek(fd, static_cast<off_t>(offset), SEEK_SET) < 0) {
      throw IoError(with_errno("cannot seek in " + name));
    }
  }
  current->size = 0;
  current->position = {input, offset};
  std::uint64_t total_read = offset - start_offset;
  for (;;) {
    const auto [got, at_end] =
        read_some(fd, regular_[input], stop_pipe_[0], current->bytes() + current->size,
                  current->capacity() - current->size, name);
    if (checksum) {
      checksum->update(reinterpret_cast<const std::byte*>(current->bytes() + current->size), got);
    }
    current->size += got;
    total_read += got;
    // A file that grows is read to its end; one cut short is being rewritten, and its records
    // are not those the run was sized for, nor any the user can name. (Its size, not the bytes
    // read: a pseudo-file's size says 4096 whatever it holds.)
    struct stat now {};
    if (at_end && file && fstat(fd, &now) == 0 &&
        static_cast<std::uint64_t>(now.st_size) < sizes_[input]) {
      throw shrank(input, static_cast<std::uint64_t>(now.st_size));
    }
    if (at_end && checksum) contents_[input] = InputContent{total_read, checksum->digest()};
    // The end of the whole records in the buffer; the tail waits for the next read.
    std::size_t boundary;
    if (format_.kind == FormatKind::u64) {
      boundary = current->size - current->size % 8;
      if (at_end && boundary != current->size) {
        throw DataError("input " + name + " ends with a partial record: " +
                        std::to_string(start_offset + total_read) +
                        " bytes is not a multiple of 8, so it is not a u64 file");
      }
    } else if (at_end) {
      boundary = current->size;
    } else {
      boundary = complete_records_length(format_, {current->bytes(), current->size});
    }
    if (at_end && total_read == 0 && start_offset == 0 && !skip_empty_) {
      throw DataError("input " + name + " is empty");
    }
    if (boundary == 0) {
      if (at_end) return;
      // One record longer than the buffer: grow it; there is no line-length limit.
      if (current->size == current->capacity()) {
        current->storage.resize(current->storage.size() * 2);
      }
      continue;
    }
    std::unique_ptr<Chunk> next = take_free_chunk();
    if (!next) return;  // the consumer has stopped
    const std::size_t tail = current->size - boundary;
    if (next->capacity() < tail) next->storage.resize(current->storage.size());
    std::memcpy(next->bytes(), current->bytes() + boundary, tail);
    next->size = tail;
    next->position = {input, current->position.offset + boundary};
    current->size = boundary;
    filled_.push(std::move(current));
    current = std::move(next);
    if (at_end) return;
  }
}

std::uint64_t ChunkReader::map_windows(std::size_t input, int fd, std::uint64_t offset,
                                       std::unique_ptr<Chunk>& current,
                                       std::optional<detail::DataChecksum>& checksum) {
  struct stat st {};
  if (fstat(fd, &st) != 0) return offset;
  const auto file_bytes = static_cast<std::uint64_t>(st.st_size);
  // The last chunk's worth is read(): it finds the end, and whatever was appended since.
  while (file_bytes > offset && file_bytes - offset > chunk_bytes_) {
    std::size_t length = chunk_bytes_;
    std::optional<InputWindow> window;
    std::size_t boundary = 0;
    for (;;) {
      window = InputWindow::map(fd, offset, length);
      if (!window) return offset;
      boundary = format_.kind == FormatKind::u64
                     ? length
                     : complete_records_length(format_, {window->data(), length});
      check_window(input, *window);
      if (boundary != 0) break;
      // One record longer than the window: a larger one, or read() for the last of the file.
      if (file_bytes - offset <= 2 * length) return offset;
      length *= 2;
    }
    if (checksum) {
      checksum->update(reinterpret_cast<const std::byte*>(window->data()), boundary);
    } else {
      window->read_ahead();
    }
    check_window(input, *window);
    std::unique_ptr<Chunk> next = take_free_chunk();
    if (!next) {
      current.reset();
      return offset;
    }
    current->window = std::move(window);
    current->size = boundary;
    current->position = {input, offset};
    filled_.push(std::move(current));
    current = std::move(next);
    offset += boundary;
  }
  return offset;
}

void ChunkReader::check_window(std::size_t input, const InputWindow& window) const {
  // A cut inside the window's last page leaves zeros there and no fault: the size tells.
  if (const auto size = window.file_size(); size && *size < window.end_offset()) {
    throw shrank(input, *size);
  }
  if (const auto lost = window.fault_offset()) {
    throw IoError("cannot read input " + names_[input] + ": its page at byte " +
                  std::to_string(*lost) + " could not be read (an I/O error)");
  }
}

IoError ChunkReader::shrank(std::size_t input, std::uint64_t size) const {
  return IoError("input " + names_[input] + " shrank from " + std::to_string(sizes_[input]) +
                 " to " + std::to_string(size) +
                 " bytes while it was read: something is rewriting it");
}

std::unique_ptr<Chunk> ChunkReader::next() {
  auto chunk = filled_.pop();
  if (chunk) return std::move(*chunk);
  if (error_) std::rethrow_exception(error_);
  return nullptr;
}

void ChunkReader::recycle(std::unique_ptr<Chunk> chunk) {
  std::optional<InputWindow> window = std::move(chunk->window);
  chunk->window.reset();
  const std::size_t input = chunk->position.input;
  free_.push(std::move(chunk));
  if (window) check_window(input, *window);
}

}  // namespace bulkbloom::cli
