/// @file
/// Bulk calls on keys that are already in GPU memory, queued on a CUDA stream, for filters on the
/// CUDA backend. This header needs no CUDA headers: `Stream` is the type `cudaStream_t` names.
/// In a build of bulkbloom without CUDA every call throws BackendUnavailable.
///
/// Unlike the host-span calls of Filter, these return as soon as the work is queued. They are
/// ordered with other work on `stream` only: a host-span call of the same filter does not wait
/// for them, so synchronise the stream first.
#pragma once

#include <cstdint>

#include "bulkbloom/filter.hpp"

struct CUstream_st;

namespace bulkbloom::cuda {

/// A CUDA stream (`cudaStream_t`); nullptr is the default stream.
using Stream = CUstream_st*;

/// Most keys one device-pointer call takes (the kernels index keys with 32 bits); split larger
/// batches. Host-span calls have no such limit.
inline constexpr std::uint64_t kMaxDeviceBatch = (std::uint64_t{1} << 32) - 1;

/// Inserts the `n` keys at `keys` (device memory). Throws std::invalid_argument if the filter is
/// not on the CUDA backend, `n` exceeds kMaxDeviceBatch, or `keys` is null or not device memory.
void insert(Filter& filter, const std::uint64_t* keys, std::uint64_t n, Stream stream = nullptr);

/// Writes 1 to `out[i]` (device memory, `n` bytes) if `keys[i]` may be present, else 0. Throws
/// as insert() does, also for `out`.
void contains(const Filter& filter, const std::uint64_t* keys, std::uint64_t n, std::uint8_t* out,
              Stream stream = nullptr);

/// The dedup primitive on device memory: inserts each key and writes 1 to `is_new[i]` if it was
/// absent. Zero leaks: of several copies of a key (in this call, earlier calls or calls running at
/// the same time on other streams) at most one is reported new. A flag may differ from the
/// sequential loop only where a never-seen key's bits were all set by other keys (DESIGN §3).
/// If `new_count` is not null it must be device memory; the number of new keys is added to it.
/// Throws as insert() does, also for `is_new` and `new_count`.
void insert_if_absent(Filter& filter, const std::uint64_t* keys, std::uint64_t n,
                      std::uint8_t* is_new, std::uint64_t* new_count = nullptr,
                      Stream stream = nullptr);

}  // namespace bulkbloom::cuda
