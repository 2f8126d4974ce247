// Every performance threshold of the library in one place: the sizes and counts at which a plan,
// a thread count or a chunk size changes. Each says why it has its value; the measurements behind
// them are in bench/RESULTS.md and bench/DECISIONS.md. Changing one changes speed, never answers
// (every plan gives the scalar oracle's bytes and flags). Limits of formats and of the model are
// not here: they are where the format or rule is defined.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>

namespace bulkbloom::detail::tuning {

// --- Bulk calls on the CPU (src/cpu/partitioned.cpp: plan_bulk, alternative_plan) -------------

// Keys per partitioned pass: bounds the scratch (10 bytes a key) for batches of any size.
inline constexpr std::size_t kMaxChunkKeys = std::size_t{1} << 24;
// Keys hashed at a time, then partitioned or scattered while their hashes are in the L1.
inline constexpr std::size_t kHashRun = 512;
// Below this many keys a call stays on the calling thread: waking workers costs more.
inline constexpr std::size_t kMinParallelKeys = std::size_t{1} << 14;
// Smaller filters are written by one thread whatever the thread count, one the caller set
// included. Two threads routing each key to its block's owner gained 1.06-1.62x one thread's speed
// from 1 MiB to 16 MiB on a quiet host, and lost or gained at random below (bench/DECISIONS.md
// #37, "Routed writes from 1 MiB").
inline constexpr std::uint64_t kMinParallelWriteFilterBytes = std::uint64_t{1} << 20;
// Routed writes to smaller filters on up to kMaxTasksTimedAgainstOneThread tasks are timed against
// one thread, others against block ranges. Whether routing repays its pass over the keys there
// turns on the target: with AVX-512's compressing stores it costs ~0.9 ns a key and two routed
// threads gained 1.06-1.62x from 1 MiB, but AVX2 then routed a key at a time (~2.8 ns), and two
// threads on AVX2 measured 0.89-0.95x one thread for insert_if_absent from 1 to 16 MiB, 1.19-1.48x
// for insert (bench/DECISIONS.md #37, "One thread as the other plan under 16 MiB"; AVX2 has split
// vectors as AVX-512 does since "Routing on AVX2", not remeasured under 16 MiB). A one-thread
// call takes about as long as `tasks` routed calls, so with more tasks its rechecks would cost
// more than a slower plan found by them could save; block ranges split the work.
inline constexpr std::uint64_t kMinBlockRangeAlternativeFilterBytes = std::uint64_t{16} << 20;
inline constexpr unsigned kMaxTasksTimedAgainstOneThread = 4;
// A write on several threads takes at most one task for each this many bytes of the filter (and
// at least two): routing keeps lists of about a MiB a task for the filter's lifetime, which for a
// small filter on many threads would outweigh the filter, and a small filter's call is too short
// to split many ways.
inline constexpr std::uint64_t kMinWriteBytesPerTask = std::uint64_t{512} << 10;
// A partition's share of the filter when partitioning for locality: an eighth of the L3, so a
// partition stays cached while it is worked on. Larger filters get larger partitions rather than
// more than 2^kMaxPartitionBits of them: beyond a few hundred, the scatter's output streams no
// longer fit the L1 and the partitioning pass slows.
inline constexpr std::uint64_t kCachePartitionBytes = std::uint64_t{4} << 20;
inline constexpr unsigned kMaxPartitionBits = 8;
static_assert(kMaxPartitionBits <= 8, "a key's partition is kept in one byte");
// Partitioning for locality can only pay when the filter is beyond the caches and the batch
// revisits each block many times: the three extra passes over the batch measured costlier than the
// cache misses they save up to tens of keys per block (bench/RESULTS.md), so the prefetching
// kernels are chosen there; these thresholds keep partitioning for still denser batches only.
inline constexpr std::uint64_t kMinLocalityFilterBytes = std::uint64_t{64} << 20;
inline constexpr double kMinLocalityKeysPerBlock = 64.0;
// Writes on several threads to a filter this large are partitioned even where locality cannot pay:
// split by block range instead, each thread would hash and scan every key of the batch to find its
// own, and with every visit a miss to memory that doubled work measured costlier than one hashing
// and two partitioning passes (insert and insert_if_absent at 4 GiB; at 0.5 GiB insert_if_absent,
// whose flags take a fourth pass, was still faster by block range; bench/RESULTS.md).
inline constexpr std::uint64_t kMinPartitionedWriteFilterBytes = std::uint64_t{1} << 30;
// Reading threads do not scan each other's keys, but on a filter beyond what the TLB maps with huge
// pages each key's block costs a page walk as well as a miss; partitioned, a thread's blocks come
// from one partition at a time. Zen 4's L2 TLB maps 6 GiB of 2 MiB pages (3,072 entries); on the VM
// measured, key slices were faster at 4 GiB and partitions at 8 and 12 GiB (bench/DECISIONS.md,
// "Partitioned threads for big filters").
inline constexpr std::uint64_t kMinPartitionedReadFilterBytes = std::uint64_t{6} << 30;
// From here up to kMinPartitionedReadFilterBytes, whether partitions or key slices read faster
// turned out to depend on the host as much as on the size (cpu/plan_chooser.hpp), so the engine
// reads with partitions now and then as well and keeps the faster. Beyond it partitions were the
// faster on every host measured, and each trial of key slices there cost a slow call.
// Between block ranges and partitions a write keeps the one chosen by size: one host wrote a little
// faster by block range, the others far slower, and every trial of the slower plan costs a slow
// call (bench/DECISIONS.md, "Plans chosen by measurement"). Below 1 GiB, routed key slices (the
// plan by size) and block ranges are timed against each other from
// kMinBlockRangeAlternativeFilterBytes (below, routed writes and one thread, up to
// kMaxTasksTimedAgainstOneThread tasks): routed do less work, but on two threads of a shared VM
// each was the faster in some runs (bench/DECISIONS.md, #37). Against
// atomic key slices, which neither scan the batch once per thread nor partition it, but pay a
// locked OR for each word a key changes and bounce lines two threads write, an insert is timed
// from 1 GiB, where the plan by size partitions: the balance depends on the filter's fill and the
// host's cost of an atomic as much as on the size (bench/DECISIONS.md, "Inserts without routing");
// below, it lost to block ranges by 2x on the quiet host (bench/RESULTS.md). Reads of fewer keys
// keep the size-chosen plan: they are over in well under a millisecond, too short to time against a
// shared machine's noise. Inserts are timed from 2^16 keys, a CLI chunk of 2 MiB of 8-byte keys
// and bench_filter's small batch, or the second plan would never serve batches of that size: both
// plans there run on every thread (or one thread against at most four routed tasks), so a trial of
// the slower costs at most a few milliseconds, and a call slowed by a neighbour does not mislead
// the chooser, which keeps the fastest of each plan's last calls and decides on calls made close
// together.
inline constexpr std::uint64_t kMinChosenByMeasurementFilterBytes = std::uint64_t{1} << 30;
inline constexpr std::size_t kMinChosenByMeasurementKeys = std::size_t{1} << 18;
inline constexpr std::size_t kMinTimedInsertKeys = std::size_t{1} << 16;
static_assert(kMinTimedInsertKeys >= kMinParallelKeys, "a timed insert runs on several threads");

// --- The CUDA backend (src/cuda) ---------------------------------------------------------------

// Backend::automatic leaves filters smaller than this on the CPU. Chosen, not yet measured: such
// a filter fits in one CPU core's L2, where the CPU answers a batch of 10^4 keys in about the
// time a GPU call spends on its launch and its copies over PCIe. bench/gpu_check.sh's figures
// are to replace it with a measured bound.
inline constexpr std::uint64_t kAutomaticMinFilterBytes = std::uint64_t{1} << 20;
// Host bytes combined into a device filter per step, through one device buffer.
inline constexpr std::uint64_t kCombineChunkBytes = std::uint64_t{64} << 20;
// Host copies into pinned memory smaller than this stay on the calling thread.
inline constexpr std::size_t kParallelCopyBytes = std::size_t{8} << 20;

// --- Chunks and threads elsewhere -------------------------------------------------------------

// A window hashes keys once per chunk this long, then every generation works on the hashes.
inline constexpr std::size_t kWindowHashChunk = std::size_t{1} << 16;
// Byte-string keys are hashed into a stack buffer this many at a time, then passed on as hashes.
inline constexpr std::size_t kByteKeyHashChunk = 4096;
// Bytes the command line reads per chunk of input: one chunk is one bulk filter call. Per-chunk
// costs are microseconds, so small chunks cost nothing, and a chunk's keys and flags then stay in
// cache while the engine works on them (2 MiB chunks dedup faster than 32 MiB ones,
// bench/DECISIONS.md).
inline constexpr std::size_t kInputChunkBytes = std::size_t{2} << 20;
// The CPU's fill statistics (Filter::popcount, Filter::current_fpr) split a filter into spans of
// this many bytes, which the engine's threads share out. The rate's partial sums are added span by
// span in order, so the span fixes the summation order: the rate is the same double for every
// thread count. 4 MiB: a span's pass is about a millisecond, long beside a task's start.
inline constexpr std::uint64_t kFillSpanBytes = std::uint64_t{4} << 20;
// Bytes per read or write call of the file helpers.
inline constexpr std::size_t kIoChunk = std::size_t{8} << 20;
// How long a thread polls before it blocks: back-to-back bulk calls come microseconds apart, while
// waking a sleeping thread costs tens of microseconds in a VM.
inline constexpr std::chrono::microseconds kPollTime{50};

}  // namespace bulkbloom::detail::tuning
