// SplitMix64 (Steele, Lea and Flood), the one definition shared by the tests, the benchmarks and
// the CLI's generator: a fixed-seed stream of well-mixed 64-bit values.
#pragma once

#include <cstdint>

#include "bulkbloom/detail/block_math.hpp"  // BULKBLOOM_HOST_DEVICE

namespace bulkbloom::detail {

/// The stream's step between states (the golden ratio in 64-bit fixed point).
inline constexpr std::uint64_t kSplitMix64Gamma = 0x9E3779B97F4A7C15ull;

/// SplitMix64's output function: a bijection of 64-bit values, so distinct inputs stay distinct.
/// Also device code: the CUDA runtime generates benchmark keys with it (DeviceRuntime::fill_keys).
BULKBLOOM_HOST_DEVICE constexpr std::uint64_t splitmix64_mix(std::uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

class SplitMix64 {
 public:
  explicit constexpr SplitMix64(std::uint64_t seed) : state_(seed) {}
  constexpr std::uint64_t next() { return splitmix64_mix(state_ += kSplitMix64Gamma); }

 private:
  std::uint64_t state_;
};

}  // namespace bulkbloom::detail
