/// @file
/// Bulk calls on keys that are already in GPU memory, for filters on the CUDA backend. This header
/// needs no CUDA headers: `Stream` is the type `cudaStream_t` names. In a build of bulkbloom
/// without CUDA every call throws BackendUnavailable.
///
/// Each call has two forms, as in cuCollections: `insert(...)` returns when its work is done;
/// `insert_async(..., stream)` returns once the work is queued. Queued work waits for what was
/// queued on `stream` before the call, and work queued on `stream` afterwards waits for it. Work
/// on one filter runs in the order the host issued it, whatever the streams (the filter has a
/// stream of its own), so `insert_if_absent` answers exactly as the sequential loop over the calls
/// in that order (DESIGN §3). Host-span calls of Filter come after every earlier call.
///
/// Pointers must be memory of the filter's device (cudaMalloc with that device current), managed
/// memory, or mapped pinned host memory that the device reaches at the same address; `keys` and
/// `new_count` aligned to 8 bytes. Anything else throws std::invalid_argument before any work is
/// queued.
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

/// Inserts the `n` keys at `keys`. Throws std::invalid_argument if the filter is not on the CUDA
/// backend, `n` exceeds kMaxDeviceBatch, or a pointer is null, misaligned or not device memory.
void insert(Filter& filter, const std::uint64_t* keys, std::uint64_t n);
void insert_async(Filter& filter, const std::uint64_t* keys, std::uint64_t n, Stream stream);

/// Writes 1 to `out[i]` (`n` bytes) if `keys[i]` may be present, else 0. Throws as insert() does.
void contains(const Filter& filter, const std::uint64_t* keys, std::uint64_t n, std::uint8_t* out);
void contains_async(const Filter& filter, const std::uint64_t* keys, std::uint64_t n,
                    std::uint8_t* out, Stream stream);

/// The dedup primitive: inserts each key and writes 1 to `is_new[i]` if it was absent, exactly
/// as the sequential loop does. If `new_count` is not null, the number of new keys is added to
/// it. Throws as insert() does. The `_async` form waits for the work queued before it on `stream`
/// and for the batch's first pass: the number of keys left to sort comes back to the host to size
/// the sort; the rest of the work is queued.
void insert_if_absent(Filter& filter, const std::uint64_t* keys, std::uint64_t n,
                      std::uint8_t* is_new, std::uint64_t* new_count = nullptr);
void insert_if_absent_async(Filter& filter, const std::uint64_t* keys, std::uint64_t n,
                            std::uint8_t* is_new, std::uint64_t* new_count, Stream stream);

}  // namespace bulkbloom::cuda
