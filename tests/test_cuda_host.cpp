// The CUDA backend's logic on the CPU, no GPU needed (DESIGN §3, §6):
// - the exact insert_if_absent algorithm, the same source the GPU runs, on Thrust's sequential
//   host policy, against the scalar oracle on adversarial batches;
// - the CUDA engine's host side against a fake CUDA runtime that runs each stream's work late and
//   in random order, as non-blocking streams may, and can fail an allocation or a call.
#include <gtest/gtest.h>
#include <thrust/system/cpp/execution_policy.h>

#include <algorithm>
#include <bit>
#include <cstring>
#include <deque>
#include <functional>
#include <map>
#include <numeric>
#include <random>
#include <stdexcept>
#include <string>

#include "bulkbloom/error.hpp"
#include "core/filter_access.hpp"
#include "core/splitmix64.hpp"
#include "cuda/cuda_engine.hpp"
#include "cuda/exact_insert_if_absent.hpp"
#include "registry/device_bench.hpp"
#include "test_support.hpp"

namespace bulkbloom {
// Names shapes in test listings (found by argument-dependent lookup).
void PrintTo(Shape shape, std::ostream* os) {
  *os << to_string(shape);
}
}  // namespace bulkbloom

namespace bulkbloom::test {
namespace {

using detail::CombineOp;
using detail::KeyMode;

constexpr Shape kShapes[] = {Shape::sb256, Shape::sb256x4, Shape::sb512, Shape::sb512x16};

Options on_scalar() {
  Options o;
  o.implementation = "cpu/scalar";
  return o;
}

struct Batch {
  std::string name;
  std::uint64_t num_blocks;
  std::vector<std::uint64_t> preload;
  std::vector<std::uint64_t> keys;
};

// DESIGN §6's adversarial batches, each with a filter size that makes it bite.
std::vector<Batch> adversarial_batches() {
  std::vector<Batch> batches;
  batches.push_back({"empty", 64, {}, {}});
  batches.push_back({"one_key", 64, {}, {42}});
  batches.push_back({"all_equal", 64, {}, std::vector<std::uint64_t>(5000, 0xabcdefull)});
  batches.push_back({"hot_keys", 509, random_keys(2000, 9), hot_key_batch(16, 300, 3000, 10)});
  // Every key in one block: false positives inside the batch, which must be the oracle's.
  batches.push_back({"one_block", 1, {}, random_keys(300, 11)});
  batches.push_back({"few_blocks", 3, {}, hot_key_batch(5, 40, 200, 12)});
  for (std::size_t n : {1023, 1024, 1025, 4095, 4097}) {
    batches.push_back({"n" + std::to_string(n), 257, random_keys(500, 13), random_keys(n, n)});
  }
  // Keys the filter already holds, mixed with their own copies and new keys.
  auto present = random_keys(3000, 14);
  auto mixed = present;
  const auto fresh = random_keys(3000, 15);
  mixed.insert(mixed.end(), fresh.begin(), fresh.end());
  mixed.insert(mixed.end(), fresh.begin(), fresh.begin() + 1000);
  std::shuffle(mixed.begin(), mixed.end(), std::mt19937_64(16));
  batches.push_back({"already_present", 1021, present, mixed});
  // Identity-hashed, these sit where the two block indices part: high32 puts each in block 0
  // or 1 of 3, full64 (which also weighs the low half) in the next block.
  std::vector<std::uint64_t> boundary;
  for (std::uint64_t i = 0; i < 200; ++i) {
    boundary.push_back((std::uint64_t{0x55555555} << 32) | (0xffffffffu - i));
    boundary.push_back((std::uint64_t{0xaaaaaaaa} << 32) | (0xffffffffu - i));
  }
  boundary.insert(boundary.end(), boundary.begin(), boundary.begin() + 100);
  batches.push_back({"index_boundary", 3, {}, boundary});
  std::vector<std::uint64_t> sequential(6000);
  std::iota(sequential.begin(), sequential.end(), 0);
  batches.push_back({"sequential", 131, {}, sequential});
  return batches;
}

// Step 2's sort ending as the GPU's radix sort may: the output in the spare region and the
// regions swapped. The region it leaves is filled with junk first, so that a later step that kept
// the old pointers reads nonsense.
struct SortIntoSpares {
  void operator()(detail::exact::Scratch& scratch, std::uint32_t m) const {
    std::copy(scratch.blocks, scratch.blocks + m, scratch.spare_blocks);
    std::copy(scratch.positions, scratch.positions + m, scratch.spare_positions);
    std::fill(scratch.blocks, scratch.blocks + m, 0x5a5a5a5au);
    std::fill(scratch.positions, scratch.positions + m, 0xa5a5a5a5u);
    thrust::stable_sort_by_key(thrust::cpp::par, scratch.spare_blocks, scratch.spare_blocks + m,
                               scratch.spare_positions);
    std::swap(scratch.blocks, scratch.spare_blocks);
    std::swap(scratch.positions, scratch.spare_positions);
  }
};

// Runs the exact algorithm on Thrust's sequential host policy with tiles of `tile` keys, sorting
// in place or into the spare region.
void exact_on_host(const Layout& layout, std::byte* bits, const std::uint64_t* keys,
                   std::uint32_t n, KeyMode mode, std::uint8_t* is_new, std::uint64_t* new_count,
                   std::uint32_t tile, bool into_spares = false) {
  detail::with_geometry(layout.shape, [&]<typename G>(G) {
    std::vector<std::uint64_t> scratch((detail::exact::scratch_bytes(n, tile, G::kBlockBytes) + 7) /
                                       8);
    const auto arrays = detail::exact::carve_scratch(scratch.data(), n, tile, G::kBlockBytes);
    if (into_spares) {
      detail::exact::insert_if_absent<G>(thrust::cpp::par, layout, bits, keys, n, mode, is_new,
                                         new_count, arrays, SortIntoSpares{});
    } else {
      detail::exact::insert_if_absent<G>(
          thrust::cpp::par, layout, bits, keys, n, mode, is_new, new_count, arrays,
          detail::exact::ThrustSortByBlock<decltype(thrust::cpp::par)>{thrust::cpp::par});
    }
  });
}

class ExactOnHost : public testing::TestWithParam<Shape> {};

TEST_P(ExactOnHost, GivesTheSequentialLoopsFlagsAndBytes) {
  for (const KeyHash hash : {KeyHash::xxh64, KeyHash::identity}) {
    for (const BlockIndex index : {BlockIndex::high32, BlockIndex::full64}) {
      for (const Batch& batch : adversarial_batches()) {
        const auto n = static_cast<std::uint32_t>(batch.keys.size());
        // Tiles of one key, a few keys, the GPU's size and the whole batch: runs cut anywhere
        // by a tile boundary, and runs over many tiles, must carry their prefix across.
        for (const std::uint32_t tile :
             {1u, 7u, detail::exact::kDeviceTileKeys, 64u, std::max(n, 1u)}) {
          // Both ends of the sort, alternating, so that each batch and tile meets both.
          const bool into_spares = (tile % 2 == 1) != (hash == KeyHash::identity);
          const Layout layout{GetParam(), batch.num_blocks, hash, 3, index};
          Filter oracle(layout, on_scalar());
          oracle.insert(batch.preload);
          std::vector<std::byte> bits = bytes_of(oracle);

          std::vector<std::uint8_t> expected(n), got(n, 7);
          const std::uint64_t expected_count = oracle.insert_if_absent(batch.keys, expected);
          std::uint64_t count = 5;  // added to, not overwritten
          exact_on_host(layout, bits.data(), batch.keys.data(), n, KeyMode::hash_with_layout,
                        got.data(), &count, tile, into_spares);
          const std::string where = batch.name + ", tile " + std::to_string(tile) +
                                    (into_spares ? ", sorted into the spares, " : ", ") +
                                    layout.describe();
          ASSERT_EQ(got, expected) << where;
          EXPECT_EQ(count, 5 + expected_count) << where;
          EXPECT_EQ(bits, bytes_of(oracle)) << where;
        }
      }
    }
  }
}

TEST_P(ExactOnHost, WithoutACountGivesTheSameFlags) {
  // The host-span path passes no count: flags and bits must not depend on it.
  const Layout layout{GetParam(), 61};
  const auto batch = hot_key_batch(12, 80, 2000, 21);
  const auto n = static_cast<std::uint32_t>(batch.size());
  Filter oracle(layout, on_scalar());
  std::vector<std::byte> bits = bytes_of(oracle);
  std::vector<std::uint8_t> expected(n), got(n, 7);
  oracle.insert_if_absent(batch, expected);
  exact_on_host(layout, bits.data(), batch.data(), n, KeyMode::hash_with_layout, got.data(),
                nullptr, 100);
  EXPECT_EQ(got, expected);
  EXPECT_EQ(bits, bytes_of(oracle));
}

TEST_P(ExactOnHost, PrehashedKeysArePlacedByTheirOwnBits) {
  // KeyMode::prehashed (byte-string keys hashed by the front end) skips the layout's key hash.
  const Layout layout{GetParam(), 97};
  const auto hashes = hot_key_batch(6, 40, 1500, 22);
  const auto n = static_cast<std::uint32_t>(hashes.size());
  Filter oracle(layout, on_scalar());
  const FilterRef ref = oracle.view();
  std::vector<std::uint8_t> expected(n), got(n, 7);
  for (std::uint32_t i = 0; i < n; ++i) {
    expected[i] = ref.contains_hash(hashes[i]) ? 0 : 1;
    ref.insert_hash(hashes[i]);
  }
  std::vector<std::byte> bits(layout.size_bytes());
  exact_on_host(layout, bits.data(), hashes.data(), n, KeyMode::prehashed, got.data(), nullptr, 33);
  EXPECT_EQ(got, expected);
  EXPECT_EQ(bits, bytes_of(oracle));
}

INSTANTIATE_TEST_SUITE_P(Shapes, ExactOnHost, testing::ValuesIn(kShapes));

// Block indices, positions and tiles fit 32 bits for every batch a device call takes
// (n < 2^32), and Thrust's counting iterator measures such ranges without overflow.
static_assert(std::is_same_v<const std::uint32_t, decltype(detail::exact::kSettled)>);
static_assert(
    sizeof(std::iterator_traits<thrust::counting_iterator<std::uint32_t>>::difference_type) >= 8);

// ---------------------------------------------------------------------------------------------
// A fake CUDA runtime: device memory is host memory, kernels run the same per-key code on the
// host, and each stream's queued work runs late, in stream order, interleaved at random with
// other streams' work. Faults can be injected.

class FakeRuntime final : public detail::DeviceRuntime {
 public:
  struct Stats {
    int live_allocations = 0;
    int live_streams_and_events = 0;
    int wrong_device = 0;  // work queued while another device was current
    int freed_with_pending_work = 0;
    int deadlocks = 0;
  };

  // Each call may run up to `eagerness` queued ops before returning; 0 runs everything only when
  // a synchronisation forces it, the latest and most shuffled order.
  FakeRuntime(std::uint64_t seed, int device)
      : rng_(seed), eagerness_(static_cast<int>(seed % 3)), current_device_(device) {}

  // Shared, so that a test can read them after the engine has destroyed the runtime.
  std::shared_ptr<Stats> shared_stats = std::make_shared<Stats>();
  Stats& stats = *shared_stats;
  int engine_device = 0;
  int fail_allocation_at = -1;  // the n-th allocation from now (0: the next) fails
  int fail_copy_at = -1;        // the n-th copy from now fails
  // The fake device's clock: each kernel advances it by its keys (or reads) times these
  // nanoseconds when it runs, and a timing event takes its reading, so elapsed_ms() gives what
  // the test chose.
  double insert_ns = 2, contains_ns = 1, insert_if_absent_ns = 4, block_read_ns = 0.5;
  // A kernel ("insert", "contains", "insert_if_absent", "fill_keys") that does nothing at all.
  std::string no_op;

  std::size_t pending() const {
    std::size_t total = 0;
    for (const auto& [stream, queue] : queues_) total += queue.size();
    return total;
  }

  std::string stand_in() const override { return "fake CUDA runtime (tests)"; }
  int current_device() override { return current_device_; }
  void set_device(int device) override { current_device_ = device; }

  void* allocate_device(std::size_t bytes, const char* what) override {
    return allocate(bytes, what, device_);
  }
  void free_device(void* p) noexcept override { release(p, device_); }
  void* allocate_pinned(std::size_t bytes, const char* what) override {
    return allocate(bytes, what, pinned_);
  }
  void free_pinned(void* p) noexcept override { release(p, pinned_); }
  detail::PointerKind pointer_kind(const void* p, int* device) override {
    if (const Allocation* a = inside(p, device_)) {
      *device = a->device;
      return detail::PointerKind::device;
    }
    if (inside(p, pinned_) != nullptr) return detail::PointerKind::host_mapped;
    return detail::PointerKind::unknown;
  }

  detail::StreamHandle create_stream() override {
    auto* s = reinterpret_cast<detail::StreamHandle>(++next_handle_);
    queues_[s];
    ++stats.live_streams_and_events;
    return s;
  }
  void destroy_stream(detail::StreamHandle s) noexcept override {
    queues_.erase(s);
    --stats.live_streams_and_events;
  }
  detail::EventHandle create_event() override {
    auto* e = reinterpret_cast<detail::EventHandle>(++next_handle_);
    events_[e];
    ++stats.live_streams_and_events;
    return e;
  }
  detail::EventHandle create_timing_event() override {
    detail::EventHandle e = create_event();
    events_.at(e).timing = true;
    return e;
  }
  void destroy_event(detail::EventHandle e) noexcept override {
    events_.erase(e);
    --stats.live_streams_and_events;
  }
  void record(detail::EventHandle e, detail::StreamHandle s) override {
    Event& event = events_.at(e);
    const std::uint64_t generation = ++event.recorded;
    enqueue(s, [this, &event, generation] {
      event.completed = std::max(event.completed, generation);
      event.time_ns = clock_ns_;
    });
  }
  void wait(detail::StreamHandle s, detail::EventHandle e) override {
    const Event& event = events_.at(e);
    const std::uint64_t generation = event.recorded;
    enqueue(s, {}, [&event, generation] { return event.completed >= generation; });
  }
  void synchronize(detail::EventHandle e) override {
    const Event& event = events_.at(e);
    const std::uint64_t generation = event.recorded;
    while (event.completed < generation) {
      if (!step()) throw_deadlock();
    }
  }
  double elapsed_ms(detail::EventHandle start, detail::EventHandle stop) override {
    const Event& a = events_.at(start);
    const Event& b = events_.at(stop);
    if (!a.timing || !b.timing || a.completed != a.recorded || b.completed != b.recorded) {
      throw DeviceError("elapsed_ms of an event without timing or not completed");
    }
    return (b.time_ns - a.time_ns) * 1e-6;
  }
  void synchronize_stream(detail::StreamHandle s) override {
    while (!queues_[s].empty()) {
      if (!step()) throw_deadlock();
    }
  }
  void drain(detail::StreamHandle s) noexcept override {
    while (!queues_[s].empty()) {
      if (!step()) {
        ++stats.deadlocks;
        return;
      }
    }
  }

  void copy(void* dst, const void* src, std::size_t bytes, detail::StreamHandle s) override {
    if (fail_copy_at >= 0 && fail_copy_at-- == 0) {
      throw DeviceError("CUDA call cudaMemcpyAsync failed (injected by the test)");
    }
    enqueue(s, [=] { std::memcpy(dst, src, bytes); });
  }
  void zero(void* dst, std::size_t bytes, detail::StreamHandle s) override {
    enqueue(s, [=] { std::memset(dst, 0, bytes); });
  }

  void insert(const Layout& layout, std::byte* bits, const std::uint64_t* keys, std::uint32_t n,
              KeyMode mode, detail::StreamHandle s) override {
    enqueue(s, [=, this] {
      clock_ns_ += n * insert_ns;
      if (no_op == "insert") return;
      const FilterRef ref(bits, layout);
      for (std::uint32_t i = 0; i < n; ++i) {
        ref.insert_hash(detail::gpu::hash_key(layout, keys[i], mode));
      }
    });
  }
  void contains(const Layout& layout, const std::byte* bits, const std::uint64_t* keys,
                std::uint32_t n, KeyMode mode, std::uint8_t* out, detail::StreamHandle s) override {
    enqueue(s, [=, this] {
      clock_ns_ += n * contains_ns;
      if (no_op == "contains") return;
      const FilterRef ref(const_cast<std::byte*>(bits), layout);
      for (std::uint32_t i = 0; i < n; ++i) {
        out[i] = ref.contains_hash(detail::gpu::hash_key(layout, keys[i], mode)) ? 1 : 0;
      }
    });
  }
  void insert_if_absent(const Layout& layout, std::byte* bits, const std::uint64_t* keys,
                        std::uint32_t n, KeyMode mode, std::uint8_t* is_new,
                        std::uint64_t* new_count, detail::StreamHandle s) override {
    // Tiles of 100 keys, so that the chunks of a batch also span several tiles.
    enqueue(s, [=, this] {
      clock_ns_ += n * insert_if_absent_ns;
      if (no_op != "insert_if_absent") {
        exact_on_host(layout, bits, keys, n, mode, is_new, new_count, 100);
      }
    });
  }
  void fill_keys(std::uint64_t* keys, std::uint64_t n, std::uint64_t seed,
                 detail::StreamHandle s) override {
    enqueue(s, [=, this] {
      if (no_op == "fill_keys") return;
      detail::SplitMix64 rng(seed);
      for (std::uint64_t i = 0; i < n; ++i) keys[i] = rng.next();
    });
  }
  void random_block_reads(const Layout& layout, const std::byte* bits, std::uint32_t n,
                          std::uint64_t* sink, detail::StreamHandle s) override {
    enqueue(s, [=, this] {
      clock_ns_ += n * block_read_ns;
      // Reads the blocks, as the device does, so a probe past the filter's bits shows here too.
      std::uint64_t x = 0;
      for (std::uint32_t i = 0; i < n; ++i) {
        const std::uint64_t block = detail::block_of(detail::xxh64_u64(i, 0x5eed),
                                                     static_cast<std::uint32_t>(layout.num_blocks));
        x ^= std::to_integer<std::uint64_t>(bits[block * block_bytes(layout.shape)]);
      }
      if (x == 0x123456789abcdefull) *sink = x;
    });
  }
  void combine(std::byte* bits, const std::byte* other, std::uint64_t bytes, CombineOp op,
               detail::StreamHandle s) override {
    enqueue(s, [=] {
      for (std::uint64_t i = 0; i < bytes; ++i) {
        bits[i] = op == CombineOp::bit_or ? bits[i] | other[i] : bits[i] & other[i];
      }
    });
  }
  void popcount(const Layout& layout, const std::byte* bits, std::uint64_t* partials,
                detail::StreamHandle s) override {
    enqueue(s, [=] {
      std::fill(partials, partials + detail::kReductionPartials, 0);
      for (std::uint64_t i = 0; i < layout.size_bytes(); ++i) {
        partials[i % detail::kReductionPartials] +=
            std::popcount(std::to_integer<unsigned>(bits[i]));
      }
    });
  }
  void fpr_sum(const Layout& layout, const std::byte* bits, double* partials,
               detail::StreamHandle s) override {
    enqueue(s, [=] {
      std::fill(partials, partials + detail::kReductionPartials, 0.0);
      detail::with_geometry(layout.shape, [&]<typename G>(G) {
        const auto* words = reinterpret_cast<const typename G::Word*>(bits);
        for (std::uint64_t b = 0; b < layout.num_blocks; ++b) {
          double p = 1.0;
          for (int w = 0; w < G::kWords; ++w) {
            p *= std::popcount(words[b * G::kWords + w]) / double(G::kWordBits);
          }
          partials[b % detail::kReductionPartials] += p;
        }
      });
    });
  }

  // Runs queued work until every stream is empty (as a device-wide synchronisation would).
  void run_all() {
    while (pending() != 0) {
      if (!step()) throw_deadlock();
    }
  }

 private:
  struct Event {
    std::uint64_t recorded = 0;
    std::uint64_t completed = 0;
    bool timing = false;
    double time_ns = 0;  // the clock when its latest record ran
  };
  struct Op {
    std::function<void()> run;
    std::function<bool()> ready;  // empty: always ready
  };
  struct Allocation {
    std::size_t bytes;
    int device;  // current when it was allocated, as cudaMalloc's memory is
  };
  using Allocations = std::map<const std::byte*, Allocation>;

  void* allocate(std::size_t bytes, const char* what, Allocations& where) {
    if (fail_allocation_at >= 0 && fail_allocation_at-- == 0) {
      throw AllocationError(std::string("cannot allocate memory for ") + what +
                            " (injected by the test)");
    }
    // Aligned for the widest word, as cudaMalloc's memory is, and holding junk as it may: never
    // what a freed buffer held, so that a kernel that does nothing cannot pass on the bytes that
    // an earlier one left behind in reused memory.
    auto* p = static_cast<std::byte*>(
        ::operator new (std::max<std::size_t>(bytes, 1), std::align_val_t{256}));
    std::memset(p, 0xa5, bytes);
    where[p] = {bytes, current_device_};
    ++stats.live_allocations;
    return p;
  }
  void release(void* p, Allocations& where) {
    if (pending() != 0) ++stats.freed_with_pending_work;
    where.erase(static_cast<std::byte*>(p));
    ::operator delete (p, std::align_val_t{256});
    --stats.live_allocations;
  }
  // The allocation `p` points into, or null.
  static const Allocation* inside(const void* p, const Allocations& where) {
    const auto* b = static_cast<const std::byte*>(p);
    auto it = where.upper_bound(b);
    if (it == where.begin()) return nullptr;
    --it;
    return b < it->first + std::max<std::size_t>(it->second.bytes, 1) ? &it->second : nullptr;
  }

  void enqueue(detail::StreamHandle s, std::function<void()> run,
               std::function<bool()> ready = {}) {
    if (current_device_ != engine_device) ++stats.wrong_device;
    queues_[s].push_back({std::move(run), std::move(ready)});
    // Some earlier work may run now, in any stream, or not yet.
    for (int i = std::uniform_int_distribution<int>(0, eagerness_)(rng_); i > 0; --i) step();
  }

  // Runs the first op of a random stream whose first op can run; false if none can.
  bool step() {
    std::vector<std::deque<Op>*> runnable;
    for (auto& [stream, queue] : queues_) {
      if (!queue.empty() && (!queue.front().ready || queue.front().ready())) {
        runnable.push_back(&queue);
      }
    }
    if (runnable.empty()) return false;
    auto& queue =
        *runnable[std::uniform_int_distribution<std::size_t>(0, runnable.size() - 1)(rng_)];
    Op op = std::move(queue.front());
    queue.pop_front();
    if (op.run) op.run();
    return true;
  }

  [[noreturn]] void throw_deadlock() {
    ++stats.deadlocks;
    throw std::logic_error("fake CUDA runtime: a synchronisation waits for work that cannot run");
  }

  std::mt19937_64 rng_;
  int eagerness_;
  int current_device_;
  double clock_ns_ = 0;
  std::uintptr_t next_handle_ = 0x1000;
  std::map<detail::StreamHandle, std::deque<Op>> queues_;
  std::map<detail::EventHandle, Event> events_;
  Allocations device_;
  Allocations pinned_;
};

// An engine on "device 1" over a fake runtime while the caller's current device is 0, with tiny
// pipeline chunks so that batches span many of them.
struct FakeEngine {
  FakeEngine(const Layout& layout, std::uint64_t seed, std::uint32_t chunk_keys = 512) {
    auto owned = std::make_unique<FakeRuntime>(seed, 0);
    fake = owned.get();
    fake->engine_device = 1;
    engine = detail::make_device_engine(layout, "cuda/fake", 1, std::move(owned), chunk_keys);
  }
  FakeRuntime* fake;
  std::unique_ptr<detail::CudaEngine> engine;
};

// Memory of the fake device the engine is on (1), allocated as a caller would: with that device
// current for the allocation only.
template <typename T>
T* engine_device_memory(FakeRuntime& fake, std::size_t bytes, const char* what) {
  fake.set_device(1);
  void* p = fake.allocate_device(bytes, what);
  fake.set_device(0);
  return static_cast<T*>(p);
}

std::vector<std::byte> engine_bytes(const detail::Engine& engine, const Layout& layout) {
  std::vector<std::byte> out(layout.size_bytes());
  engine.copy_bytes_to(out);
  return out;
}

class FakeCuda : public testing::TestWithParam<std::uint64_t> {
 protected:
  Layout layout_{Shape::sb512, 1021, KeyHash::xxh64, 0};
};

TEST_P(FakeCuda, HostSpanCallsGiveTheOraclesAnswersAcrossChunks) {
  FakeEngine gpu(layout_, GetParam());
  Filter cpu(layout_, on_scalar());
  const auto inserted = random_keys(3000, 1);
  gpu.engine->insert(inserted, KeyMode::hash_with_layout);
  cpu.insert(inserted);
  EXPECT_EQ(engine_bytes(*gpu.engine, layout_), bytes_of(cpu));

  // Hot keys whose copies fall in different chunks: each chunk must see the ones before it.
  const auto batch = hot_key_batch(20, 150, 4000, GetParam());
  std::vector<std::uint8_t> gpu_new(batch.size()), cpu_new(batch.size());
  EXPECT_EQ(gpu.engine->insert_if_absent(batch, KeyMode::hash_with_layout, gpu_new),
            cpu.insert_if_absent(batch, cpu_new));
  EXPECT_EQ(gpu_new, cpu_new);

  auto probes = random_keys(5000, 2);
  probes.insert(probes.end(), batch.begin(), batch.begin() + 2000);
  std::vector<std::uint8_t> gpu_has(probes.size(), 9), cpu_has(probes.size());
  gpu.engine->contains(probes, KeyMode::hash_with_layout, gpu_has);
  cpu.contains(probes, cpu_has);
  EXPECT_EQ(gpu_has, cpu_has);

  EXPECT_EQ(gpu.engine->popcount(), cpu.popcount());
  EXPECT_NEAR(gpu.engine->current_fpr(), cpu.current_fpr(), 1e-12);
  EXPECT_EQ(gpu.fake->pending(), 0u) << "a call returned before its work was done";
  EXPECT_EQ(gpu.fake->stats.wrong_device, 0) << "work queued while another device was current";
  EXPECT_EQ(gpu.fake->current_device(), 0) << "the caller's device was not restored";
}

// Batches of every length about the pipeline's chunk (512 keys here) and twice it, from pageable
// memory and from the fake's pinned memory (copied from directly, no staging): each chunk's flags
// land in their own place, and each chunk sees the ones before it.
TEST_P(FakeCuda, BatchesAtChunkBoundariesFromPageableAndPinnedMemory) {
  FakeEngine gpu(layout_, GetParam());
  FakeRuntime& fake = *gpu.fake;
  Filter cpu(layout_, on_scalar());
  std::uint64_t seed = 40;
  for (const std::size_t n : {511, 512, 513, 1023, 1024, 1025}) {
    for (const bool pinned : {false, true}) {
      // Every fifth key repeats the key 512 before it: in the chunk before.
      auto keys = random_keys(n, ++seed);
      for (std::size_t i = 512; i < n; i += 5) keys[i] = keys[i - 512];
      std::span<const std::uint64_t> batch = keys;
      std::uint64_t* staged = nullptr;
      if (pinned) {
        staged = static_cast<std::uint64_t*>(fake.allocate_pinned(n * 8, "test keys"));
        std::copy(keys.begin(), keys.end(), staged);
        batch = {staged, n};
      }
      std::vector<std::uint8_t> gpu_new(n, 9), cpu_new(n);
      ASSERT_EQ(gpu.engine->insert_if_absent(batch, KeyMode::hash_with_layout, gpu_new),
                cpu.insert_if_absent(keys, cpu_new))
          << n << (pinned ? " pinned" : " pageable");
      ASSERT_EQ(gpu_new, cpu_new) << n << (pinned ? " pinned" : " pageable");
      std::vector<std::uint8_t> gpu_has(n, 9), cpu_has(n);
      gpu.engine->contains(batch, KeyMode::hash_with_layout, gpu_has);
      cpu.contains(keys, cpu_has);
      ASSERT_EQ(gpu_has, cpu_has) << n << (pinned ? " pinned" : " pageable");
      if (staged != nullptr) fake.free_pinned(staged);
    }
  }
  EXPECT_EQ(engine_bytes(*gpu.engine, layout_), bytes_of(cpu));
}

TEST_P(FakeCuda, ClearFollowedAtOnceByInsertsKeepsTheInserts) {
  FakeEngine gpu(layout_, GetParam());
  const auto first = random_keys(2000, 3), second = random_keys(300, 4);
  Filter cpu(layout_, on_scalar());
  cpu.insert(second);
  // As a window rotates: many rounds of clear() then at once a batch of one chunk, so that a
  // clear() not ordered before the next kernel shows in some round.
  for (int round = 0; round < 20; ++round) {
    gpu.engine->insert(first, KeyMode::hash_with_layout);
    gpu.engine->clear();
    gpu.engine->insert(second, KeyMode::hash_with_layout);
    ASSERT_EQ(engine_bytes(*gpu.engine, layout_), bytes_of(cpu)) << "round " << round;
  }
  gpu.engine->clear();
  std::vector<std::uint8_t> is_new(first.size());
  EXPECT_EQ(gpu.engine->insert_if_absent(first, KeyMode::hash_with_layout, is_new), first.size());
}

TEST_P(FakeCuda, WholeFilterCallsMatchTheOracle) {
  FakeEngine gpu(layout_, GetParam());
  Filter cpu(layout_, on_scalar()), other(layout_, on_scalar());
  const auto keys = random_keys(4000, 5);
  other.insert(std::span(keys).subspan(1000));
  cpu.insert(std::span(keys).first(2000));
  gpu.engine->copy_bytes_from(bytes_of(cpu));
  const auto other_bytes = bytes_of(other);
  gpu.engine->combine(other_bytes, CombineOp::bit_or);
  cpu.merge(other);
  EXPECT_EQ(engine_bytes(*gpu.engine, layout_), bytes_of(cpu));
  gpu.engine->combine(other_bytes, CombineOp::bit_and);
  cpu.intersect(other);
  EXPECT_EQ(engine_bytes(*gpu.engine, layout_), bytes_of(cpu));
  EXPECT_EQ(gpu.engine->popcount(), cpu.popcount());
}

// Work the caller queued on the default (null) stream, such as a kernel of its own writing the
// filter through view(), comes before every later host-span or whole-filter call's work, as it
// does before the device-pointer calls: a save() right after it holds its bits.
TEST_P(FakeCuda, HostSpanCallsComeAfterTheCallersDefaultStreamWork) {
  FakeEngine gpu(layout_, GetParam());
  FakeRuntime& fake = *gpu.fake;
  Filter cpu(layout_, on_scalar());
  const FilterRef ref = gpu.engine->view();
  for (int round = 0; round < 12; ++round) {
    const auto batch = random_keys(200, 100 + round);
    auto* keys = engine_device_memory<std::uint64_t>(fake, batch.size() * 8, "keys");
    std::memcpy(keys, batch.data(), batch.size() * 8);
    fake.set_device(1);
    fake.insert(layout_, ref.data(), keys, static_cast<std::uint32_t>(batch.size()),
                KeyMode::hash_with_layout, nullptr);
    fake.set_device(0);
    cpu.insert(batch);
    switch (round % 3) {
      case 0:
        ASSERT_EQ(engine_bytes(*gpu.engine, layout_), bytes_of(cpu)) << "round " << round;
        break;
      case 1:
        ASSERT_EQ(gpu.engine->popcount(), cpu.popcount()) << "round " << round;
        break;
      default: {
        std::vector<std::uint8_t> has(batch.size());
        gpu.engine->contains(batch, KeyMode::hash_with_layout, has);
        ASSERT_EQ(std::ranges::count(has, 1), static_cast<long>(batch.size())) << "round " << round;
      }
    }
    fake.run_all();
    fake.free_device(keys);
  }
}

TEST_P(FakeCuda, DeviceCallsRunInIssueOrderWhateverTheirStreams) {
  FakeEngine gpu(layout_, GetParam());
  FakeRuntime& fake = *gpu.fake;
  // "Device memory" of the fake: the engine accepts only pointers it knows.
  const auto batch = hot_key_batch(10, 100, 2000, GetParam() + 7);
  const std::size_t n = batch.size();
  auto* keys = engine_device_memory<std::uint64_t>(fake, n * 8, "keys");
  auto* flags = engine_device_memory<std::uint8_t>(fake, 2 * n, "flags");
  auto* count = engine_device_memory<std::uint64_t>(fake, 8, "count");
  std::memcpy(keys, batch.data(), n * 8);
  *count = 0;
  const detail::StreamHandle streams[2] = {fake.create_stream(), fake.create_stream()};
  gpu.engine->insert_if_absent_device(keys, static_cast<std::uint32_t>(n), flags, count, streams[0],
                                      false);
  gpu.engine->insert_if_absent_device(keys, static_cast<std::uint32_t>(n), flags + n, count,
                                      streams[1], false);
  fake.synchronize_stream(streams[0]);
  fake.synchronize_stream(streams[1]);

  Filter cpu(layout_, on_scalar());
  std::vector<std::uint8_t> cpu_first(n), cpu_second(n);
  const std::uint64_t cpu_count =
      cpu.insert_if_absent(batch, cpu_first) + cpu.insert_if_absent(batch, cpu_second);
  EXPECT_EQ(std::vector<std::uint8_t>(flags, flags + n), cpu_first);
  EXPECT_EQ(std::vector<std::uint8_t>(flags + n, flags + 2 * n), cpu_second);
  EXPECT_EQ(*count, cpu_count);
  // A host-span call after them sees their bits.
  EXPECT_EQ(engine_bytes(*gpu.engine, layout_), bytes_of(cpu));
  for (auto s : streams) fake.destroy_stream(s);
  fake.free_device(keys);
  fake.free_device(flags);
  fake.free_device(count);
}

TEST_P(FakeCuda, FailedGrowthLeavesAUsableEngine) {
  const auto small = random_keys(100, 6), big = random_keys(5000, 7);
  for (int failing = 0; failing < 8; ++failing) {
    FakeEngine gpu(layout_, GetParam(), 4096);
    Filter cpu(layout_, on_scalar());
    gpu.engine->insert(small, KeyMode::hash_with_layout);
    cpu.insert(small);
    gpu.fake->fail_allocation_at = failing;  // one of the 8 buffers of two grown slots
    EXPECT_THROW(gpu.engine->insert(big, KeyMode::hash_with_layout), AllocationError);
    EXPECT_EQ(gpu.fake->pending(), 0u);
    gpu.fake->fail_allocation_at = -1;
    // Small and big calls work afterwards (no slot is left half-allocated).
    std::vector<std::uint8_t> gpu_has(small.size()), cpu_has(small.size());
    gpu.engine->contains(small, KeyMode::hash_with_layout, gpu_has);
    cpu.contains(small, cpu_has);
    EXPECT_EQ(gpu_has, cpu_has) << "allocation " << failing;
    gpu.engine->insert(big, KeyMode::hash_with_layout);
    cpu.insert(big);
    EXPECT_EQ(engine_bytes(*gpu.engine, layout_), bytes_of(cpu)) << "allocation " << failing;
    const auto stats = gpu.fake->shared_stats;
    gpu.engine.reset();
    EXPECT_EQ(stats->live_allocations, 0) << "allocation " << failing;
    EXPECT_EQ(stats->live_streams_and_events, 0) << "allocation " << failing;
  }
}

TEST_P(FakeCuda, AThrowMidLoopWaitsForBothSlotsFirst) {
  const auto batch = hot_key_batch(8, 50, 6000, GetParam());
  for (int failing : {1, 4, 9}) {
    FakeEngine gpu(layout_, GetParam());
    gpu.fake->fail_copy_at = failing;
    std::vector<std::uint8_t> is_new(batch.size());
    EXPECT_THROW(gpu.engine->insert_if_absent(batch, KeyMode::hash_with_layout, is_new),
                 DeviceError);
    // Nothing still reads or writes a staging buffer that the next call would reuse.
    EXPECT_EQ(gpu.fake->pending(), 0u) << "copy " << failing;
    EXPECT_EQ(gpu.fake->stats.freed_with_pending_work, 0);
    gpu.engine->clear();
    Filter cpu(layout_, on_scalar());
    std::vector<std::uint8_t> gpu_new(batch.size()), cpu_new(batch.size());
    gpu.engine->insert_if_absent(batch, KeyMode::hash_with_layout, gpu_new);
    cpu.insert_if_absent(batch, cpu_new);
    EXPECT_EQ(gpu_new, cpu_new) << "copy " << failing;
  }
}

TEST_P(FakeCuda, DevicePointersAreChecked) {
  FakeEngine gpu(layout_, GetParam());
  FakeRuntime& fake = *gpu.fake;
  auto* keys = engine_device_memory<std::uint64_t>(fake, 800, "keys");
  auto* flags = engine_device_memory<std::uint8_t>(fake, 100, "flags");
  // Memory of device 0, current for the caller: not the filter's device.
  auto* elsewhere = static_cast<std::uint64_t*>(fake.allocate_device(800, "other keys"));
  try {
    gpu.engine->insert_device(elsewhere, 10, nullptr, true);
    ADD_FAILURE() << "memory of device 0 accepted for a filter on device 1";
  } catch (const std::invalid_argument& e) {
    EXPECT_STREQ(e.what(),
                 "keys is memory of CUDA device 0; this filter is on device 1: pass memory of "
                 "that device");
  }
  EXPECT_THROW(gpu.engine->contains_device(keys, 10, reinterpret_cast<std::uint8_t*>(elsewhere),
                                           nullptr, true),
               std::invalid_argument);
  fake.free_device(elsewhere);
  std::vector<std::uint64_t> host_keys(100);
  const auto misaligned =
      reinterpret_cast<const std::uint64_t*>(reinterpret_cast<const std::byte*>(keys) + 4);
  EXPECT_THROW(gpu.engine->insert_device(misaligned, 10, nullptr, true), std::invalid_argument);
  EXPECT_THROW(gpu.engine->insert_device(host_keys.data(), 10, nullptr, true),
               std::invalid_argument);
  EXPECT_THROW(gpu.engine->contains_device(keys, 10, nullptr, nullptr, true),
               std::invalid_argument);
  auto* count_misaligned = reinterpret_cast<std::uint64_t*>(flags + 1);
  EXPECT_THROW(
      gpu.engine->insert_if_absent_device(keys, 10, flags, count_misaligned, nullptr, true),
      std::invalid_argument);
  EXPECT_EQ(fake.pending(), 0u);
  // Synchronous calls return with their work done.
  std::memset(keys, 0, 800);
  gpu.engine->contains_device(keys, 100, flags, nullptr, true);
  EXPECT_EQ(fake.pending(), 0u);
  fake.free_device(keys);
  fake.free_device(flags);
}

TEST_P(FakeCuda, ConstructionFailureReleasesEverything) {
  for (int failing = 0; failing < 2; ++failing) {
    auto owned = std::make_unique<FakeRuntime>(GetParam(), 0);
    owned->engine_device = 1;
    owned->fail_allocation_at = failing;
    const auto stats = owned->shared_stats;
    EXPECT_THROW(detail::make_device_engine(layout_, "cuda/fake", 1, std::move(owned)),
                 AllocationError);
    EXPECT_EQ(stats->live_allocations, 0) << "allocation " << failing;
    EXPECT_EQ(stats->live_streams_and_events, 0) << "allocation " << failing;
  }
}

INSTANTIATE_TEST_SUITE_P(Seeds, FakeCuda, testing::Range<std::uint64_t>(1, 7));

// ---------------------------------------------------------------------------------------------
// The device benchmark (registry/device_bench.hpp) over the fake runtime: its figures are the
// runtime's event times, and a device that does nothing yields no figure.

class DeviceBenchOnFake : public testing::TestWithParam<std::uint64_t> {
 protected:
  // A filter whose engine runs on a fake device; `fake` stays valid while the filter lives.
  Filter fake_filter(FakeRuntime*& fake) {
    FakeEngine gpu(layout_, GetParam());
    fake = gpu.fake;
    return detail::FilterAccess::make(layout_, std::move(gpu.engine));
  }
  Layout layout_{Shape::sb256, 4093, KeyHash::xxh64, 0};
  detail::DeviceBenchSettings settings_{6000, 3, 1024, 77};
};

TEST_P(DeviceBenchOnFake, FiguresAreTheRuntimesEventTimesAndTheAnswersAreChecked) {
  FakeRuntime* fake = nullptr;
  Filter filter = fake_filter(fake);
  const detail::DeviceBench bench = detail::bench_device(filter, settings_);
  EXPECT_EQ(bench.stand_in, "fake CUDA runtime (tests)");
  EXPECT_EQ(bench.implementation, "cuda/fake");
  EXPECT_EQ(bench.filter_bytes, layout_.size_bytes());
  EXPECT_EQ(bench.block_bytes, 32u);
  EXPECT_EQ(bench.verified_keys, 1024u);
  // keys / (keys x ns per key) on the fake's clock, read through its timing events.
  const auto expect_rate = [&](const detail::DeviceRate& rate, const char* op, double ns) {
    EXPECT_EQ(rate.operation, op);
    ASSERT_EQ(rate.runs.size(), settings_.repetitions) << op;
    for (const double run : rate.runs) EXPECT_NEAR(run, 1e9 / ns, 1e9 / ns * 1e-9) << op;
    EXPECT_NEAR(rate.keys_per_s, 1e9 / ns, 1e9 / ns * 1e-9) << op;
  };
  expect_rate(bench.random_block_reads, "random block reads", fake->block_read_ns);
  ASSERT_EQ(bench.device_resident.size(), 3u);
  expect_rate(bench.device_resident[0], "insert", fake->insert_ns);
  expect_rate(bench.device_resident[1], "contains", fake->contains_ns);
  expect_rate(bench.device_resident[2], "insert_if_absent", fake->insert_if_absent_ns);
  // End to end by the wall clock: measured, and labelled apart.
  ASSERT_EQ(bench.host_resident.size(), 3u);
  for (const detail::DeviceRate& rate : bench.host_resident) {
    EXPECT_EQ(rate.runs.size(), settings_.repetitions) << rate.operation;
    EXPECT_GT(rate.keys_per_s, 0) << rate.operation;
  }
  EXPECT_EQ(fake->pending(), 0u);
  EXPECT_EQ(fake->stats.wrong_device, 0);
}

TEST_P(DeviceBenchOnFake, AKernelThatDoesNothingYieldsNoFigure) {
  for (const char* kernel : {"insert", "contains", "insert_if_absent", "fill_keys"}) {
    FakeRuntime* fake = nullptr;
    Filter filter = fake_filter(fake);
    fake->no_op = kernel;
    try {
      detail::bench_device(filter, settings_);
      ADD_FAILURE() << "a " << kernel << " that does nothing gave figures";
    } catch (const DeviceError& e) {
      EXPECT_NE(std::string(e.what()).find("no figures"), std::string::npos) << e.what();
    }
    EXPECT_EQ(fake->pending(), 0u) << kernel;
  }
}

TEST_P(DeviceBenchOnFake, AFilterOffTheGpuIsRefusedByName) {
  Options on_cpu;
  on_cpu.backend = Backend::cpu;
  Filter cpu(layout_, on_cpu);
  try {
    detail::bench_device(cpu, settings_);
    ADD_FAILURE() << "a CPU filter was benchmarked as a GPU's";
  } catch (const BackendUnavailable& e) {
    EXPECT_NE(std::string(e.what()).find(cpu.implementation()), std::string::npos) << e.what();
  }
}

INSTANTIATE_TEST_SUITE_P(Seeds, DeviceBenchOnFake, testing::Range<std::uint64_t>(1, 4));

// Where no CUDA device is usable (every machine this test runs on without one), the reason is
// named: this build has no CUDA backend, or the driver's own answer.
TEST(DeviceBench, WithoutADeviceTheReasonIsNamed) {
  const std::string why = detail::device_bench_unavailable();
  if (why.empty()) GTEST_SKIP() << "a CUDA device is usable here";
  const bool named = why.find("CUDA device") != std::string::npos ||
                     why.find("does not include the CUDA backend") != std::string::npos;
  EXPECT_TRUE(named) << why;
}

}  // namespace
}  // namespace bulkbloom::test
