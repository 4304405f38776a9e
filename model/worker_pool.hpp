// The CPU forward pass's thread pool: GEMM tiles, attention and elementwise work all run here (no
// second pool: the kernels are single-threaded and take the ranges they are given).
//
// parallel_for blocks the calling thread until every index ran; the caller takes indices too, so
// a pool of 0 workers is plain sequential execution. One parallel_for at a time (the executor's
// thread is the only caller). A step calls parallel_for a few hundred times, so workers spin for a
// short while before they sleep (on the generation counter, C++20 atomic wait): a wake-up through
// the kernel costs tens of microseconds, which would add up to milliseconds per step.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <thread>
#include <vector>

#if defined(__x86_64__) || defined(_M_X64)
#include <immintrin.h>
#endif

namespace coserve {

// Physical cores: distinct thread-sibling sets in sysfs (logical CPUs when sysfs has none).
int32_t physical_cores();

class worker_pool {
 public:
  explicit worker_pool(int32_t num_workers) {
    for (int32_t i = 0; i < num_workers; ++i) threads_.emplace_back([this] { run(); });
  }
  worker_pool(const worker_pool&) = delete;
  worker_pool& operator=(const worker_pool&) = delete;
  ~worker_pool() {
    stop_.store(true, std::memory_order_release);
    generation_.fetch_add(1, std::memory_order_acq_rel);
    generation_.notify_all();
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
    // The round's generation sits in the high half of the ticket. The ticket is closed (index
    // 2^32 - 1 under the new generation) before fn_ and n_ change, so a worker still holding the
    // previous generation sees a foreign generation and cannot claim an index with stale fn_/n_.
    // Sequentially consistent order makes "saw the new n_" imply "sees the closed ticket".
    const uint64_t gen = generation_.load() + 1;
    ticket_.store((gen << 32) | 0xffffffffu);
    fn_.store(&fn);
    n_.store(n);
    done_.store(0);
    ticket_.store(gen << 32);
    generation_.store(gen);
    generation_.notify_all();
    drain(gen);
    while (done_.load(std::memory_order_acquire) != n) pause();
  }

 private:
  static void pause() noexcept {
#if defined(__x86_64__) || defined(_M_X64)
    _mm_pause();
#else
    std::this_thread::yield();
#endif
  }

  // Claims indices of generation `gen` until none are left.
  void drain(uint64_t gen) {
    const std::function<void(int64_t)>* fn = fn_.load();
    const int64_t n = n_.load();
    uint64_t t = ticket_.load();
    for (;;) {
      if ((t >> 32) != (gen & 0xffffffffu) || int64_t(t & 0xffffffffu) >= n) return;
      if (!ticket_.compare_exchange_weak(t, t + 1)) continue;
      (*fn)(int64_t(t & 0xffffffffu));
      done_.fetch_add(1);
      t = ticket_.load();
    }
  }

  void run() {
    uint64_t seen = 0;
    for (;;) {
      uint64_t g = generation_.load(std::memory_order_acquire);
      if (g == seen) {
        // Spin about 100 microseconds, then sleep until the generation changes.
        const auto until = std::chrono::steady_clock::now() + std::chrono::microseconds(100);
        int spins = 0;
        while ((g = generation_.load(std::memory_order_acquire)) == seen) {
          if (++spins % 64 == 0 && std::chrono::steady_clock::now() > until) {
            generation_.wait(seen, std::memory_order_acquire);
          } else {
            pause();
          }
        }
      }
      if (stop_.load(std::memory_order_acquire)) return;
      seen = g;
      drain(g);
    }
  }

  // Sequentially consistent throughout (the default): see parallel_for.
  std::atomic<const std::function<void(int64_t)>*> fn_{nullptr};
  std::atomic<int64_t> n_{0};
  std::atomic<int64_t> done_{0};
  std::atomic<uint64_t> ticket_{0};  // generation << 32 | next index
  std::atomic<uint64_t> generation_{0};
  std::atomic<bool> stop_{false};
  std::vector<std::thread> threads_;
};

}  // namespace coserve
