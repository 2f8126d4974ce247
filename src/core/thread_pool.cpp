#include "core/thread_pool.hpp"

#include <chrono>
#include <utility>

#include "core/tuning.hpp"

namespace bulkbloom::detail {
namespace {

// Polls `done` for up to kPollTime; returns whether it became true.
template <class Done>
bool poll(const Done& done) {
  const auto deadline = std::chrono::steady_clock::now() + tuning::kPollTime;
  while (!done()) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
    if (std::chrono::steady_clock::now() > deadline) return false;
  }
  return true;
}

// The pool whose task the current thread is running, if any. A call made from inside a task (a
// worker's, or the caller's own share) runs inline: waiting for the pool it occupies would never
// end, and splitting again onto another pool's workers would put two threads on each core.
thread_local const ThreadPool* running_tasks_of = nullptr;

}  // namespace

ThreadPool::~ThreadPool() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  for (auto& worker : workers_) worker.join();
}

void ThreadPool::start_workers() {
  for (unsigned w = 1; w < threads_; ++w) workers_.emplace_back([this, w] { work(w); });
}

void ThreadPool::run(unsigned tasks, const std::function<void(unsigned)>& task) {
  const auto run_inline = [&] {
    for (unsigned i = 0; i < tasks; ++i) task(i);
  };
  if (tasks <= 1 || threads_ == 1 || running_tasks_of != nullptr) return run_inline();
  std::unique_lock run_lock(run_mutex_, std::try_to_lock);
  if (!run_lock.owns_lock()) return run_inline();
  if (workers_.empty()) start_workers();
  {
    std::lock_guard lock(mutex_);
    task_ = &task;
    tasks_ = tasks;
    busy_.store(threads_ - 1, std::memory_order_relaxed);
    generation_.fetch_add(1, std::memory_order_release);
  }
  wake_.notify_all();
  // Participant p runs tasks p, p + size(), ...: the caller is participant 0.
  const ThreadPool* const outer = std::exchange(running_tasks_of, this);
  for (unsigned i = 0; i < tasks; i += threads_) task(i);
  running_tasks_of = outer;
  if (poll([this] { return busy_.load(std::memory_order_acquire) == 0; })) return;
  std::unique_lock lock(mutex_);
  done_.wait(lock, [this] { return busy_.load(std::memory_order_acquire) == 0; });
}

void ThreadPool::work(unsigned worker) {
  running_tasks_of = this;  // a worker runs nothing but this pool's tasks
  std::uint64_t seen = 0;
  for (;;) {
    poll([&] { return generation_.load(std::memory_order_acquire) != seen; });
    std::unique_lock lock(mutex_);
    wake_.wait(lock, [&] { return stopping_ || generation_.load() != seen; });
    if (stopping_) return;
    seen = generation_.load();
    const auto* task = task_;
    const unsigned tasks = tasks_;
    lock.unlock();
    for (unsigned i = worker; i < tasks; i += threads_) (*task)(i);
    if (busy_.fetch_sub(1, std::memory_order_acq_rel) == 1) {
      // Under the lock, so that a caller that found busy_ non-zero is already waiting.
      std::lock_guard done_lock(mutex_);
      done_.notify_one();
    }
  }
}

}  // namespace bulkbloom::detail
