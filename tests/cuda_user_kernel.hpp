// A user's own CUDA kernels working through FilterRef, launched from the test's host code.
#pragma once

#include <bulkbloom/filter_ref.hpp>

#include <cstdint>

namespace bulkbloom::test {

/// Inserts `n` device-resident keys with FilterRef::insert, one thread per key; waits for it.
void user_kernel_insert(FilterRef view, const std::uint64_t* keys, std::uint32_t n);
/// Writes FilterRef::contains of each device-resident key to `out` (device); waits for it.
void user_kernel_contains(FilterRef view, const std::uint64_t* keys, std::uint32_t n,
                          std::uint8_t* out);

}  // namespace bulkbloom::test
