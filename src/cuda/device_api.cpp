// The device-pointer front end (include/bulkbloom/cuda.hpp): checks what it can without CUDA,
// then hands over to the CUDA engine. Compiled in every build, so the header always links.
#include "bulkbloom/cuda.hpp"

#include <stdexcept>
#include <string>

#include "bulkbloom/error.hpp"
#include "core/filter_access.hpp"
#include "registry/engine.hpp"

#include "cuda/cuda_engine.hpp"

namespace bulkbloom::cuda {
namespace {

void check_batch(std::uint64_t n) {
  if (n > kMaxDeviceBatch) {
    throw std::invalid_argument("device batch of " + std::to_string(n) +
                                " keys exceeds the limit of " + std::to_string(kMaxDeviceBatch) +
                                " (2^32 - 1) keys per call; split it");
  }
}

detail::CudaEngine& cuda_engine(const Filter& filter) {
  auto* engine = dynamic_cast<detail::CudaEngine*>(&detail::FilterAccess::engine(filter));
  if (engine != nullptr) return *engine;
#if BULKBLOOM_HAVE_CUDA
  throw std::invalid_argument(
      "device-pointer calls need a filter on the CUDA backend; this one "
      "runs " +
      filter.implementation());
#else
  throw BackendUnavailable(
      "bulkbloom::cuda calls need the CUDA backend, which this build of "
      "bulkbloom does not include");
#endif
}

}  // namespace

void insert(Filter& filter, const std::uint64_t* keys, std::uint64_t n) {
  check_batch(n);
  cuda_engine(filter).insert_device(keys, static_cast<std::uint32_t>(n), nullptr, true);
}

void insert_async(Filter& filter, const std::uint64_t* keys, std::uint64_t n, Stream stream) {
  check_batch(n);
  cuda_engine(filter).insert_device(keys, static_cast<std::uint32_t>(n), stream, false);
}

void contains(const Filter& filter, const std::uint64_t* keys, std::uint64_t n, std::uint8_t* out) {
  check_batch(n);
  cuda_engine(filter).contains_device(keys, static_cast<std::uint32_t>(n), out, nullptr, true);
}

void contains_async(const Filter& filter, const std::uint64_t* keys, std::uint64_t n,
                    std::uint8_t* out, Stream stream) {
  check_batch(n);
  cuda_engine(filter).contains_device(keys, static_cast<std::uint32_t>(n), out, stream, false);
}

void insert_if_absent(Filter& filter, const std::uint64_t* keys, std::uint64_t n,
                      std::uint8_t* is_new, std::uint64_t* new_count) {
  check_batch(n);
  cuda_engine(filter).insert_if_absent_device(keys, static_cast<std::uint32_t>(n), is_new,
                                              new_count, nullptr, true);
}

void insert_if_absent_async(Filter& filter, const std::uint64_t* keys, std::uint64_t n,
                            std::uint8_t* is_new, std::uint64_t* new_count, Stream stream) {
  check_batch(n);
  cuda_engine(filter).insert_if_absent_device(keys, static_cast<std::uint32_t>(n), is_new,
                                              new_count, stream, false);
}

}  // namespace bulkbloom::cuda
