// A window's next generation, zeroed off the thread that rotates the window.
#pragma once

#include <cstdint>
#include <memory>

#include "bulkbloom/filter.hpp"

namespace bulkbloom::detail {

class SpareWorker;

// Clearing a generation at a rotation writes all its bytes on the rotating thread (a Flink task's,
// a stall at the sink), and giving the new generation fresh memory only moves the zeroing into
// the page faults of its first inserts, which touch every huge page of it at once. So a window
// keeps one filter more than its generations, zeroed on a background thread: a rotation swaps it
// in and hands the dropped generation back to be zeroed for the next one.
class SpareGeneration {
 public:
  SpareGeneration();
  SpareGeneration(SpareGeneration&&) noexcept;
  SpareGeneration& operator=(SpareGeneration&&) noexcept;
  ~SpareGeneration();

  /// Starts making a zeroed filter of `layout` on the background thread, unless one is there or
  /// under way. Only host filters of at least kMinSpareGenerationBytes get one.
  void prepare(const Layout& layout, const Options& options);
  /// If a zeroed spare of `slot`'s layout is ready, swaps it into `slot` and hands the filter
  /// `slot` held to the background thread to be zeroed; returns whether it did. When the spare is
  /// of another layout it is remade at `slot`'s (for the next rotation) and nothing changes now.
  bool swap_into(Filter& slot, const Options& options);
  /// Waits until the spare is ready (or none is being made); for tests and benchmarks.
  void wait() const;
  /// Bytes the spare holds (0 when there is none).
  std::uint64_t memory_bytes() const;

  struct State;

 private:
  // The spare, shared with the job that readies it; the process's background thread, held by
  // windows only, so that it never outlives them on its own thread.
  std::shared_ptr<State> state_;
  std::shared_ptr<SpareWorker> worker_;
};

}  // namespace bulkbloom::detail
