// The backend interface behind bulkbloom::Filter. Each backend owns the filter's bits.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "bulkbloom/filter_ref.hpp"
#include "bulkbloom/layout.hpp"

namespace bulkbloom::detail {

/// Whether bulk keys still need the layout's hash, or are hashes already (byte-string keys are
/// hashed by the front end, then passed on as hashes).
enum class KeyMode : std::uint8_t { hash_with_layout, prehashed };

/// Bitwise combination of two filters' bytes.
enum class CombineOp : std::uint8_t { bit_or, bit_and };

class Engine {
 public:
  virtual ~Engine() = default;

  virtual std::string implementation() const = 0;
  virtual unsigned threads() const = 0;
  /// Runs `task(i)` for i in [0, tasks) on the host threads this engine's bulk calls use (by
  /// default one after another on the calling thread) and returns when all are done. Bulk calls
  /// made from inside a task run on that task's thread, so that independent pieces of work,
  /// such as a window's lookups, can each keep their data on one core.
  virtual void parallel_for(unsigned tasks, const std::function<void(unsigned)>& task) const {
    for (unsigned i = 0; i < tasks; ++i) task(i);
  }

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
};

/// A CPU engine running `target` ("" for the best this CPU supports, "scalar", or a Highway
/// target name such as "AVX2") on `threads` workers (0 = one per hardware thread).
/// Throws BackendUnavailable for a target this build or CPU cannot run.
std::unique_ptr<Engine> make_cpu_engine(const Layout& layout, const std::string& target,
                                        unsigned threads);

class HostBuffer;
/// As above, over existing storage of layout.size_bytes() bytes (e.g. a mapped file).
std::unique_ptr<Engine> make_cpu_engine(const Layout& layout, const std::string& target,
                                        unsigned threads, HostBuffer&& storage);

/// Names of the CPU targets this build can run here, best first, each prefixed "cpu/".
std::vector<std::string> cpu_implementations();

}  // namespace bulkbloom::detail
