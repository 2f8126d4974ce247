// A fixed set of worker threads that run one parallel task at a time; the caller takes part.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
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

  /// Runs `task(i)` for i in [0, tasks) on up to size() threads and returns when all are done.
  /// A call that finds the pool busy with another thread's call, or that comes from inside a
  /// task of any pool, runs its tasks on the calling thread instead of waiting: the cores are
  /// taken either way.
  void run(unsigned tasks, const std::function<void(unsigned)>& task);

 private:
  void start_workers();
  void work(unsigned worker);

  const unsigned threads_;
  std::mutex run_mutex_;  // held by the call the workers serve
  std::mutex mutex_;
  std::condition_variable wake_, done_;
  std::vector<std::thread> workers_;
  const std::function<void(unsigned)>* task_ = nullptr;
  unsigned tasks_ = 0;
  // Atomics, so that threads can poll them briefly before sleeping on the condition variables.
  std::atomic<std::uint64_t> generation_ = 0;
  std::atomic<unsigned> busy_ = 0;
  bool stopping_ = false;
};

}  // namespace bulkbloom::detail
