#include <bulkbloom/bulkbloom.hpp>

#include <cstdio>
#include <vector>

int main() {
  // Room for 1M keys at a 0.1% false-positive rate; the shape and size come from the model.
  auto filter = bulkbloom::Filter::for_capacity(1'000'000, 0.001);
  const std::vector<std::uint64_t> ids = {7, 42, 7, 99, 42};
  std::vector<std::uint8_t> is_new(ids.size());
  const auto fresh = filter.insert_if_absent(ids, is_new);  // dedup: 1 = first sighting
  std::printf("%llu new: %d %d %d %d %d\n", static_cast<unsigned long long>(fresh), is_new[0],
              is_new[1], is_new[2], is_new[3], is_new[4]);
  std::printf("contains(42)=%d contains(5)=%d\n", filter.contains(42), filter.contains(5));
  std::printf("%s\n", filter.layout().describe().c_str());
}
