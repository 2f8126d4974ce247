#include "cpu/partitioned.hpp"

#include <algorithm>
#include <bit>
#include <cstdint>
#include <utility>
#include <vector>

#include "bulkbloom/detail/block_math.hpp"
#include "core/tuning.hpp"

namespace bulkbloom::detail {
namespace {

// The [begin, end) of slice `i` of `n` items cut into `parts` nearly equal slices.
std::size_t slice_begin(std::size_t n, unsigned parts, unsigned i) {
  return n * i / parts;  // n is far below 2^64 / parts
}

// Elements of T to skip from `p` to the next 64-byte line (0 if `p` starts one).
template <class T>
std::size_t line_offset_of(const T* p) {
  constexpr std::size_t kLine = 64;
  static_assert(kLine % sizeof(T) == 0);
  return (kLine - reinterpret_cast<std::uintptr_t>(p) % kLine) % kLine / sizeof(T);
}

unsigned ceil_log2(std::uint64_t v) {
  return v <= 1 ? 0 : static_cast<unsigned>(std::bit_width(v - 1));
}

// Partitions of kCachePartitionBytes, or 2^kMaxPartitionBits of them where that is more: from
// kMinPartitionedWriteFilterBytes up this makes 129 to 256 partitions, fine enough for the tasks to
// take nearly equal shares of the keys in whole partitions.
unsigned partition_shift_of(const Layout& layout) {
  const unsigned block_bits = ceil_log2(layout.num_blocks);
  const unsigned bytes_bits = ceil_log2(tuning::kCachePartitionBytes / block_bytes(layout.shape));
  return std::min(block_bits, std::max(bytes_bits, block_bits > tuning::kMaxPartitionBits
                                                       ? block_bits - tuning::kMaxPartitionBits
                                                       : 0u));
}

// Calls `visit(i, hash)` for each key i of keys[begin, end), in order, hashing kHashRun keys at a
// time into a buffer that stays in the L1. The visitors capture by value: pointers and layout
// held in the closure, unlike ones reached through references, are not reloaded after each of
// the visitors' byte stores, which may alias anything.
template <class Visit>
void for_each_hash(const CpuKernels& kernels, const Layout& layout, const std::uint64_t* keys,
                   std::size_t begin, std::size_t end, KeyMode mode, Visit visit) {
  std::uint64_t run_hashes[tuning::kHashRun];
  for (std::size_t run = begin; run < end; run += tuning::kHashRun) {
    const std::size_t run_size = std::min(end - run, tuning::kHashRun);
    kernels.hash(layout, keys + run, run_size, mode, run_hashes);
    for (std::size_t i = 0; i < run_size; ++i) visit(run + i, run_hashes[i]);
  }
}

}  // namespace

BulkPlan plan_bulk(BulkOp op, const Layout& layout, std::size_t n, unsigned threads) {
  BulkPlan plan;
  const bool split_pays =
      op == BulkOp::contains || layout.size_bytes() >= tuning::kMinParallelWriteFilterBytes;
  const bool parallel = threads > 1 && n >= tuning::kMinParallelKeys && split_pays;
  plan.tasks = parallel ? threads : 1;
  if (parallel && op != BulkOp::contains) {
    const std::uint64_t most = layout.size_bytes() / tuning::kMinWriteBytesPerTask;
    plan.tasks = static_cast<unsigned>(std::clamp<std::uint64_t>(most, 2, threads));
  }
  const bool locality = layout.size_bytes() >= tuning::kMinLocalityFilterBytes &&
                        static_cast<double>(n) >= tuning::kMinLocalityKeysPerBlock *
                                                      static_cast<double>(layout.num_blocks);
  const bool partitioned_threads =
      parallel &&
      layout.size_bytes() >= (op == BulkOp::contains ? tuning::kMinPartitionedReadFilterBytes
                                                     : tuning::kMinPartitionedWriteFilterBytes);
  if (locality || partitioned_threads) {
    plan.mode = BulkPlan::Mode::partitioned;
    plan.partition_shift = partition_shift_of(layout);
  } else if (parallel) {
    // contains only reads, so threads may share blocks; the writing calls route each key to the
    // task that owns its block.
    plan.mode =
        op == BulkOp::contains ? BulkPlan::Mode::key_slices : BulkPlan::Mode::routed_key_slices;
  }
  return plan;
}

std::optional<BulkPlan> alternative_plan(BulkOp op, const Layout& layout, std::size_t n,
                                         const BulkPlan& plan) {
  if (plan.tasks < 2) return std::nullopt;
  BulkPlan other = plan;
  if (op == BulkOp::contains && plan.mode == BulkPlan::Mode::key_slices &&
      n >= tuning::kMinChosenByMeasurementKeys &&
      layout.size_bytes() >= tuning::kMinChosenByMeasurementFilterBytes) {
    other.mode = BulkPlan::Mode::partitioned;
    other.partition_shift = partition_shift_of(layout);
    return other;
  }
  if (op != BulkOp::contains && n >= tuning::kMinTimedInsertKeys &&
      plan.mode == BulkPlan::Mode::routed_key_slices) {
    if (layout.size_bytes() < tuning::kMinBlockRangeAlternativeFilterBytes &&
        plan.tasks <= tuning::kMaxTasksTimedAgainstOneThread) {
      other.mode = BulkPlan::Mode::single;
      other.tasks = 1;
    } else {
      other.mode = BulkPlan::Mode::block_ranges;
    }
    return other;
  }
  if (op == BulkOp::insert && n >= tuning::kMinTimedInsertKeys) {  // partitioned
    other.mode = BulkPlan::Mode::atomic_key_slices;
    other.partition_shift = 0;
    return other;
  }
  if (op == BulkOp::insert_if_absent && n >= tuning::kMinTimedInsertKeys) {  // partitioned
    other.mode = BulkPlan::Mode::routed_key_slices;
    other.partition_shift = 0;
    return other;
  }
  return std::nullopt;
}

void insert_in_key_slices(const CpuKernels& kernels, const Layout& layout, std::byte* bits,
                          const std::uint64_t* keys, std::size_t n, KeyMode mode, ThreadPool& pool,
                          unsigned tasks) {
  pool.run(tasks, [&](unsigned t) {
    const std::size_t begin = slice_begin(n, tasks, t), end = slice_begin(n, tasks, t + 1);
    kernels.insert_atomic(layout, bits, keys + begin, end - begin, mode);
  });
}

void insert_by_plan(const BulkPlan& plan, const CpuKernels& kernels, const Layout& layout,
                    std::byte* bits, const std::uint64_t* keys, std::size_t n, KeyMode mode,
                    ThreadPool& pool, PartitionScratch& scratch, RoutedScratch& routed) {
  switch (plan.mode) {
    case BulkPlan::Mode::partitioned:
      scratch.run(BulkOp::insert, kernels, layout, bits, keys, n, mode, nullptr, pool,
                  plan.partition_shift);
      return;
    case BulkPlan::Mode::block_ranges:
      pool.run(plan.tasks, [&](unsigned t) {
        kernels.insert(layout, bits, keys, n, mode, task_blocks(layout, t, plan.tasks));
      });
      return;
    case BulkPlan::Mode::atomic_key_slices:
      insert_in_key_slices(kernels, layout, bits, keys, n, mode, pool, plan.tasks);
      return;
    case BulkPlan::Mode::routed_key_slices:
      routed.insert(kernels, layout, bits, keys, n, mode, pool, plan.tasks);
      return;
    case BulkPlan::Mode::single:
    case BulkPlan::Mode::key_slices:  // a reading plan: plan_bulk never gives it to a write
      kernels.insert(layout, bits, keys, n, mode, all_blocks(layout));
  }
}

BlockRange task_blocks(const Layout& layout, unsigned t, unsigned tasks) {
  return {static_cast<std::uint32_t>(slice_begin(layout.num_blocks, tasks, t)),
          static_cast<std::uint32_t>(slice_begin(layout.num_blocks, tasks, t + 1))};
}

std::uint64_t insert_if_absent_in_block_ranges(const CpuKernels& kernels, const Layout& layout,
                                               std::byte* bits, const std::uint64_t* keys,
                                               std::size_t n, KeyMode mode, std::uint8_t* is_new,
                                               ThreadPool& pool, unsigned tasks) {
  // Each task writes the flags of its own keys into a private zeroed buffer, merged afterwards:
  // writing them in place would have the tasks fight over every cache line of the flags.
  constexpr std::size_t kChunkKeys = std::size_t{1} << 20;  // bounds the buffers
  std::vector<std::uint8_t> task_flags(std::min(n, kChunkKeys) * tasks);
  std::vector<std::uint64_t> fresh(tasks, 0);
  for (std::size_t start = 0; start < n; start += kChunkKeys) {
    const std::size_t count = std::min(kChunkKeys, n - start);
    std::fill(task_flags.begin(), task_flags.begin() + count * tasks, 0);
    pool.run(tasks, [&](unsigned t) {
      fresh[t] +=
          kernels.insert_if_absent(layout, bits, keys + start, count, mode,
                                   task_blocks(layout, t, tasks), task_flags.data() + t * count);
    });
    std::uint8_t* out = is_new + start;
    std::copy_n(task_flags.data(), count, out);
    for (unsigned t = 1; t < tasks; ++t) {
      const std::uint8_t* flags = task_flags.data() + t * count;
      for (std::size_t i = 0; i < count; ++i) out[i] |= flags[i];
    }
  }
  std::uint64_t total = 0;
  for (auto f : fresh) total += f;
  return total;
}

void RoutedScratch::insert(const CpuKernels& kernels, const Layout& layout, std::byte* bits,
                           const std::uint64_t* keys, std::size_t n, KeyMode mode, ThreadPool& pool,
                           unsigned tasks) {
  run(kernels, layout, bits, keys, n, mode, nullptr, pool, tasks);
}

std::uint64_t RoutedScratch::insert_if_absent(const CpuKernels& kernels, const Layout& layout,
                                              std::byte* bits, const std::uint64_t* keys,
                                              std::size_t n, KeyMode mode, std::uint8_t* is_new,
                                              ThreadPool& pool, unsigned tasks) {
  // A key's owner is a byte; more tasks would share bytes (the pool runs the tasks on its threads
  // whatever their number).
  return run(kernels, layout, bits, keys, n, mode, is_new, pool,
             std::min(tasks, RouteLists::kMaxTasks));
}

std::uint64_t RoutedScratch::run(const CpuKernels& kernels, const Layout& layout, std::byte* bits,
                                 const std::uint64_t* keys, std::size_t n, KeyMode mode,
                                 std::uint8_t* is_new, ThreadPool& pool, unsigned tasks) {
  if (n == 0) return 0;
  const std::size_t chunks = (n - 1) / kChunkKeys + 1;
  const std::size_t lists = std::size_t{tasks} * tasks;
  // A list may receive every key of its slice; past it, the route's whole-vector writes and the
  // merge's reads of flags.
  static_assert(RouteLists::kRouteSlack >= CpuKernels::kMergeReadSlack);
  const std::size_t capacity =
      slice_begin(std::min(n, kChunkKeys) + tasks - 1, tasks, 1) + RouteLists::kRouteSlack;
  hashes_.resize(std::max(hashes_.size(), kHashSets * lists * capacity));
  if (is_new != nullptr) {
    owner_of_.resize(std::max(owner_of_.size(), kFlagSets * kChunkKeys));
    flags_.resize(std::max(flags_.size(), kFlagSets * lists * capacity));
  }
  // Each slice's counts on cache lines of their own: route() updates them as it appends, and a
  // line two tasks update at once would move between their cores all along the routing.
  constexpr std::size_t kCountsPerLine = 64 / sizeof(std::size_t);
  const std::size_t counts_stride = (tasks + kCountsPerLine - 1) / kCountsPerLine * kCountsPerLine;
  counts_.resize(std::max(counts_.size(), kHashSets * counts_stride * tasks + kCountsPerLine));
  std::size_t* const counts = counts_.data() + line_offset_of(counts_.data());
  task_fresh_.assign(tasks, 0);
  const BlockOwners owners = BlockOwners::of(layout, tasks);
  // Chunk c's keys, and its sets of lists: list (s, d) holds slice s's keys of task d's blocks,
  // and their flags.
  const auto chunk_begin = [&](std::size_t c) { return c * kChunkKeys; };
  const auto chunk_size = [&](std::size_t c) { return std::min(kChunkKeys, n - c * kChunkKeys); };
  const std::size_t first_chunk = next_chunk_;
  next_chunk_ += chunks;
  const auto hash_set = [&](std::size_t c) { return (first_chunk + c) % kHashSets; };
  const auto flag_set = [&](std::size_t c) { return (first_chunk + c) % kFlagSets; };
  const auto list_in = [&](std::size_t set, unsigned s, unsigned d) {
    return (set * lists + std::size_t{s} * tasks + d) * capacity;
  };
  const auto hash_list = [&](std::size_t c, unsigned s, unsigned d) {
    return hashes_.data() + list_in(hash_set(c), s, d);
  };
  const auto flag_list = [&](std::size_t c, unsigned s, unsigned d) {
    return flags_.data() + list_in(flag_set(c), s, d);
  };
  const auto count = [&](std::size_t c, unsigned s) -> std::size_t* {
    return counts + (hash_set(c) * tasks + s) * counts_stride;
  };
  const auto owner_of = [&](std::size_t c) { return owner_of_.data() + flag_set(c) * kChunkKeys; };
  const auto slice = [&](std::size_t c, unsigned s) {
    const std::size_t size = chunk_size(c);
    return std::pair{slice_begin(size, tasks, s), slice_begin(size, tasks, s + 1)};
  };
  // Chunk c's slice s routed to its keys' owners.
  const auto route = [&](std::size_t c, unsigned s) {
    const auto [begin, end] = slice(c, s);
    std::fill_n(count(c, s), tasks, 0);
    const RouteLists to{hash_list(c, s, 0), is_new != nullptr ? owner_of(c) + begin : nullptr,
                        capacity, count(c, s)};
    kernels.route(layout, keys + chunk_begin(c) + begin, end - begin, mode, owners, to);
  };
  // Chunk c's keys of task d's blocks written, and their flags into the flag lists.
  const auto write = [&](std::size_t c, unsigned d) {
    // insert_if_absent's flags need input order, slice after slice. An insert's bytes take any
    // order: it reads the other slices' lists first and slice d's last, which measured steadier
    // on two threads beside the two sets of lists alone when the pool dealt task d to the same
    // thread in both steps (bench/DECISIONS.md #37); claimed tasks usually still fall that way.
    for (unsigned k = 1; k <= tasks; ++k) {
      const unsigned s = is_new == nullptr ? (d + k) % tasks : k - 1;
      const std::uint64_t* hashes = hash_list(c, s, d);
      const std::size_t routed = count(c, s)[d];
      if (is_new == nullptr) {
        kernels.insert(layout, bits, hashes, routed, KeyMode::prehashed, all_blocks(layout));
      } else {
        task_fresh_[d] += kernels.insert_if_absent(layout, bits, hashes, routed, KeyMode::prehashed,
                                                   all_blocks(layout), flag_list(c, s, d));
      }
    }
  };
  // Chunk c's slice s's flags from every task's list to its keys' places, each key's from the
  // list its owner byte names: each task writes the flags of its own slice, so that no two cores
  // write one line of is_new. Not chunk c's counts: the route of chunk c + 2, in the same step,
  // rewrites them.
  const auto merge = [&](std::size_t c, unsigned s) {
    const auto [begin, end] = slice(c, s);
    kernels.merge_flags(owner_of(c) + begin, end - begin, flag_list(c, s, 0), capacity, tasks,
                        is_new + chunk_begin(c) + begin);
  };
  // Step p routes chunk p, writes chunk p - 1 and, for insert_if_absent, merges chunk p - 2's
  // flags: one join a chunk, and one or two more. Chunks are written one after another, so keys
  // of different chunks keep their sequential order; routing reads only keys and writes only the
  // lists and owner bytes of its own chunk's sets, and merging reads only flags that the join
  // before it completed and writes only its slice of is_new.
  const std::size_t steps = chunks + (is_new == nullptr ? 1 : 2);
  for (std::size_t step = 0; step < steps; ++step) {
    pool.run(tasks, [&](unsigned t) {
      if (is_new != nullptr && step >= 2) merge(step - 2, t);
      if (step >= 1 && step <= chunks) write(step - 1, t);
      if (step < chunks) route(step, t);
    });
  }
  std::uint64_t fresh = 0;
  for (unsigned d = 0; d < tasks; ++d) fresh += task_fresh_[d];
  return fresh;
}

void PartitionScratch::reserve(std::size_t keys) {
  if (keys <= capacity_) return;
  scratch_.reset();  // the old one goes first: both at once could double the peak
  scratch_.emplace(keys * (sizeof(std::uint64_t) + 2));
  part_hashes_ = reinterpret_cast<std::uint64_t*>(scratch_->data());
  part_of_key_ = reinterpret_cast<std::uint8_t*>(part_hashes_ + keys);
  part_flags_ = part_of_key_ + keys;
  capacity_ = keys;
}

std::uint64_t PartitionScratch::run(BulkOp op, const CpuKernels& kernels, const Layout& layout,
                                    std::byte* bits, const std::uint64_t* keys, std::size_t n,
                                    KeyMode mode, std::uint8_t* flags, ThreadPool& pool,
                                    unsigned partition_shift) {
  // A key's partition is kept in one byte: a finer partitioning is coarsened to
  // 2^kMaxPartitionBits block ranges. (Answers hold for any grouping of whole blocks; contiguous
  // ranges are what gives each thread's accesses their locality.)
  const unsigned block_bits = ceil_log2(layout.num_blocks);
  partition_shift = std::max(partition_shift, block_bits > tuning::kMaxPartitionBits
                                                  ? block_bits - tuning::kMaxPartitionBits
                                                  : 0u);
  std::lock_guard lock(mutex_);
  reserve(std::min(n, tuning::kMaxChunkKeys));
  std::uint64_t fresh = 0;
  // Chunks run one after another, so insert_if_absent keeps its sequential meaning across them.
  for (std::size_t start = 0; start < n; start += tuning::kMaxChunkKeys) {
    const std::size_t count = std::min(tuning::kMaxChunkKeys, n - start);
    fresh += run_chunk(op, kernels, layout, bits, keys + start, count, mode,
                       flags == nullptr ? nullptr : flags + start, pool, partition_shift);
  }
  return fresh;
}

std::uint64_t PartitionScratch::run_chunk(BulkOp op, const CpuKernels& kernels,
                                          const Layout& layout, std::byte* bits,
                                          const std::uint64_t* keys, std::size_t n, KeyMode mode,
                                          std::uint8_t* flags, ThreadPool& pool,
                                          unsigned partition_shift) {
  const auto num_blocks = static_cast<std::uint32_t>(layout.num_blocks);
  const std::size_t parts = ((std::size_t{num_blocks} - 1) >> partition_shift) + 1;
  const unsigned tasks = n >= tuning::kMinParallelKeys ? pool.size() : 1;
  const bool with_flags = op != BulkOp::insert;
  // Plain locals for the loops below: through the byte stores of partitions and flags, which may
  // alias anything, the compiler would otherwise reload the buffers' addresses and the layout on
  // every key.
  const Layout local_layout = layout;
  std::uint64_t* const part_hashes = part_hashes_;
  std::uint8_t* const part_of_key = part_of_key_;
  std::uint8_t* const part_flags = part_flags_;
  // 1. Each task hashes its slice of the input, finds each key's partition and counts its keys per
  // partition. The hashes are not kept: step 2 hashes again, which measured no slower than writing
  // them out and reading them back, moves fewer bytes in passes that share the memory bandwidth
  // with the kernels' blocks, and keeps the scratch at 10 bytes a key (bench/DECISIONS.md).
  std::vector<std::size_t> cursor(std::size_t{tasks} * parts, 0);  // [task][partition]
  pool.run(tasks, [&](unsigned t) {
    const std::size_t begin = slice_begin(n, tasks, t), end = slice_begin(n, tasks, t + 1);
    // Counted in a vector of the task's own: counters of two tasks in one cache line would
    // bounce it between the cores on every key.
    std::vector<std::size_t> counts(parts, 0);
    std::size_t* const count = counts.data();
    for_each_hash(kernels, layout, keys, begin, end, mode, [=](std::size_t i, std::uint64_t hash) {
      const auto part = static_cast<std::uint8_t>(local_layout.block_of(hash) >> partition_shift);
      part_of_key[i] = part;
      ++count[part];
    });
    std::copy(counts.begin(), counts.end(), cursor.begin() + std::size_t{t} * parts);
  });
  // 2. Partition-major offsets, earlier slices first: input order survives inside a partition.
  std::vector<std::size_t> part_begin(parts + 1);
  std::size_t offset = 0;
  for (std::size_t p = 0; p < parts; ++p) {
    part_begin[p] = offset;
    for (unsigned t = 0; t < tasks; ++t) {
      const std::size_t count = cursor[std::size_t{t} * parts + p];
      cursor[std::size_t{t} * parts + p] = offset;
      offset += count;
    }
  }
  part_begin[parts] = offset;
  const auto task_cursors = [&](unsigned t) {
    return std::vector<std::size_t>(cursor.begin() + std::size_t{t} * parts,
                                    cursor.begin() + std::size_t{t + 1} * parts);
  };
  pool.run(tasks, [&](unsigned t) {
    std::vector<std::size_t> cursors = task_cursors(t);
    std::size_t* const next = cursors.data();
    const std::size_t begin = slice_begin(n, tasks, t), end = slice_begin(n, tasks, t + 1);
    for_each_hash(kernels, layout, keys, begin, end, mode, [=](std::size_t i, std::uint64_t hash) {
      part_hashes[next[part_of_key[i]]++] = hash;
    });
  });
  // 3. Each task takes a contiguous run of whole partitions holding about n / tasks keys.
  std::vector<std::size_t> task_begin(tasks + 1);
  for (unsigned t = 0; t <= tasks; ++t) {
    const std::size_t target = slice_begin(n, tasks, t);
    task_begin[t] = *std::lower_bound(part_begin.begin(), part_begin.end(), target);
  }
  std::vector<std::uint64_t> task_fresh(tasks, 0);
  pool.run(tasks, [&](unsigned t) {
    const std::size_t begin = task_begin[t], count = task_begin[t + 1] - begin;
    const std::uint64_t* task_hashes = part_hashes + begin;
    std::uint8_t* out = part_flags + begin;
    switch (op) {
      case BulkOp::insert:
        kernels.insert(layout, bits, task_hashes, count, KeyMode::prehashed, all_blocks(layout));
        break;
      case BulkOp::contains:
        kernels.contains(layout, bits, task_hashes, count, KeyMode::prehashed, out);
        break;
      case BulkOp::insert_if_absent:
        task_fresh[t] = kernels.insert_if_absent(layout, bits, task_hashes, count,
                                                 KeyMode::prehashed, all_blocks(layout), out);
        break;
    }
  });
  // 4. Flags back to the keys' input positions: replaying step 2's slot order reads each
  // partition's flags in sequence and writes the output in sequence, with no random access.
  if (with_flags) {
    pool.run(tasks, [&](unsigned t) {
      std::vector<std::size_t> cursors = task_cursors(t);
      std::size_t* const next = cursors.data();
      const std::size_t begin = slice_begin(n, tasks, t), end = slice_begin(n, tasks, t + 1);
      for (std::size_t i = begin; i < end; ++i) flags[i] = part_flags[next[part_of_key[i]]++];
    });
  }
  std::uint64_t fresh = 0;
  for (auto f : task_fresh) fresh += f;
  return fresh;
}

}  // namespace bulkbloom::detail
