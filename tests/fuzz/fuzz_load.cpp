// libFuzzer target: every byte string fed to the filter-image, Parquet, grown-filter and
// window-file readers must give a result or a FormatError, never a crash, a leak or an
// out-of-bounds access.
#include <sys/mman.h>
#include <unistd.h>
#include <bulkbloom/bulkbloom.hpp>
#include <bulkbloom/window.hpp>

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

namespace {

// The window reader takes a path: hand it the input through an in-memory file.
void load_as_window_file(const std::uint8_t* data, std::size_t size) {
  const int fd = memfd_create("fuzz-window", MFD_CLOEXEC);
  if (fd < 0) return;
  if (write(fd, data, size) == static_cast<ssize_t>(size)) {
    try {
      const auto window = bulkbloom::load_window("/proc/self/fd/" + std::to_string(fd));
      (void)window;
    } catch (const bulkbloom::FormatError&) {
    }
  }
  close(fd);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::span<const std::byte> bytes(reinterpret_cast<const std::byte*>(data), size);
  try {
    bulkbloom::FileState state;
    const bulkbloom::Filter filter = bulkbloom::load(bytes, &state);
    (void)filter.popcount();
  } catch (const bulkbloom::FormatError&) {
  }
  try {
    const bulkbloom::Filter filter = bulkbloom::from_parquet(bytes);
    (void)filter.popcount();
  } catch (const bulkbloom::FormatError&) {
  }
  try {
    const bulkbloom::GrownFilter grown = bulkbloom::GrownFilter::load(bytes);
    (void)grown.current_fpr();
  } catch (const bulkbloom::FormatError&) {
  }
  load_as_window_file(data, size);
  return 0;
}
