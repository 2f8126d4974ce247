// A fixed set of worker threads that run one parallel call at a time; the caller takes part.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

namespace bulkbloom::detail {

class ThreadPool {
 public:
  /// A pool of `threads` participants (the calling thread is one of them). Workers start on the
  /// first call that needs them, so single-threaded filters and small batches never spawn any.
  explicit ThreadPool(unsigned threads) : threads_(threads < 1 ? 1 : threads) {}
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;
  ~ThreadPool();

  unsigned size() const { return threads_; }

  /// Runs `task(i)` once for each i in [0, tasks) on up to size() threads and returns when all
  /// are done. Participants claim tasks one at a time, from the last i down, until none is left, so
  /// which thread runs a task is not fixed: a participant that is late (a worker asleep, or its
  /// core taken by another process) leaves its share to the others instead of holding the call
  /// up, and the call waits only for tasks already begun. A call that finds the pool busy with
  /// another thread's call, or that comes from inside a task of any pool, runs its tasks on the
  /// calling thread instead of waiting: the cores are taken either way.
  void run(unsigned tasks, const std::function<void(unsigned)>& task);

 private:
  void start_workers();
  void work();
  // Claims the next task of call `call` (see claim_): the number of tasks it left unclaimed,
  // less one. nullopt once that call has none left.
  std::optional<unsigned> claim(std::uint32_t call);
  // Runs tasks of call `call` until none is left to claim.
  void run_claimed(std::uint32_t call, const std::function<void(unsigned)>* task);

  const unsigned threads_;
  std::mutex run_mutex_;  // held by the call the workers serve
  std::mutex mutex_;
  std::condition_variable wake_, done_;
  std::vector<std::thread> workers_;
  // The current call's number (high 32 bits) and tasks not yet claimed (low 32 bits), in one word
  // so that a claim fails once a later call has begun: a worker late for a call never runs a
  // task of it with the next call's task function. A claim's task is the count it leaves, so no
  // task count is read beside it. Polled before sleeping on the condition variables, like
  // unfinished_.
  std::atomic<std::uint64_t> claim_ = 0;
  // The current call's task. Read by a worker after it sees the call's number in claim_, and
  // called only once a claim against that number succeeds: the caller replaces it only after
  // every task of its call has finished, so after every claim of it.
  std::atomic<const std::function<void(unsigned)>*> task_ = nullptr;
  std::atomic<unsigned> unfinished_ = 0;  // tasks of the current call not yet finished
  bool stopping_ = false;
};

}  // namespace bulkbloom::detail
