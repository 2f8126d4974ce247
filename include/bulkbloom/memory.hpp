/// @file
/// Memory for CPU filters faulted in ahead of their use, on other threads.
#pragma once

#include <cstdint>
#include <memory>

namespace bulkbloom {

namespace detail {
class HostBuffer;
}

/// Zeroed memory that background threads fault in from the moment it is made, for the CPU
/// filters that are made next (on the thread that holds a PrefaultedMemory::Use).
///
/// A page's first write costs the kernel far more than the write: zeroing it and, on a virtual
/// machine whose host took the memory back, the host's own fault; 1 GiB took 3 s of CPU on the
/// machine of bench/RESULTS.md. A restore of a large window is mostly that. Made as soon as the
/// window's size is known, this does that work on every core while the caller reads its state;
/// the restore then writes into pages already there.
///
/// Each filter made under a Use takes the next piece (whole pages) while its size fits in what is
/// left; one that does not maps its own memory as usual. A thread faults in only memory no filter
/// took (a filter waits for the huge page a thread is faulting in, a few milliseconds at most),
/// so nothing but the filter ever writes its bits. The threads go from the back, the filters take
/// from the front and fault in what they write themselves until the two meet. A piece taken belongs
/// to its filter (unmapped when the filter goes); what no filter took is unmapped when this object
/// is destroyed, after its threads stopped.
class PrefaultedMemory {
 public:
  /// Maps `bytes` (rounded up to whole pages) and starts `threads` threads faulting them in (0:
  /// one per hardware thread). Throws AllocationError when the memory cannot be mapped.
  explicit PrefaultedMemory(std::uint64_t bytes, unsigned threads = 0);
  ~PrefaultedMemory();
  PrefaultedMemory(const PrefaultedMemory&) = delete;
  PrefaultedMemory& operator=(const PrefaultedMemory&) = delete;

  /// The bytes no filter has taken yet.
  std::uint64_t available() const;
  /// Waits until the threads have faulted in every page (for tests and measurements).
  void wait() const;

  /// While one is in scope, the CPU filters made on its thread take their memory from `memory`.
  /// Uses nest; the innermost counts.
  class Use {
   public:
    explicit Use(PrefaultedMemory& memory);
    ~Use();
    Use(const Use&) = delete;
    Use& operator=(const Use&) = delete;

   private:
    PrefaultedMemory* previous_;
  };

  struct State;

 private:
  friend class detail::HostBuffer;
  // The memory of the innermost Use on this thread, or null.
  static State* current_state();

  std::unique_ptr<State> state_;
};

}  // namespace bulkbloom
