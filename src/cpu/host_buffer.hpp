// Zeroed, block-aligned host memory for a filter's bits; large buffers ask for 2 MiB pages.
#pragma once

#include <cstddef>
#include <cstdint>

namespace bulkbloom::detail {

class HostBuffer {
 public:
  /// Maps `bytes` zeroed bytes aligned to 2 MiB (transparent huge pages requested when the
  /// buffer spans at least one). Throws AllocationError naming the size when it cannot.
  explicit HostBuffer(std::uint64_t bytes);
  /// Maps `bytes` bytes of the open file `fd` from `offset` (a multiple of the page size)
  /// privately: writes copy the touched pages and never reach the file. Throws AllocationError.
  static HostBuffer map_file_private(int fd, std::uint64_t offset, std::uint64_t bytes);

  HostBuffer(HostBuffer&& other) noexcept;
  HostBuffer& operator=(HostBuffer&& other) noexcept;
  HostBuffer(const HostBuffer&) = delete;
  HostBuffer& operator=(const HostBuffer&) = delete;
  ~HostBuffer();

  std::byte* data() const { return data_; }
  std::uint64_t size() const { return size_; }

 private:
  HostBuffer() = default;
  void release() noexcept;

  std::byte* data_ = nullptr;
  std::uint64_t size_ = 0;
  void* mapping_ = nullptr;
  std::size_t mapping_bytes_ = 0;
};

}  // namespace bulkbloom::detail
