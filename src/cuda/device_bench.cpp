// The device benchmark's measurements (device_bench.hpp); the registry checks their answers.
#include "cuda/device_bench.hpp"

#include <algorithm>
#include <chrono>
#include <exception>
#include <span>
#include <stdexcept>
#include <string>

#include "bulkbloom/error.hpp"
#include "cuda/cuda_engine.hpp"
#include "cuda/device_buffer.hpp"

namespace bulkbloom::detail {
namespace {

constexpr KeyMode kMode = KeyMode::hash_with_layout;

double median_of(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  const std::size_t n = values.size();
  return n % 2 == 1 ? values[n / 2] : (values[n / 2 - 1] + values[n / 2]) / 2;
}

// Two timing events for the scope.
class TimingEvents {
 public:
  explicit TimingEvents(DeviceRuntime& rt) : rt_(rt) {
    start = rt.create_timing_event();
    try {
      stop = rt.create_timing_event();
    } catch (...) {
      rt.destroy_event(start);
      throw;
    }
  }
  TimingEvents(const TimingEvents&) = delete;
  TimingEvents& operator=(const TimingEvents&) = delete;
  ~TimingEvents() {
    rt_.destroy_event(start);
    rt_.destroy_event(stop);
  }
  EventHandle start = nullptr;
  EventHandle stop = nullptr;

 private:
  DeviceRuntime& rt_;
};

// Waits for `stream` when the scope is left by an exception, so that no queued work still uses
// the buffers and events declared before it when they go.
class DrainOnThrow {
 public:
  DrainOnThrow(DeviceRuntime& rt, StreamHandle stream) : rt_(rt), stream_(stream) {}
  DrainOnThrow(const DrainOnThrow&) = delete;
  DrainOnThrow& operator=(const DrainOnThrow&) = delete;
  ~DrainOnThrow() {
    if (std::uncaught_exceptions() > exceptions_) rt_.drain(stream_);
  }

 private:
  DeviceRuntime& rt_;
  StreamHandle stream_;
  int exceptions_ = std::uncaught_exceptions();
};

// Wall-clock milliseconds of `reps` runs of `body` after one warm-up, `before` ahead of each.
std::vector<double> wall_ms(unsigned reps, const std::function<void()>& body,
                            const std::function<void()>& before) {
  std::vector<double> ms;
  for (unsigned r = 0; r <= reps; ++r) {
    before();
    const auto start = std::chrono::steady_clock::now();
    body();
    const auto stop = std::chrono::steady_clock::now();
    if (r > 0) ms.push_back(std::chrono::duration<double, std::milli>(stop - start).count());
  }
  return ms;
}

// The device's answers on settings.verify_keys of the keys, for the registry's check
// (DeviceSample says which calls).
void take_sample(DeviceRuntime& rt, StreamHandle stream, const Layout& layout, std::byte* bits,
                 const std::uint64_t* keys, std::uint32_t n, DeviceSample& sample) {
  RuntimeBuffer batch(rt, RuntimeBuffer::Kind::device, std::size_t{n} * 8, "the check's batch");
  RuntimeBuffer flags(rt, RuntimeBuffer::Kind::device, n, "the check's flags");
  RuntimeBuffer count(rt, RuntimeBuffer::Kind::device, 8, "the check's count");
  const DrainOnThrow drain(rt, stream);
  sample.keys.resize(n);
  sample.contains.resize(n);
  sample.is_new.resize(n);
  const std::uint32_t half = n / 2;
  auto* batch_keys = batch.get<std::uint64_t>();
  auto* out = flags.get<std::uint8_t>();
  // Zeroed first, so a call that writes nothing reads back as "absent" everywhere.
  rt.zero(out, n, stream);
  rt.zero(bits, layout.size_bytes(), stream);
  rt.insert(layout, bits, keys, half, kMode, stream);
  rt.contains(layout, bits, keys, n, kMode, out, stream);
  rt.copy(sample.contains.data(), out, n, stream);
  rt.zero(out, n, stream);
  rt.zero(count.get(), 8, stream);
  rt.zero(bits, layout.size_bytes(), stream);
  rt.insert(layout, bits, keys, half / 2, kMode, stream);
  rt.copy(batch_keys, keys, std::size_t{half} * 8, stream);
  rt.copy(batch_keys + half, keys, std::size_t{half} * 8, stream);
  rt.insert_if_absent(layout, bits, batch_keys, 2 * half, kMode, out, count.get<std::uint64_t>(),
                      stream);
  rt.copy(sample.is_new.data(), out, n, stream);
  rt.copy(&sample.new_count, count.get(), 8, stream);
  rt.copy(sample.keys.data(), keys, std::size_t{n} * 8, stream);
  rt.synchronize_stream(stream);
}

}  // namespace

std::vector<double> time_on_stream(DeviceRuntime& rt, StreamHandle stream, unsigned reps,
                                   const std::function<void()>& body,
                                   const std::function<void()>& before) {
  TimingEvents events(rt);
  const DrainOnThrow drain(rt, stream);
  std::vector<double> ms;
  for (unsigned r = 0; r <= reps; ++r) {
    if (before) before();
    rt.record(events.start, stream);
    body();
    rt.record(events.stop, stream);
    rt.synchronize(events.stop);
    if (r > 0) ms.push_back(rt.elapsed_ms(events.start, events.stop));
  }
  return ms;
}

DeviceRate rate_of(const char* operation, std::uint64_t items, const std::vector<double>& ms) {
  DeviceRate rate{operation, {}, 0};
  for (const double t : ms) {
    // No call of a million items takes no time: a timer that says so measured nothing.
    if (!(t > 0)) {
      throw DeviceError(std::string("the timing of ") + operation + " measured " +
                        std::to_string(t) + " ms for " + std::to_string(items) +
                        " items: no figure");
    }
    rate.runs.push_back(static_cast<double>(items) / (t * 1e-3));
  }
  rate.keys_per_s = median_of(rate.runs);
  return rate;
}

DeviceRate probe_random_block_reads(DeviceRuntime& rt, StreamHandle stream, const Layout& layout,
                                    const std::byte* bits, std::uint32_t n, unsigned reps) {
  RuntimeBuffer sink(rt, RuntimeBuffer::Kind::device, 8, "the probe's sink");
  return rate_of("random block reads", n, time_on_stream(rt, stream, reps, [&] {
                   rt.random_block_reads(layout, bits, n, sink.get<std::uint64_t>(), stream);
                 }));
}

DeviceBench measure_device_bench(CudaEngine& engine, DeviceRuntime& rt, StreamHandle stream,
                                 const Layout& layout, std::byte* bits,
                                 const DeviceBenchSettings& settings, DeviceSample& sample) {
  const std::uint32_t n = settings.keys;
  if (settings.verify_keys < 4 || n < settings.verify_keys || settings.repetitions == 0) {
    throw std::invalid_argument("device benchmark: " + std::to_string(n) + " keys per call, " +
                                std::to_string(settings.verify_keys) + " checked, " +
                                std::to_string(settings.repetitions) +
                                " repetitions: needs 4 <= checked <= keys and repetitions >= 1");
  }
  DeviceBench out;
  out.implementation = engine.implementation();
  out.stand_in = rt.stand_in();
  out.filter_bytes = layout.size_bytes();
  out.block_bytes = static_cast<std::uint32_t>(block_bytes(layout.shape));
  out.keys = n;
  const unsigned reps = settings.repetitions;

  // keys[0, n) are inserted; contains and insert_if_absent ask for keys[n/2, n/2 + n), of which
  // the filter holds the first half.
  const std::uint64_t total = std::uint64_t{n} + n / 2;
  RuntimeBuffer keys(rt, RuntimeBuffer::Kind::device, total * 8, "the benchmark's keys");
  RuntimeBuffer flags(rt, RuntimeBuffer::Kind::device, n, "the benchmark's flags");
  RuntimeBuffer pinned(rt, RuntimeBuffer::Kind::pinned, total * 8, "the benchmark's host keys");
  const DrainOnThrow drain(rt, stream);
  auto* inserted = keys.get<std::uint64_t>();
  const std::uint64_t* asked = inserted + n / 2;
  rt.fill_keys(inserted, total, settings.seed, stream);
  const auto clear = [&] { rt.zero(bits, layout.size_bytes(), stream); };
  const auto insert_all = [&] {
    clear();
    rt.insert(layout, bits, inserted, n, kMode, stream);
  };

  out.random_block_reads = probe_random_block_reads(rt, stream, layout, bits, n, reps);
  out.device_resident.push_back(rate_of(
      "insert", n,
      time_on_stream(
          rt, stream, reps, [&] { rt.insert(layout, bits, inserted, n, kMode, stream); }, clear)));
  insert_all();
  out.device_resident.push_back(rate_of("contains", n, time_on_stream(rt, stream, reps, [&] {
                                          rt.contains(layout, bits, asked, n, kMode,
                                                      flags.get<std::uint8_t>(), stream);
                                        })));
  out.device_resident.push_back(rate_of("insert_if_absent", n,
                                        time_on_stream(
                                            rt, stream, reps,
                                            [&] {
                                              rt.insert_if_absent(layout, bits, asked, n, kMode,
                                                                  flags.get<std::uint8_t>(),
                                                                  nullptr, stream);
                                            },
                                            insert_all)));

  // The same calls on the same keys from pinned host memory, through the engine's pipeline.
  rt.copy(pinned.get(), inserted, total * 8, stream);
  rt.synchronize_stream(stream);
  const std::span<const std::uint64_t> host_inserted(pinned.get<std::uint64_t>(), n);
  const std::span<const std::uint64_t> host_asked(pinned.get<std::uint64_t>() + n / 2, n);
  std::vector<std::uint8_t> host_flags(n);
  const auto host_insert_all = [&] {
    engine.clear();
    engine.insert(host_inserted, kMode);
  };
  out.host_resident.push_back(
      rate_of("insert", n,
              wall_ms(
                  reps, [&] { engine.insert(host_inserted, kMode); }, [&] { engine.clear(); })));
  host_insert_all();
  out.host_resident.push_back(
      rate_of("contains", n,
              wall_ms(
                  reps, [&] { engine.contains(host_asked, kMode, host_flags); }, [] {})));
  out.host_resident.push_back(rate_of(
      "insert_if_absent", n,
      wall_ms(
          reps, [&] { engine.insert_if_absent(host_asked, kMode, host_flags); }, host_insert_all)));

  take_sample(rt, stream, layout, bits, inserted, settings.verify_keys, sample);
  return out;
}

}  // namespace bulkbloom::detail
