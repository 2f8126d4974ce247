// The GPU benchmark's door (device_bench.hpp): the CUDA engine measures, and the answers it gave
// are replayed on the CPU backend before any figure is returned.
#include "registry/device_bench.hpp"

#include <algorithm>
#include <span>

#include "bulkbloom/error.hpp"
#include "core/filter_access.hpp"
#include "core/splitmix64.hpp"
#include "cuda/cuda_engine.hpp"

namespace bulkbloom::detail {
namespace {

// "contains differs from the CPU at key 17 of 4096 (device 0, CPU 1)", or "" when equal.
std::string first_difference(const char* call, std::span<const std::uint8_t> device,
                             std::span<const std::uint8_t> cpu) {
  for (std::size_t i = 0; i < cpu.size(); ++i) {
    if (device[i] != cpu[i]) {
      return std::string(call) + " differs from the CPU at key " + std::to_string(i) + " of " +
             std::to_string(cpu.size()) + " (device " + std::to_string(device[i]) + ", CPU " +
             std::to_string(cpu[i]) + ")";
    }
  }
  return "";
}

// Replays the sample's calls (DeviceSample) on the CPU backend; throws DeviceError on the first
// difference.
void check_sample(const Filter& filter, const DeviceBenchSettings& settings,
                  const DeviceSample& sample) {
  const std::string where =
      "the GPU benchmark on " + filter.implementation() + " (" + filter.layout().describe() + "): ";
  const std::size_t n = settings.verify_keys, half = n / 2;
  if (sample.keys.size() != n || sample.contains.size() != n || sample.is_new.size() != n) {
    throw DeviceError(where + "the check's sample is incomplete: no figures");
  }
  SplitMix64 expected(settings.seed);
  for (std::size_t i = 0; i < n; ++i) {
    if (sample.keys[i] != expected.next()) {
      throw DeviceError(where + "key " + std::to_string(i) +
                        " generated on the device is not SplitMix64's: no figures");
    }
  }
  // A fresh CPU filter for each half, not clear(): a large one's untouched pages cost nothing,
  // where clearing would write every byte of it.
  Options on_cpu;
  on_cpu.backend = Backend::cpu;
  const std::span<const std::uint64_t> keys(sample.keys);
  std::vector<std::uint8_t> flags(n);
  std::string difference;
  {
    Filter cpu(filter.layout(), on_cpu);
    cpu.insert(keys.first(half));
    cpu.contains(keys, flags);
    difference = first_difference("contains", sample.contains, flags);
  }
  if (difference.empty()) {
    Filter cpu(filter.layout(), on_cpu);
    cpu.insert(keys.first(half / 2));
    std::vector<std::uint64_t> batch(keys.begin(), keys.begin() + half);
    batch.insert(batch.end(), keys.begin(), keys.begin() + half);
    const std::uint64_t count = cpu.insert_if_absent(batch, flags);
    difference = first_difference("insert_if_absent", sample.is_new, flags);
    if (difference.empty() && count != sample.new_count) {
      difference = "insert_if_absent counted " + std::to_string(sample.new_count) +
                   " new keys, the CPU " + std::to_string(count);
    }
  }
  if (!difference.empty()) throw DeviceError(where + difference + ": no figures");
}

}  // namespace

std::string device_bench_unavailable() {
#if BULKBLOOM_HAVE_CUDA
  // A build with the backend always lists its CUDA entry, usable or not (backend.cpp).
  const std::vector<Implementation> all = implementations();
  const auto cuda = std::find_if(all.begin(), all.end(), [](const Implementation& impl) {
    return impl.backend == Backend::cuda;
  });
  return cuda->usable ? "" : cuda->unusable_reason;
#else
  return "this build of bulkbloom does not include the CUDA backend";
#endif
}

DeviceBench bench_device(Filter& filter, const DeviceBenchSettings& settings) {
  auto* engine = dynamic_cast<CudaEngine*>(&FilterAccess::engine(filter));
  if (engine == nullptr) {
    throw BackendUnavailable(
        "the GPU benchmark needs a filter on the CUDA backend; this one runs " +
        filter.implementation());
  }
  DeviceSample sample;
  DeviceBench result = engine->benchmark(settings, sample);
  check_sample(filter, settings, sample);
  result.verified_keys = settings.verify_keys;
  return result;
}

}  // namespace bulkbloom::detail
