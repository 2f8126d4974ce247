// The CUDA runtime calls and kernel launches the CUDA engine makes, behind an interface in plain
// C++: the real one (cuda_device.cu) calls CUDA; the tests' fake runs each stream's work late and
// in random order on the host, as a non-blocking stream may, to check the engine's ordering.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "bulkbloom/layout.hpp"
#include "registry/engine.hpp"

namespace bulkbloom::detail {

/// Opaque handles: cudaStream_t and cudaEvent_t on a real device. A null stream is CUDA's
/// default stream.
using StreamHandle = void*;
using EventHandle = void*;

/// Partial sums the whole-filter reductions write (one per CUDA block); the host adds them up in
/// a fixed order, so results do not depend on scheduling.
inline constexpr unsigned kReductionPartials = 1024;

/// What a pointer handed to the device-pointer API is.
enum class PointerKind : std::uint8_t { device, host_mapped, host_unmapped, unknown };

/// Every call throws DeviceError (AllocationError for allocations) when CUDA reports a failure,
/// naming the call. Work queued on a stream runs in stream order, possibly long after the call
/// returns; only the synchronising calls wait for it.
class DeviceRuntime {
 public:
  virtual ~DeviceRuntime() = default;

  /// Empty for the real CUDA runtime; otherwise what stands in for the device (the tests' fake).
  /// Every figure measured through a stand-in carries its name, so that none passes for a GPU's.
  virtual std::string stand_in() const = 0;

  virtual int current_device() = 0;
  virtual void set_device(int device) = 0;

  /// `what` names the allocation in the error message.
  virtual void* allocate_device(std::size_t bytes, const char* what) = 0;
  virtual void free_device(void* p) noexcept = 0;
  virtual void* allocate_pinned(std::size_t bytes, const char* what) = 0;
  virtual void free_pinned(void* p) noexcept = 0;
  /// For PointerKind::device, `*device` gets the device the memory is on, or -1 for managed
  /// memory, which every device reaches.
  virtual PointerKind pointer_kind(const void* p, int* device) = 0;

  virtual StreamHandle create_stream() = 0;
  virtual void destroy_stream(StreamHandle stream) noexcept = 0;
  /// An event for synchronisation only (no timestamp: cheaper to record).
  virtual EventHandle create_event() = 0;
  /// An event that also takes the device's timestamp when it completes, for elapsed_ms().
  virtual EventHandle create_timing_event() = 0;
  virtual void destroy_event(EventHandle event) noexcept = 0;
  virtual void record(EventHandle event, StreamHandle stream) = 0;
  /// Work queued on `stream` after this call waits for the event's latest record.
  virtual void wait(StreamHandle stream, EventHandle event) = 0;
  virtual void synchronize(EventHandle event) = 0;
  /// Device time between two completed timing events' latest records, in milliseconds.
  virtual double elapsed_ms(EventHandle start, EventHandle stop) = 0;
  virtual void synchronize_stream(StreamHandle stream) = 0;
  /// Waits for all queued work and reports nothing: for clean-up after another error.
  virtual void drain(StreamHandle stream) noexcept = 0;

  /// Copies between any two of host, pinned and device memory.
  virtual void copy(void* dst, const void* src, std::size_t bytes, StreamHandle stream) = 0;
  virtual void zero(void* dst, std::size_t bytes, StreamHandle stream) = 0;

  // Kernels; `bits` is the filter's device memory (layout.size_bytes() bytes).
  virtual void insert(const Layout& layout, std::byte* bits, const std::uint64_t* keys,
                      std::uint32_t n, KeyMode mode, StreamHandle stream) = 0;
  virtual void contains(const Layout& layout, const std::byte* bits, const std::uint64_t* keys,
                        std::uint32_t n, KeyMode mode, std::uint8_t* out, StreamHandle stream) = 0;
  /// Exact (exact_insert_if_absent.hpp); adds the number of new keys to `*new_count` if not null.
  virtual void insert_if_absent(const Layout& layout, std::byte* bits, const std::uint64_t* keys,
                                std::uint32_t n, KeyMode mode, std::uint8_t* is_new,
                                std::uint64_t* new_count, StreamHandle stream) = 0;
  /// keys[i] = splitmix64_mix(seed + (i + 1) * kSplitMix64Gamma) for i < n: the i-th value of
  /// SplitMix64(seed) (core/splitmix64.hpp), generated in place, so the host can check them.
  virtual void fill_keys(std::uint64_t* keys, std::uint64_t n, std::uint64_t seed,
                         StreamHandle stream) = 0;
  /// `n` loads of whole blocks of the layout's size at random block indices of `bits` (no keys,
  /// no hashing of keys): the device's random-read limit for contains over this filter. Writes
  /// to `*sink` only in the (practically impossible) case that keeps the loads from being elided.
  virtual void random_block_reads(const Layout& layout, const std::byte* bits, std::uint32_t n,
                                  std::uint64_t* sink, StreamHandle stream) = 0;
  /// bits[i] = bits[i] op other[i] for the `bytes` (a multiple of 8) at `bits` and `other`.
  virtual void combine(std::byte* bits, const std::byte* other, std::uint64_t bytes, CombineOp op,
                       StreamHandle stream) = 0;
  /// Writes kReductionPartials partial popcounts of the filter's bits.
  virtual void popcount(const Layout& layout, const std::byte* bits, std::uint64_t* partials,
                        StreamHandle stream) = 0;
  /// Writes kReductionPartials partial sums over blocks of the product of each word's fraction
  /// of set bits.
  virtual void fpr_sum(const Layout& layout, const std::byte* bits, double* partials,
                       StreamHandle stream) = 0;
};

}  // namespace bulkbloom::detail
