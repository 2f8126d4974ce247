#include "bulkbloom/filter.hpp"

#include <array>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <vector>

#include "core/key_hash.hpp"
#include "core/span_checks.hpp"
#include "core/tuning.hpp"
#include "registry/backend.hpp"

namespace bulkbloom {
namespace {

using detail::check_byte_keys_allowed;
using detail::check_size;
using detail::KeyMode;

void check_same_layout(const Layout& a, const Layout& b, const char* operation) {
  if (!(a == b)) {
    throw std::invalid_argument(std::string("cannot ") + operation + " filters of different " +
                                "layouts: " + a.describe() + " vs " + b.describe());
  }
}

// Combines the bits of `other` into `target`: straight from host memory, or through a host copy
// when they live on a device.
void combine_into(detail::Engine& target, const detail::Engine& other, std::uint64_t bytes,
                  detail::CombineOp op) {
  if (const std::byte* host = other.host_bytes()) {
    target.combine({host, bytes}, op);
    return;
  }
  std::vector<std::byte> copy(bytes);
  other.copy_bytes_to(copy);
  target.combine(copy, op);
}

// Hashes `keys` chunk by chunk and hands each chunk of hashes to `consume(hashes, offset)`, in
// order, so that order-dependent operations keep their sequential meaning.
template <typename Consume>
void for_each_hashed_chunk(std::span<const std::string_view> keys, std::uint64_t seed,
                           Consume&& consume) {
  std::array<std::uint64_t, detail::tuning::kByteKeyHashChunk> hashes;
  for (std::size_t offset = 0; offset < keys.size(); offset += detail::tuning::kByteKeyHashChunk) {
    const std::size_t n = std::min(detail::tuning::kByteKeyHashChunk, keys.size() - offset);
    for (std::size_t i = 0; i < n; ++i) hashes[i] = detail::xxh64_bytes(keys[offset + i], seed);
    consume(std::span<const std::uint64_t>(hashes.data(), n), offset);
  }
}

}  // namespace

Filter::Filter(const Layout& layout, const Options& options) : layout_(layout) {
  layout_.validate();
  engine_ = detail::make_engine(layout_, options);
}

Filter::Filter(const Layout& layout, std::unique_ptr<detail::Engine> engine)
    : layout_(layout), engine_(std::move(engine)) {}

Filter Filter::for_capacity(std::uint64_t capacity, double fpr, const Options& options) {
  return Filter(Layout::for_capacity(capacity, fpr), options);
}

Filter::Filter(Filter&&) noexcept = default;
Filter& Filter::operator=(Filter&&) noexcept = default;
Filter::~Filter() = default;

detail::Engine& Filter::engine() const {
  // A moved-from filter has no bits; say so rather than dereference nothing.
  if (!engine_) throw std::logic_error("bulkbloom::Filter used after it was moved from");
  return *engine_;
}

std::string Filter::implementation() const {
  return engine().implementation();
}
unsigned Filter::threads() const {
  return engine().threads();
}

void Filter::insert(std::span<const std::uint64_t> keys) {
  engine().insert(keys, KeyMode::hash_with_layout);
}

void Filter::insert(std::span<const std::string_view> keys) {
  check_byte_keys_allowed(layout_);
  for_each_hashed_chunk(keys, layout_.seed,
                        [&](std::span<const std::uint64_t> hashes, std::size_t) {
                          engine().insert(hashes, KeyMode::prehashed);
                        });
}

void Filter::insert(std::uint64_t key) {
  insert(std::span<const std::uint64_t>(&key, 1));
}

void Filter::contains(std::span<const std::uint64_t> keys, std::span<std::uint8_t> out) const {
  check_size(keys.size(), out.size(), "contains: output span");
  engine().contains(keys, KeyMode::hash_with_layout, out);
}

void Filter::contains(std::span<const std::string_view> keys, std::span<std::uint8_t> out) const {
  check_byte_keys_allowed(layout_);
  check_size(keys.size(), out.size(), "contains: output span");
  for_each_hashed_chunk(
      keys, layout_.seed, [&](std::span<const std::uint64_t> hashes, std::size_t offset) {
        engine().contains(hashes, KeyMode::prehashed, out.subspan(offset, hashes.size()));
      });
}

bool Filter::contains(std::uint64_t key) const {
  // One key in host memory: the view's per-key math (the layout header every backend shares)
  // answers it in one cache-line read; a batch call's dispatch and plan choice cost more than
  // the lookup.
  const detail::Engine& bits = engine();
  if (bits.host_bytes() != nullptr) return bits.view().contains(key);
  std::uint8_t flag = 0;
  contains(std::span<const std::uint64_t>(&key, 1), std::span<std::uint8_t>(&flag, 1));
  return flag != 0;
}

std::uint64_t Filter::insert_if_absent(std::span<const std::uint64_t> keys,
                                       std::span<std::uint8_t> is_new) {
  check_size(keys.size(), is_new.size(), "insert_if_absent: is_new span");
  return engine().insert_if_absent(keys, KeyMode::hash_with_layout, is_new);
}

std::uint64_t Filter::insert_if_absent(std::span<const std::string_view> keys,
                                       std::span<std::uint8_t> is_new) {
  check_byte_keys_allowed(layout_);
  check_size(keys.size(), is_new.size(), "insert_if_absent: is_new span");
  std::uint64_t fresh = 0;
  for_each_hashed_chunk(keys, layout_.seed,
                        [&](std::span<const std::uint64_t> hashes, std::size_t offset) {
                          fresh += engine().insert_if_absent(hashes, KeyMode::prehashed,
                                                             is_new.subspan(offset, hashes.size()));
                        });
  return fresh;
}

bool Filter::insert_if_absent(std::uint64_t key) {
  std::uint8_t flag = 0;
  insert_if_absent(std::span<const std::uint64_t>(&key, 1), std::span<std::uint8_t>(&flag, 1));
  return flag != 0;
}

void Filter::merge(const Filter& other) {
  check_same_layout(layout_, other.layout_, "merge");
  combine_into(engine(), other.engine(), layout_.size_bytes(), detail::CombineOp::bit_or);
}

void Filter::intersect(const Filter& other) {
  check_same_layout(layout_, other.layout_, "intersect");
  combine_into(engine(), other.engine(), layout_.size_bytes(), detail::CombineOp::bit_and);
}

void Filter::clear() {
  engine().clear();
}

std::uint64_t Filter::popcount() const {
  return engine().popcount();
}

double Filter::estimated_count() const {
  // Each key sets one uniformly placed bit per word; over a Poisson(lambda) block load a bit
  // stays clear with probability exp(-lambda / w). Invert the observed clear fraction.
  const double total_bits = 8.0 * static_cast<double>(layout_.size_bytes());
  const double set_fraction = static_cast<double>(popcount()) / total_bits;
  if (set_fraction >= 1.0) return std::numeric_limits<double>::infinity();
  const double w = word_bits(layout_.shape);
  const double lambda = -w * std::log1p(-set_fraction);
  return lambda * static_cast<double>(layout_.num_blocks);
}

double Filter::current_fpr() const {
  return engine().current_fpr();
}

FilterRef Filter::view() const {
  return engine().view();
}

void Filter::copy_bytes_to(std::span<std::byte> out) const {
  check_size(layout_.size_bytes(), out.size(), "copy_bytes_to: destination");
  engine().copy_bytes_to(out);
}

void Filter::copy_bytes_from(std::span<const std::byte> in) {
  check_size(layout_.size_bytes(), in.size(), "copy_bytes_from: source");
  engine().copy_bytes_from(in);
}

Backend parse_backend(std::string_view name) {
  if (name == "auto") return Backend::automatic;
  if (name == "cpu") return Backend::cpu;
  if (name == "cuda") return Backend::cuda;
  throw std::invalid_argument("unknown backend '" + std::string(name) +
                              "': expected auto, cpu or cuda");
}

}  // namespace bulkbloom
