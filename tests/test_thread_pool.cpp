// The worker pool (src/core/thread_pool.*): every task of a call runs exactly once, and a
// participant that stalls leaves the tasks it has not begun to the others.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

#include "core/thread_pool.hpp"

namespace bulkbloom::test {
namespace {

TEST(ThreadPool, RunsEveryTaskOfEveryCallExactlyOnce) {
  // Back-to-back calls of tasks that take no time, their count changing from call to call, on
  // pools of up to four times as many threads as this machine has cores: workers come late to
  // most calls, often with their core taken, and one must never run a task of a call that has
  // ended, or a task of a later call with the earlier call's function. Successive calls take
  // turns between two task functions, both alive, each counting into its own vector: a task run
  // with the other call's function is missed by its own call.
  for (const unsigned threads : {1u, 2u, 3u, 5u, 8u}) {
    detail::ThreadPool pool(threads);
    std::vector<std::atomic<unsigned>> runs[2];
    const std::function<void(unsigned)> count_run[2] = {
        [&](unsigned i) { runs[0].at(i).fetch_add(1, std::memory_order_relaxed); },
        [&](unsigned i) { runs[1].at(i).fetch_add(1, std::memory_order_relaxed); }};
    for (int call = 0; call < 20000; ++call) {
      const unsigned tasks = static_cast<unsigned>(call * 7 % 19);
      runs[call % 2] = std::vector<std::atomic<unsigned>>(tasks);
      pool.run(tasks, count_run[call % 2]);
      for (unsigned i = 0; i < tasks; ++i) {
        ASSERT_EQ(runs[call % 2][i].load(), 1u)
            << threads << " threads, task " << i << " of " << tasks;
      }
    }
  }
}

TEST(ThreadPool, AStalledParticipantLeavesTheTasksItHasNotBegunToTheOthers) {
  // The first task a worker begins stalls until every other task has finished, as a worker whose
  // core another process has taken would. The call must still finish: the calling thread runs
  // the rest. (The caller's own first task waits until a worker has begun one, so that a worker
  // does take part.)
  constexpr unsigned kTasks = 16;
  constexpr auto kPatience = std::chrono::seconds(10);
  detail::ThreadPool pool(2);
  const std::thread::id caller = std::this_thread::get_id();
  std::mutex mutex;
  std::condition_variable changed;
  bool worker_began = false, caller_began = false, gave_up = false;
  unsigned finished = 0;
  pool.run(kTasks, [&](unsigned) {
    std::unique_lock lock(mutex);
    if (std::this_thread::get_id() == caller && !caller_began) {
      caller_began = true;
      gave_up |= !changed.wait_for(lock, kPatience, [&] { return worker_began; });
    } else if (std::this_thread::get_id() != caller && !worker_began) {
      worker_began = true;
      changed.notify_all();
      gave_up |= !changed.wait_for(lock, kPatience, [&] { return finished == kTasks - 1; });
    }
    ++finished;
    changed.notify_all();
  });
  EXPECT_FALSE(gave_up) << "a stalled worker held back tasks it had not begun";
  EXPECT_TRUE(worker_began);
  EXPECT_EQ(finished, kTasks);
}

}  // namespace
}  // namespace bulkbloom::test
