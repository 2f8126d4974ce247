// Bulk operations split by block range: between threads, and into cache-sized partitions.
//
// A blocked filter decomposes by block (DESIGN §3): keys of different blocks never interact. A
// batch is radix-partitioned by block range (keys keep their input order inside a partition),
// each thread runs the kernels over a contiguous run of partitions, and flags go back to the
// keys' input positions. Results are the single-threaded kernels' for every thread count.
#pragma once

#include <cstddef>
#include <cstdint>
#include <mutex>
#include <optional>
#include <vector>

#include "bulkbloom/layout.hpp"
#include "core/thread_pool.hpp"
#include "cpu/host_buffer.hpp"
#include "cpu/kernels.hpp"

namespace bulkbloom::detail {

enum class BulkOp : std::uint8_t { insert, contains, insert_if_absent };

/// Reusable buffers for partitioned calls (kept between calls: fresh pages cost a fault each).
class PartitionScratch {
 public:
  /// Runs `op` over `keys` with `partition_shift` (a key of block b goes to partition
  /// b >> partition_shift; a shift making more than 256 partitions is raised to make 256) on
  /// `pool`; `flags` receives contains / is_new flags (unused for
  /// insert). Returns the number of new keys for insert_if_absent, else 0.
  std::uint64_t run(BulkOp op, const CpuKernels& kernels, const Layout& layout, std::byte* bits,
                    const std::uint64_t* keys, std::size_t n, KeyMode mode, std::uint8_t* flags,
                    ThreadPool& pool, unsigned partition_shift);

 private:
  std::uint64_t run_chunk(BulkOp op, const CpuKernels& kernels, const Layout& layout,
                          std::byte* bits, const std::uint64_t* keys, std::size_t n, KeyMode mode,
                          std::uint8_t* flags, ThreadPool& pool, unsigned partition_shift);
  void reserve(std::size_t keys);

  std::mutex mutex_;  // contains() on a shared filter may come from several threads
  std::size_t capacity_ = 0;
  // The three buffers below, in memory that may get 2 MiB pages: the scatter writes 256 streams.
  std::optional<HostBuffer> scratch_;
  std::uint64_t* part_hashes_ = nullptr;  // partition by partition
  // Each key's partition: run() makes at most 256.
  std::uint8_t* part_of_key_ = nullptr;
  std::uint8_t* part_flags_ = nullptr;
};

/// How a bulk call runs.
struct BulkPlan {
  enum class Mode : std::uint8_t {
    single,             // the calling thread, one kernel call
    key_slices,         // contains: each task reads a contiguous slice of the keys
    block_ranges,       // insert paths: each task scans every key and owns a range of blocks
    partitioned,        // radix-partitioned by block range first (PartitionScratch): for locality,
                        // or to spread a large filter's blocks over several threads
    atomic_key_slices,  // insert: each task sets the bits of a contiguous slice of the keys with
                        // atomic ORs, in any block (CpuKernels::insert_atomic)
    routed_key_slices,  // insert paths: each task hashes a contiguous slice of the keys once and
                        // routes each key to the task owning its block; each task then writes
                        // its blocks' keys, slice after slice (RoutedScratch)
  };
  Mode mode = Mode::single;
  unsigned tasks = 1;
  unsigned partition_shift = 0;  // for Mode::partitioned
};

/// Chooses the plan for `n` keys on a filter of `layout` with `threads` threads available. Writes
/// to a filter that splitting does not speed up stay on one thread whatever `threads` is.
BulkPlan plan_bulk(BulkOp op, const Layout& layout, std::size_t n, unsigned threads);

/// The other plan worth timing against `plan` (plan_bulk's for the same call) on several threads,
/// if any: partitions, for a contains of at least 2^18 keys that `plan` reads in key slices from a
/// filter of 1 to 6 GiB; for a write of at least 2^16 keys that `plan` routes, one thread under
/// 16 MiB on up to four tasks (where routing pays on AVX-512 and not always on AVX2) and block
/// ranges otherwise, up to 1 GiB (which of the two is faster on two threads turned on the host's
/// load and the filter's size in the runs so far; both: bench/DECISIONS.md #37); atomic key slices,
/// for an insert of at least 2^16 keys that `plan` partitions; routed key slices, for an
/// insert_if_absent of at least 2^16 keys that `plan` partitions (from 1 GiB, or a batch of 64 keys
/// a block and more from 64 MiB; at 2 GiB routing measured as fast as partitions or faster:
/// bench/DECISIONS.md #37, "Owner bytes"). Both give the same answers; which is faster depends on
/// the machine (cpu/plan_chooser.hpp).
std::optional<BulkPlan> alternative_plan(BulkOp op, const Layout& layout, std::size_t n,
                                         const BulkPlan& plan);

/// Mode::routed_key_slices: insert and insert_if_absent on several threads with every key hashed
/// once and visited by one task (DESIGN §3, bench/DECISIONS.md "Keys routed to their blocks'
/// owners"). Per chunk of keys:
///  1. each task hashes a contiguous slice of the keys and appends each hash to one of its
///     lists, that of the task owning the key's block (CpuKernels::route, BlockOwners), and for
///     insert_if_absent writes that task's number beside the key (a byte);
///  2. each task writes its own blocks' keys: the lists every slice made for it, with the kernels
///     over prehashed keys; insert_if_absent's slice after slice (so in input order), flags into
///     a list beside each list of keys; an insert's own slice last;
///  3. insert_if_absent: each task puts its own slice's flags back in input order, each key's
///     from the list of the task its byte names (CpuKernels::merge_flags).
/// The steps are pipelined: one pool call runs step 3 of a chunk, step 2 of the next and step 1 of
/// the one after, so a call of c chunks joins c + 1 times for an insert and c + 2 for
/// insert_if_absent. Bytes, flags and count are one sequential call's. insert_if_absent runs on
/// at most RouteLists::kMaxTasks tasks, whatever `tasks` asks.
class RoutedScratch {
 public:
  void insert(const CpuKernels& kernels, const Layout& layout, std::byte* bits,
              const std::uint64_t* keys, std::size_t n, KeyMode mode, ThreadPool& pool,
              unsigned tasks);
  std::uint64_t insert_if_absent(const CpuKernels& kernels, const Layout& layout, std::byte* bits,
                                 const std::uint64_t* keys, std::size_t n, KeyMode mode,
                                 std::uint8_t* is_new, ThreadPool& pool, unsigned tasks);

  /// Keys per chunk: the lists of a chunk (8 bytes a key; insert_if_absent 10) stay in the caches
  /// between the steps.
  static constexpr std::size_t kChunkKeys = std::size_t{1} << 16;

 private:
  // `is_new` null for an insert. Returns the count of new keys.
  std::uint64_t run(const CpuKernels& kernels, const Layout& layout, std::byte* bits,
                    const std::uint64_t* keys, std::size_t n, KeyMode mode, std::uint8_t* is_new,
                    ThreadPool& pool, unsigned tasks);

  // Sets of tasks × tasks lists, chunks taking turns: a chunk is routed into one set while the
  // chunk before it is written from another. A chunk writing the lists that were read just before
  // would wait on the reading core for every line (a slice whose lists were read last routed 1.5x
  // slower than the other beside it: bench/DECISIONS.md #37). Owner bytes and flags live a step
  // longer, until the chunk's merge, so they take turns in three sets.
  static constexpr std::size_t kHashSets = 2;
  static constexpr std::size_t kFlagSets = 3;
  static_assert(kHashSets >= 2, "a chunk is routed into one set while the one before is read");
  static_assert(kFlagSets >= 3, "routed, written and merged in one step: three chunks' flags");
  std::vector<std::uint64_t> hashes_;
  std::size_t next_chunk_ = 0;          // the chunks run so far: which sets the next call starts in
  std::vector<std::uint8_t> owner_of_;  // each key's task, kChunkKeys for each set
  std::vector<std::uint8_t> flags_;
  std::vector<std::size_t> counts_;  // a set's slice s's from a cache line of their own, d's at d
  std::vector<std::uint64_t> task_fresh_;
};

/// Mode::atomic_key_slices: `tasks` tasks on `pool`, each inserting a contiguous slice of the keys
/// with `kernels.insert_atomic`. The bytes are those of one `kernels.insert` over all the keys.
void insert_in_key_slices(const CpuKernels& kernels, const Layout& layout, std::byte* bits,
                          const std::uint64_t* keys, std::size_t n, KeyMode mode, ThreadPool& pool,
                          unsigned tasks);

/// An insert run by `plan`, plan_bulk's or alternative_plan's for BulkOp::insert (any of them: the
/// engine's chooser, and bench/write_plans which times each plan forced). `scratch` serves
/// Mode::partitioned, `routed` Mode::routed_key_slices. The bytes are those of one
/// `kernels.insert` over all the keys.
void insert_by_plan(const BulkPlan& plan, const CpuKernels& kernels, const Layout& layout,
                    std::byte* bits, const std::uint64_t* keys, std::size_t n, KeyMode mode,
                    ThreadPool& pool, PartitionScratch& scratch, RoutedScratch& routed);

/// The blocks task `t` of `tasks` owns in Mode::block_ranges.
BlockRange task_blocks(const Layout& layout, unsigned t, unsigned tasks);

/// Mode::block_ranges for insert_if_absent: `tasks` tasks on `pool`, each running
/// `kernels.insert_if_absent` over every key for its own range of blocks. Returns the count of new
/// keys; `is_new` as the single call's.
std::uint64_t insert_if_absent_in_block_ranges(const CpuKernels& kernels, const Layout& layout,
                                               std::byte* bits, const std::uint64_t* keys,
                                               std::size_t n, KeyMode mode, std::uint8_t* is_new,
                                               ThreadPool& pool, unsigned tasks);

}  // namespace bulkbloom::detail
