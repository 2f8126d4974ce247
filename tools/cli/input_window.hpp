// A read-only window of a regular input file mapped into memory, so that the engine reads the
// records from the page cache in place instead of from a copy (bench/DECISIONS.md "CLI end to
// end", item 4).
//
// A file that shrinks while it is mapped makes any thread touching a page past its new end die
// of SIGBUS (an I/O error in a mapped page does the same). The window's SIGBUS handler instead
// maps zeros over the rest of the window and notes the fault; the thread carries on reading
// zeros, and whoever hands the window back asks fault_offset() and fails the run before anything
// read through the window is committed.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>

namespace bulkbloom::cli {

class InputWindow {
 public:
  /// Maps `length` bytes of `fd` from `offset` and reads them into the page cache (on this
  /// thread, so that the engine's threads do not wait on the disk). nullopt where the file
  /// cannot be mapped (a file system without mmap, no address space, too many windows at once):
  /// the caller reads the bytes instead. The window must lie within the file's size at the call.
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
  /// The file offset of the first page a thread found missing (the file shrank, or the page
  /// could not be read), if any: from there on the window holds zeros, not the file's bytes.
  std::optional<std::uint64_t> fault_offset() const;

 private:
  InputWindow(int slot, void* mapping, std::size_t mapped_bytes, const char* data,
              std::size_t length, std::uint64_t mapping_offset);
  void release();

  int slot_ = -1;  // the window's entry in the SIGBUS handler's table
  void* mapping_ = nullptr;
  std::size_t mapped_bytes_ = 0;
  const char* data_ = nullptr;
  std::size_t length_ = 0;
  std::uint64_t mapping_offset_ = 0;  // the file offset of mapping_ (page aligned)
};

}  // namespace bulkbloom::cli
