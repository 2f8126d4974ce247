// PrefaultedMemory: CPU filters made under a Use take their memory from it, pages faulted in by
// its threads before any filter writes them, and keep it after it is gone.
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <vector>

#include "bulkbloom/filter.hpp"
#include "bulkbloom/memory.hpp"
#include "core/filter_access.hpp"
#include "registry/engine.hpp"

namespace bulkbloom::test {
namespace {

constexpr std::uint64_t kMiB = std::uint64_t{1} << 20;

Options on_cpu() {
  Options options;
  options.backend = Backend::cpu;
  return options;
}

Layout of_bytes(std::uint64_t bytes) {
  Layout layout;
  layout.num_blocks = bytes / block_bytes(layout.shape);
  return layout;
}

const std::byte* bits_of(const Filter& filter) {
  return detail::FilterAccess::engine(filter).host_bytes();
}

// The pages of [data, data + bytes) that are in memory.
std::uint64_t resident_pages(const std::byte* data, std::uint64_t bytes) {
  const auto page = static_cast<std::uint64_t>(sysconf(_SC_PAGESIZE));
  std::vector<unsigned char> in(bytes / page);
  EXPECT_EQ(mincore(const_cast<std::byte*>(data), bytes, in.data()), 0);
  std::uint64_t count = 0;
  for (unsigned char c : in) count += c & 1;
  return count;
}

TEST(PrefaultedMemory, FiltersMadeUnderAUseTakeItInTurn) {
  PrefaultedMemory memory(8 * kMiB, 2);
  EXPECT_EQ(memory.available(), 8 * kMiB);
  const Layout three = of_bytes(3 * kMiB + 64);  // takes whole pages: 3 MiB and one page
  const auto page = static_cast<std::uint64_t>(sysconf(_SC_PAGESIZE));
  std::vector<Filter> filters;
  {
    const PrefaultedMemory::Use use(memory);
    filters.emplace_back(three, on_cpu());
    EXPECT_EQ(memory.available(), 8 * kMiB - 3 * kMiB - page);
    filters.emplace_back(three, on_cpu());
    EXPECT_EQ(bits_of(filters[1]), bits_of(filters[0]) + 3 * kMiB + page) << "the next piece";
    // Too large for what is left: its own memory, and the rest stays.
    filters.emplace_back(three, on_cpu());
    EXPECT_EQ(memory.available(), 8 * kMiB - 2 * (3 * kMiB + page));
  }
  filters.emplace_back(three, on_cpu());  // no Use in scope
  EXPECT_EQ(memory.available(), 8 * kMiB - 2 * (3 * kMiB + page));

  for (std::size_t i = 0; i < filters.size(); ++i) {
    const std::byte* bits = bits_of(filters[i]);
    for (std::uint64_t at = 0; at < three.size_bytes(); ++at) {
      ASSERT_EQ(bits[at], std::byte{0}) << "filter " << i << " byte " << at;
    }
  }
  std::vector<std::uint64_t> keys(20000);
  for (std::uint64_t i = 0; i < keys.size(); ++i) keys[i] = i * 0x9E3779B97F4A7C15u;
  for (Filter& f : filters) f.insert(keys);
  std::vector<std::uint8_t> found(keys.size());
  for (const Filter& f : filters) {
    f.contains(keys, found);
    for (std::uint8_t hit : found) ASSERT_EQ(hit, 1);
  }
}

TEST(PrefaultedMemory, ItsThreadsFaultThePagesInBeforeAnyWrite) {
  const std::uint64_t bytes = 64 * kMiB;
  PrefaultedMemory memory(bytes);
  memory.wait();
  const PrefaultedMemory::Use use(memory);
  const Filter filter(of_bytes(bytes), on_cpu());
  ASSERT_EQ(memory.available(), 0u);
  const auto page = static_cast<std::uint64_t>(sysconf(_SC_PAGESIZE));
  EXPECT_EQ(resident_pages(bits_of(filter), bytes), bytes / page);
  // A filter of its own memory is faulted in only where it is written (none here).
  const Filter own(of_bytes(bytes), on_cpu());
  EXPECT_EQ(resident_pages(bits_of(own), bytes), 0u);
}

TEST(PrefaultedMemory, FiltersOutliveItAndNestedUsesTakeTheInnermost) {
  const Layout one = of_bytes(kMiB);
  std::vector<Filter> filters;
  {
    PrefaultedMemory outer(4 * kMiB, 1);
    {
      PrefaultedMemory inner(4 * kMiB, 1);
      const PrefaultedMemory::Use use_outer(outer);
      {
        const PrefaultedMemory::Use use_inner(inner);
        filters.emplace_back(one, on_cpu());
      }
      filters.emplace_back(one, on_cpu());
      EXPECT_EQ(inner.available(), 3 * kMiB);
      EXPECT_EQ(outer.available(), 3 * kMiB);
    }
  }
  std::vector<std::uint64_t> keys(5000);
  for (std::uint64_t i = 0; i < keys.size(); ++i) keys[i] = i + 1;
  std::vector<std::uint8_t> found(keys.size());
  for (Filter& f : filters) {
    f.insert(keys);
    f.contains(keys, found);
    for (std::uint8_t hit : found) ASSERT_EQ(hit, 1);
  }
}

}  // namespace
}  // namespace bulkbloom::test
