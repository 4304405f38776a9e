// Scheduling and the trace clock: where a ready actor runs (deferred after a synchronous
// handler, posted from a coroutine), when a sender waiting for space is woken, and the clock
// spans are timed with.
#include <asio/io_context.hpp>
#include <asio/steady_timer.hpp>
#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <cstring>
#include <future>
#include <thread>
#include <vector>

#include "runtime/clock.hpp"
#include "runtime/mailbox.hpp"
#include "runtime/system.hpp"

using namespace coserve;
using namespace std::chrono_literals;

namespace {

int64_t steady_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// ---- a handler that makes another actor ready, then keeps its thread for a while ----

struct note {};
struct times {
  std::atomic<int64_t> sender_done{0};
  std::atomic<int64_t> receiver_start{0};
  std::promise<void> received;
};

struct receiver {
  using messages = rt::message_list<note>;
  times* t;
  void handle(note&) {
    t->receiver_start = steady_ns();
    t->received.set_value();
  }
};

struct kick {};
struct sync_sender {
  using messages = rt::message_list<kick>;
  rt::actor_ref<receiver> to;
  times* t;
  void handle(kick&) {
    (void)to.tell(note{});
    std::this_thread::sleep_for(50ms);  // the receiver may not run on this thread meanwhile
    t->sender_done = steady_ns();
  }
};

struct coroutine_sender {
  using messages = rt::message_list<kick>;
  rt::actor_ref<receiver> to;
  times* t;
  asio::awaitable<void> handle(kick&) {
    (void)to.tell(note{});
    std::this_thread::sleep_for(50ms);  // runs before the coroutine's first suspension
    t->sender_done = steady_ns();
    co_return;
  }
};

// ---- producers that wait for space in a small mailbox, and a consumer checking order ----

struct item {
  int producer;
  int seq;
};
struct checker {
  using messages = rt::message_list<item>;
  std::vector<int>* next;  // per producer: the next sequence number expected
  std::atomic<long>* bad;
  long expect;
  std::promise<void>* done;
  long got = 0;
  void handle(item& m) {
    if ((*next)[m.producer] != m.seq) bad->fetch_add(1);
    (*next)[m.producer] = m.seq + 1;
    if (++got == expect) done->set_value();
  }
};
struct run_producer {
  int id;
  int n;
};
struct producer {
  using messages = rt::message_list<run_producer>;
  rt::actor_ref<checker> to;
  asio::awaitable<void> handle(run_producer& r) {
    for (int i = 0; i < r.n; ++i) {
      if (to.tell(item{r.id, i}) == rt::send_status::full) co_await to.send(item{r.id, i});
    }
  }
};

}  // namespace

TEST_CASE("trace_clock is monotonic on every thread and runs at steady_clock's rate", "[clock]") {
  const char* src = rt::trace_clock::source();
  INFO("source " << src);
  CHECK((std::strcmp(src, "tsc") == 0 || std::strcmp(src, "cntvct") == 0 ||
         std::strcmp(src, "steady_clock") == 0));
  // Readings handed from thread to thread never go backwards by more than the CPU's reordering
  // window (the counter read is not ordered with the load before it, and a contended load can
  // take microseconds: runtime/clock.hpp); 100 us of slack still catches counters out of step.
  std::atomic<int64_t> last{rt::trace_clock::now_ns()};
  std::atomic<int> backwards{0};
  std::vector<std::thread> ts;
  for (int k = 0; k < 4; ++k)
    ts.emplace_back([&] {
      for (int i = 0; i < 20000; ++i) {
        const int64_t seen = last.load(std::memory_order_acquire);
        const int64_t now = rt::trace_clock::now_ns();
        if (now < seen - 100'000) backwards.fetch_add(1);
        int64_t cur = seen;
        while (cur < now && !last.compare_exchange_weak(cur, now, std::memory_order_acq_rel)) {
        }
      }
    });
  for (auto& t : ts) t.join();
  CHECK(backwards.load() == 0);
  // Over 100 ms it advances as steady_clock does, to well within 1%.
  const int64_t s0 = steady_ns(), c0 = rt::trace_clock::now_ns();
  std::this_thread::sleep_for(100ms);
  const int64_t s1 = steady_ns(), c1 = rt::trace_clock::now_ns();
  const double rate = double(c1 - c0) / double(s1 - s0);
  CHECK(rate == Approx(1.0).epsilon(0.01));
  // And it reads nanoseconds on steady_clock's scale, not a raw counter.
  CHECK(std::llabs(c1 - s1) < 1'000'000'000);
}

TEST_CASE("A sender waiting for space is woken once a quarter of the mailbox is free",
          "[mailbox]") {
  asio::io_context io;
  rt::mailbox<int> box(64, 0);
  const std::size_t cap = box.capacity();
  REQUIRE(cap == 64);
  for (std::size_t i = 0; i < cap; ++i) REQUIRE(box.try_push(int(i)) == rt::send_status::ok);
  REQUIRE(box.try_push(-1) == rt::send_status::full);
  int woken = 0;
  box.wait_for_space(io.get_executor(), [&] { ++woken; });
  io.poll();
  io.restart();
  CHECK(woken == 0);  // full: nothing to wake for
  // One free slot, then up to a quarter less one: still asleep.
  for (std::size_t i = 0; i < cap / 4 - 1; ++i) {
    REQUIRE(box.try_pop());
    box.wake_space_waiters();
    io.poll();
    io.restart();
  }
  CHECK(woken == 0);
  REQUIRE(box.try_pop());  // a quarter free
  box.wake_space_waiters();
  io.poll();
  CHECK(woken == 1);
  // A waiter registering while a quarter is already free fires at once.
  io.restart();
  box.wait_for_space(io.get_executor(), [&] { ++woken; });
  io.poll();
  CHECK(woken == 2);
}

TEST_CASE("An emptied mailbox wakes its space waiters whatever its size", "[mailbox]") {
  asio::io_context io;
  rt::mailbox<int> box(4, 0);
  for (std::size_t i = 0; i < box.capacity(); ++i) REQUIRE(box.try_push(1) == rt::send_status::ok);
  int woken = 0;
  box.wait_for_space(io.get_executor(), [&] { ++woken; });
  while (box.try_pop()) {
  }
  box.wake_space_waiters();
  io.poll();
  CHECK(woken == 1);
}

TEST_CASE("An actor made ready by a synchronous handler runs after that handler returns",
          "[scheduling]") {
  rt::system sys({.threads = 2});
  times t;
  auto r = sys.spawn<receiver>({.name = "receiver"}, &t);
  auto s = sys.spawn<sync_sender>({.name = "sender"}, r, &t);
  REQUIRE(s.tell(kick{}) == rt::send_status::ok);
  REQUIRE(t.received.get_future().wait_for(10s) == std::future_status::ready);
  // The second pool thread was free all along, yet the receiver waited for the sender.
  CHECK(t.receiver_start.load() >= t.sender_done.load());
  sys.stop();
}

TEST_CASE("An actor made ready by a coroutine handler is posted to a free thread at once",
          "[scheduling]") {
  rt::system sys({.threads = 2});
  times t;
  auto r = sys.spawn<receiver>({.name = "receiver"}, &t);
  auto s = sys.spawn<coroutine_sender>({.name = "sender"}, r, &t);
  REQUIRE(s.tell(kick{}) == rt::send_status::ok);
  REQUIRE(t.received.get_future().wait_for(10s) == std::future_status::ready);
  for (int i = 0; i < 2000 && t.sender_done.load() == 0; ++i) std::this_thread::sleep_for(5ms);
  REQUIRE(t.sender_done.load() != 0);
  // Handled on the other thread while the coroutine still held its own.
  CHECK(t.receiver_start.load() < t.sender_done.load());
  sys.stop();
}

TEST_CASE("Producers waiting on a small mailbox lose nothing and keep their order",
          "[scheduling][mailbox]") {
  const int producers = 4;
  const int per = 20000;
  for (std::size_t capacity : {std::size_t(2), std::size_t(8), std::size_t(64)}) {
    INFO("mailbox capacity " << capacity);
    rt::system sys({.threads = 2});
    std::vector<int> next(producers, 0);
    std::atomic<long> bad{0};
    std::promise<void> done;
    auto c = sys.spawn<checker>({.name = "checker", .mailbox_capacity = capacity, .batch = 3},
                                &next, &bad, long(producers) * per, &done);
    std::vector<rt::actor_ref<producer>> ps;
    for (int p = 0; p < producers; ++p)
      ps.push_back(sys.spawn<producer>({.name = "producer" + std::to_string(p)}, c));
    for (int p = 0; p < producers; ++p)
      REQUIRE(ps[p].tell(run_producer{p, per}) == rt::send_status::ok);
    REQUIRE(done.get_future().wait_for(60s) == std::future_status::ready);
    CHECK(bad.load() == 0);
    for (int p = 0; p < producers; ++p) CHECK(next[p] == per);
    sys.stop();
  }
}
