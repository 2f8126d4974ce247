// Dedups a generated stream of 10M event ids with 12% repeats and reports what it found against
// the exact answer.
#include <bulkbloom/bulkbloom.hpp>

#include <chrono>
#include <cstdio>
#include <vector>

int main() {
  constexpr std::uint64_t kDistinct = 8'800'000;
  constexpr std::uint64_t kTotal = 10'000'000;
  // Distinct ids 0..kDistinct-1 scattered by an odd multiplier, then repeats of earlier ids.
  std::vector<std::uint64_t> ids(kTotal);
  std::uint64_t state = 42;
  for (std::uint64_t i = 0; i < kTotal; ++i) {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    const std::uint64_t id = i < kDistinct ? i : (state >> 11) % kDistinct;
    ids[i] = id * 0x9E3779B97F4A7C15ull;
  }
  // Interleave: swap each repeat into a random earlier-or-later slot so repeats are spread out.
  for (std::uint64_t i = kTotal - 1; i > 0; --i) {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    std::swap(ids[i], ids[(state >> 11) % (i + 1)]);
  }

  auto filter = bulkbloom::Filter::for_capacity(kDistinct, 0.001);
  std::vector<std::uint8_t> is_new(ids.size());
  const auto start = std::chrono::steady_clock::now();
  const std::uint64_t unique = filter.insert_if_absent(ids, is_new);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();

  std::printf("filter:            %s on %s\n", filter.layout().describe().c_str(),
              filter.implementation().c_str());
  std::printf("records:           %llu\n", static_cast<unsigned long long>(kTotal));
  std::printf("reported unique:   %llu (exact: %llu)\n", static_cast<unsigned long long>(unique),
              static_cast<unsigned long long>(kDistinct));
  // The k-th new id meets a filter holding k ids: sum the model's FPR over the fill.
  double expected_wrong = 0.0;
  constexpr int kSteps = 1000;
  for (int s = 0; s < kSteps; ++s) {
    expected_wrong += filter.expected_fpr(kDistinct * (s + 0.5) / kSteps) * kDistinct / kSteps;
  }
  std::printf("wrongly dropped:   %llu (model expects about %.0f)\n",
              static_cast<unsigned long long>(kDistinct - unique), expected_wrong);
  std::printf("estimated count:   %.0f\n", filter.estimated_count());
  std::printf("throughput:        %.1f M keys/s\n", kTotal / seconds / 1e6);
  return 0;
}
