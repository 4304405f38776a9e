// A small fixed pool of worker threads for the CPU forward pass (attention, elementwise work).
// parallel_for blocks the calling thread until every chunk ran; the caller runs chunks too, so a
// pool of 0 workers is plain sequential execution. One parallel_for at a time (the executor's
// thread is the only caller). Threads start in the constructor and join in the destructor.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace coserve {

class worker_pool {
 public:
  explicit worker_pool(int32_t num_workers) {
    for (int32_t i = 0; i < num_workers; ++i) threads_.emplace_back([this] { run(); });
  }
  worker_pool(const worker_pool&) = delete;
  worker_pool& operator=(const worker_pool&) = delete;
  ~worker_pool() {
    {
      std::lock_guard lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    for (auto& t : threads_) t.join();
  }

  int32_t num_threads() const noexcept { return int32_t(threads_.size()) + 1; }

  // Calls fn(i) for every i in [0, n), spread over the workers and the caller.
  void parallel_for(int64_t n, const std::function<void(int64_t)>& fn) {
    if (n <= 0) return;
    if (threads_.empty() || n == 1) {
      for (int64_t i = 0; i < n; ++i) fn(i);
      return;
    }
    {
      std::lock_guard lock(mu_);
      fn_ = &fn;
      n_ = n;
      next_ = 0;
      pending_ = n;
      ++generation_;
    }
    cv_.notify_all();
    drain();
    std::unique_lock lock(mu_);
    done_cv_.wait(lock, [this] { return pending_ == 0; });
    fn_ = nullptr;
  }

 private:
  // Takes indices one at a time under the lock; work items are coarse (a head of a sequence).
  void drain() {
    for (;;) {
      int64_t i;
      const std::function<void(int64_t)>* fn;
      {
        std::lock_guard lock(mu_);
        if (!fn_ || next_ >= n_) return;
        i = next_++;
        fn = fn_;
      }
      (*fn)(i);
      std::lock_guard lock(mu_);
      if (--pending_ == 0) done_cv_.notify_one();
    }
  }

  void run() {
    uint64_t seen = 0;
    for (;;) {
      {
        std::unique_lock lock(mu_);
        cv_.wait(lock, [&] { return stop_ || generation_ != seen; });
        if (stop_) return;
        seen = generation_;
      }
      drain();
    }
  }

  std::mutex mu_;
  std::condition_variable cv_;
  std::condition_variable done_cv_;
  const std::function<void(int64_t)>* fn_ = nullptr;
  int64_t n_ = 0;
  int64_t next_ = 0;
  int64_t pending_ = 0;
  uint64_t generation_ = 0;
  bool stop_ = false;
  std::vector<std::thread> threads_;
};

}  // namespace coserve
