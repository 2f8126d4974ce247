// A blocking hand-off queue between the reader, the filter and the writer threads.
#pragma once

#include <condition_variable>
#include <deque>
#include <mutex>
#include <optional>

namespace bulkbloom::cli {

/// Unbounded FIFO; the buffer pools that travel through it bound its length.
template <typename T>
class WorkQueue {
 public:
  void push(T item) {
    {
      std::lock_guard lock(mutex_);
      items_.push_back(std::move(item));
    }
    ready_.notify_one();
  }

  /// Waits for an item; nullopt once the queue is closed and empty.
  std::optional<T> pop() {
    std::unique_lock lock(mutex_);
    ready_.wait(lock, [&] { return !items_.empty() || closed_; });
    if (items_.empty()) return std::nullopt;
    T item = std::move(items_.front());
    items_.pop_front();
    return item;
  }

  /// Wakes every waiter; pop() drains what is left, then returns nullopt.
  void close() {
    {
      std::lock_guard lock(mutex_);
      closed_ = true;
    }
    ready_.notify_all();
  }

 private:
  std::mutex mutex_;
  std::condition_variable ready_;
  std::deque<T> items_;
  bool closed_ = false;
};

}  // namespace bulkbloom::cli
