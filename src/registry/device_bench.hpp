// The GPU's figures for `bulkbloom bench` and bench/gpu: a filter on the CUDA backend timed with
// its keys in device memory (CUDA events around each call) beside the device's random block-read
// rate over the filter's own bits, and with its keys in pinned host memory through PCIe (end to
// end). Plain C++: the CLI reaches it through the registry, which checks the device's answers
// against the CPU before any figure leaves it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "bulkbloom/filter.hpp"

namespace bulkbloom::detail {

struct DeviceBenchSettings {
  std::uint32_t keys = std::uint32_t{1} << 24;  ///< Keys per timed call (at least verify_keys).
  unsigned repetitions = 5;                     ///< Timed runs per figure, after one warm-up.
  std::uint32_t verify_keys = 4096;             ///< Keys whose answers are checked on the CPU.
  std::uint64_t seed = 1;                       ///< Of the keys: SplitMix64(seed)'s values.
};

/// One operation's rate: keys/s of each timed run and their median.
struct DeviceRate {
  std::string operation;  ///< insert, contains or insert_if_absent (exact)
  std::vector<double> runs;
  double keys_per_s = 0;
};

struct DeviceBench {
  std::string implementation;  ///< The filter's, as Filter::implementation() names it.
  /// Empty when the real CUDA runtime measured it; else the stand-in that did (a test's fake),
  /// whose figures are no GPU's.
  std::string stand_in;
  std::uint64_t filter_bytes = 0;
  std::uint32_t block_bytes = 0;  ///< Bytes one key's block spans: what one probe read loads.
  std::uint32_t keys = 0;         ///< Per timed call.
  /// Random whole-block loads/s over the filter's bits (thread i loads the block at a hash of
  /// i): the limit of contains, one block a key, on this device at this size.
  DeviceRate random_block_reads;
  /// Keys in device memory, each call timed by CUDA events on the filter's stream: insert (into
  /// the cleared filter), contains (half of the keys present) and exact insert_if_absent (half
  /// present, into the filter holding the inserted keys).
  std::vector<DeviceRate> device_resident;
  /// The same calls on the same keys in pinned host memory through Filter's host-span calls,
  /// timed by the wall clock: copies over PCIe both ways, launches and synchronisation included.
  std::vector<DeviceRate> host_resident;
  std::uint32_t verified_keys = 0;  ///< Keys whose answers matched the CPU backend's.
};

/// The keys and answers of the check a device benchmark ends with, for the registry to replay on
/// the CPU: on the cleared filter, insert keys[0, n/2), contains of keys[0, n), clear, insert
/// keys[0, n/4), then insert_if_absent of keys[0, n/2) followed by the same n/2 keys again.
struct DeviceSample {
  std::vector<std::uint64_t> keys;  ///< Read back from the device: SplitMix64(seed)'s first n.
  std::vector<std::uint8_t> contains;
  std::vector<std::uint8_t> is_new;  ///< Of the n keys of the insert_if_absent batch.
  std::uint64_t new_count = 0;
};

/// Why the GPU figures cannot be measured in this process, or "" when they can: this build has no
/// CUDA backend, or the registry's reason its CUDA entry is unusable (no device, too old, ...).
std::string device_bench_unavailable();

/// Measures `filter`, which must run on the CUDA backend (else BackendUnavailable), and checks
/// the device's answers on settings.verify_keys keys against the CPU backend's for the same
/// layout: a mismatch, or keys that are not the ones asked for, throws DeviceError and no figure
/// is returned. Leaves the filter's contents unspecified; no other call on it may run meanwhile.
DeviceBench bench_device(Filter& filter, const DeviceBenchSettings& settings);

}  // namespace bulkbloom::detail
