#include <catch2/catch.hpp>

#include <atomic>
#include <thread>
#include <vector>

#include "runtime/mpsc_queue.hpp"

using coserve::rt::mpsc_queue;
namespace rt = coserve::rt;

TEST_CASE("mpsc_queue is FIFO and bounded", "[mpsc]") {
  mpsc_queue<int> q(5);  // rounded up to 8
  REQUIRE(q.capacity() == 8);
  REQUIRE(q.empty());
  for (int i = 0; i < 8; ++i) REQUIRE(q.try_push(i) == rt::push_result::ok);
  int extra = 99;
  REQUIRE(q.try_push(extra) == rt::push_result::full);  // full: refused, value untouched
  REQUIRE(extra == 99);
  REQUIRE(q.size_approx() == 8);
  for (int i = 0; i < 8; ++i) {
    auto v = q.try_pop();
    REQUIRE(v);
    REQUIRE(*v == i);
  }
  REQUIRE_FALSE(q.try_pop());
  // Wraps around many laps.
  for (int lap = 0; lap < 100; ++lap) {
    REQUIRE(q.try_push(lap) == rt::push_result::ok);
    REQUIRE(q.try_pop().value() == lap);
  }
}

TEST_CASE("mpsc_queue keeps move-only values and destroys leftovers", "[mpsc]") {
  auto counter = std::make_shared<int>(0);
  {
    mpsc_queue<std::shared_ptr<int>> q(4);
    REQUIRE(q.try_push(counter) == rt::push_result::ok);
    REQUIRE(q.try_push(counter) == rt::push_result::ok);
    REQUIRE(counter.use_count() == 3);
  }
  REQUIRE(counter.use_count() == 1);
}

TEST_CASE("mpsc_queue stress: several producers, no loss, no duplicate, per-producer order",
          "[mpsc][concurrency]") {
  constexpr int producers = 4;
  constexpr int per_producer = 200000;
  mpsc_queue<uint64_t> q(1024);
  std::vector<std::thread> threads;
  for (int p = 0; p < producers; ++p) {
    threads.emplace_back([&q, p] {
      for (uint64_t i = 0; i < per_producer; ++i) {
        const uint64_t v = (uint64_t(p) << 32) | i;
        while (q.try_push(v) != rt::push_result::ok) std::this_thread::yield();
      }
    });
  }
  std::vector<uint64_t> next(producers, 0);
  uint64_t received = 0;
  bool in_order = true;
  while (received < uint64_t(producers) * per_producer) {
    auto v = q.try_pop();
    if (!v) {
      std::this_thread::yield();
      continue;
    }
    const auto p = *v >> 32;
    const auto i = *v & 0xffffffffu;
    if (p >= producers || i != next[p]) in_order = false;  // loss, duplicate or reorder
    if (p < producers) next[p] = i + 1;
    ++received;
  }
  for (auto& t : threads) t.join();
  REQUIRE(in_order);
  for (int p = 0; p < producers; ++p) REQUIRE(next[p] == per_producer);
  REQUIRE_FALSE(q.try_pop());
}

TEST_CASE("mpsc_queue: close refuses new pushes and keeps what was accepted", "[mpsc]") {
  rt::mpsc_queue<int> q(4);
  REQUIRE(q.try_push(1) == rt::push_result::ok);
  REQUIRE(q.try_push(2) == rt::push_result::ok);
  REQUIRE_FALSE(q.drained());  // not closed yet
  q.close();
  REQUIRE(q.closed());
  REQUIRE(q.try_push(3) == rt::push_result::closed);
  REQUIRE_FALSE(q.drained());  // two accepted values still queued
  REQUIRE(q.try_pop() == 1);
  REQUIRE(q.try_pop() == 2);
  REQUIRE_FALSE(q.try_pop().has_value());
  REQUIRE(q.drained());
  REQUIRE(q.size_approx() == 0);  // the closed bit is not counted
}

TEST_CASE("mpsc_queue: every push accepted before a concurrent close is consumed", "[mpsc][concurrency]") {
  for (int trial = 0; trial < 50; ++trial) {
    rt::mpsc_queue<int> q(1024);
    std::atomic<long> accepted{0};
    std::atomic<bool> go{true};
    std::vector<std::thread> ps;
    for (int p = 0; p < 3; ++p)
      ps.emplace_back([&] {
        while (go.load(std::memory_order_relaxed)) {
          const auto r = q.try_push(1);
          if (r == rt::push_result::ok) accepted.fetch_add(1, std::memory_order_relaxed);
          if (r == rt::push_result::closed) return;
        }
      });
    long popped = 0;
    for (int i = 0; i < 2000; ++i)
      if (q.try_pop()) ++popped;
    q.close();
    // Consumer: keep popping until every claim made before the close has been consumed.
    while (!q.drained())
      if (q.try_pop()) ++popped;
    go = false;
    for (auto& t : ps) t.join();
    REQUIRE(popped == accepted.load());
    REQUIRE_FALSE(q.try_pop().has_value());
  }
}
