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

std::uint32_t call_of(std::uint64_t claim) {
  return static_cast<std::uint32_t>(claim >> 32);
}
std::uint32_t unclaimed_of(std::uint64_t claim) {
  return static_cast<std::uint32_t>(claim);
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
  for (unsigned w = 1; w < threads_; ++w) workers_.emplace_back([this] { work(); });
}

std::optional<unsigned> ThreadPool::claim(std::uint32_t call) {
  std::uint64_t current = claim_.load(std::memory_order_acquire);
  for (;;) {
    if (call_of(current) != call || unclaimed_of(current) == 0) return std::nullopt;
    if (claim_.compare_exchange_weak(current, current - 1, std::memory_order_acq_rel,
                                     std::memory_order_acquire)) {
      return unclaimed_of(current) - 1;
    }
  }
}

void ThreadPool::run_claimed(std::uint32_t call, const std::function<void(unsigned)>* task) {
  while (const std::optional<unsigned> i = claim(call)) {
    (*task)(*i);
    if (unfinished_.fetch_sub(1, std::memory_order_acq_rel) == 1) {
      // Under the lock, so that a caller that found unfinished_ non-zero is already waiting.
      std::lock_guard done_lock(mutex_);
      done_.notify_one();
    }
  }
}

void ThreadPool::run(unsigned tasks, const std::function<void(unsigned)>& task) {
  const auto run_inline = [&] {
    for (unsigned i = 0; i < tasks; ++i) task(i);
  };
  if (tasks <= 1 || threads_ == 1 || running_tasks_of != nullptr) return run_inline();
  std::unique_lock run_lock(run_mutex_, std::try_to_lock);
  if (!run_lock.owns_lock()) return run_inline();
  if (workers_.empty()) start_workers();
  // Only the caller holding run_mutex_ changes the call number.
  const std::uint32_t call = call_of(claim_.load(std::memory_order_relaxed)) + 1;
  task_.store(&task, std::memory_order_relaxed);
  unfinished_.store(tasks, std::memory_order_relaxed);
  {
    std::lock_guard lock(mutex_);
    claim_.store(std::uint64_t{call} << 32 | tasks, std::memory_order_release);
  }
  wake_.notify_all();
  const ThreadPool* const outer = std::exchange(running_tasks_of, this);
  run_claimed(call, &task);
  running_tasks_of = outer;
  const auto finished = [this] { return unfinished_.load(std::memory_order_acquire) == 0; };
  if (poll(finished)) return;
  std::unique_lock lock(mutex_);
  done_.wait(lock, finished);
}

void ThreadPool::work() {
  running_tasks_of = this;  // a worker runs nothing but this pool's tasks
  std::uint32_t seen = 0;
  for (;;) {
    const auto new_call = [&] { return call_of(claim_.load(std::memory_order_acquire)) != seen; };
    poll(new_call);
    std::unique_lock lock(mutex_);
    wake_.wait(lock, [&] { return stopping_ || new_call(); });
    if (stopping_) return;
    seen = call_of(claim_.load(std::memory_order_acquire));
    lock.unlock();
    // The call may be over already, even a later one begun: claim() then fails, and the task
    // function read here is never called.
    run_claimed(seen, task_.load(std::memory_order_acquire));
  }
}

}  // namespace bulkbloom::detail
