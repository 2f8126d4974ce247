#include "cpu/thread_pool.hpp"

namespace bulkbloom::detail {

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
  if (tasks <= 1 || threads_ == 1) {
    for (unsigned i = 0; i < tasks; ++i) task(i);
    return;
  }
  std::lock_guard run_lock(run_mutex_);
  if (workers_.empty()) start_workers();
  {
    std::lock_guard lock(mutex_);
    task_ = &task;
    tasks_ = tasks;
    busy_ = threads_ - 1;
    ++generation_;
  }
  wake_.notify_all();
  // Participant p runs tasks p, p + size(), ...: the caller is participant 0.
  for (unsigned i = 0; i < tasks; i += threads_) task(i);
  std::unique_lock lock(mutex_);
  done_.wait(lock, [this] { return busy_ == 0; });
  task_ = nullptr;
}

void ThreadPool::work(unsigned worker) {
  std::uint64_t seen = 0;
  for (;;) {
    std::unique_lock lock(mutex_);
    wake_.wait(lock, [&] { return stopping_ || generation_ != seen; });
    if (stopping_) return;
    seen = generation_;
    const auto* task = task_;
    const unsigned tasks = tasks_;
    lock.unlock();
    for (unsigned i = worker; i < tasks; i += threads_) (*task)(i);
    lock.lock();
    if (--busy_ == 0) done_.notify_one();
  }
}

}  // namespace bulkbloom::detail
