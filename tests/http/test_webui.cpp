// The web UI over real sockets with the fake engine: the embedded pages and files with their
// security headers, /api/status and /api/trace behind the API key, --no-webui; and status_json()
// from known counters, history and trace spans.
#include <catch2/catch.hpp>
#include <chrono>
#include <thread>

#include "http/status_view.hpp"
#include "http/webui.hpp"
#include "model/text/json/value.hpp"
#include "runtime/trace.hpp"
#include "tests/http/test_client.hpp"

using namespace coserve;
using namespace coserve::test;

namespace {

json::value parse_body(const std::string& body) {
  auto v = json::parse(body);
  REQUIRE(v.ok());
  return std::move(v).value();
}

bool has_header(const raw_response& r, const std::string& line) {
  return r.head.find(line) != std::string::npos;
}

}  // namespace

TEST_CASE("web UI: pages and files with their types and a strict CSP", "[http][webui]") {
  server_fixture f;
  auto chat = request(f.port, "GET", "/");
  CHECK(chat.status == 200);
  CHECK(has_header(chat, "Content-Type: text/html; charset=utf-8"));
  CHECK(has_header(chat, "Content-Security-Policy: default-src 'none'; script-src 'self';"));
  CHECK(has_header(chat, "X-Content-Type-Options: nosniff"));
  CHECK(has_header(chat, "X-Frame-Options: DENY"));
  CHECK(chat.body.find("<title>coserve chat</title>") != std::string::npos);
  // No inline script or style anywhere: the CSP would block it.
  for (const char* page : {"/", "/status"}) {
    auto r = request(f.port, "GET", page);
    CHECK(r.status == 200);
    CHECK(r.body.find("<script>") == std::string::npos);
    CHECK(r.body.find("<style") == std::string::npos);
    CHECK(r.body.find(" style=") == std::string::npos);
    CHECK(r.body.find("onclick") == std::string::npos);
  }
  CHECK(request(f.port, "GET", "/status").body.find("Download trace") != std::string::npos);
  auto js = request(f.port, "GET", "/webui/chat.js");
  CHECK(js.status == 200);
  CHECK(has_header(js, "Content-Type: text/javascript; charset=utf-8"));
  CHECK(js.body.find("/v1/chat/completions") != std::string::npos);
  CHECK(has_header(request(f.port, "GET", "/webui/style.css"), "Content-Type: text/css"));
  CHECK(request(f.port, "GET", "/webui/nope.js").status == 404);
  CHECK(request(f.port, "POST", "/", "{}").status == 404);
  // The table the server serves from is what the pages load.
  for (const char* asset : {"/webui/common.js", "/webui/status.js", "/webui/favicon.svg"})
    CHECK(http::find_web_asset(asset) != nullptr);
}

TEST_CASE("web UI: /api/status reports the engine's counters and history", "[http][webui]") {
  server_fixture f;
  auto r = request(f.port, "GET", "/api/status");
  REQUIRE(r.status == 200);
  CHECK(has_header(r, "Cache-Control: no-store"));
  const auto v = parse_body(r.body);
  CHECK(v.find("model")->as_string() == "fake-model");
  CHECK(v.find("healthy")->as_bool());
  CHECK(v.find("kv_blocks")->find("total")->as_int() == 100);
  CHECK(v.find("kv_blocks")->find("used")->as_int() == 0);
  // The sampler takes its first sample when the engine is attached.
  CHECK(v.find("history")->find("t")->as_array().size() >= 1);
  CHECK(v.find("requests")->as_array().empty());
  CHECK(v.find("trace")->find("enabled")->as_bool() == false);
  // The fake engine has no tracer: no trace to download.
  CHECK(request(f.port, "GET", "/api/trace").status == 404);
  CHECK(request(f.port, "POST", "/api/status", "{}").status == 405);
}

TEST_CASE("web UI: with an API key the pages stay open and their data needs the key",
          "[http][webui]") {
  http::api_options o;
  o.api_key = "sekrit";
  server_fixture f({}, o);
  CHECK(request(f.port, "GET", "/").status == 200);
  CHECK(request(f.port, "GET", "/status").status == 200);
  CHECK(request(f.port, "GET", "/webui/chat.js").status == 200);
  auto denied = request(f.port, "GET", "/api/status");
  CHECK(denied.status == 401);
  CHECK(parse_body(denied.body).find("error")->find("code")->as_string() == "invalid_api_key");
  CHECK(request(f.port, "GET", "/api/trace").status == 401);
  CHECK(request(f.port, "GET", "/api/status", {}, "Authorization: Bearer wrong\r\n").status == 401);
  CHECK(request(f.port, "GET", "/api/status", {}, "Authorization: Bearer sekrit\r\n").status ==
        200);
}

TEST_CASE("web UI: off, every page, file and data route answers 404", "[http][webui]") {
  http::api_options o;
  o.webui = false;
  server_fixture f({}, o);
  for (const char* p : {"/", "/status", "/webui/chat.js", "/api/status", "/api/trace"}) {
    INFO(p);
    auto r = request(f.port, "GET", p);
    CHECK(r.status == 404);
    CHECK(parse_body(r.body).find("error") != nullptr);
  }
  CHECK(request(f.port, "GET", "/v1/models").status == 200);
}

TEST_CASE("status_json: rates from the history, busy time from the trace, newest timelines first",
          "[http][webui]") {
  http::status_inputs in;
  in.model = "m";
  in.metrics.kv_blocks_total = 100;
  in.metrics.kv_blocks_free = 70;
  in.metrics.kv_blocks_cached_free = 20;
  in.metrics.prefix_queries = 1000;
  in.metrics.prefix_hits = 250;
  in.metrics.mailbox_depth = {{"executor", 3}, {"tokenizer", 1}};
  // 61 samples a second apart: 10 generated tokens a second, prefix hits 50% over the last minute.
  for (int i = 0; i <= 60; ++i) {
    http::status_history::sample s;
    s.t = 1000.0 + i;
    s.generation_tokens = 10 * i;
    s.prompt_tokens = 100;
    s.prefix_queries = 2 * i;
    s.prefix_hits = i;
    s.kv_total = 100;
    s.kv_free = 70;
    in.history.push_back(s);
  }
  in.requests = {{.id = 7, .running = true, .age_seconds = 1.5, .samples = 1, .prompt_tokens = 5}};
  rt::tracer tr(true, 1024);
  const uint32_t exec = tr.register_track("executor");
  const uint32_t tok0 = tr.register_track("tokenizer0");
  (void)tr.register_track("tokenizer1");
  const int64_t now = tr.now_ns();
  auto rec = [&](uint32_t actor, uint64_t rid, int64_t start_ms_ago, int64_t dur_ms,
                 const char* what) {
    rt::span s;
    s.message = what;
    s.track_id = actor;
    s.request_id = rid;
    s.start_ns = s.enqueue_ns = now - start_ms_ago * 1000000;
    s.end_ns = s.start_ns + dur_ms * 1000000;
    tr.record(s);
  };
  // The executor: 1 s busy in two overlapping spans (a step and its per-request copy) and one more.
  rec(exec, 0, 5000, 500, "step");
  rec(exec, 7, 5000, 500, "execute_step");
  rec(exec, 0, 3000, 500, "step");
  rec(tok0, 7, 6000, 100, "tokenize_request");
  rec(tok0, 9, 2000, 100, "tokenize_request");
  in.trace = &tr;
  in.actor_window = std::chrono::seconds(10);
  const auto v = parse_body(http::status_json(in));
  CHECK(v.find("kv_blocks")->find("used")->as_int() == 30);
  CHECK(v.find("kv_blocks")->find("cached")->as_int() == 20);
  CHECK(v.find("kv_blocks")->find("free")->as_int() == 50);
  CHECK(v.find("throughput")->find("generation_tokens_per_second")->as_double() == Approx(10.0));
  CHECK(v.find("throughput")->find("prompt_tokens_per_second")->as_double() == Approx(0.0));
  CHECK(v.find("prefix_cache")->find("hit_rate")->as_double() == Approx(0.25));
  CHECK(v.find("prefix_cache")->find("hit_rate_last_minute")->as_double() == Approx(0.5));
  CHECK(v.find("history")->find("generation_tokens_per_second")->as_array().back().as_double() ==
        Approx(10.0));
  CHECK(v.find("requests")->as_array()[0].find("state")->as_string() == "running");
  const auto& actors = v.find("actors")->as_array();
  REQUIRE(actors.size() == 2);
  CHECK(actors[0].find("name")->as_string() == "executor");
  CHECK(actors[0].find("mailbox_depth")->as_int() == 3);
  CHECK(actors[0].find("busy_ms")->as_double() == Approx(1000.0));
  CHECK(actors[0].find("busy_fraction")->as_double() == Approx(0.1));
  CHECK(actors[1].find("name")->as_string() == "tokenizer");
  CHECK(actors[1].find("actors")->as_int() == 2);  // the pool's busy time is per member
  CHECK(actors[1].find("busy_fraction")->as_double() == Approx(0.2 / 10.0 / 2.0));
  const auto& tl = v.find("timelines")->as_array();
  REQUIRE(tl.size() == 2);
  CHECK(tl[0].find("request_id")->as_int() == 9);  // the newest first
  CHECK_FALSE(tl[0].find("active")->as_bool());
  CHECK(tl[1].find("request_id")->as_int() == 7);
  CHECK(tl[1].find("active")->as_bool());
  CHECK(tl[1].find("duration_ms")->as_double() == Approx(1500.0));
  const auto& spans = tl[1].find("spans")->as_array();
  REQUIRE(spans.size() == 2);
  CHECK(spans[0].find("actor")->as_string() == "tokenizer0");
  CHECK(spans[1].find("message")->as_string() == "execute_step");
  CHECK(spans[1].find("start_ms")->as_double() == Approx(1000.0));
  // A long request keeps its first quarter and newest three quarters of spans.
  for (int i = 0; i < 50; ++i) rec(exec, 11, 1000 - i, 1, "execute_step");
  in.spans_per_timeline = 20;
  const auto v2 = parse_body(http::status_json(in));
  const auto& t11 = v2.find("timelines")->as_array()[0];
  CHECK(t11.find("request_id")->as_int() == 11);
  CHECK(t11.find("spans")->as_array().size() == 20);
  CHECK(t11.find("omitted_spans")->as_int() == 30);
}

TEST_CASE("status_history keeps the newest samples and its sampler stops", "[http][webui]") {
  http::status_history h(3, std::chrono::milliseconds(1));
  for (int i = 0; i < 5; ++i) {
    engine_metrics m;
    m.generation_tokens = i;
    h.record(m);
  }
  auto s = h.samples();
  REQUIRE(s.size() == 3);
  CHECK(s.front().generation_tokens == 2);
  CHECK(s.back().generation_tokens == 4);
  std::atomic<int> calls{0};
  h.start([&] {
    ++calls;
    return engine_metrics{};
  });
  while (calls.load() < 5) std::this_thread::yield();
  h.stop();
  const int after = calls.load();
  std::this_thread::sleep_for(std::chrono::milliseconds(5));
  CHECK(calls.load() == after);
  CHECK(h.samples().size() == 3);
}
