// libFuzzer target: every byte string fed to the filter-image and Parquet readers must give a
// filter or a FormatError, never a crash, a leak or an out-of-bounds access.
#include <bulkbloom/bulkbloom.hpp>

#include <cstddef>
#include <cstdint>
#include <span>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::span<const std::byte> bytes(reinterpret_cast<const std::byte*>(data), size);
  try {
    bulkbloom::FileState state;
    const bulkbloom::Filter filter = bulkbloom::deserialize(bytes, &state);
    (void)filter.popcount();
  } catch (const bulkbloom::FormatError&) {
  }
  try {
    const bulkbloom::Filter filter = bulkbloom::from_parquet(bytes);
    (void)filter.popcount();
  } catch (const bulkbloom::FormatError&) {
  }
  return 0;
}
