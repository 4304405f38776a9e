// The server over real sockets on 127.0.0.1 with the fake engine: routes, status codes, SSE bytes,
// keep-alive, limits, timeouts, disconnect → cancel, overload, engine failure mid-stream.
#include <catch2/catch.hpp>
#include <chrono>
#include <thread>

#include "model/text/json/value.hpp"
#include "tests/http/test_client.hpp"

using namespace coserve;
using namespace coserve::test;
using namespace std::chrono_literals;

namespace {

json::value body_json(const raw_response& r) {
  auto v = json::parse(r.body);
  REQUIRE(v.ok());
  return std::move(v).value();
}

// The `data:` payloads of an SSE body, in order.
std::vector<std::string> sse_payloads(const std::string& body) {
  std::vector<std::string> out;
  size_t pos = 0;
  while (pos < body.size()) {
    REQUIRE(body.compare(pos, 6, "data: ") == 0);
    size_t end = body.find("\n\n", pos);
    REQUIRE(end != std::string::npos);
    out.push_back(body.substr(pos + 6, end - pos - 6));
    pos = end + 2;
  }
  return out;
}

}  // namespace

TEST_CASE("routes: models, health, version, metrics, 404, 405", "[http][server]") {
  server_fixture f;
  REQUIRE(f.port != 0);
  auto models = request(f.port, "GET", "/v1/models");
  CHECK(models.status == 200);
  CHECK(body_json(models).find("data")->as_array()[0].find("id")->as_string() == "fake-model");
  CHECK(request(f.port, "GET", "/health").status == 200);
  CHECK(body_json(request(f.port, "GET", "/version")).find("version") != nullptr);
  auto nf = request(f.port, "GET", "/nope");
  CHECK(nf.status == 404);
  CHECK(body_json(nf).find("error")->find("message") != nullptr);
  auto m = request(f.port, "GET", "/v1/completions");
  CHECK(m.status == 405);
  CHECK(m.head.find("Allow: POST") != std::string::npos);
  auto metrics = request(f.port, "GET", "/metrics");
  CHECK(metrics.status == 200);
  CHECK(metrics.body.find("coserve_kv_blocks_total{model_name=\"fake-model\"} 100") !=
        std::string::npos);
  CHECK(metrics.body.find("coserve_time_to_first_token_seconds_bucket{model_name=\"fake-model\","
                          "le=\"0.005\"} 1") != std::string::npos);
  CHECK(
      metrics.body.find("coserve_time_to_first_token_seconds_count{model_name=\"fake-model\"} 2") !=
      std::string::npos);
  CHECK(metrics.body.find("vllm:num_requests_running{model_name=\"fake-model\"} ") !=
        std::string::npos);
  f.engine.up = false;
  CHECK(request(f.port, "GET", "/health").status == 503);
}

TEST_CASE("HEAD answers a GET route's status and headers without its body", "[http][server]") {
  server_fixture f;
  const auto get = request(f.port, "GET", "/v1/models");
  const auto head = request(f.port, "HEAD", "/v1/models");
  CHECK(head.status == 200);
  CHECK(head.body.empty());
  CHECK(head.head.find("Content-Length: " + std::to_string(get.body.size())) != std::string::npos);
  CHECK(request(f.port, "HEAD", "/nope").status == 404);
  auto post_only = request(f.port, "HEAD", "/v1/completions");
  CHECK(post_only.status == 405);
  CHECK(post_only.body.empty());
  auto get_only = request(f.port, "POST", "/health", "{}");
  CHECK(get_only.status == 405);
  CHECK(get_only.head.find("Allow: GET, HEAD") != std::string::npos);
  // On a kept-alive connection the next response starts right after the HEAD's headers.
  const std::string both =
      exchange_raw(f.port,
                   "HEAD /health HTTP/1.1\r\nHost: x\r\n\r\n"
                   "GET /v1/models HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
  const auto first_end = both.find("\r\n\r\n");
  REQUIRE(first_end != std::string::npos);
  CHECK(both.compare(0, 15, "HTTP/1.1 200 OK") == 0);
  const auto second = parse_raw(both.substr(first_end + 4));
  CHECK(second.status == 200);
  CHECK(second.body == get.body);
}

TEST_CASE("completions: non-streaming body and usage", "[http][server]") {
  server_fixture f;
  auto r = request(f.port, "POST", "/v1/completions",
                   R"({"model":"fake-model","prompt":"abc","max_tokens":5,"n":2})");
  REQUIRE(r.status == 200);
  auto v = body_json(r);
  CHECK(v.find("id")->as_string().rfind("cmpl-", 0) == 0);
  CHECK(v.find("object")->as_string() == "text_completion");
  const auto& ch = v.find("choices")->as_array();
  REQUIRE(ch.size() == 2);
  CHECK(ch[0].find("text")->as_string() == "abcab");
  CHECK(ch[1].find("text")->as_string() == "bcabc");
  CHECK(ch[0].find("finish_reason")->as_string() == "length");
  CHECK(v.find("usage")->find("prompt_tokens")->as_int() == 3);
  CHECK(v.find("usage")->find("completion_tokens")->as_int() == 10);
  CHECK(v.find("usage")->find("total_tokens")->as_int() == 13);
}

TEST_CASE("chat streaming: role first, deltas, finish, usage, DONE", "[http][server][sse]") {
  server_fixture f;
  auto r = request(f.port, "POST", "/v1/chat/completions",
                   R"({"messages":[{"role":"user","content":"hi"}],"max_tokens":3,"stream":true,
                       "stream_options":{"include_usage":true}})");
  REQUIRE(r.status == 200);
  CHECK(r.head.find("Content-Type: text/event-stream") != std::string::npos);
  auto events = sse_payloads(r.body);
  REQUIRE(events.size() == 1 + 3 + 1 + 1 + 1);
  CHECK(events.back() == "[DONE]");
  auto role = *json::parse(events[0]);
  CHECK(role.find("choices")->as_array()[0].find("delta")->find("role")->as_string() ==
        "assistant");
  std::string text;
  for (size_t i = 1; i <= 3; ++i)
    text += json::parse(events[i])
                ->find("choices")
                ->as_array()[0]
                .find("delta")
                ->find("content")
                ->as_string();
  CHECK(text == "use");  // the fake template renders "user: hi\nassistant: "; 3 tokens
  auto fin = *json::parse(events[4]);
  CHECK(fin.find("choices")->as_array()[0].find("finish_reason")->as_string() == "length");
  auto usage = *json::parse(events[5]);
  CHECK(usage.find("choices")->as_array().empty());
  CHECK(usage.find("usage")->find("completion_tokens")->as_int() == 3);
}

TEST_CASE("completions streaming: stop strings and logprobs", "[http][server][sse]") {
  server_fixture f;
  auto r =
      request(f.port, "POST", "/v1/completions",
              R"({"prompt":"hello world","max_tokens":20,"stream":true,"stop":"lo","logprobs":2})");
  REQUIRE(r.status == 200);
  auto events = sse_payloads(r.body);
  CHECK(events.back() == "[DONE]");
  std::string text;
  std::string finish;
  for (size_t i = 0; i + 1 < events.size(); ++i) {
    auto c = json::parse(events[i])->find("choices")->as_array()[0];
    text += c.find("text")->as_string();
    if (c.find("finish_reason")->is_string()) finish = c.find("finish_reason")->as_string();
    if (!c.find("text")->as_string().empty())
      CHECK(c.find("logprobs")->find("top_logprobs")->as_array()[0].size() == 2);
  }
  // The fake engine does not hold back text that may start a stop string (the real streamer does),
  // so the partial "l" of "lo" was already sent; the stop string itself never is.
  CHECK(text == "hell");
  CHECK(finish == "stop");
}

TEST_CASE("validation errors over the wire: 400 with param, 404 model, 401, 413",
          "[http][server]") {
  server_fixture f(http::server_limits{.max_body_bytes = 4096},
                   http::api_options{.api_key = "sekret"});
  const std::string auth = "Authorization: Bearer sekret\r\n";
  auto bad = request(f.port, "POST", "/v1/completions", R"({"prompt":"x","temperature":9})", auth);
  CHECK(bad.status == 400);
  CHECK(body_json(bad).find("error")->find("param")->as_string() == "temperature");
  CHECK(request(f.port, "POST", "/v1/completions", "{not json", auth).status == 400);
  CHECK(request(f.port, "POST", "/v1/completions", "[]", auth).status == 400);
  CHECK(
      request(f.port, "POST", "/v1/completions", R"({"prompt":"x","model":"zzz"})", auth).status ==
      404);
  CHECK(request(f.port, "POST", "/v1/completions", R"({"prompt":"x"})").status == 401);
  CHECK(request(f.port, "POST", "/v1/completions", R"({"prompt":"x"})",
                "Authorization: Bearer nope\r\n")
            .status == 401);
  CHECK(request(f.port, "GET", "/health").status == 200);  // not behind the key
  auto big = request(f.port, "POST", "/v1/completions",
                     R"({"prompt":")" + std::string(5000, 'a') + "\"}", auth);
  CHECK(big.status == 413);
  auto ctx =
      request(f.port, "POST", "/v1/completions", R"({"prompt":"abc","max_tokens":126})", auth);
  CHECK(ctx.status == 400);
  CHECK(body_json(ctx).find("error")->find("param")->as_string() == "max_tokens");
  auto raise = request(f.port, "POST", "/v1/chat/completions",
                       R"({"messages":[{"role":"user","content":"RAISE"}]})", auth);
  CHECK(raise.status == 400);
  CHECK(body_json(raise).find("error")->find("message")->as_string() ==
        "Conversation roles must alternate");
}

TEST_CASE("header limit answers 431, slow request times out with 408", "[http][server][limits]") {
  server_fixture f(http::server_limits{.max_header_bytes = 512, .request_timeout = 300ms});
  auto r = parse_raw(exchange_raw(
      f.port, "GET /health HTTP/1.1\r\nX-Big: " + std::string(2000, 'x') + "\r\n\r\n"));
  CHECK(r.status == 431);
  auto start = std::chrono::steady_clock::now();
  auto slow =
      parse_raw(exchange_raw(f.port, "GET /health HTTP/1.1\r\nHost: x\r\n"));  // never finishes
  CHECK(slow.status == 408);
  CHECK(std::chrono::steady_clock::now() - start < 5s);
}

TEST_CASE("keep-alive: two requests on one connection, pipelined", "[http][server]") {
  server_fixture f;
  auto all = exchange_raw(f.port,
                          "GET /health HTTP/1.1\r\nHost: x\r\n\r\n"
                          "POST /tokenize HTTP/1.1\r\nHost: x\r\nContent-Length: 15\r\nConnection: "
                          "close\r\n\r\n{\"prompt\":\"ab\"}");
  size_t first = all.find("HTTP/1.1 200");
  size_t second = all.find("HTTP/1.1 200", first + 1);
  REQUIRE(first != std::string::npos);
  REQUIRE(second != std::string::npos);
  CHECK(all.find(R"("tokens":[97,98])") != std::string::npos);
}

TEST_CASE("client disconnect mid-stream cancels the request at once", "[http][server]") {
  server_fixture f;
  f.engine.token_delay_ms = 20;
  {
    asio::io_context io;
    asio::ip::tcp::socket s(io);
    s.connect({asio::ip::make_address("127.0.0.1"), f.port});
    std::string body = R"({"prompt":"abc","max_tokens":100,"stream":true})";
    std::string raw = "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: " +
                      std::to_string(body.size()) + "\r\n\r\n" + body;
    asio::write(s, asio::buffer(raw));
    char buf[512];
    s.read_some(asio::buffer(buf));  // the stream has started
  }                                  // closed
  auto deadline = std::chrono::steady_clock::now() + 1s;
  while (f.engine.cancels.load() == 0 && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(5ms);
  CHECK(f.engine.cancels.load() == 1);
  while (f.engine.in_flight.load() != 0 && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(5ms);
  CHECK(f.engine.in_flight.load() == 0);
  CHECK(request(f.port, "GET", "/metrics")
            .body.find("coserve_http_client_disconnects_total{model_name=\"fake-model\"} 1") !=
        std::string::npos);
}

TEST_CASE("overload and engine down answer fast", "[http][server]") {
  server_fixture f;
  f.engine.max_in_flight = 0;
  auto r = request(f.port, "POST", "/v1/completions", R"({"prompt":"x"})");
  CHECK(r.status == 429);
  f.engine.up = false;
  CHECK(request(f.port, "POST", "/v1/completions", R"({"prompt":"x"})").status == 503);
}

TEST_CASE("engine failure mid-stream: error event then DONE", "[http][server][sse]") {
  server_fixture f;
  auto r = request(f.port, "POST", "/v1/completions",
                   R"({"prompt":"FAIL","max_tokens":10,"stream":true})");
  REQUIRE(r.status == 200);
  auto events = sse_payloads(r.body);
  REQUIRE(events.size() == 5);
  // The choice ends with finish_reason "error", then the error event, then [DONE].
  CHECK(json::parse(events[2])->find("choices")->as_array()[0].find("finish_reason")->as_string() ==
        "error");
  CHECK(json::parse(events[3])->find("error")->find("message")->as_string() ==
        "simulated executor failure");
  CHECK(events[4] == "[DONE]");
  auto nonstream =
      request(f.port, "POST", "/v1/completions", R"({"prompt":"FAIL","max_tokens":10})");
  CHECK(nonstream.status == 500);
}

TEST_CASE("lifecycle: 503 while loading, 200 once attached, 503 with Retry-After while draining",
          "[http][server][lifecycle]") {
  fake_engine eng;
  asio::io_context io;
  http::api_options opts;
  opts.served_model_name = "fake-model";
  http::openai_api api(opts);  // no engine yet: the model is loading
  http::http_server server(
      io, {}, [&api](http::http_request& r, http::response_writer& w) { return api.handle(r, w); });
  auto p = server.listen("127.0.0.1", 0);
  REQUIRE(p);
  std::thread t([&io] { io.run(); });

  auto loading = request(*p, "GET", "/health");
  CHECK(loading.status == 503);
  CHECK(body_json(loading).find("status")->as_string() == "loading");
  auto gen = request(*p, "POST", "/v1/completions",
                     R"({"model":"fake-model","prompt":"hi","max_tokens":2})");
  CHECK(gen.status == 503);
  CHECK(gen.head.find("Retry-After: ") != std::string::npos);
  CHECK(body_json(gen).find("error")->find("type")->as_string() == "ServiceUnavailableError");
  CHECK(request(*p, "GET", "/version").status == 200);

  api.attach(eng);
  CHECK(request(*p, "GET", "/health").status == 200);
  CHECK(request(*p, "GET", "/v1/models").status == 200);

  api.set_draining();
  auto draining = request(*p, "GET", "/health");
  CHECK(draining.status == 503);
  CHECK(body_json(draining).find("status")->as_string() == "draining");
  auto late = request(*p, "POST", "/v1/completions",
                      R"({"model":"fake-model","prompt":"hi","max_tokens":2})");
  CHECK(late.status == 503);
  CHECK(late.head.find("Retry-After: ") != std::string::npos);

  server.stop();
  io.stop();
  t.join();
}

TEST_CASE("SSE keep-alive: a comment line while a stream waits, events intact",
          "[http][server][sse]") {
  http::api_options opts;
  opts.sse_keepalive = 40ms;
  server_fixture f({}, opts);
  f.engine.token_delay_ms = 150;  // each token waits longer than the keep-alive interval
  auto r = request(f.port, "POST", "/v1/completions",
                   R"({"prompt":"abc","max_tokens":3,"stream":true})");
  REQUIRE(r.status == 200);
  // Comments come between events, never inside one; without them the events are as usual.
  std::string events_only;
  int comments = 0;
  size_t pos = 0;
  while (pos < r.body.size()) {
    const size_t end = r.body.find("\n\n", pos);
    REQUIRE(end != std::string::npos);
    const std::string block = r.body.substr(pos, end + 2 - pos);
    if (block == ": keep-alive\n\n")
      ++comments;
    else
      events_only += block;
    pos = end + 2;
  }
  CHECK(comments >= 3);
  auto events = sse_payloads(events_only);
  REQUIRE(events.size() == 3 + 1);
  CHECK(events.back() == "[DONE]");
  std::string text;
  for (size_t i = 0; i < 3; ++i)
    text += json::parse(events[i])->find("choices")->as_array()[0].find("text")->as_string();
  CHECK(text == "abc");
}

TEST_CASE("SSE keep-alive off: no comment lines", "[http][server][sse]") {
  http::api_options opts;
  opts.sse_keepalive = 0ms;
  server_fixture f({}, opts);
  f.engine.token_delay_ms = 60;
  auto r = request(f.port, "POST", "/v1/completions",
                   R"({"prompt":"abc","max_tokens":2,"stream":true})");
  REQUIRE(r.status == 200);
  CHECK(r.body.find(": keep-alive") == std::string::npos);
  CHECK(sse_payloads(r.body).size() == 3);
}
