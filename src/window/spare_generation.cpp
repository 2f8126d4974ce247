#include "window/spare_generation.hpp"

#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <optional>
#include <thread>
#include <utility>

#include "core/filter_access.hpp"
#include "core/tuning.hpp"

namespace bulkbloom::detail {

// One thread for the whole process, shared by every window's spare and stopped when the last
// window that holds it goes. Windows hold it, never its jobs, so that it is never destroyed on
// its own thread.
class SpareWorker {
 public:
  static std::shared_ptr<SpareWorker> shared() {
    static std::mutex mutex;
    static std::weak_ptr<SpareWorker> current;
    const std::lock_guard lock(mutex);
    std::shared_ptr<SpareWorker> worker = current.lock();
    if (!worker) {
      worker = std::make_shared<SpareWorker>();
      current = worker;
    }
    return worker;
  }

  SpareWorker() : thread_([this] { run(); }) {}
  SpareWorker(const SpareWorker&) = delete;
  SpareWorker& operator=(const SpareWorker&) = delete;

  ~SpareWorker() {
    {
      const std::lock_guard lock(mutex_);
      stopping_ = true;
    }
    wake_.notify_one();
    thread_.join();
  }

  void post(std::function<void()> job) {
    {
      const std::lock_guard lock(mutex_);
      jobs_.push_back(std::move(job));
    }
    wake_.notify_one();
  }

 private:
  void run() {
    std::unique_lock lock(mutex_);
    while (true) {
      wake_.wait(lock, [&] { return stopping_ || !jobs_.empty(); });
      if (stopping_) return;  // the jobs left go with their windows
      std::function<void()> job = std::move(jobs_.front());
      jobs_.pop_front();
      lock.unlock();
      job();
      job = nullptr;  // drops what the job held before the lock is taken again
      lock.lock();
    }
  }

  std::mutex mutex_;
  std::condition_variable wake_;
  std::deque<std::function<void()>> jobs_;
  bool stopping_ = false;
  std::thread thread_;
};

// While `busy`, `filter` belongs to the worker's job; otherwise to the window, under `mutex`.
struct SpareGeneration::State {
  mutable std::mutex mutex;
  mutable std::condition_variable done;
  std::optional<Filter> filter;
  bool busy = false;
  bool host_only = true;    // false once a spare came out on a device: none is made again
  std::uint64_t bytes = 0;  // what `filter` holds, or will once the job is done
};

namespace {

// Posts the job that leaves `state.filter` a zeroed filter of `layout`: the dropped generation
// (or a stale spare) cleared or replaced, its pages faulted in here rather than by the window's
// first inserts. Called with state.mutex held and busy not set.
void make_ready(SpareWorker& worker, const std::shared_ptr<SpareGeneration::State>& state,
                const Layout& layout, const Options& options) {
  state->busy = true;
  state->bytes = layout.size_bytes();
  worker.post([state, layout, options] {
    bool device = false;
    try {
      if (!state->filter || !(state->filter->layout() == layout)) {
        state->filter.reset();
        state->filter.emplace(layout, options);
      }
      device = FilterAccess::engine(*state->filter).host_bytes() == nullptr;
      if (!device) state->filter->clear();
    } catch (...) {
      state->filter.reset();  // out of memory, say: no spare now, another try at the next rotation
    }
    if (device) state->filter.reset();
    {
      const std::lock_guard lock(state->mutex);
      state->host_only = state->host_only && !device;
      state->bytes = state->filter ? state->filter->layout().size_bytes() : 0;
      state->busy = false;
    }
    state->done.notify_all();
  });
}

}  // namespace

SpareGeneration::SpareGeneration() = default;
SpareGeneration::SpareGeneration(SpareGeneration&&) noexcept = default;
SpareGeneration& SpareGeneration::operator=(SpareGeneration&&) noexcept = default;
SpareGeneration::~SpareGeneration() = default;

void SpareGeneration::prepare(const Layout& layout, const Options& options) {
  if (layout.size_bytes() < tuning::kMinSpareGenerationBytes) return;
  if (!state_) {
    state_ = std::make_shared<State>();
    worker_ = SpareWorker::shared();
  }
  const std::lock_guard lock(state_->mutex);
  if (state_->busy || !state_->host_only) return;
  if (state_->filter && state_->filter->layout() == layout) return;
  make_ready(*worker_, state_, layout, options);
}

bool SpareGeneration::swap_into(Filter& slot, const Options& options) {
  if (state_) {
    const std::lock_guard lock(state_->mutex);
    if (state_->busy) return false;
    if (state_->filter && state_->filter->layout() == slot.layout()) {
      std::swap(*state_->filter, slot);
      make_ready(*worker_, state_, slot.layout(), options);
      return true;
    }
  }
  prepare(slot.layout(), options);
  return false;
}

void SpareGeneration::wait() const {
  if (!state_) return;
  std::unique_lock lock(state_->mutex);
  state_->done.wait(lock, [&] { return !state_->busy; });
}

std::uint64_t SpareGeneration::memory_bytes() const {
  if (!state_) return 0;
  const std::lock_guard lock(state_->mutex);
  return state_->bytes;
}

}  // namespace bulkbloom::detail
