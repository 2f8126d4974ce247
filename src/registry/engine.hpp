// The backend interface behind bulkbloom::Filter. Each backend owns the filter's bits; engines
// are made by the registry (backend.hpp), which also hands each one its host side.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "bulkbloom/filter_ref.hpp"
#include "bulkbloom/layout.hpp"
#include "core/key_mode.hpp"

namespace bulkbloom::detail {

struct HostSide;

/// Bitwise combination of two filters' bytes.
enum class CombineOp : std::uint8_t { bit_or, bit_and };

class Engine {
 public:
  virtual ~Engine() = default;

  virtual std::string implementation() const = 0;
  virtual unsigned threads() const = 0;

  /// The host kernels and worker threads of this engine's implementation, for work outside the
  /// engine on the keys it serves (a window's hashing and lookups). Set by the registry.
  const HostSide& host() const { return *host_; }
  void set_host(std::shared_ptr<const HostSide> host) { host_ = std::move(host); }

  virtual void insert(std::span<const std::uint64_t> keys, KeyMode mode) = 0;
  virtual void contains(std::span<const std::uint64_t> keys, KeyMode mode,
                        std::span<std::uint8_t> out) const = 0;
  virtual std::uint64_t insert_if_absent(std::span<const std::uint64_t> keys, KeyMode mode,
                                         std::span<std::uint8_t> is_new) = 0;

  /// Combines `other` (host bytes of a filter of the same layout) into this one.
  virtual void combine(std::span<const std::byte> other, CombineOp op) = 0;
  virtual void clear() = 0;
  virtual std::uint64_t popcount() const = 0;
  virtual double current_fpr() const = 0;

  /// The bits as host memory, or null if they live elsewhere (device memory).
  virtual const std::byte* host_bytes() const = 0;
  virtual FilterRef view() const = 0;
  virtual void copy_bytes_to(std::span<std::byte> out) const = 0;
  virtual void copy_bytes_from(std::span<const std::byte> in) = 0;

 private:
  std::shared_ptr<const HostSide> host_;
};

}  // namespace bulkbloom::detail
