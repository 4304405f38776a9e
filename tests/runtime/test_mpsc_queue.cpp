#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <memory>
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

// Four producers push 200000 tagged values each; the consumer checks that none is lost, duplicated
// or reordered per producer.
static void check_producers_stress(mpsc_queue<uint64_t>& q) {
  constexpr int producers = 4;
  constexpr int per_producer = 200000;
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

TEST_CASE("mpsc_queue stress: several producers, no loss, no duplicate, per-producer order",
          "[mpsc][concurrency]") {
  mpsc_queue<uint64_t> q(1024);
  check_producers_stress(q);
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

// Three producers push until the queue closes; the consumer pops `pops` times, closes it and pops
// until drained: everything accepted is consumed. make() builds each trial's queue.
template <class Make>
void check_close_race(Make make, int trials, int pops) {
  for (int trial = 0; trial < trials; ++trial) {
    auto q = make();
    std::atomic<long> accepted{0};
    std::atomic<bool> go{true};
    std::vector<std::thread> ps;
    for (int p = 0; p < 3; ++p)
      ps.emplace_back([&] {
        while (go.load(std::memory_order_relaxed)) {
          const auto r = q->try_push(1);
          if (r == rt::push_result::ok) accepted.fetch_add(1, std::memory_order_relaxed);
          if (r == rt::push_result::closed) return;
        }
      });
    long popped = 0;
    for (int i = 0; i < pops; ++i)
      if (q->try_pop()) ++popped;
    q->close();
    // Consumer: keep popping until every claim made before the close has been consumed.
    while (!q->drained())
      if (q->try_pop()) ++popped;
    go = false;
    for (auto& t : ps) t.join();
    REQUIRE(popped == accepted.load());
    REQUIRE_FALSE(q->try_pop().has_value());
  }
}

TEST_CASE("mpsc_queue: every push accepted before a concurrent close is consumed",
          "[mpsc][concurrency]") {
  check_close_race([] { return std::make_unique<mpsc_queue<int>>(1024); }, 50, 2000);
}

// ---- page release (rings of at least 8 release chunks)
// --------------------------------------------

// Every chunk dropped at its end, however fast the ring goes round.
constexpr std::chrono::nanoseconds always{0};

TEST_CASE("mpsc_queue with page release: capacity() always fits, FIFO over many laps", "[mpsc]") {
  // 16-byte slots, 4 KiB chunks: 256 slots a chunk, 8 of them in the ring.
  mpsc_queue<uint64_t> q(2048, 4096, always);
  REQUIRE(q.release_chunk() == 256);
  REQUIRE(q.capacity() == 2048 - 256);
  REQUIRE(mpsc_queue<uint64_t>(1024, 4096).release_chunk() == 0);  // 4 chunks: too small
  uint64_t next_in = 0, next_out = 0;
  // From every kind of consumer position (chunk start, inside, last slot) the ring takes capacity()
  // values, keeps their order, and gives them all back.
  for (std::size_t offset : {0, 1, 100, 254, 255, 256, 257, 1000, 1791, 2047}) {
    for (std::size_t i = 0; i < offset; ++i) {
      REQUIRE(q.try_push(next_in++) == rt::push_result::ok);
      REQUIRE(q.try_pop().value() == next_out++);
    }
    for (std::size_t i = 0; i < q.capacity(); ++i) {
      uint64_t v = next_in++;
      REQUIRE(q.try_push(v) == rt::push_result::ok);
    }
    REQUIRE(q.size_approx() == q.capacity());
    for (std::size_t i = 0; i < q.capacity(); ++i) REQUIRE(q.try_pop().value() == next_out++);
    REQUIRE_FALSE(q.try_pop());
  }
  // Full is still refused: fill until a push fails; it fails no earlier than capacity() values and
  // no later than the ring's size.
  std::size_t pushed = 0;
  for (;;) {
    uint64_t v = next_in;
    if (q.try_push(v) != rt::push_result::ok) break;
    ++next_in;
    ++pushed;
  }
  REQUIRE(pushed >= q.capacity());
  REQUIRE(pushed <= q.capacity() + q.release_chunk());
  while (auto v = q.try_pop()) REQUIRE(*v == next_out++);
  REQUIRE(next_out == next_in);
  // Bursts of varying length for 20 laps.
  uint64_t seed = 12345;
  for (int round = 0; round < 400; ++round) {
    seed = seed * 6364136223846793005ull + 1442695040888963407ull;
    const std::size_t burst = 1 + (seed >> 33) % q.capacity();
    for (std::size_t i = 0; i < burst; ++i) REQUIRE(q.try_push(next_in++) == rt::push_result::ok);
    for (std::size_t i = 0; i < burst; ++i) REQUIRE(q.try_pop().value() == next_out++);
  }
  REQUIRE_FALSE(q.try_pop());
}

TEST_CASE("mpsc_queue with page release: resident memory follows what is queued, not what passed",
          "[mpsc]") {
  using payload = std::array<char, 248>;  // 256-byte slots
  const std::size_t page = static_cast<std::size_t>(sysconf(_SC_PAGESIZE));
  constexpr std::size_t chunk_bytes = 64 << 10;
  auto run = [](mpsc_queue<payload>& q, std::size_t values, std::size_t burst) {
    payload p{};
    for (std::size_t done = 0; done < values; done += burst) {
      for (std::size_t i = 0; i < burst; ++i) {
        p[0] = char(i);
        REQUIRE(q.try_push(p) == rt::push_result::ok);
      }
      for (std::size_t i = 0; i < burst; ++i) REQUIRE(q.try_pop().value()[0] == char(i));
    }
  };
  mpsc_queue<payload> kept(8192, 0);                        // no page release: 2 MiB
  mpsc_queue<payload> released(8192, chunk_bytes, always);  // 256-slot chunks
  REQUIRE(kept.release_chunk() == 0);
  REQUIRE(released.release_chunk() == chunk_bytes / 256);
  REQUIRE(kept.resident_bytes() == 0);
  REQUIRE(released.resident_bytes() == 0);
  // Three laps' worth of values, 100 at a time.
  run(kept, 3 * 8192, 100);
  run(released, 3 * 8192, 100);
  INFO("kept " << kept.resident_bytes() << " B, released " << released.resident_bytes() << " B");
  REQUIRE(kept.resident_bytes() >= 8192 * 256);  // every slot's page stays
  // The chunk the consumer is in and the next one, plus a page either side.
  REQUIRE(released.resident_bytes() <= 2 * chunk_bytes + 2 * page);
  // A backlog is resident while queued and released once consumed.
  payload p{};
  for (int i = 0; i < 6000; ++i) REQUIRE(released.try_push(p) == rt::push_result::ok);
  REQUIRE(released.resident_bytes() >= 6000 * 256);
  for (int i = 0; i < 6000; ++i) REQUIRE(released.try_pop());
  REQUIRE(released.resident_bytes() <= 2 * chunk_bytes + 2 * page);
  // Values still queued when the ring is destroyed are destroyed (ASan: no leak).
  mpsc_queue<std::shared_ptr<int>> owners(4096, 4096, always);
  REQUIRE(owners.release_chunk() != 0);
  auto counter = std::make_shared<int>(0);
  for (int lap = 0; lap < 3; ++lap) {
    for (std::size_t i = 0; i < owners.capacity(); ++i)
      REQUIRE(owners.try_push(counter) == rt::push_result::ok);
    for (std::size_t i = 0; i + 7 < owners.capacity(); ++i) REQUIRE(owners.try_pop());
    while (owners.try_pop()) {
    }
  }
  for (int i = 0; i < 5; ++i) REQUIRE(owners.try_push(counter) == rt::push_result::ok);
  REQUIRE(counter.use_count() == 6);
}

TEST_CASE(
    "mpsc_queue with page release: a ring going round faster than release_after keeps its pages",
    "[mpsc]") {
  using payload = std::array<char, 248>;
  const std::size_t page = static_cast<std::size_t>(sysconf(_SC_PAGESIZE));
  constexpr std::size_t chunk_bytes = 64 << 10;
  mpsc_queue<payload> q(8192, chunk_bytes, std::chrono::milliseconds(1000));
  const std::size_t ring_bytes = 8192 * 256;
  auto lap = [&] {  // no assertion per value: a lap must take well under release_after
    payload p{};
    bool ok = true;
    for (std::size_t done = 0; done < q.capacity() + q.release_chunk(); done += 64) {
      for (int i = 0; i < 64; ++i) ok = ok && q.try_push(p) == rt::push_result::ok;
      for (int i = 0; i < 64; ++i) ok = ok && q.try_pop().has_value();
    }
    REQUIRE(ok);
  };
  lap();  // the first lap drops every chunk behind it
  REQUIRE(q.resident_bytes() <= 2 * chunk_bytes + 2 * page);
  lap();  // at once: too soon, every chunk is kept
  lap();
  REQUIRE(q.resident_bytes() >= ring_bytes - chunk_bytes);
  std::this_thread::sleep_for(std::chrono::milliseconds(1100));
  lap();  // 1 s after the last lap through each chunk: dropped again
  REQUIRE(q.resident_bytes() <= 2 * chunk_bytes + 2 * page);
}

TEST_CASE("mpsc_queue with page release, stress: several producers, no loss, no duplicate, order",
          "[mpsc][concurrency]") {
  // 256-slot chunks on a 2048-slot ring: a chunk is dropped every 256 values, 3125 times.
  mpsc_queue<uint64_t> q(2048, 4096, always);
  REQUIRE(q.release_chunk() == 256);
  check_producers_stress(q);
}

TEST_CASE("mpsc_queue with page release: every push accepted before a concurrent close is consumed",
          "[mpsc][concurrency]") {
  REQUIRE(mpsc_queue<int>(2048, 4096, always).release_chunk() != 0);
  check_close_race([] { return std::make_unique<mpsc_queue<int>>(2048, 4096, always); }, 20, 5000);
}
