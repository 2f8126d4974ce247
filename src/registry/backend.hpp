// The backend registry: every implementation this build contains, how one is chosen, and the
// factories of its engines and host side. The only code that knows both src/cpu and src/cuda;
// the filter, the window and persistence reach the backends through it (docs/DESIGN.md,
// "Architecture").
#pragma once

#include <cstdint>
#include <memory>

#include "bulkbloom/filter.hpp"
#include "core/host_kernels.hpp"
#include "core/thread_pool.hpp"
#include "registry/engine.hpp"

namespace bulkbloom::detail {

/// What runs on the host, outside an engine, for the keys that engine serves.
struct HostSide {
  /// The host kernels of the engine's implementation (for a CUDA engine: the best CPU target's).
  const HostKernels* kernels;
  /// The threads the engine's bulk calls use. A bulk call made from one of their tasks stays on
  /// that task's thread, so independent pieces of work can each keep their data on one core.
  std::shared_ptr<ThreadPool> workers;
};

/// An empty engine for `layout` of the implementation `options` chooses: Options::implementation;
/// else BULKBLOOM_IMPL (read once per process) when it names one of options.backend; else the
/// best usable one of options.backend (automatic: CUDA when a device is present, else the CPU).
/// Its host() is the chosen implementation's host side. Throws std::invalid_argument for an
/// unknown name or one of another backend, BackendUnavailable for one that cannot run here,
/// AllocationError when the memory cannot be had.
std::unique_ptr<Engine> make_engine(const Layout& layout, const Options& options);

/// As make_engine(), on the CPU backend, over `layout.size_bytes()` bytes of the open file `fd`
/// from `offset` (a multiple of the page size), mapped privately: writes never reach the file.
/// Throws std::invalid_argument when options.implementation names a non-CPU one.
std::unique_ptr<Engine> make_engine_over_file(const Layout& layout, const Options& options, int fd,
                                              std::uint64_t offset);

/// The host kernels of the best CPU implementation this machine runs, for hashing whose result
/// must not depend on any one filter's implementation: which shard a key belongs to. Every
/// implementation hashes alike, so this only decides the speed.
const HostKernels& best_cpu_host_kernels();

}  // namespace bulkbloom::detail
