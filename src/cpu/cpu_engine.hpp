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
/// mapped file). Writes that splitting does not speed up stay on the calling thread (plan_bulk).
std::unique_ptr<Engine> make_cpu_engine(const Layout& layout, const CpuKernels& kernels,
                                        std::shared_ptr<ThreadPool> pool, HostBuffer&& storage);

}  // namespace bulkbloom::detail
