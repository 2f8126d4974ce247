// The CPU backend's factory, as the registry (backend.cpp) calls it.
#pragma once

#include <memory>

#include "bulkbloom/layout.hpp"
#include "core/thread_pool.hpp"
#include "cpu/host_buffer.hpp"
#include "cpu/kernels.hpp"
#include "registry/engine.hpp"

namespace bulkbloom::detail {

/// An engine running `kernels` on `pool` over `storage` (layout.size_bytes() bytes, zeroed or a
/// mapped file). `threads_fixed`: the caller chose the pool's size, so every call large enough to
/// split uses it (otherwise writes that splitting does not speed up stay on the calling thread).
std::unique_ptr<Engine> make_cpu_engine(const Layout& layout, const CpuKernels& kernels,
                                        std::shared_ptr<ThreadPool> pool, bool threads_fixed,
                                        HostBuffer&& storage);

}  // namespace bulkbloom::detail
