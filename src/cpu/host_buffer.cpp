#include "cpu/host_buffer.hpp"

#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>
#include <utility>

#include "bulkbloom/error.hpp"

namespace bulkbloom::detail {
namespace {

constexpr std::uint64_t kHugePage = std::uint64_t{2} << 20;

std::uint64_t physical_memory_bytes() {
  const long pages = sysconf(_SC_PHYS_PAGES);
  const long page_size = sysconf(_SC_PAGESIZE);
  return pages > 0 && page_size > 0 ? std::uint64_t(pages) * std::uint64_t(page_size) : 0;
}

std::string gib(std::uint64_t bytes) {
  return std::to_string(static_cast<double>(bytes) / double(1ull << 30)).substr(0, 6) + " GiB";
}

}  // namespace

HostBuffer::HostBuffer(std::uint64_t bytes) : size_(bytes) {
  // The kernel would grant an over-committed mapping and kill the process on first touch;
  // refuse up front what can never fit.
  const std::uint64_t physical = physical_memory_bytes();
  if (physical != 0 && bytes > physical) {
    throw AllocationError("cannot allocate a " + std::to_string(bytes) + "-byte (" + gib(bytes) +
                          ") filter: this machine has " + gib(physical) + " of memory");
  }
  // Over-map by one huge page so the bits can start on a 2 MiB boundary.
  mapping_bytes_ = static_cast<std::size_t>(bytes + (bytes >= kHugePage ? kHugePage : 0));
  void* p =
      mmap(nullptr, mapping_bytes_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) {
    const int err = errno;
    throw AllocationError("cannot allocate a " + std::to_string(bytes) + "-byte (" + gib(bytes) +
                          ") filter: " + std::strerror(err));
  }
  mapping_ = p;
  auto address = reinterpret_cast<std::uintptr_t>(p);
  if (bytes >= kHugePage) {
    address = (address + kHugePage - 1) & ~(kHugePage - 1);
    // Random access over a large filter misses the TLB on nearly every key with 4 KiB pages.
    madvise(reinterpret_cast<void*>(address), static_cast<std::size_t>(bytes), MADV_HUGEPAGE);
  }
  data_ = reinterpret_cast<std::byte*>(address);
}

HostBuffer HostBuffer::map_file_private(int fd, std::uint64_t offset, std::uint64_t bytes) {
  HostBuffer buffer;
  buffer.size_ = bytes;
  buffer.mapping_bytes_ = static_cast<std::size_t>(bytes);
  void* p = mmap(nullptr, buffer.mapping_bytes_, PROT_READ | PROT_WRITE, MAP_PRIVATE, fd,
                 static_cast<off_t>(offset));
  if (p == MAP_FAILED) {
    const int err = errno;
    throw AllocationError("cannot map " + std::to_string(bytes) +
                          " bytes of a filter file: " + std::strerror(err));
  }
  buffer.mapping_ = p;
  buffer.data_ = static_cast<std::byte*>(p);
  return buffer;
}

HostBuffer::HostBuffer(HostBuffer&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)),
      size_(std::exchange(other.size_, 0)),
      mapping_(std::exchange(other.mapping_, nullptr)),
      mapping_bytes_(std::exchange(other.mapping_bytes_, 0)) {}

HostBuffer& HostBuffer::operator=(HostBuffer&& other) noexcept {
  if (this != &other) {
    release();
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
    mapping_ = std::exchange(other.mapping_, nullptr);
    mapping_bytes_ = std::exchange(other.mapping_bytes_, 0);
  }
  return *this;
}

HostBuffer::~HostBuffer() {
  release();
}

void HostBuffer::release() noexcept {
  if (mapping_ != nullptr) munmap(mapping_, mapping_bytes_);
  mapping_ = nullptr;
  data_ = nullptr;
}

}  // namespace bulkbloom::detail
