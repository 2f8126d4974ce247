#include "cli/input_window.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <cerrno>
#include <csignal>
#include <mutex>
#include <utility>

#ifndef MADV_POPULATE_READ
#define MADV_POPULATE_READ 22  // Linux 5.14; older kernels answer EINVAL
#endif

namespace bulkbloom::cli {
namespace {

// The windows mapped now, for the SIGBUS handler, in fixed storage (a handler may not allocate).
// A reader has three chunks in flight and maps one more; the rest serve tests and several readers.
constexpr int kWindowSlots = 16;

struct WindowSlot {
  std::atomic<bool> used{false};
  // Odd while begin and end change, so that the handler never pairs one window's begin with the
  // next one's end.
  std::atomic<std::uintptr_t> version{0};
  std::atomic<std::uintptr_t> begin{0};  // 0 while empty
  std::atomic<std::uintptr_t> end{0};
  std::atomic<std::uintptr_t> fault{0};  // the first faulting address, 0 for none
};

static_assert(std::atomic<std::uintptr_t>::is_always_lock_free &&
                  std::atomic<bool>::is_always_lock_free,
              "the SIGBUS handler reads the slots: only lock-free atomics are safe there");

std::array<WindowSlot, kWindowSlots> g_windows;
std::uintptr_t g_page_bytes = 0;
struct sigaction g_previous_sigbus {};

void publish(WindowSlot& slot, std::uintptr_t begin, std::uintptr_t end) {
  ++slot.version;
  slot.begin = begin;
  slot.end = end;
  ++slot.version;
}

// For a fault at `address` in a window: maps zeros from the lost page to the window's end, so
// that the thread's read completes and each later page does not fault again, notes the fault for
// the window's owner, who fails the run, and returns true.
bool zero_rest_of_window(std::uintptr_t address) {
  for (WindowSlot& slot : g_windows) {
    const std::uintptr_t version = slot.version.load();
    const std::uintptr_t begin = slot.begin.load();
    const std::uintptr_t end = slot.end.load();
    if (version % 2 != 0 || slot.version.load() != version) continue;
    if (begin == 0 || address < begin || address >= end) continue;
    const std::uintptr_t page = address & ~(g_page_bytes - 1);
    void* zeros = mmap(reinterpret_cast<void*>(page), end - page, PROT_READ,
                       MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0);
    if (zeros == MAP_FAILED) return false;
    std::uintptr_t none = 0;
    slot.fault.compare_exchange_strong(none, address);
    return true;
  }
  return false;
}

extern "C" void on_sigbus(int signal_number, siginfo_t* info, void* context) {
  // Only a fault has an address; a SIGBUS sent by kill() holds a pid and uid there.
  const bool fault = info->si_code > 0;
  if (fault && zero_rest_of_window(reinterpret_cast<std::uintptr_t>(info->si_addr))) return;
  // Not a window's: what SIGBUS did before the first window.
  if (g_previous_sigbus.sa_flags & SA_SIGINFO) {
    if (g_previous_sigbus.sa_sigaction != nullptr) {
      g_previous_sigbus.sa_sigaction(signal_number, info, context);
      return;
    }
  } else if (g_previous_sigbus.sa_handler != SIG_DFL && g_previous_sigbus.sa_handler != SIG_IGN) {
    g_previous_sigbus.sa_handler(signal_number);
    return;
  }
  std::signal(SIGBUS, SIG_DFL);
  // A fault repeats on return and kills with SIGBUS; a SIGBUS sent by kill() must be raised again.
  if (!fault) std::raise(SIGBUS);
}

void install_sigbus_handler() {
  static std::once_flag installed;
  std::call_once(installed, [] {
    g_page_bytes = static_cast<std::uintptr_t>(sysconf(_SC_PAGESIZE));
    struct sigaction action {};
    action.sa_sigaction = on_sigbus;
    action.sa_flags = SA_SIGINFO;
    sigemptyset(&action.sa_mask);
    sigaction(SIGBUS, &action, &g_previous_sigbus);
  });
}

int claim_slot() {
  for (int i = 0; i < kWindowSlots; ++i) {
    bool expected = false;
    if (g_windows[i].used.compare_exchange_strong(expected, true)) return i;
  }
  return -1;
}

}  // namespace

std::optional<InputWindow> InputWindow::map(int fd, std::uint64_t offset, std::size_t length) {
  if (length == 0) return std::nullopt;
  install_sigbus_handler();
  const int own_fd = fcntl(fd, F_DUPFD_CLOEXEC, 0);
  if (own_fd < 0) return std::nullopt;
  // Past the end, each page would be a fault to catch (populating refuses them, but only from
  // Linux 5.14).
  struct stat st {};
  if (fstat(own_fd, &st) != 0 || static_cast<std::uint64_t>(st.st_size) < offset + length) {
    close(own_fd);
    return std::nullopt;
  }
  const int slot = claim_slot();
  if (slot < 0) {
    close(own_fd);
    return std::nullopt;
  }
  const std::uint64_t mapping_offset = offset & ~std::uint64_t{g_page_bytes - 1};
  const std::size_t mapped_bytes = static_cast<std::size_t>(offset - mapping_offset) + length;
  void* mapping =
      mmap(nullptr, mapped_bytes, PROT_READ, MAP_PRIVATE, fd, static_cast<off_t>(mapping_offset));
  if (mapping == MAP_FAILED) {
    close(own_fd);
    g_windows[slot].used = false;
    return std::nullopt;
  }
  WindowSlot& entry = g_windows[slot];
  entry.fault = 0;
  const auto begin = reinterpret_cast<std::uintptr_t>(mapping);
  publish(entry, begin, begin + mapped_bytes);
  InputWindow window(slot, own_fd, mapping, mapped_bytes, offset, length);
  // Large readahead for the pages, read here rather than on the engine's threads' first touch.
  // A kernel before 5.14 answers EINVAL: the pages then come in with the caller's first pass over
  // the window, on this thread too (read_ahead, or the checksum).
  madvise(mapping, mapped_bytes, MADV_SEQUENTIAL);
  if (madvise(mapping, mapped_bytes, MADV_POPULATE_READ) != 0 && errno != EINVAL) {
    return std::nullopt;  // cut since, or unreadable: read() will say
  }
  return window;
}

void InputWindow::read_ahead() const {
  // One load a cache line: the lines stay in this core's caches and the last-level one it shares,
  // where the engine's hashing finds them, as it found the copy read() made.
  constexpr std::size_t kLineBytes = 64;
  std::uint64_t sink = 0;
  const auto* bytes = static_cast<const volatile std::uint8_t*>(mapping_);
  for (std::size_t at = 0; at < mapped_bytes_; at += kLineBytes) sink += bytes[at];
  static_cast<void>(sink);
}

InputWindow::InputWindow(int slot, int fd, void* mapping, std::size_t mapped_bytes,
                         std::uint64_t offset, std::size_t length)
    : slot_(slot),
      fd_(fd),
      mapping_(mapping),
      mapped_bytes_(mapped_bytes),
      offset_(offset),
      data_(static_cast<const char*>(mapping) + (mapped_bytes - length)),
      length_(length) {}

InputWindow::InputWindow(InputWindow&& other) noexcept
    : slot_(std::exchange(other.slot_, -1)),
      fd_(std::exchange(other.fd_, -1)),
      mapping_(std::exchange(other.mapping_, nullptr)),
      mapped_bytes_(std::exchange(other.mapped_bytes_, 0)),
      offset_(other.offset_),
      data_(std::exchange(other.data_, nullptr)),
      length_(std::exchange(other.length_, 0)) {}

InputWindow& InputWindow::operator=(InputWindow&& other) noexcept {
  if (this != &other) {
    release();
    slot_ = std::exchange(other.slot_, -1);
    fd_ = std::exchange(other.fd_, -1);
    mapping_ = std::exchange(other.mapping_, nullptr);
    mapped_bytes_ = std::exchange(other.mapped_bytes_, 0);
    offset_ = other.offset_;
    data_ = std::exchange(other.data_, nullptr);
    length_ = std::exchange(other.length_, 0);
  }
  return *this;
}

InputWindow::~InputWindow() {
  release();
}

void InputWindow::release() {
  if (slot_ < 0) return;
  WindowSlot& entry = g_windows[slot_];
  // Out of the handler's table before the addresses can be reused by another mapping.
  publish(entry, 0, 0);
  munmap(mapping_, mapped_bytes_);
  close(fd_);
  entry.used = false;
  slot_ = -1;
}

std::optional<std::uint64_t> InputWindow::file_size() const {
  struct stat st {};
  if (fstat(fd_, &st) != 0) return std::nullopt;
  return static_cast<std::uint64_t>(st.st_size);
}

std::optional<std::uint64_t> InputWindow::fault_offset() const {
  if (slot_ < 0) return std::nullopt;
  const std::uintptr_t address = g_windows[slot_].fault.load();
  if (address == 0) return std::nullopt;
  const std::uintptr_t page = address & ~(g_page_bytes - 1);
  const std::uint64_t mapping_offset = offset_ - (mapped_bytes_ - length_);
  return mapping_offset + (page - reinterpret_cast<std::uintptr_t>(mapping_));
}

}  // namespace bulkbloom::cli
