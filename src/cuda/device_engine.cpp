// The CUDA engine's host side: the filter's bits in device memory, host spans streamed through
// pinned buffers in two slots, every kernel on the engine's one stream. Plain C++ over
// DeviceRuntime, so the tests run it against a fake runtime on machines without a GPU.
#include <algorithm>
#include <bit>
#include <cstring>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "bulkbloom/error.hpp"
#include "core/tuning.hpp"
#include "cuda/cuda_engine.hpp"
#include "cuda/device_bench.hpp"
#include "cuda/device_buffer.hpp"

namespace bulkbloom::detail {
namespace {

// Copies host memory with several threads: one thread's memcpy into pinned memory is slower than
// a PCIe 5 link, and the copy sits on the streaming pipeline's critical path.
void parallel_copy(void* dst, const void* src, std::size_t bytes) {
  const unsigned workers = std::min(8u, std::max(1u, std::thread::hardware_concurrency()));
  if (bytes < tuning::kParallelCopyBytes || workers == 1) {
    std::memcpy(dst, src, bytes);
    return;
  }
  const std::size_t piece = (bytes / workers + 63) & ~std::size_t{63};
  std::vector<std::jthread> threads;
  for (unsigned w = 1; w < workers && w * piece < bytes; ++w) {
    const std::size_t begin = w * piece, len = std::min(piece, bytes - begin);
    threads.emplace_back([=] {
      std::memcpy(static_cast<char*>(dst) + begin, static_cast<const char*>(src) + begin, len);
    });
  }
  std::memcpy(dst, src, std::min(piece, bytes));
}

// Makes the filter's device current for the scope, then restores the caller's.
class DeviceScope {
 public:
  DeviceScope(DeviceRuntime& runtime, int device) : runtime_(runtime) {
    previous_ = runtime.current_device();
    if (previous_ != device) runtime.set_device(device);
  }
  DeviceScope(const DeviceScope&) = delete;
  DeviceScope& operator=(const DeviceScope&) = delete;
  ~DeviceScope() {
    try {
      if (runtime_.current_device() != previous_) runtime_.set_device(previous_);
    } catch (...) {
      // Restoring is best effort: the caller's next CUDA call reports a broken context itself.
    }
  }

 private:
  DeviceRuntime& runtime_;
  int previous_ = 0;
};

// Checks that `p` is memory the kernels of a filter on `filter_device` can read and write.
void require_device_pointer(DeviceRuntime& runtime, int filter_device, const void* p,
                            std::size_t alignment, const char* what) {
  if (p == nullptr) {
    throw std::invalid_argument(std::string(what) + " is a null pointer; expected device memory");
  }
  // A misaligned load on the device kills the whole CUDA context, so it never gets there.
  if (reinterpret_cast<std::uintptr_t>(p) % alignment != 0) {
    throw std::invalid_argument(std::string(what) + " is not aligned to " +
                                std::to_string(alignment) + " bytes");
  }
  int owner = -1;
  switch (runtime.pointer_kind(p, &owner)) {
    case PointerKind::device:
      // Another device's memory is reached, if at all, only through peer access and at link
      // speed: refused rather than slow or a fault.
      if (owner >= 0 && owner != filter_device) {
        throw std::invalid_argument(std::string(what) + " is memory of CUDA device " +
                                    std::to_string(owner) + "; this filter is on device " +
                                    std::to_string(filter_device) + ": pass memory of that device");
      }
      return;
    case PointerKind::host_mapped:
      return;
    case PointerKind::host_unmapped:
      throw std::invalid_argument(std::string(what) +
                                  " is pinned host memory that the device sees at another "
                                  "address; pass the device pointer (cudaHostGetDevicePointer)");
    case PointerKind::unknown:
      break;
  }
  throw std::invalid_argument(std::string(what) +
                              " is not device memory (it is host memory or unknown to CUDA); "
                              "pass memory from cudaMalloc or mapped pinned memory, or use the "
                              "Filter calls that take host spans");
}

// One slot of the streaming pipeline: a copy stream and the buffers of one chunk.
struct Slot {
  StreamHandle stream = nullptr;
  EventHandle copied = nullptr;  // the chunk's keys are on the device
  EventHandle done = nullptr;    // its kernel ran and its flags are back in host_flags
  RuntimeBuffer host_keys;
  RuntimeBuffer host_flags;
  RuntimeBuffer keys;
  RuntimeBuffer flags;
};

class DeviceEngine final : public CudaEngine {
 public:
  DeviceEngine(const Layout& layout, std::string name, int device,
               std::unique_ptr<DeviceRuntime> runtime, std::uint32_t chunk_keys)
      : layout_(layout),
        name_(std::move(name)),
        device_(device),
        chunk_keys_(std::bit_floor(std::max<std::uint32_t>(chunk_keys, 1))),
        rt_(std::move(runtime)) {
    DeviceScope scope(*rt_, device_);
    try {
      stream_ = rt_->create_stream();
      computed_ = rt_->create_event();
      caller_ = rt_->create_event();
      for (Slot& slot : slots_) {
        slot.stream = rt_->create_stream();
        slot.copied = rt_->create_event();
        slot.done = rt_->create_event();
      }
      bits_ = RuntimeBuffer(*rt_, RuntimeBuffer::Kind::device, layout.size_bytes(),
                            "the filter's bits");
      partials_ = RuntimeBuffer(*rt_, RuntimeBuffer::Kind::device,
                                kReductionPartials * sizeof(double), "whole-filter sums");
      rt_->zero(bits_.get(), bits_.bytes(), stream_);
      rt_->synchronize_stream(stream_);
    } catch (...) {
      release();
      throw;
    }
  }

  ~DeviceEngine() override {
    try {
      DeviceScope scope(*rt_, device_);
      release();
    } catch (...) {
      release();
    }
  }

  std::string implementation() const override { return name_; }
  unsigned threads() const override { return 1; }

  void insert(std::span<const std::uint64_t> keys, KeyMode mode) override {
    stream_keys(keys, {}, [&](Slot& slot, std::uint32_t n) {
      rt_->insert(layout_, bits_.get<std::byte>(), slot.keys.get<std::uint64_t>(), n, mode,
                  stream_);
    });
  }

  void contains(std::span<const std::uint64_t> keys, KeyMode mode,
                std::span<std::uint8_t> out) const override {
    stream_keys(keys, out, [&](Slot& slot, std::uint32_t n) {
      rt_->contains(layout_, bits_.get<std::byte>(), slot.keys.get<std::uint64_t>(), n, mode,
                    slot.flags.get<std::uint8_t>(), stream_);
    });
  }

  std::uint64_t insert_if_absent(std::span<const std::uint64_t> keys, KeyMode mode,
                                 std::span<std::uint8_t> is_new) override {
    // Counted on the host from the flags, which come back anyway.
    stream_keys(keys, is_new, [&](Slot& slot, std::uint32_t n) {
      rt_->insert_if_absent(layout_, bits_.get<std::byte>(), slot.keys.get<std::uint64_t>(), n,
                            mode, slot.flags.get<std::uint8_t>(), nullptr, stream_);
    });
    std::uint64_t total = 0;
    for (std::uint8_t flag : is_new) total += flag;
    return total;
  }

  void insert_device(const std::uint64_t* keys, std::uint32_t n, void* stream, bool wait) override {
    if (n == 0) return;
    const std::lock_guard hold(mutex_);
    DeviceScope scope(*rt_, device_);
    require_device_pointer(*rt_, device_, keys, alignof(std::uint64_t), "keys");
    on_caller_stream(stream, wait, [&] {
      rt_->insert(layout_, bits_.get<std::byte>(), keys, n, KeyMode::hash_with_layout, stream_);
    });
  }

  void contains_device(const std::uint64_t* keys, std::uint32_t n, std::uint8_t* out, void* stream,
                       bool wait) const override {
    if (n == 0) return;
    const std::lock_guard hold(mutex_);
    DeviceScope scope(*rt_, device_);
    require_device_pointer(*rt_, device_, keys, alignof(std::uint64_t), "keys");
    require_device_pointer(*rt_, device_, out, 1, "out");
    on_caller_stream(stream, wait, [&] {
      rt_->contains(layout_, bits_.get<std::byte>(), keys, n, KeyMode::hash_with_layout, out,
                    stream_);
    });
  }

  void insert_if_absent_device(const std::uint64_t* keys, std::uint32_t n, std::uint8_t* is_new,
                               std::uint64_t* new_count, void* stream, bool wait) override {
    if (n == 0) return;
    const std::lock_guard hold(mutex_);
    DeviceScope scope(*rt_, device_);
    require_device_pointer(*rt_, device_, keys, alignof(std::uint64_t), "keys");
    require_device_pointer(*rt_, device_, is_new, 1, "is_new");
    if (new_count != nullptr) {
      require_device_pointer(*rt_, device_, new_count, alignof(std::uint64_t), "new_count");
    }
    on_caller_stream(stream, wait, [&] {
      rt_->insert_if_absent(layout_, bits_.get<std::byte>(), keys, n, KeyMode::hash_with_layout,
                            is_new, new_count, stream_);
    });
  }

  DeviceBench benchmark(const DeviceBenchSettings& settings, DeviceSample& sample) override {
    DeviceScope scope(*rt_, device_);
    try {
      return measure_device_bench(*this, *rt_, stream_, layout_, bits_.get<std::byte>(), settings,
                                  sample);
    } catch (...) {
      drain_all();
      throw;
    }
  }

  void combine(std::span<const std::byte> other, CombineOp op) override {
    whole_filter_call([&] {
      // Through one bounded device buffer, kept for later calls, so combining never needs a
      // second filter's worth of GPU memory.
      if (combine_staging_.get() == nullptr) {
        combine_staging_ = RuntimeBuffer(
            *rt_, RuntimeBuffer::Kind::device,
            std::min<std::uint64_t>(other.size(), tuning::kCombineChunkBytes), "merging filters");
      }
      const std::uint64_t chunk = combine_staging_.bytes();
      for (std::uint64_t offset = 0; offset < other.size(); offset += chunk) {
        const std::uint64_t bytes = std::min(chunk, other.size() - offset);
        rt_->copy(combine_staging_.get(), other.data() + offset, bytes, stream_);
        rt_->combine(bits_.get<std::byte>() + offset, combine_staging_.get<std::byte>(), bytes, op,
                     stream_);
      }
    });
  }

  void clear() override {
    whole_filter_call([&] { rt_->zero(bits_.get(), bits_.bytes(), stream_); });
  }

  std::uint64_t popcount() const override {
    std::vector<std::uint64_t> partials(kReductionPartials);
    whole_filter_call([&] {
      rt_->popcount(layout_, bits_.get<std::byte>(), partials_.get<std::uint64_t>(), stream_);
      rt_->copy(partials.data(), partials_.get(), partials.size() * sizeof(partials[0]), stream_);
    });
    std::uint64_t total = 0;
    for (std::uint64_t v : partials) total += v;
    return total;
  }

  double current_fpr() const override {
    std::vector<double> partials(kReductionPartials);
    whole_filter_call([&] {
      rt_->fpr_sum(layout_, bits_.get<std::byte>(), partials_.get<double>(), stream_);
      rt_->copy(partials.data(), partials_.get(), partials.size() * sizeof(partials[0]), stream_);
    });
    double total = 0;
    for (double v : partials) total += v;
    return total / static_cast<double>(layout_.num_blocks);
  }

  const std::byte* host_bytes() const override { return nullptr; }
  FilterRef view() const override { return FilterRef(bits_.get<std::byte>(), layout_); }

  void copy_bytes_to(std::span<std::byte> out) const override {
    whole_filter_call([&] { rt_->copy(out.data(), bits_.get(), bits_.bytes(), stream_); });
  }
  void copy_bytes_from(std::span<const std::byte> in) override {
    whole_filter_call([&] { rt_->copy(bits_.get(), in.data(), bits_.bytes(), stream_); });
  }

 private:
  // Waits for every stream, frees every buffer and destroys streams and events; never throws.
  void release() noexcept {
    if (stream_ != nullptr) rt_->drain(stream_);
    for (Slot& slot : slots_) {
      if (slot.stream != nullptr) rt_->drain(slot.stream);
    }
    for (Slot& slot : slots_) {
      slot.host_keys.reset();
      slot.host_flags.reset();
      slot.keys.reset();
      slot.flags.reset();
      for (EventHandle* e : {&slot.copied, &slot.done}) {
        if (*e != nullptr) rt_->destroy_event(std::exchange(*e, nullptr));
      }
      if (slot.stream != nullptr) rt_->destroy_stream(std::exchange(slot.stream, nullptr));
    }
    combine_staging_.reset();
    partials_.reset();
    bits_.reset();
    for (EventHandle* e : {&computed_, &caller_}) {
      if (*e != nullptr) rt_->destroy_event(std::exchange(*e, nullptr));
    }
    if (stream_ != nullptr) rt_->destroy_stream(std::exchange(stream_, nullptr));
  }

  // Waits for all queued work, so that no copy or kernel still reads or writes a buffer when an
  // exception leaves the call.
  void drain_all() const noexcept {
    rt_->drain(stream_);
    for (const Slot& slot : slots_) rt_->drain(slot.stream);
  }

  // Orders what is queued on stream_ next after the work already queued on the default (null)
  // stream, where a caller's own kernel on view() goes when it names no stream: stream_ is
  // non-blocking, so without this a save() right after such a kernel could copy the bits before
  // it ran. The device-pointer calls order after their caller's stream instead (on_caller_stream).
  void after_default_stream() const {
    rt_->record(caller_, nullptr);
    rt_->wait(stream_, caller_);
  }

  // Runs `queue()` (which queues work on stream_) under the lock on the filter's device, after
  // the default stream's work, and returns when the work is done.
  template <typename Queue>
  void whole_filter_call(Queue&& queue) const {
    const std::lock_guard hold(mutex_);
    DeviceScope scope(*rt_, device_);
    try {
      after_default_stream();
      queue();
      rt_->synchronize_stream(stream_);
    } catch (...) {
      drain_all();
      throw;
    }
  }

  // Queues `launch()` on stream_ between the caller's stream's earlier and later work.
  template <typename Launch>
  void on_caller_stream(void* caller, bool wait, Launch&& launch) const {
    try {
      rt_->record(caller_, caller);
      rt_->wait(stream_, caller_);
      launch();
      if (wait) {
        rt_->synchronize_stream(stream_);
      } else {
        rt_->record(computed_, stream_);
        rt_->wait(caller, computed_);
      }
    } catch (...) {
      drain_all();
      throw;
    }
  }

  // Makes both slots able to hold min(n, chunk_keys_) keys. The old buffers go first, so old and
  // new are never held together; the new ones are kept only if all of them could be had.
  void prepare_slots(std::size_t n) const {
    const auto want = static_cast<std::uint32_t>(
        n >= chunk_keys_ ? chunk_keys_ : std::bit_ceil(static_cast<std::uint32_t>(n)));
    if (slot_keys_ >= want) return;
    slot_keys_ = 0;
    for (Slot& slot : slots_) {
      slot.host_keys.reset();
      slot.host_flags.reset();
      slot.keys.reset();
      slot.flags.reset();
    }
    RuntimeBuffer fresh[2][4];
    for (RuntimeBuffer(&b)[4] : fresh) {
      b[0] = RuntimeBuffer(*rt_, RuntimeBuffer::Kind::pinned, want * sizeof(std::uint64_t),
                           "staged keys");
      b[1] = RuntimeBuffer(*rt_, RuntimeBuffer::Kind::pinned, want, "staged flags");
      b[2] = RuntimeBuffer(*rt_, RuntimeBuffer::Kind::device, want * sizeof(std::uint64_t),
                           "streamed keys");
      b[3] = RuntimeBuffer(*rt_, RuntimeBuffer::Kind::device, want, "streamed flags");
    }
    for (int s = 0; s < 2; ++s) {
      slots_[s].host_keys = std::move(fresh[s][0]);
      slots_[s].host_flags = std::move(fresh[s][1]);
      slots_[s].keys = std::move(fresh[s][2]);
      slots_[s].flags = std::move(fresh[s][3]);
    }
    slot_keys_ = want;
  }

  // Runs `launch(slot, n)` (on stream_, after the default stream's work) over `keys` chunk by
  // chunk, alternating between the two slots: while one chunk's kernel runs, the next chunk's keys
  // cross the bus on the other slot's stream and the host stages the one after. Kernels run one
  // after another on stream_, so each chunk sees every earlier chunk's bits. Flags (if `out` is not
  // empty) come back the same way. Returns when all work is done.
  template <typename Launch>
  void stream_keys(std::span<const std::uint64_t> keys, std::span<std::uint8_t> out,
                   Launch&& launch) const {
    if (keys.empty()) return;
    const std::lock_guard hold(mutex_);
    DeviceScope scope(*rt_, device_);
    struct Pending {
      std::size_t offset = 0;
      std::uint32_t n = 0;
    };
    Pending pending[2];
    auto finish = [&](int s) {
      if (pending[s].n == 0) return;
      rt_->synchronize(slots_[s].done);
      if (!out.empty()) {
        std::memcpy(out.data() + pending[s].offset, slots_[s].host_flags.get<std::uint8_t>(),
                    pending[s].n);
      }
      pending[s].n = 0;
    };
    try {
      after_default_stream();
      prepare_slots(keys.size());
      // Pinned input (registered or cudaMallocHost) is copied from directly.
      int owner = -1;
      const PointerKind kind = rt_->pointer_kind(keys.data(), &owner);
      const bool pinned = kind == PointerKind::host_mapped || kind == PointerKind::host_unmapped;
      std::size_t chunk_index = 0;
      for (std::size_t offset = 0; offset < keys.size(); offset += slot_keys_, ++chunk_index) {
        const int s = static_cast<int>(chunk_index % 2);
        Slot& slot = slots_[s];
        finish(s);
        const auto n =
            static_cast<std::uint32_t>(std::min<std::size_t>(slot_keys_, keys.size() - offset));
        const std::uint64_t* source = keys.data() + offset;
        if (!pinned) {
          parallel_copy(slot.host_keys.get(), source, n * sizeof(std::uint64_t));
          source = slot.host_keys.get<std::uint64_t>();
        }
        rt_->copy(slot.keys.get(), source, n * sizeof(std::uint64_t), slot.stream);
        rt_->record(slot.copied, slot.stream);
        rt_->wait(stream_, slot.copied);
        launch(slot, n);
        rt_->record(computed_, stream_);
        rt_->wait(slot.stream, computed_);
        if (!out.empty()) rt_->copy(slot.host_flags.get(), slot.flags.get(), n, slot.stream);
        rt_->record(slot.done, slot.stream);
        pending[s] = {offset, n};
      }
      finish(0);
      finish(1);
    } catch (...) {
      drain_all();
      throw;
    }
  }

  Layout layout_;
  std::string name_;
  int device_;
  std::uint32_t chunk_keys_;
  std::unique_ptr<DeviceRuntime> rt_;
  // Every kernel and whole-filter copy runs here, in the order the host issued it.
  StreamHandle stream_ = nullptr;
  EventHandle computed_ = nullptr;  // the latest kernel on stream_ is done
  EventHandle caller_ = nullptr;    // a device-pointer caller's earlier work is done
  RuntimeBuffer bits_;
  RuntimeBuffer partials_;
  RuntimeBuffer combine_staging_;
  // Calls on one filter take turns: they share the pipeline's slots and the events above.
  mutable std::mutex mutex_;
  mutable Slot slots_[2];
  mutable std::uint32_t slot_keys_ = 0;
};

}  // namespace

std::unique_ptr<CudaEngine> make_device_engine(const Layout& layout, std::string name, int device,
                                               std::unique_ptr<DeviceRuntime> runtime,
                                               std::uint32_t chunk_keys) {
  return std::make_unique<DeviceEngine>(layout, std::move(name), device, std::move(runtime),
                                        chunk_keys);
}

}  // namespace bulkbloom::detail
