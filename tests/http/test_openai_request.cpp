// Request parsing and validation: every invalid body is a 4xx naming the field.
#include <catch2/catch.hpp>

#include "http/openai_request.hpp"
#include "http/openai_response.hpp"

using namespace coserve;
using namespace coserve::http;

namespace {

model_limits limits() { return {"m", 1000, 256}; }

api_error expect_error(const std::string& body, bool chat = false) {
  auto r = parse_openai_request(body, chat, limits());
  REQUIRE(std::holds_alternative<api_error>(r));
  return std::get<api_error>(r);
}

openai_request expect_ok(const std::string& body, bool chat = false) {
  auto r = parse_openai_request(body, chat, limits());
  if (auto* e = std::get_if<api_error>(&r)) FAIL(e->message);
  return std::get<openai_request>(r);
}

}  // namespace

TEST_CASE("completions: prompt forms", "[http][request]") {
  auto a = expect_ok(R"({"model":"m","prompt":"hi"})");
  REQUIRE(a.prompts.size() == 1);
  CHECK(std::get<std::string>(a.prompts[0]) == "hi");
  auto b = expect_ok(R"({"prompt":["a","b"]})");
  CHECK(b.prompts.size() == 2);
  auto c = expect_ok(R"({"prompt":[1,2,3]})");
  REQUIRE(c.prompts.size() == 1);
  CHECK(std::get<std::vector<int32_t>>(c.prompts[0]) == std::vector<int32_t>{1, 2, 3});
  auto d = expect_ok(R"({"prompt":[[1],[2,3]]})");
  CHECK(d.prompts.size() == 2);
  CHECK(expect_error(R"({"prompt":[]})").param == "prompt");
  CHECK(expect_error(R"({"prompt":[1,1000]})").param == "prompt");
  CHECK(expect_error(R"({"prompt":[-1]})").param == "prompt");
  CHECK(expect_error(R"({"prompt":5})").param == "prompt");
  CHECK(expect_error(R"({"max_tokens":3})").param == "prompt");
}

TEST_CASE("sampling parameters map onto sampling_params", "[http][request]") {
  auto r =
      expect_ok(R"({"prompt":"x","max_tokens":7,"temperature":0,"top_p":0.5,"top_k":4,"min_p":0.1,
    "n":2,"stop":["a","bc"],"stop_token_ids":[5],"seed":42,"presence_penalty":1.5,"frequency_penalty":-1,
    "repetition_penalty":1.2,"logit_bias":{"7":-100,"9":3.5},"logprobs":3,"ignore_eos":true,
    "stream":true,"stream_options":{"include_usage":true},"user":"u"})");
  const auto& p = r.params;
  CHECK(p.max_tokens == 7);
  CHECK(r.max_tokens_given);
  CHECK(p.greedy());
  CHECK(p.top_p == Approx(0.5));
  CHECK(p.top_k == 4);
  CHECK(p.min_p == Approx(0.1));
  CHECK(p.n == 2);
  CHECK(p.stop == std::vector<std::string>{"a", "bc"});
  CHECK(p.stop_token_ids == std::vector<int32_t>{5});
  CHECK(p.seed == 42u);
  CHECK(p.presence_penalty == Approx(1.5));
  CHECK(p.frequency_penalty == Approx(-1));
  CHECK(p.repetition_penalty == Approx(1.2));
  REQUIRE(p.logit_bias.size() == 2);
  CHECK(p.logit_bias[0] == std::pair<int32_t, float>{7, -100.0f});
  CHECK(p.logprobs == 3);
  CHECK(p.ignore_eos);
  CHECK(r.stream);
  CHECK(r.include_usage);
  CHECK(r.user == "u");
  auto s = expect_ok(R"({"prompt":"x","stop":"end"})");
  CHECK(s.params.stop == std::vector<std::string>{"end"});
  auto t =
      expect_ok(R"({"messages":[{"role":"user","content":"q"}],"max_completion_tokens":9})", true);
  CHECK(t.params.max_tokens == 9);
}

TEST_CASE("out-of-range and wrongly typed fields name their param", "[http][request]") {
  const std::pair<const char*, const char*> cases[] = {
      {R"({"prompt":"x","temperature":2.5})", "temperature"},
      {R"({"prompt":"x","temperature":-0.1})", "temperature"},
      {R"({"prompt":"x","temperature":"hot"})", "temperature"},
      {R"({"prompt":"x","top_p":0})", "top_p"},
      {R"({"prompt":"x","top_p":1.01})", "top_p"},
      {R"({"prompt":"x","n":0})", "n"},
      {R"({"prompt":"x","n":1.5})", "n"},
      {R"({"prompt":"x","max_tokens":0})", "max_tokens"},
      {R"({"prompt":"x","max_tokens":"3"})", "max_tokens"},
      {R"({"prompt":"x","presence_penalty":2.1})", "presence_penalty"},
      {R"({"prompt":"x","frequency_penalty":-3})", "frequency_penalty"},
      {R"({"prompt":"x","seed":1e30})", "seed"},
      {R"({"prompt":"x","seed":18446744073709551615})", "seed"},
      {R"({"prompt":"x","logprobs":21})", "logprobs"},
      {R"({"prompt":"x","logprobs":true})", "logprobs"},
      {R"({"prompt":"x","stop":[1]})", "stop"},
      {R"({"prompt":"x","stop_token_ids":[1000]})", "stop_token_ids"},
      {R"({"prompt":"x","logit_bias":{"abc":1}})", "logit_bias"},
      {R"({"prompt":"x","logit_bias":{"1000":1}})", "logit_bias"},
      {R"({"prompt":"x","logit_bias":{"1":101}})", "logit_bias"},
      {R"({"prompt":"x","stream":"yes"})", "stream"},
      {R"({"prompt":"x","stream_options":{"include_usage":true}})", "stream_options"},
      {R"({"prompt":"x","ignore_eos":1})", "ignore_eos"},
      {R"({"prompt":"x","user":5})", "user"},
      {R"({"prompt":"x","model":5})", "model"},
      {R"({"prompt":"x","top_k":-2})", "top_k"},
  };
  for (const auto& [body, param] : cases) {
    INFO(body);
    auto e = expect_error(body);
    CHECK(e.status == 400);
    CHECK(e.param == param);
    CHECK(e.type == "BadRequestError");
  }
}

TEST_CASE("chat: messages, content parts, logprobs", "[http][request]") {
  auto r = expect_ok(
      R"({"messages":[{"role":"user","content":[{"type":"text","text":"a"},{"type":"text","text":"b"}]}],
                        "logprobs":true,"top_logprobs":2,"tools":[{"type":"function","function":{"name":"f"}}],
                        "tool_choice":"none"})",
      true);
  CHECK(r.chat_in.messages.as_array()[0].find("content")->as_string() == "a\nb");
  CHECK(r.params.logprobs == 2);
  CHECK(r.chat_in.tools.is_array());
  CHECK(expect_error(R"({"messages":[]})", true).param == "messages");
  CHECK(expect_error(R"({"messages":"hi"})", true).param == "messages");
  CHECK(expect_error(R"({"messages":[{"content":"x"}]})", true).param == "messages");
  CHECK(expect_error(R"({"messages":[{"role":"user","content":[{"type":"image_url"}]}]})", true)
            .param == "messages");
  CHECK(expect_error(R"({"messages":[{"role":"user","content":"x"}],"top_logprobs":2})", true)
            .param == "top_logprobs");
  CHECK(expect_error(R"({"messages":[{"role":"user","content":"x"}],"logprobs":3})", true).param ==
        "logprobs");
}

TEST_CASE("body-level errors and unknown model", "[http][request]") {
  CHECK(expect_error("{\"prompt\":").status == 400);
  CHECK(expect_error("[1,2]").status == 400);
  CHECK(expect_error("\"str\"").status == 400);
  auto e = expect_error(R"({"model":"other","prompt":"x"})");
  CHECK(e.status == 404);
  CHECK(e.param == "model");
}

TEST_CASE("context length rule", "[http][request]") {
  auto r = expect_ok(R"({"prompt":"x","max_tokens":200})");
  CHECK_FALSE(check_context(r, 50, limits()).has_value());
  auto e = check_context(r, 57, limits());
  REQUIRE(e.has_value());
  CHECK(e->param == "max_tokens");
  auto chat = expect_ok(R"({"messages":[{"role":"user","content":"x"}]})", true);
  CHECK_FALSE(check_context(chat, 56, limits()).has_value());
  CHECK(chat.params.max_tokens == 200);  // the rest of the context
  auto plain = expect_ok(R"({"prompt":"x"})");
  CHECK_FALSE(check_context(plain, 10, limits()).has_value());
  CHECK(plain.params.max_tokens == 16);
  auto full = expect_ok(R"({"prompt":"x"})");
  CHECK(check_context(full, 256, limits())->param == "prompt");
}

TEST_CASE("SSE framing and chunk shapes", "[http][sse]") {
  CHECK(sse_event("{}") == "data: {}\n\n");
  response_header h{"chatcmpl-1", 7, "m", true};
  CHECK(
      chat_role_chunk(h, 0, false) ==
      R"({"id":"chatcmpl-1","object":"chat.completion.chunk","created":7,"model":"m","choices":[{"index":0,"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}]})");
  CHECK(
      chat_delta_chunk(h, 1, "hi", json::value(), {}, true) ==
      R"({"id":"chatcmpl-1","object":"chat.completion.chunk","created":7,"model":"m","choices":[{"index":1,"delta":{"content":"hi"},"logprobs":null,"finish_reason":null}],"usage":null})");
  CHECK(
      chat_delta_chunk(h, 0, {}, json::value(), "stop", false) ==
      R"({"id":"chatcmpl-1","object":"chat.completion.chunk","created":7,"model":"m","choices":[{"index":0,"delta":{},"logprobs":null,"finish_reason":"stop"}]})");
  CHECK(
      usage_chunk(h, usage_json(3, 4, 0)) ==
      R"({"id":"chatcmpl-1","object":"chat.completion.chunk","created":7,"model":"m","choices":[],"usage":{"prompt_tokens":3,"completion_tokens":4,"total_tokens":7}})");
  response_header c{"cmpl-1", 7, "m", false};
  CHECK(
      text_chunk(c, 0, "a\"b", json::value(), "length", false) ==
      R"({"id":"cmpl-1","object":"text_completion","created":7,"model":"m","choices":[{"index":0,"text":"a\"b","logprobs":null,"finish_reason":"length","stop_reason":null}]})");
}

TEST_CASE("completion logprobs carry text offsets", "[http][sse]") {
  token_text_fn text_of = [](int32_t id) { return std::string(static_cast<size_t>(id), 'x'); };
  auto v =
      completion_logprobs({1, 2, 3}, {-0.1f, -0.2f, -0.3f}, {{{1, -0.1f}}, {}, {}}, 5, text_of);
  const auto& off = v.find("text_offset")->as_array();
  REQUIRE(off.size() == 3);
  CHECK(off[0].as_int() == 5);
  CHECK(off[1].as_int() == 6);
  CHECK(off[2].as_int() == 8);
  CHECK(v.find("top_logprobs")->as_array()[0].find("x") != nullptr);
  // The sampled token is always among the top logprobs (OpenAI's legacy completions).
  const auto& top1 = v.find("top_logprobs")->as_array()[1];
  REQUIRE(top1.is_object());
  CHECK(top1.size() == 1);
  CHECK(top1.find("xx")->as_double() == Approx(-0.2));
  auto c = chat_logprobs({2}, {-1.0f}, {{{2, -1.0f}, {3, -2.0f}}}, text_of);
  const auto& e = c.find("content")->as_array()[0];
  CHECK(e.find("token")->as_string() == "xx");
  CHECK(e.find("bytes")->as_array().size() == 2);
  CHECK(e.find("top_logprobs")->as_array().size() == 2);
}

TEST_CASE("openai request: the server's sampling defaults fill what the request leaves out",
          "[http][openai]") {
  model_limits lim = limits();
  lim.defaults.temperature = 0.7f;
  lim.defaults.top_p = 0.8f;
  lim.defaults.top_k = 20;
  lim.defaults.repetition_penalty = 1.05f;
  lim.defaults.max_tokens = 100;
  auto r = parse_openai_request(R"({"messages": [{"role": "user", "content": "x"}]})", true, lim);
  REQUIRE(std::holds_alternative<openai_request>(r));
  auto& q = std::get<openai_request>(r);
  CHECK(q.params.temperature == 0.7f);
  CHECK(q.params.top_p == 0.8f);
  CHECK(q.params.top_k == 20);
  CHECK(q.params.repetition_penalty == 1.05f);
  CHECK(context_of(q).default_max_tokens == 100);
  auto given = parse_openai_request(
      R"({"messages": [{"role": "user", "content": "x"}], "temperature": 0, "top_k": -1, "max_tokens": 300})",
      true, lim);
  REQUIRE(std::holds_alternative<openai_request>(given));
  CHECK(std::get<openai_request>(given).params.temperature == 0.0f);
  CHECK(std::get<openai_request>(given).params.top_k == -1);
  CHECK(std::get<openai_request>(given).params.max_tokens == 300);  // a default, not a ceiling
  auto completion = parse_openai_request(R"({"prompt": "x"})", false, lim);  // completions keep 16
  REQUIRE(std::holds_alternative<openai_request>(completion));
  CHECK(context_of(std::get<openai_request>(completion)).default_max_tokens == 16);
}
