// Device or pinned host memory of a DeviceRuntime, owned: the engine's buffers and the device
// benchmark's.
#pragma once

#include <cstddef>
#include <utility>

#include "cuda/device_runtime.hpp"

namespace bulkbloom::detail {

// Device or pinned host memory from the runtime, freed on destruction.
class RuntimeBuffer {
 public:
  enum class Kind { device, pinned };
  RuntimeBuffer() = default;
  RuntimeBuffer(DeviceRuntime& runtime, Kind kind, std::size_t bytes, const char* what)
      : runtime_(&runtime), kind_(kind), bytes_(bytes) {
    ptr_ = kind == Kind::pinned ? runtime.allocate_pinned(bytes, what)
                                : runtime.allocate_device(bytes, what);
  }
  RuntimeBuffer(RuntimeBuffer&& o) noexcept { swap(o); }
  RuntimeBuffer& operator=(RuntimeBuffer&& o) noexcept {
    RuntimeBuffer(std::move(o)).swap(*this);
    return *this;
  }
  ~RuntimeBuffer() { reset(); }
  void reset() noexcept {
    if (ptr_ == nullptr) return;
    if (kind_ == Kind::pinned) {
      runtime_->free_pinned(ptr_);
    } else {
      runtime_->free_device(ptr_);
    }
    ptr_ = nullptr;
    bytes_ = 0;
  }
  template <typename T = void>
  T* get() const {
    return static_cast<T*>(ptr_);
  }
  std::size_t bytes() const { return bytes_; }

 private:
  void swap(RuntimeBuffer& o) noexcept {
    std::swap(runtime_, o.runtime_);
    std::swap(kind_, o.kind_);
    std::swap(ptr_, o.ptr_);
    std::swap(bytes_, o.bytes_);
  }
  DeviceRuntime* runtime_ = nullptr;
  Kind kind_ = Kind::device;
  void* ptr_ = nullptr;
  std::size_t bytes_ = 0;
};

}  // namespace bulkbloom::detail
