// A read-only window of a regular input file mapped into memory, so that the engine reads the
// records from the page cache in place instead of from a copy (bench/DECISIONS.md "CLI end to
// end", item 4).
//
// A file that shrinks while it is mapped loses its pages past the new end: the rest of the page
// holding the end reads as zeros, and a thread touching a later page dies of SIGBUS (an I/O
// error in a mapped page does the same). The window's SIGBUS handler instead maps zeros over the
// rest of the window and notes the fault; the thread carries on reading zeros, and whoever hands
// the window back asks file_size() and fault_offset() and fails the run before anything read
// through the window is committed.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>

namespace bulkbloom::cli {

class InputWindow {
 public:
  /// Maps `length` bytes of `fd` from `offset` and reads them into the page cache (on this
  /// thread, so that the engine's threads do not wait on the disk; before Linux 5.14, the first
  /// pass over the window reads them, read_ahead() or the caller's own). nullopt where the file
  /// cannot be mapped (a file system without mmap, no address space, too many windows at once)
  /// or the window is not within the file any more: the caller reads the bytes instead. The
  /// window keeps a descriptor of its own for file_size().
  static std::optional<InputWindow> map(int fd, std::uint64_t offset, std::size_t length);

  InputWindow(InputWindow&& other) noexcept;
  InputWindow& operator=(InputWindow&& other) noexcept;
  InputWindow(const InputWindow&) = delete;
  InputWindow& operator=(const InputWindow&) = delete;
  ~InputWindow();

  /// Reads the window through once, on this thread, so that its bytes are in the caches when
  /// another thread reads them next (a fault is caught as any other: fault_offset()).
  void read_ahead() const;

  /// The byte at `offset` of the file.
  const char* data() const { return data_; }
  std::size_t size() const { return length_; }
  /// The file offset just past the window.
  std::uint64_t end_offset() const { return offset_ + length_; }
  /// The file's size now; nullopt if it cannot be read. Below end_offset(), the window's bytes
  /// from that size on are zeros, not the file's.
  std::optional<std::uint64_t> file_size() const;
  /// The file offset of the first page a thread found missing (the file shrank, or the page
  /// could not be read), if any: from there on the window holds zeros, not the file's bytes.
  std::optional<std::uint64_t> fault_offset() const;

 private:
  InputWindow(int slot, int fd, void* mapping, std::size_t mapped_bytes, std::uint64_t offset,
              std::size_t length);
  void release();

  int slot_ = -1;  // the window's entry in the SIGBUS handler's table
  int fd_ = -1;    // the file's, the window's own: the reader closes its own when it has read
  void* mapping_ = nullptr;
  std::size_t mapped_bytes_ = 0;
  std::uint64_t offset_ = 0;  // of data_ in the file; mapping_ starts at the page holding it
  const char* data_ = nullptr;
  std::size_t length_ = 0;
};

}  // namespace bulkbloom::cli
