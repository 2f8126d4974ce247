/// @file
/// The owning filter: bulk insert, membership and dedup over a backend chosen at run time.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "bulkbloom/filter_ref.hpp"
#include "bulkbloom/layout.hpp"

namespace bulkbloom {

namespace detail {
class Engine;
struct FilterAccess;
}  // namespace detail

/// Where a filter's bits live and which code works on them.
enum class Backend : std::uint8_t {
  automatic,  ///< CUDA when built and a device is present, else the CPU.
  cpu,        ///< Host memory; SIMD kernels for the best target of this CPU.
  cuda,       ///< Device memory of the current CUDA device.
};

/// Parses a backend name as the command line and Python take it: "auto", "cpu" or "cuda".
/// Throws std::invalid_argument naming the accepted names.
Backend parse_backend(std::string_view name);

/// How a Filter picks and runs its implementation.
struct Options {
  /// Backend to use.
  Backend backend = Backend::automatic;
  /// Exact implementation, as implementations() names it ("cpu/scalar", "cpu/AVX2", "cuda/sm_90"),
  /// or "cpu" / "cuda" for the best of a backend. Empty: the environment variable BULKBLOOM_IMPL,
  /// read once per process, if it names one of `backend`; else the best one. The choice also
  /// holds for work done on the host around the filter (a window's key hashing and lookups).
  std::string implementation;
  /// Worker threads for bulk calls on the CPU. 0: one per hardware thread. Every filter left at 0
  /// shares one process-wide set of workers, and a call that finds them busy runs on its calling
  /// thread. A number: that many threads, this filter's own. Either way they are used where more
  /// threads measured faster: every call large enough to split, except writes (insert,
  /// insert_if_absent) to a filter under 1 MiB, which stay on the calling thread, because there
  /// splitting a write gained nothing steady; a write takes at most one thread per 512 KiB of the
  /// filter (the measured bounds are in docs/DESIGN.md §7, with the engine's other plans).
  unsigned threads = 0;
};

/// One implementation compiled into this build.
struct Implementation {
  /// As Options::implementation and Filter::implementation() name it: "cpu/scalar", "cpu/AVX2",
  /// "cuda/sm_90" (just "cuda" when no device answers).
  std::string name;
  /// Backend::cpu or Backend::cuda.
  Backend backend = Backend::cpu;
  /// Whether it runs on this machine: every CPU entry does; a CUDA entry needs a device.
  bool usable = false;
  /// Why it does not run here, when it does not.
  std::string unusable_reason;
};

/// Every implementation of this build that a filter can ask for: the CPU targets this CPU runs
/// (best first, the scalar reference last), then the CUDA backend if it is built, whether or not
/// a device is present. Options::implementation and BULKBLOOM_IMPL take these names.
std::vector<Implementation> implementations();

/// The names of the usable entries of implementations(), in the same order.
std::vector<std::string> available_implementations();

/// A blocked Bloom filter that owns its bits. Move-only: a moved-from filter is only fit to be
/// assigned to or destroyed, and every call that reaches its bits throws std::logic_error.
///
/// Contracts (DESIGN §3): no false negatives; insert() is order-independent and gives the same
/// bytes on every backend; insert_if_absent() reports a repeated key new at most once, and on every
/// backend, thread count and SIMD target returns exactly what the sequential loop
/// `new = !contains(k); insert(k)` would.
class Filter {
 public:
  /// An empty filter with an explicit layout. Throws std::invalid_argument for a bad layout,
  /// AllocationError when its memory cannot be had, BackendUnavailable for a missing backend.
  explicit Filter(const Layout& layout, const Options& options = {});

  /// An empty filter sized by Layout::for_capacity(capacity, fpr).
  static Filter for_capacity(std::uint64_t capacity, double fpr, const Options& options = {});

  Filter(Filter&&) noexcept;
  Filter& operator=(Filter&&) noexcept;
  Filter(const Filter&) = delete;
  Filter& operator=(const Filter&) = delete;
  ~Filter();

  /// The filter's layout.
  const Layout& layout() const { return layout_; }
  /// The running implementation, e.g. "cpu/AVX3_DL" or "cpu/scalar".
  std::string implementation() const;
  /// Worker threads used by bulk calls.
  unsigned threads() const;

  /// Inserts each key.
  void insert(std::span<const std::uint64_t> keys);
  /// Inserts each byte string (hashed with XXH64 and the layout's seed).
  void insert(std::span<const std::string_view> keys);
  /// Inserts one key.
  void insert(std::uint64_t key);

  /// Writes 1 to `out[i]` if `keys[i]` may be present, else 0. `out` must be as long as `keys`.
  void contains(std::span<const std::uint64_t> keys, std::span<std::uint8_t> out) const;
  /// contains() for byte strings.
  void contains(std::span<const std::string_view> keys, std::span<std::uint8_t> out) const;
  /// True if `key` may be present.
  bool contains(std::uint64_t key) const;

  /// The dedup primitive: inserts each key and writes 1 to `is_new[i]` if `keys[i]` was absent
  /// before (counting earlier keys of the same batch), else 0. Returns the number of 1s.
  std::uint64_t insert_if_absent(std::span<const std::uint64_t> keys,
                                 std::span<std::uint8_t> is_new);
  /// insert_if_absent() for byte strings.
  std::uint64_t insert_if_absent(std::span<const std::string_view> keys,
                                 std::span<std::uint8_t> is_new);
  /// Inserts one key; true if it was absent.
  bool insert_if_absent(std::uint64_t key);

  /// Sets this filter to the union with `other`. Throws std::invalid_argument if layouts differ.
  void merge(const Filter& other);
  /// Sets this filter to the bitwise AND with `other` (a superset of the intersection's keys).
  /// Throws std::invalid_argument if layouts differ.
  void intersect(const Filter& other);
  /// Clears every bit.
  void clear();

  /// Number of set bits.
  std::uint64_t popcount() const;
  /// Estimated number of distinct keys inserted, from the fraction of set bits.
  double estimated_count() const;
  /// False-positive rate of the filter as it is now: the mean over blocks of the product of each
  /// word's fraction of set bits (exact for a uniformly hashed absent key).
  double current_fpr() const;
  /// Modelled false-positive rate after `n` distinct keys (Layout::expected_fpr).
  double expected_fpr(std::uint64_t n) const { return layout_.expected_fpr(n); }

  /// A non-owning view of the bits (host memory on the CPU backend, device memory on CUDA).
  FilterRef view() const;
  /// Copies the filter's layout().size_bytes() bytes into `out`, which must be that long.
  void copy_bytes_to(std::span<std::byte> out) const;
  /// Replaces the filter's bytes with `in`, which must be layout().size_bytes() long.
  void copy_bytes_from(std::span<const std::byte> in);

 private:
  friend struct detail::FilterAccess;
  Filter(const Layout& layout, std::unique_ptr<detail::Engine> engine);
  detail::Engine& engine() const;

  Layout layout_;
  std::unique_ptr<detail::Engine> engine_;
};

}  // namespace bulkbloom
