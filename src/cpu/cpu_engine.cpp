// The CPU backend: host memory, a kernel set chosen by target, and the whole-filter operations.
#include <bit>
#include <cstring>
#include <thread>

#include "bulkbloom/error.hpp"
#include "cpu/host_buffer.hpp"
#include "cpu/kernels.hpp"
#include "engine.hpp"
#include "shape_dispatch.hpp"

namespace bulkbloom::detail {
namespace {

class CpuEngine final : public Engine {
 public:
  CpuEngine(const Layout& layout, const CpuKernels& kernels, unsigned threads, HostBuffer&& bits)
      : layout_(layout), kernels_(kernels), threads_(threads), bits_(std::move(bits)) {}

  std::string implementation() const override { return std::string("cpu/") + kernels_.target; }
  unsigned threads() const override { return threads_; }

  void insert(std::span<const std::uint64_t> keys, KeyMode mode) override {
    kernels_.insert(layout_, bits_.data(), keys.data(), keys.size(), mode);
  }

  void contains(std::span<const std::uint64_t> keys, KeyMode mode,
                std::span<std::uint8_t> out) const override {
    kernels_.contains(layout_, bits_.data(), keys.data(), keys.size(), mode, out.data());
  }

  std::uint64_t insert_if_absent(std::span<const std::uint64_t> keys, KeyMode mode,
                                 std::span<std::uint8_t> is_new) override {
    return kernels_.insert_if_absent(layout_, bits_.data(), keys.data(), keys.size(), mode,
                                     is_new.data());
  }

  void combine(std::span<const std::byte> other, CombineOp op) override {
    auto* dst = reinterpret_cast<std::uint64_t*>(bits_.data());
    const auto* src = reinterpret_cast<const std::uint64_t*>(other.data());
    const std::size_t words = other.size() / sizeof(std::uint64_t);
    if (op == CombineOp::bit_or) {
      for (std::size_t i = 0; i < words; ++i) dst[i] |= src[i];
    } else {
      for (std::size_t i = 0; i < words; ++i) dst[i] &= src[i];
    }
  }

  void clear() override { std::memset(bits_.data(), 0, bits_.size()); }

  std::uint64_t popcount() const override {
    const auto* words = reinterpret_cast<const std::uint64_t*>(bits_.data());
    const std::size_t count = bits_.size() / sizeof(std::uint64_t);
    std::uint64_t total = 0;
    for (std::size_t i = 0; i < count; ++i) total += std::popcount(words[i]);
    return total;
  }

  double current_fpr() const override {
    return with_geometry(layout_.shape, [&]<typename G>(G) {
      const auto* words = reinterpret_cast<const typename G::Word*>(bits_.data());
      double sum = 0.0;
      for (std::uint64_t b = 0; b < layout_.num_blocks; ++b, words += G::kWords) {
        double p = 1.0;
        for (int i = 0; i < G::kWords; ++i) p *= std::popcount(words[i]) / double(G::kWordBits);
        sum += p;
      }
      return sum / static_cast<double>(layout_.num_blocks);
    });
  }

  const std::byte* host_bytes() const override { return bits_.data(); }
  FilterRef view() const override { return FilterRef(bits_.data(), layout_); }

  void copy_bytes_to(std::span<std::byte> out) const override {
    std::memcpy(out.data(), bits_.data(), bits_.size());
  }
  void copy_bytes_from(std::span<const std::byte> in) override {
    std::memcpy(bits_.data(), in.data(), bits_.size());
  }

 private:
  Layout layout_;
  const CpuKernels& kernels_;
  unsigned threads_;
  HostBuffer bits_;
};

std::vector<const CpuKernels*> kernel_sets_best_first() {
  return {&scalar_kernels()};
}

}  // namespace

std::vector<std::string> cpu_implementations() {
  std::vector<std::string> names;
  for (const CpuKernels* k : kernel_sets_best_first())
    names.push_back(std::string("cpu/") + k->target);
  return names;
}

std::unique_ptr<Engine> make_cpu_engine(const Layout& layout, const std::string& target,
                                        unsigned threads) {
  return make_cpu_engine(layout, target, threads, HostBuffer(layout.size_bytes()));
}

std::unique_ptr<Engine> make_cpu_engine(const Layout& layout, const std::string& target,
                                        unsigned threads, HostBuffer&& storage) {
  if (threads == 0) threads = std::max(1u, std::thread::hardware_concurrency());
  const auto sets = kernel_sets_best_first();
  if (target.empty()) {
    return std::make_unique<CpuEngine>(layout, *sets.front(), threads, std::move(storage));
  }
  for (const CpuKernels* k : sets) {
    if (target == k->target) {
      return std::make_unique<CpuEngine>(layout, *k, threads, std::move(storage));
    }
  }
  std::string available;
  for (const auto& name : cpu_implementations())
    available += (available.empty() ? "" : ", ") + name;
  throw BackendUnavailable("CPU implementation 'cpu/" + target +
                           "' is not available in this build on this CPU; available: " + available);
}

}  // namespace bulkbloom::detail
