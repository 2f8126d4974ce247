// The timing of device-resident calls and the random block-read probe, in one place: the CUDA
// engine's benchmark (registry/device_bench.hpp, for `bulkbloom bench`) and bench/gpu both time
// with it. Plain C++ over DeviceRuntime, so the tests run it against a fake runtime.
#pragma once

#include <functional>
#include <vector>

#include "cuda/device_runtime.hpp"
#include "registry/device_bench.hpp"

namespace bulkbloom::detail {

class CudaEngine;

/// Device milliseconds of `reps` timed runs of `body` (which queues work on `stream`), after one
/// untimed warm-up run: two timing events recorded on `stream` around each run, `before` (if
/// any) queued untimed ahead of each. Returns when the work is done.
std::vector<double> time_on_stream(DeviceRuntime& rt, StreamHandle stream, unsigned reps,
                                   const std::function<void()>& body,
                                   const std::function<void()>& before = {});

/// A rate for each of `ms` (milliseconds of `items` items) and their median.
DeviceRate rate_of(const char* operation, std::uint64_t items, const std::vector<double>& ms);

/// Random block reads/s of `n` reads over `bits` (the layout's size), timed as time_on_stream.
DeviceRate probe_random_block_reads(DeviceRuntime& rt, StreamHandle stream, const Layout& layout,
                                    const std::byte* bits, std::uint32_t n, unsigned reps);

/// CudaEngine::benchmark for an engine whose bits are `bits` and whose kernels run on `stream`
/// of `rt` (the engine's own runtime, on its device): the device-resident calls straight on the
/// runtime, the host-resident ones through the engine's host-span calls.
DeviceBench measure_device_bench(CudaEngine& engine, DeviceRuntime& rt, StreamHandle stream,
                                 const Layout& layout, std::byte* bits,
                                 const DeviceBenchSettings& settings, DeviceSample& sample);

}  // namespace bulkbloom::detail
