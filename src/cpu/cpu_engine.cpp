// The CPU backend: host memory, a kernel set chosen by target, and the whole-filter operations.
#include <algorithm>
#include <chrono>
#include <cstring>
#include <memory>
#include <numeric>
#include <optional>
#include <vector>

#include "core/tuning.hpp"
#include "cpu/cpu_engine.hpp"
#include "cpu/partitioned.hpp"
#include "cpu/plan_chooser.hpp"

namespace bulkbloom::detail {
namespace {

class CpuEngine final : public Engine {
 public:
  CpuEngine(const Layout& layout, const CpuKernels& kernels, std::shared_ptr<ThreadPool> pool,
            HostBuffer&& bits)
      : layout_(layout), kernels_(kernels), pool_(std::move(pool)), bits_(std::move(bits)) {}

  std::string implementation() const override { return std::string("cpu/") + kernels_.target; }
  unsigned threads() const override { return pool_->size(); }

  void insert(std::span<const std::uint64_t> keys, KeyMode mode) override {
    const BulkPlan plan = plan_bulk(BulkOp::insert, layout_, keys.size(), pool_->size());
    const std::optional<BulkPlan> other =
        alternative_plan(BulkOp::insert, layout_, keys.size(), plan);
    if (!other) {
      insert_with(plan, keys, mode);
      return;
    }
    run_chosen(write_plans_, plan, *other, keys.size(),
               [&](const BulkPlan& chosen) { insert_with(chosen, keys, mode); });
  }

  void contains(std::span<const std::uint64_t> keys, KeyMode mode,
                std::span<std::uint8_t> out) const override {
    const BulkPlan plan = plan_bulk(BulkOp::contains, layout_, keys.size(), pool_->size());
    const std::optional<BulkPlan> other =
        alternative_plan(BulkOp::contains, layout_, keys.size(), plan);
    if (!other) {
      contains_with(plan, keys, mode, out);
      return;
    }
    run_chosen(read_plans_, plan, *other, keys.size(),
               [&](const BulkPlan& chosen) { contains_with(chosen, keys, mode, out); });
  }

  std::uint64_t insert_if_absent(std::span<const std::uint64_t> keys, KeyMode mode,
                                 std::span<std::uint8_t> is_new) override {
    const BulkPlan plan = plan_bulk(BulkOp::insert_if_absent, layout_, keys.size(), pool_->size());
    const std::optional<BulkPlan> other =
        alternative_plan(BulkOp::insert_if_absent, layout_, keys.size(), plan);
    if (!other) return insert_if_absent_with(plan, keys, mode, is_new);
    std::uint64_t fresh = 0;
    run_chosen(dedup_plans_, plan, *other, keys.size(), [&](const BulkPlan& chosen) {
      fresh = insert_if_absent_with(chosen, keys, mode, is_new);
    });
    return fresh;
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
    constexpr std::uint64_t kSpanWords = tuning::kFillSpanBytes / sizeof(std::uint64_t);
    const std::uint64_t count = bits_.size() / sizeof(std::uint64_t);
    std::vector<std::uint64_t> counts(span_count(count, kSpanWords));
    for_each_span(count, kSpanWords,
                  [&](std::size_t index, std::uint64_t begin, std::uint64_t end) {
                    counts[index] = kernels_.popcount(words + begin, end - begin);
                  });
    return std::accumulate(counts.begin(), counts.end(), std::uint64_t{0});
  }

  double current_fpr() const override {
    const std::uint64_t span_blocks = tuning::kFillSpanBytes / block_bytes(layout_.shape);
    std::vector<double> sums(span_count(layout_.num_blocks, span_blocks));
    for_each_span(layout_.num_blocks, span_blocks,
                  [&](std::size_t index, std::uint64_t begin, std::uint64_t end) {
                    sums[index] = kernels_.fpr_sum(layout_, bits_.data(), begin, end);
                  });
    // In span order whatever the threads: the same double for every thread count.
    double sum = 0.0;
    for (const double span_sum : sums) sum += span_sum;
    return sum / static_cast<double>(layout_.num_blocks);
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
  // Runs the plan `chooser` picks of `plan` (0) and `other` (1) with `run`, and tells it the time.
  template <class Run>
  static void run_chosen(PlanChooser& chooser, const BulkPlan& plan, const BulkPlan& other,
                         std::size_t keys, const Run& run) {
    const unsigned choice = chooser.next();
    const auto start = std::chrono::steady_clock::now();
    run(choice == 0 ? plan : other);
    chooser.record(choice, keys,
                   std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  }

  // Spans of `span_size` items that [0, items) is cut into, the last one shorter.
  static std::size_t span_count(std::uint64_t items, std::uint64_t span_size) {
    return static_cast<std::size_t>((items + span_size - 1) / span_size);
  }

  // Calls visit(index, begin, end) for each span of [0, items), the spans shared among the pool's
  // threads in contiguous runs. The pool's workers start on the first call that splits.
  template <class Visit>
  void for_each_span(std::uint64_t items, std::uint64_t span_size, const Visit& visit) const {
    const std::size_t spans = span_count(items, span_size);
    const auto tasks = static_cast<unsigned>(std::min<std::size_t>(pool_->size(), spans));
    pool_->run(tasks, [&](unsigned t) {
      for (std::size_t s = spans * t / tasks; s < spans * (t + 1) / tasks; ++s) {
        visit(s, s * span_size, std::min(items, (s + 1) * span_size));
      }
    });
  }

  void insert_with(const BulkPlan& plan, std::span<const std::uint64_t> keys, KeyMode mode) {
    insert_by_plan(plan, kernels_, layout_, bits_.data(), keys.data(), keys.size(), mode, *pool_,
                   scratch_, routed_);
  }

  void contains_with(const BulkPlan& plan, std::span<const std::uint64_t> keys, KeyMode mode,
                     std::span<std::uint8_t> out) const {
    if (plan.mode == BulkPlan::Mode::partitioned) {
      scratch_.run(BulkOp::contains, kernels_, layout_, bits_.data(), keys.data(), keys.size(),
                   mode, out.data(), *pool_, plan.partition_shift);
      return;
    }
    const std::size_t n = keys.size();
    pool_->run(plan.tasks, [&](unsigned t) {
      const std::size_t begin = n * t / plan.tasks, end = n * (t + 1) / plan.tasks;
      kernels_.contains(layout_, bits_.data(), keys.data() + begin, end - begin, mode,
                        out.data() + begin);
    });
  }

  std::uint64_t insert_if_absent_with(const BulkPlan& plan, std::span<const std::uint64_t> keys,
                                      KeyMode mode, std::span<std::uint8_t> is_new) {
    switch (plan.mode) {
      case BulkPlan::Mode::partitioned:
        return scratch_.run(BulkOp::insert_if_absent, kernels_, layout_, bits_.data(), keys.data(),
                            keys.size(), mode, is_new.data(), *pool_, plan.partition_shift);
      case BulkPlan::Mode::block_ranges:
        return insert_if_absent_in_block_ranges(kernels_, layout_, bits_.data(), keys.data(),
                                                keys.size(), mode, is_new.data(), *pool_,
                                                plan.tasks);
      case BulkPlan::Mode::routed_key_slices:
        return routed_.insert_if_absent(kernels_, layout_, bits_.data(), keys.data(), keys.size(),
                                        mode, is_new.data(), *pool_, plan.tasks);
      case BulkPlan::Mode::single:
      case BulkPlan::Mode::key_slices:  // a reading plan: plan_bulk never gives it to a write
      case BulkPlan::Mode::atomic_key_slices:  // insert only
        break;
    }
    return kernels_.insert_if_absent(layout_, bits_.data(), keys.data(), keys.size(), mode,
                                     all_blocks(layout_), is_new.data());
  }

  Layout layout_;
  const CpuKernels& kernels_;
  std::shared_ptr<ThreadPool> pool_;
  mutable PartitionScratch scratch_;
  // Between key slices and partitions for the reads of a filter of 1 to 6 GiB (alternative_plan).
  mutable PlanChooser read_plans_;
  // Between the size-chosen plan and one thread or block ranges (routed, under 1 GiB) or atomic
  // key slices (partitions) for inserts on several threads.
  PlanChooser write_plans_;
  // Between the size-chosen plan and one thread or block ranges (routed, under 1 GiB) or routed
  // key slices (partitions) for insert_if_absent on several threads.
  PlanChooser dedup_plans_;
  RoutedScratch routed_;
  HostBuffer bits_;
};

}  // namespace

std::unique_ptr<Engine> make_cpu_engine(const Layout& layout, const CpuKernels& kernels,
                                        std::shared_ptr<ThreadPool> pool, HostBuffer&& storage) {
  return std::make_unique<CpuEngine>(layout, kernels, std::move(pool), std::move(storage));
}

}  // namespace bulkbloom::detail
