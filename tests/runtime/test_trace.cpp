#include <asio/steady_timer.hpp>
#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <future>
#include <map>
#include <sstream>
#include <thread>

#include "runtime/system.hpp"

using namespace coserve;
using namespace std::chrono_literals;

namespace {

struct job {
  uint64_t request_id;
  int payload;
};

struct sink_actor {
  using messages = rt::message_list<job>;
  std::shared_ptr<std::promise<void>> done;
  int expect;
  int seen = 0;
  void handle(job&) {
    if (++seen == expect) done->set_value();
  }
};

// A coroutine handler that suspends: the actor must not start another handler meanwhile.
struct worker_actor {
  using messages = rt::message_list<job>;
  rt::actor_ref<sink_actor> next;
  rt::actor_context<worker_actor> ctx;
  void on_start(rt::actor_context<worker_actor>& c) { ctx = c; }
  asio::awaitable<void> handle(job& j) {
    asio::steady_timer t(ctx.io_executor(), std::chrono::microseconds(200));
    co_await t.async_wait(asio::use_awaitable);
    (void)next.tell(j);
  }
};

struct parser_actor {
  using messages = rt::message_list<job>;
  rt::actor_ref<worker_actor> next;
  void handle(job& j) { (void)next.tell(job{j.request_id, j.payload + 1}); }
};

}  // namespace

TEST_CASE("tracing records each message's path and one handler at a time per actor",
          "[trace][concurrency]") {
  rt::system sys({.threads = 2});
  constexpr int n = 50;
  auto done = std::make_shared<std::promise<void>>();
  auto fut = done->get_future();
  auto sink = sys.spawn<sink_actor>({.name = "sink"}, done, n);
  auto worker = sys.spawn<worker_actor>({.name = "worker"}, sink);
  auto parser = sys.spawn<parser_actor>({.name = "parser"}, worker);
  for (int i = 1; i <= n; ++i) REQUIRE(parser.tell(job{uint64_t(i), i}) == rt::send_status::ok);
  REQUIRE(fut.wait_for(10s) == std::future_status::ready);
  sys.stop();  // quiescent: every span recorded

  const auto& tr = sys.trace();
  // Every request went parser -> worker -> sink, in that order, each step after the previous.
  for (uint64_t id = 1; id <= n; ++id) {
    auto spans = tr.spans_of_request(id);
    REQUIRE(spans.size() == 3);
    REQUIRE(tr.track_name(spans[0].track_id) == "parser");
    REQUIRE(tr.track_name(spans[1].track_id) == "worker");
    REQUIRE(tr.track_name(spans[2].track_id) == "sink");
    for (const auto& s : spans) {
      REQUIRE(std::string(s.message) == "job");
      REQUIRE(s.enqueue_ns <= s.start_ns);
      REQUIRE(s.start_ns <= s.end_ns);
    }
    // The worker's message was sent from inside the parser's handler (the worker may start on the
    // other thread before that handler has returned).
    REQUIRE(spans[1].enqueue_ns >= spans[0].start_ns);
    REQUIRE(spans[1].enqueue_ns <= spans[0].end_ns);
    REQUIRE(spans[1].end_ns - spans[1].start_ns >= 200000);  // the coroutine's suspension counts
    REQUIRE(spans[2].enqueue_ns >= spans[1].start_ns);
  }
  // No actor ever ran two handlers at once.
  for (const char* name : {"parser", "worker", "sink"}) {
    auto spans = tr.spans_of_track(name);
    REQUIRE(spans.size() == n);
    for (std::size_t i = 1; i < spans.size(); ++i)
      REQUIRE(spans[i].start_ns >= spans[i - 1].end_ns);
  }
  // Queue depth was recorded: the parser's mailbox filled up faster than the worker drained.
  auto worker_spans = tr.spans_of_track("worker");
  uint32_t max_depth = 0;
  for (auto& s : worker_spans) max_depth = std::max(max_depth, s.mailbox_depth);
  REQUIRE(max_depth > 0);
}

TEST_CASE("Chrome trace export names a track per actor and an event per message", "[trace]") {
  rt::system sys({.threads = 1});
  auto done = std::make_shared<std::promise<void>>();
  auto sink = sys.spawn<sink_actor>({.name = "the \"sink\""}, done, 3);
  for (int i = 0; i < 3; ++i) (void)sink.tell(job{uint64_t(40 + i), i});
  done->get_future().wait();
  sys.stop();
  const std::string json = sys.trace().chrome_json();
  REQUIRE(json.find("\"traceEvents\":[") != std::string::npos);
  REQUIRE(json.find("\"name\":\"thread_name\"") != std::string::npos);
  REQUIRE(json.find("the \\\"sink\\\"") != std::string::npos);  // escaped
  std::size_t events = 0;
  for (std::size_t p = json.find("\"ph\":\"X\""); p != std::string::npos;
       p = json.find("\"ph\":\"X\"", p + 1))
    ++events;
  REQUIRE(events == 3);
  REQUIRE(json.find("\"request_id\":41") != std::string::npos);

  const auto file = std::filesystem::temp_directory_path() / "coserve_trace_test.json";
  REQUIRE(sys.trace().write_chrome_json(file).ok());
  std::ifstream in(file);
  std::stringstream ss;
  ss << in.rdbuf();
  REQUIRE(ss.str() == json);
  std::filesystem::remove(file);
}

TEST_CASE("tracing can be switched off", "[trace]") {
  rt::system sys({.threads = 1, .tracing = false});
  auto done = std::make_shared<std::promise<void>>();
  auto sink = sys.spawn<sink_actor>({.name = "sink"}, done, 2);
  (void)sink.tell(job{1, 1});
  (void)sink.tell(job{2, 2});
  done->get_future().wait();
  REQUIRE(sys.trace().spans().empty());
}

TEST_CASE("spans_since returns the spans that ended in a recent window, also across threads",
          "[trace]") {
  rt::tracer tr(true, 64);
  auto rec = [&](int64_t start, int64_t end, uint64_t rid) {
    rt::span s;
    s.message = "m";
    s.request_id = rid;
    s.start_ns = s.enqueue_ns = start;
    s.end_ns = end;
    tr.record(s);
  };
  for (int64_t i = 0; i < 100; ++i)
    rec(i * 10, i * 10 + 5, static_cast<uint64_t>(i));  // wraps the ring
  std::thread other([&] { rec(500, 995, 1000); });
  other.join();
  auto recent = tr.spans_since(900);
  // Ended at or after 900: i = 90..99 (ends 905..995) and the other thread's span.
  REQUIRE(recent.size() == 11);
  REQUIRE(recent.front().request_id == 1000);  // sorted by start
  for (size_t k = 1; k < recent.size(); ++k) REQUIRE(recent[k].request_id == 89 + k);
  REQUIRE(tr.spans_since(2000).empty());
  // The whole window is bounded by what the rings still hold (64 of the first thread's 100).
  REQUIRE(tr.spans_since(0).size() == 65);
}

namespace {
// Anonymous resident memory of this process, from /proc/self/status (KiB; -1 where absent).
long rss_anon_kib() {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("RssAnon:", 0) == 0) return std::stol(line.substr(8));
  return -1;
}
}  // namespace

TEST_CASE("a ring's memory becomes resident as spans are recorded, not at its capacity",
          "[trace]") {
  if (rss_anon_kib() < 0) {
    WARN("SKIPPED: /proc/self/status has no RssAnon here");
    return;
  }
  // 2^20 spans: 56 MiB of capacity per recording thread.
  rt::tracer tr(true, std::size_t(1) << 20);
  const long before = rss_anon_kib();
  std::thread([&] {
    for (int i = 0; i < 1000; ++i) {
      rt::span s;
      s.message = "m";
      s.request_id = static_cast<uint64_t>(i + 1);
      s.start_ns = s.enqueue_ns = i;
      s.end_ns = i + 1;
      tr.record(s);
    }
  }).join();
  const long grown = rss_anon_kib() - before;
  INFO("RssAnon grew by " << grown << " KiB");
  CHECK(grown < 16 * 1024);  // 1,000 spans are 55 KiB; the thread's stack comes and goes
  const auto all = tr.spans();
  REQUIRE(all.size() == 1000);
  CHECK(all.front().request_id == 1);
  CHECK(all.back().request_id == 1000);
}
