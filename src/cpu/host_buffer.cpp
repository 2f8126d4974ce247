#include "cpu/host_buffer.hpp"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <condition_variable>
#include <cstring>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "bulkbloom/error.hpp"
#include "bulkbloom/memory.hpp"

namespace bulkbloom {

struct PrefaultedMemory::State {
  // The memory goes in pieces of a huge page, the unit the kernel zeroes.
  static constexpr std::uint64_t kPiece = std::uint64_t{2} << 20;
  // What a piece is: free, being faulted in by a thread, faulted in, or taken (partly or wholly)
  // by a filter. Only a free piece is faulted in and only a piece no thread is faulting in is
  // taken, so no thread writes where a filter's bits are.
  enum : std::uint8_t { kFree, kFaulting, kFaulted, kTaken };

  std::byte* base = nullptr;
  std::uint64_t bytes = 0;
  std::unique_ptr<std::atomic<std::uint8_t>[]> pieces;
  // The bytes filters took, from `base` on (written by the thread of the Use).
  std::atomic<std::uint64_t> taken{0};
  // The pieces the threads looked at.
  std::atomic<std::uint64_t> next{0};
  std::atomic<bool> stop{false};
  std::vector<std::thread> threads;
  mutable std::mutex mutex;
  mutable std::condition_variable idle;
  unsigned running = 0;

  std::uint64_t piece_count() const { return (bytes + kPiece - 1) / kPiece; }

  // Faults pieces in, back to front (filters take them front to back, faulting in what they
  // write themselves, so that the two meet once), until every piece was looked at or stop is set. A
  // write, not MADV_POPULATE_WRITE: a page fault takes only its mapping's lock, where madvise holds
  // the process's memory map for a whole piece and stalled the task thread's own mmap calls
  // (RocksDB reads) for seconds.
  void fault_in() {
    const auto page = static_cast<std::uint64_t>(sysconf(_SC_PAGESIZE));
    while (!stop.load(std::memory_order_relaxed)) {
      const std::uint64_t looked = next.fetch_add(1);
      if (looked >= piece_count()) break;
      const std::uint64_t i = piece_count() - 1 - looked;
      std::uint8_t expected = kFree;
      if (!pieces[i].compare_exchange_strong(expected, kFaulting)) continue;
      volatile std::byte* at = base + i * kPiece;
      const std::uint64_t length = std::min(kPiece, bytes - i * kPiece);
      for (std::uint64_t offset = 0; offset < length; offset += page) at[offset] = std::byte{0};
      pieces[i].store(kFaulted);
      pieces[i].notify_all();
    }
    const std::lock_guard lock(mutex);
    if (--running == 0) idle.notify_all();
  }

  // Marks the pieces under [from, from + length) taken, each once no thread faults it in.
  void take(std::uint64_t from, std::uint64_t length) {
    for (std::uint64_t i = from / kPiece; i * kPiece < from + length; ++i) {
      std::uint8_t seen = pieces[i].load();
      while (seen != kTaken && !pieces[i].compare_exchange_weak(seen, kTaken)) {
        if (seen == kFaulting) {
          pieces[i].wait(kFaulting);
          seen = pieces[i].load();
        }
      }
    }
  }
};

namespace {
thread_local PrefaultedMemory* current_prefaulted = nullptr;
}  // namespace

}  // namespace bulkbloom

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

std::uint64_t page_bytes() {
  return static_cast<std::uint64_t>(sysconf(_SC_PAGESIZE));
}

}  // namespace

// Takes the next `bytes` (whole pages) of the PrefaultedMemory in use on this thread, or null when
// there is none or it has no room.
std::byte* take_prefaulted(PrefaultedMemory::State* state, std::uint64_t bytes) {
  if (state == nullptr) return nullptr;
  const std::uint64_t page = page_bytes();
  const std::uint64_t rounded = (bytes + page - 1) / page * page;
  const std::uint64_t from = state->taken.load();
  if (rounded > state->bytes - from) return nullptr;
  state->take(from, rounded);
  state->taken.store(from + rounded);
  return state->base + from;
}

HostBuffer::HostBuffer(std::uint64_t bytes) : size_(bytes) {
  // The kernel would grant an over-committed mapping and kill the process on first touch;
  // refuse up front what can never fit.
  const std::uint64_t physical = physical_memory_bytes();
  if (physical != 0 && bytes > physical) {
    throw AllocationError("cannot allocate a " + std::to_string(bytes) + "-byte (" + gib(bytes) +
                          ") filter: this machine has " + gib(physical) + " of memory");
  }
  if (std::byte* piece = take_prefaulted(PrefaultedMemory::current_state(), bytes)) {
    const std::uint64_t page = page_bytes();
    mapping_ = piece;
    mapping_bytes_ = static_cast<std::size_t>((bytes + page - 1) / page * page);
    data_ = piece;
    return;
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

namespace bulkbloom {

PrefaultedMemory::PrefaultedMemory(std::uint64_t bytes, unsigned threads)
    : state_(std::make_unique<State>()) {
  const std::uint64_t page = detail::page_bytes();
  const std::uint64_t huge = std::uint64_t{2} << 20;
  const std::uint64_t rounded = (bytes + page - 1) / page * page;
  if (rounded == 0) return;
  // Mapped a huge page longer, then trimmed to start on a 2 MiB boundary: a filter taking the
  // first piece is where a HostBuffer of its own would have been.
  const std::size_t mapped = static_cast<std::size_t>(rounded + huge);
  void* p = mmap(nullptr, mapped, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) {
    const int err = errno;
    throw AllocationError("cannot map " + std::to_string(bytes) +
                          " bytes of memory to fault in: " + std::strerror(err));
  }
  const auto raw = reinterpret_cast<std::uintptr_t>(p);
  const std::uintptr_t start = (raw + huge - 1) & ~(huge - 1);
  if (start > raw) munmap(p, start - raw);
  const std::uintptr_t end = start + rounded;
  if (raw + mapped > end) munmap(reinterpret_cast<void*>(end), raw + mapped - end);
  state_->base = reinterpret_cast<std::byte*>(start);
  state_->bytes = rounded;
  state_->pieces = std::make_unique<std::atomic<std::uint8_t>[]>(state_->piece_count());
  // As a HostBuffer of its own: random access over a large filter misses the TLB with 4 KiB pages.
  madvise(state_->base, static_cast<std::size_t>(rounded), MADV_HUGEPAGE);
  const unsigned count = threads != 0 ? threads : std::max(1u, std::thread::hardware_concurrency());
  state_->running = count;
  try {
    for (unsigned i = 0; i < count; ++i) {
      state_->threads.emplace_back([state = state_.get()] { state->fault_in(); });
    }
  } catch (...) {
    // Fewer threads than asked (none may start): the filters fault in what they write.
    const std::lock_guard lock(state_->mutex);
    state_->running = static_cast<unsigned>(state_->threads.size());
  }
}

PrefaultedMemory::~PrefaultedMemory() {
  state_->stop = true;
  for (std::thread& t : state_->threads) t.join();
  const std::uint64_t taken = state_->taken.load();
  if (taken < state_->bytes) {
    munmap(state_->base + taken, static_cast<std::size_t>(state_->bytes - taken));
  }
}

std::uint64_t PrefaultedMemory::available() const {
  return state_->bytes - state_->taken.load();
}

void PrefaultedMemory::wait() const {
  std::unique_lock lock(state_->mutex);
  state_->idle.wait(lock, [&] { return state_->running == 0; });
}

PrefaultedMemory::State* PrefaultedMemory::current_state() {
  return current_prefaulted != nullptr ? current_prefaulted->state_.get() : nullptr;
}

PrefaultedMemory::Use::Use(PrefaultedMemory& memory) : previous_(current_prefaulted) {
  current_prefaulted = &memory;
}

PrefaultedMemory::Use::~Use() {
  current_prefaulted = previous_;
}

}  // namespace bulkbloom
