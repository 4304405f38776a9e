#include <asio/co_spawn.hpp>
#include <asio/detached.hpp>
#include <asio/experimental/awaitable_operators.hpp>
#include <asio/steady_timer.hpp>
#include <asio/use_future.hpp>
#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <future>
#include <stdexcept>
#include <thread>

#include "runtime/system.hpp"
#include "runtime/timer.hpp"

using namespace coserve;
using namespace std::chrono_literals;

namespace {

struct add {
  int v;
};
struct get {
  using reply_type = int;
};
struct boom {};
struct slow_get {
  using reply_type = int;
  std::chrono::milliseconds delay;
};
struct gate_wait {};  // blocks the actor until the test opens the gate

struct counter {
  using messages = rt::message_list<add, get, boom, slow_get, gate_wait>;
  std::shared_future<void> gate;
  int total = 0;
  rt::actor_context<counter> ctx;
  explicit counter(std::shared_future<void> g = {}) : gate(std::move(g)) {}
  void on_start(rt::actor_context<counter>& c) { ctx = c; }
  void handle(add& m) { total += m.v; }
  int handle(get&) { return total; }
  void handle(boom&) { throw std::runtime_error("boom"); }
  asio::awaitable<int> handle(slow_get& m) {
    asio::steady_timer t(ctx.io_executor(), m.delay);
    co_await t.async_wait(asio::use_awaitable);
    co_return total;
  }
  void handle(gate_wait&) {
    if (gate.valid()) gate.wait();
  }
};

template <class T>
T run_on(rt::system& sys, asio::awaitable<T> a) {
  return asio::co_spawn(sys.io_executor(), std::move(a), asio::use_future).get();
}

}  // namespace

TEST_CASE("tell then ask sees every message, in order", "[actor][concurrency]") {
  rt::system sys({.threads = 2});
  auto c = sys.spawn<counter>({.name = "counter"});
  for (int i = 1; i <= 1000; ++i) REQUIRE(c.tell(add{i}) == rt::send_status::ok);
  auto r = c.ask_sync(get{});
  REQUIRE(r.ok());
  REQUIRE(*r == 500500);
  auto r2 = run_on(sys, c.ask(get{}));
  REQUIRE(r2.ok());
  REQUIRE(*r2 == 500500);
}

TEST_CASE("ask times out and a late reply is dropped", "[actor][concurrency]") {
  rt::system sys({.threads = 2});
  auto c = sys.spawn<counter>({.name = "counter"});
  auto r = run_on(sys, c.ask(slow_get{300ms}, 20ms));
  REQUIRE_FALSE(r.ok());
  REQUIRE(r.err().code == "timeout");
  auto sync = c.ask_sync(slow_get{300ms}, 20ms);
  REQUIRE_FALSE(sync.ok());
  REQUIRE(sync.err().code == "timeout");
  // The actor is still fine afterwards.
  REQUIRE(c.ask_sync(get{}).value() == 0);
}

TEST_CASE("ask is cancelled by the caller's cancellation", "[actor][concurrency]") {
  rt::system sys({.threads = 2});
  auto c = sys.spawn<counter>({.name = "counter"});
  using namespace asio::experimental::awaitable_operators;
  auto race = [&]() -> asio::awaitable<std::string> {
    asio::steady_timer t(co_await asio::this_coro::executor, 20ms);
    // `||` cancels the loser: the timer wins, so the ask sees a cancellation.
    auto v = co_await (c.ask(slow_get{3000ms}, 10s) || t.async_wait(asio::use_awaitable));
    co_return v.index() == 0 ? std::string("ask") : std::string("timer");
  };
  const auto start = std::chrono::steady_clock::now();
  REQUIRE(run_on(sys, race()) == "timer");
  REQUIRE(std::chrono::steady_clock::now() - start < 2500ms);  // did not wait for the reply
}

TEST_CASE("a full mailbox refuses tell and makes send wait", "[actor][concurrency]") {
  rt::system sys({.threads = 2});
  std::promise<void> open;
  auto c =
      sys.spawn<counter>({.name = "counter", .mailbox_capacity = 4}, open.get_future().share());
  REQUIRE(c.tell(gate_wait{}) == rt::send_status::ok);
  // Wait until the actor has taken gate_wait out of its mailbox and blocks in it.
  while (c.queued() != 0) std::this_thread::yield();
  for (int i = 0; i < 4; ++i) REQUIRE(c.tell(add{1}) == rt::send_status::ok);
  REQUIRE(c.tell(add{1}) == rt::send_status::full);  // the sender sees `full` at once

  std::atomic<bool> sent{false};
  asio::co_spawn(
      sys.io_executor(),
      [&]() -> asio::awaitable<void> {
        auto s = co_await c.send(add{100});
        sent = (s == rt::send_status::ok);
      },
      asio::detached);
  std::this_thread::sleep_for(50ms);
  REQUIRE_FALSE(sent.load());  // still waiting for space
  open.set_value();
  while (!sent.load()) std::this_thread::sleep_for(1ms);
  REQUIRE(c.ask_sync(get{}).value() == 104);
}

TEST_CASE("a throwing handler restarts the actor with fresh state",
          "[actor][supervision][concurrency]") {
  rt::system sys({.threads = 2});
  auto c = sys.spawn<counter>({.name = "flaky", .on_failure = rt::restart_policy::restart});
  REQUIRE(c.tell(add{5}) == rt::send_status::ok);
  REQUIRE(c.tell(boom{}) == rt::send_status::ok);
  REQUIRE(c.tell(add{7}) == rt::send_status::ok);  // queued behind the failure: still handled
  auto r = c.ask_sync(get{});
  REQUIRE(r.ok());
  REQUIRE(*r == 7);  // state rebuilt by the restart, later messages kept
  REQUIRE(c.cell().restarts() == 1);
  sys.stop();
  // The failure was traced.
  auto spans = sys.trace().spans_of_message("boom");
  REQUIRE(spans.size() == 1);
  REQUIRE(spans[0].failed);
}

TEST_CASE("the stop policy stops the actor and notifies, the process stays up",
          "[actor][supervision][concurrency]") {
  rt::system sys({.threads = 2});
  std::promise<std::string> stopped;
  auto c = sys.spawn<counter>({.name = "fragile",
                               .on_failure = rt::restart_policy::stop,
                               .on_stopped = [&](const std::string& name, const std::string& why) {
                                 stopped.set_value(name + ": " + why);
                               }});
  REQUIRE(c.tell(boom{}) == rt::send_status::ok);
  REQUIRE(stopped.get_future().get() == "fragile: boom");
  REQUIRE(c.tell(add{1}) == rt::send_status::closed);
  auto r = c.ask_sync(get{});
  REQUIRE_FALSE(r.ok());
}

TEST_CASE("too many failures within the window stop a restarting actor",
          "[actor][supervision][concurrency]") {
  rt::system sys({.threads = 2});
  std::promise<void> stopped;
  auto c = sys.spawn<counter>(
      {.name = "doomed",
       .max_restarts = 2,
       .on_stopped = [&](const std::string&, const std::string&) { stopped.set_value(); }});
  for (int i = 0; i < 3; ++i) (void)c.tell(boom{});
  stopped.get_future().wait();
  REQUIRE(c.cell().restarts() == 2);
  REQUIRE(c.cell().failed_stop());
}

namespace {
struct recorder {
  using messages = rt::message_list<add>;
  std::shared_ptr<std::vector<int>> log;
  void handle(add& m) {
    std::this_thread::sleep_for(std::chrono::microseconds(50));
    log->push_back(m.v);
  }
};
struct forwarder {
  using messages = rt::message_list<add>;
  rt::actor_ref<recorder> next;
  void handle(add& m) { (void)next.tell(add{m.v * 10}); }
};
}  // namespace

TEST_CASE("shutdown drains mailboxes in reverse start order", "[actor][supervision][concurrency]") {
  auto log = std::make_shared<std::vector<int>>();
  {
    rt::system sys({.threads = 2});
    auto rec = sys.spawn<recorder>({.name = "recorder", .mailbox_capacity = 512}, log);
    auto fwd = sys.spawn<forwarder>({.name = "forwarder", .mailbox_capacity = 512}, rec);
    for (int i = 0; i < 300; ++i) REQUIRE(fwd.tell(add{i}) == rt::send_status::ok);
    sys.stop();  // forwarder drains first (it still reaches recorder), then recorder drains
    REQUIRE(fwd.tell(add{1}) == rt::send_status::closed);
  }
  REQUIRE(log->size() == 300);
  for (int i = 0; i < 300; ++i) REQUIRE((*log)[i] == i * 10);
}

TEST_CASE("an actor on a dedicated thread", "[actor][concurrency]") {
  rt::system sys({.threads = 1});
  auto c = sys.spawn<counter>({.name = "dedicated", .dedicated_thread = true});
  REQUIRE(c.tell(add{3}) == rt::send_status::ok);
  REQUIRE(c.ask_sync(get{}).value() == 3);
  REQUIRE(run_on(sys, c.ask(get{})).value() == 3);
}

TEST_CASE("timers deliver once, periodically, and stop when cancelled",
          "[actor][timer][concurrency]") {
  rt::system sys({.threads = 2});
  auto c = sys.spawn<counter>({.name = "timed"});
  const auto t0 = std::chrono::steady_clock::now();
  auto once = rt::send_after(c, 30ms, add{1});
  while (c.ask_sync(get{}).value() != 1) std::this_thread::sleep_for(1ms);
  REQUIRE(std::chrono::steady_clock::now() - t0 >= 30ms);

  auto every = rt::send_every(c, 5ms, add{10});
  while (c.ask_sync(get{}).value() < 31) std::this_thread::sleep_for(1ms);
  every.cancel();
  // cancel() is posted to the timer's strand: once the count is stable, nothing more arrives.
  uint64_t fired = every.fired();
  for (int settle = 0; settle < 50; ++settle) {
    std::this_thread::sleep_for(20ms);
    if (every.fired() == fired) break;
    fired = every.fired();
  }
  const int after_cancel = c.ask_sync(get{}).value();
  std::this_thread::sleep_for(60ms);
  REQUIRE(c.ask_sync(get{}).value() == after_cancel);  // nothing more after cancel
  REQUIRE(every.fired() == fired);
  REQUIRE(every.fired() >= 3);

  auto never = rt::send_after(c, 50ms, add{1000});
  never.cancel();
  std::this_thread::sleep_for(80ms);
  REQUIRE(c.ask_sync(get{}).value() == after_cancel);
  REQUIRE(once.fired() == 1);
}

namespace {

struct tail_boom {};  // throws in the coroutine that finishes the handler, not in the handler
struct read_total {
  using reply_type = int;
};

// A behavior with a failure hook: on_failure sees the state it held, before the restart.
struct hooked {
  using messages = rt::message_list<add, tail_boom, boom, read_total>;
  std::atomic<int>* hook_calls;
  std::atomic<int>* total_seen;
  int total = 0;
  explicit hooked(std::atomic<int>* calls, std::atomic<int>* seen)
      : hook_calls(calls), total_seen(seen) {}
  void handle(add& m) { total += m.v; }
  void handle(boom&) { throw std::runtime_error("boom"); }
  rt::maybe_async handle(tail_boom&) {
    return [](int* t) -> asio::awaitable<void> {
      *t += 100;
      throw std::runtime_error("tail boom");
      co_return;
    }(&total);
  }
  int handle(read_total&) { return total; }
  void on_failure(const std::string& what) {
    hook_calls->fetch_add(1);
    total_seen->store(total);
    (void)what;
  }
};

}  // namespace

TEST_CASE("an exception in a handler's asynchronous tail goes to the supervision policy",
          "[actor][supervision][concurrency]") {
  rt::system sys({.threads = 2});
  std::atomic<int> calls{0}, seen{-1};
  auto a =
      sys.spawn<hooked>({.name = "tail", .on_failure = rt::restart_policy::restart}, &calls, &seen);
  REQUIRE(a.tell(add{5}) == rt::send_status::ok);
  REQUIRE(a.tell(tail_boom{}) == rt::send_status::ok);
  REQUIRE(a.tell(add{2}) == rt::send_status::ok);
  auto r = a.ask_sync(read_total{});
  REQUIRE(r.ok());
  CHECK(*r == 2);  // restarted with fresh state; the message behind it kept
  CHECK(a.cell().restarts() == 1);
  CHECK(calls.load() == 1);  // the hook ran once, on the old state (5 + the tail's 100)
  CHECK(seen.load() == 105);
  sys.stop();
}

TEST_CASE("on_failure runs before a stop too, and a dropped reply completes with an error",
          "[actor][supervision][concurrency]") {
  rt::system sys({.threads = 2});
  std::atomic<int> calls{0}, seen{-1};
  std::promise<void> stopped;
  auto a = sys.spawn<hooked>(
      {.name = "fragile_hooked",
       .on_failure = rt::restart_policy::stop,
       .on_stopped = [&](const std::string&, const std::string&) { stopped.set_value(); }},
      &calls, &seen);
  REQUIRE(a.tell(add{3}) == rt::send_status::ok);
  REQUIRE(a.tell(boom{}) == rt::send_status::ok);
  stopped.get_future().get();
  CHECK(calls.load() == 1);
  CHECK(seen.load() == 3);
  // A reply_state released unanswered completes with "actor_failed" instead of leaving its
  // waiter hanging.
  std::promise<result<int>> got;
  {
    auto st =
        std::make_shared<rt::reply_state<int>>([&](result<int> v) { got.set_value(std::move(v)); });
  }
  auto v = got.get_future().get();
  REQUIRE_FALSE(v.ok());
  CHECK(v.err().code == "actor_failed");
  sys.stop();
}

namespace {

// A pair of actors that send to each other: ping answers pong, pong counts and answers ping until
// a limit. Each is reached through its protocol, never its implementation.
struct ping_msg {
  int n;
};
struct pong_msg {
  int n;
};
struct pinger_protocol {
  using messages = rt::message_list<pong_msg>;
};
struct ponger_protocol {
  using messages = rt::message_list<ping_msg>;
};

struct pinger {
  using messages = pinger_protocol::messages;
  rt::actor_ref<ponger_protocol> peer;
  std::shared_ptr<std::promise<int>> done;
  int limit;
  void handle(pong_msg& m) {
    if (m.n >= limit) {
      done->set_value(m.n);
      return;
    }
    (void)peer.tell(ping_msg{m.n + 1});
  }
};

struct ponger {
  using messages = ponger_protocol::messages;
  rt::actor_ref<pinger_protocol> peer;
  std::shared_ptr<std::atomic<int>> destroyed;
  ~ponger() { ++*destroyed; }
  void handle(ping_msg& m) { (void)peer.tell(pong_msg{m.n}); }
};

}  // namespace

TEST_CASE(
    "reserve then start: actors in a circle, messages sent before start wait, refs typed by "
    "protocol, the circle released once drained",
    "[actor][concurrency]") {
  auto destroyed = std::make_shared<std::atomic<int>>(0);
  auto done = std::make_shared<std::promise<int>>();
  auto result = done->get_future();
  {
    rt::system sys({.threads = 2});
    auto pi = sys.root().reserve<pinger>({.name = "pinger"});
    auto po = sys.root().reserve<ponger>({.name = "ponger"});
    // A ref of the protocol converts from the behavior's ref: the same mailbox.
    rt::actor_ref<pinger_protocol> pi_proto = pi;
    rt::actor_ref<ponger_protocol> po_proto = po;
    // Queued before either behavior exists.
    REQUIRE(po_proto.tell(ping_msg{1}) == rt::send_status::ok);
    CHECK(po.queued() == 1);
    sys.root().start(pi, [po_proto, done] {
      return std::make_unique<pinger>(pinger{po_proto, done, 1000});
    });
    sys.root().start(po, [pi_proto, destroyed] {
      auto p = std::make_unique<ponger>();
      p->peer = pi_proto;
      p->destroyed = destroyed;
      return p;
    });
    REQUIRE(result.wait_for(10s) == std::future_status::ready);
    CHECK(result.get() == 1000);
    // Starting with a ref of another behavior is refused.
    CHECK_THROWS_AS(
        sys.root().start(rt::actor_ref<pinger>(), [] { return std::unique_ptr<pinger>(); }),
        std::logic_error);
  }  // stop: each drained actor releases its behavior and its factory (which held the other's ref)
  CHECK(destroyed->load() == 1);
}

TEST_CASE("a reserved actor never started is drained at stop, its queued messages dropped",
          "[actor][concurrency]") {
  rt::system sys({.threads = 1});
  auto po = sys.root().reserve<ponger>({.name = "never started"});
  REQUIRE(po.tell(ping_msg{1}) == rt::send_status::ok);
  sys.stop();  // returns: nothing waits on an actor that never ran
  CHECK(po.tell(ping_msg{2}) == rt::send_status::closed);
}
