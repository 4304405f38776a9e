// Tool-call parsers on output text in each family's format (as the models write it: several calls,
// text before a call, malformed calls left as content), the streaming splitter against the
// whole-output parse, and the tool-related request validation.
#include <catch2/catch.hpp>
#include <map>
#include <random>

#include "http/openai_request.hpp"
#include "http/tool_calls.hpp"
#include "model/text/json/value.hpp"

using namespace coserve;
using namespace coserve::http;

namespace {

parsed_tool_output parse(const char* parser, std::string_view text) {
  const tool_parser* p = find_tool_parser(parser);
  REQUIRE(p != nullptr);
  return p->parse(text);
}

// The arguments as a JSON value (so the test does not depend on spacing choices beyond JSON).
json::value args(const tool_call& c) {
  auto v = json::parse(c.arguments);
  REQUIRE(v.ok());
  return *v;
}

// Streams `text` through a tool_stream in pieces of `step` bytes: the content sent plus the final
// part must equal the whole-output parse.
void check_stream_matches(tool_mode mode, const char* parser, std::string_view text, size_t step) {
  const tool_parser* p = parser ? find_tool_parser(parser) : nullptr;
  tool_stream ts(mode, p);
  std::string sent;
  for (size_t i = 0; i < text.size(); i += step) sent += ts.push(text.substr(i, step));
  auto last = ts.finish();
  sent += last.content;
  const parsed_tool_output whole = parse_tool_output(mode, p, {}, text);
  INFO("text: " << text << " step " << step);
  REQUIRE(last.calls.size() == whole.calls.size());
  for (size_t i = 0; i < whole.calls.size(); ++i) {
    CHECK(last.calls[i].name == whole.calls[i].name);
    CHECK(last.calls[i].arguments == whole.calls[i].arguments);
  }
  if (whole.calls.empty())
    CHECK(sent == text);
  else
    CHECK(sent == whole.content);
}

}  // namespace

TEST_CASE("tool parsers: hermes", "[tools]") {
  auto r = parse(
      "hermes",
      "Let me check both.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": "
      "\"Paris\", "
      "\"unit\": \"celsius\"}}\n</tool_call>\n<tool_call>\n{\"name\": \"get_time\", \"arguments\": "
      "{\"tz\": \"Europe/Paris\"}}\n</tool_call>");
  CHECK(r.content == "Let me check both.\n");
  REQUIRE(r.calls.size() == 2);
  CHECK(r.calls[0].name == "get_weather");
  CHECK(args(r.calls[0]).find("city")->as_string() == "Paris");
  CHECK(r.calls[0].arguments == "{\"city\": \"Paris\", \"unit\": \"celsius\"}");
  CHECK(r.calls[1].name == "get_time");
  CHECK(r.calls[0].id != r.calls[1].id);
  CHECK(r.calls[0].id.rfind("chatcmpl-tool-", 0) == 0);
  // No text before the call: no content. An unclosed last call (cut at the stop token) still
  // parses.
  r = parse("hermes", "<tool_call>\n{\"name\": \"f\", \"arguments\": {}}\n");
  CHECK(r.content.empty());
  REQUIRE(r.calls.size() == 1);
  CHECK(r.calls[0].arguments == "{}");
  // Arguments given as a JSON string are read as the object they hold.
  r = parse("hermes",
            "<tool_call>{\"name\": \"f\", \"arguments\": \"{\\\"x\\\": 1}\"}</tool_call>");
  REQUIRE(r.calls.size() == 1);
  CHECK(r.calls[0].arguments == "{\"x\": 1}");
  // Malformed: broken JSON, no name, arguments not an object -> all content, no calls.
  for (const char* bad :
       {"<tool_call>\n{\"name\": \"f\", \"arguments\": {\"x\": }\n</tool_call>",
        "<tool_call>{\"arguments\": {}}</tool_call>",
        "<tool_call>{\"name\": \"f\", \"arguments\": 3}</tool_call>",
        "ok <tool_call>{\"name\": \"f\"}</tool_call> <tool_call>nope</tool_call>"}) {
    r = parse("hermes", bad);
    CHECK(r.calls.empty());
    CHECK(r.content == bad);
  }
  r = parse("hermes", "Plain answer with no calls.");
  CHECK(r.calls.empty());
  CHECK(r.content == "Plain answer with no calls.");
}

TEST_CASE("tool parsers: llama3_json", "[tools]") {
  auto r = parse("llama3_json",
                 "{\"name\": \"get_weather\", \"parameters\": {\"city\": \"San Francisco, CA\"}}");
  REQUIRE(r.calls.size() == 1);
  CHECK(r.content.empty());
  CHECK(r.calls[0].name == "get_weather");
  CHECK(r.calls[0].arguments == "{\"city\": \"San Francisco, CA\"}");
  r = parse("llama3_json",
            "<|python_tag|>{\"name\": \"a\", \"parameters\": {\"x\": [1, 2]}}; {\"name\": \"b\", "
            "\"arguments\": {}}");
  REQUIRE(r.calls.size() == 2);
  CHECK(r.calls[0].name == "a");
  CHECK(r.calls[1].name == "b");
  CHECK(args(r.calls[0]).find("x")->as_array().size() == 2);
  for (const char* content :
       {"The weather is sunny.", "{\"name\": \"a\", \"parameters\": {}} and some text",
        "{\"name\": \"a\", \"parameters\": {\"x\": 1}"}) {
    r = parse("llama3_json", content);
    CHECK(r.calls.empty());
    CHECK(r.content == content);
  }
}

TEST_CASE("tool parsers: mistral", "[tools]") {
  auto r = parse("mistral",
                 "[TOOL_CALLS][{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}, "
                 "{\"name\": \"add\", "
                 "\"arguments\": {\"a\": 1, \"b\": 2}}]");
  REQUIRE(r.calls.size() == 2);
  CHECK(r.content.empty());
  CHECK(r.calls[1].arguments == "{\"a\": 1, \"b\": 2}");
  // The newer form: name[ARGS]{...}, repeated.
  r = parse(
      "mistral",
      "Sure.[TOOL_CALLS]get_weather[ARGS]{\"city\": \"Paris\"}[TOOL_CALLS]add[ARGS]{\"a\": 1}");
  CHECK(r.content == "Sure.");
  REQUIRE(r.calls.size() == 2);
  CHECK(r.calls[0].name == "get_weather");
  CHECK(r.calls[1].name == "add");
  CHECK(r.calls[1].arguments == "{\"a\": 1}");
  for (const char* bad : {"[TOOL_CALLS][{\"name\": \"f\", \"arguments\": {]", "[TOOL_CALLS]",
                          "[TOOL_CALLS]bad name{\"a\": 1}"}) {
    r = parse("mistral", bad);
    CHECK(r.calls.empty());
    CHECK(r.content == bad);
  }
}

TEST_CASE("tool parsers: pythonic", "[tools]") {
  auto r = parse("pythonic",
                 "[get_weather(city='San Francisco', metric=\"celsius\", days=3, detail=True), "
                 "search(q=\"it's\\n\", filters={'lang': 'en', 'n': [1, 2.5, None]}), noargs()]");
  REQUIRE(r.calls.size() == 3);
  CHECK(r.content.empty());
  CHECK(r.calls[0].name == "get_weather");
  CHECK(r.calls[0].arguments ==
        "{\"city\": \"San Francisco\", \"metric\": \"celsius\", \"days\": 3, \"detail\": true}");
  auto a1 = args(r.calls[1]);
  CHECK(a1.find("q")->as_string() == "it's\n");
  CHECK(a1.find("filters")->find("n")->as_array().size() == 3);
  CHECK(a1.find("filters")->find("n")->as_array()[2].is_null());
  CHECK(r.calls[2].arguments == "{}");
  for (const char* bad : {"[get_weather(city=)]", "[get_weather(city='x'", "get_weather(city='x')",
                          "[1, 2]", "[f(x=unknown_name)]"}) {
    r = parse("pythonic", bad);
    CHECK(r.calls.empty());
    CHECK(r.content == bad);
  }
}

TEST_CASE("tool stream: content and calls match the whole-output parse, whatever the pieces",
          "[tools]") {
  const std::pair<const char*, const char*> cases[] = {
      {"hermes",
       "Checking.<tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\": 1}}\n</tool_call>"},
      {"hermes", "no calls here, just < and <tool and text"},
      {"hermes", "<tool_call>{\"name\": \"f\", \"arguments\": {broken</tool_call>"},
      {"llama3_json", "  {\"name\": \"f\", \"parameters\": {\"a\": \"b\"}}"},
      {"llama3_json", "plain text, not a call"},
      {"mistral", "Hi[TOOL_CALLS][{\"name\": \"f\", \"arguments\": {}}]"},
      {"mistral", "text with [TOOL and more"},
      {"pythonic", "[f(a=1), g(b='x')]"},
      {"pythonic", "an answer"},
  };
  for (const auto& [parser, text] : cases)
    for (size_t step : {1, 3, 7, 1000})
      check_stream_matches(tool_mode::automatic, parser, text, step);
  check_stream_matches(tool_mode::required, nullptr, R"([{"name": "f", "parameters": {"a": 1}}])",
                       2);
  check_stream_matches(tool_mode::none, nullptr, "<tool_call>{}</tool_call>", 2);
  // Content before a hermes call streams as it comes; the marker's first bytes are held back.
  tool_stream ts(tool_mode::automatic, find_tool_parser("hermes"));
  CHECK(ts.push("Hello <tool") == "Hello ");
  CHECK(ts.push("_call>{\"name\"").empty());
  CHECK(ts.push(": \"f\"}</tool_call>").empty());
  auto last = ts.finish();
  CHECK(last.content.empty());
  REQUIRE(last.calls.size() == 1);
  CHECK(last.calls[0].name == "f");
}

TEST_CASE("tool_choice required: the forcing schema and its output", "[tools]") {
  auto tools = json::parse(
      R"([{"type":"function","function":{"name":"a","parameters":{"type":"object","properties":{"x":{"type":"integer"}}}}},
                               {"type":"function","function":{"name":"b"}}])");
  REQUIRE(tools.ok());
  auto schema = json::parse(required_tool_calls_schema(*tools, true));
  REQUIRE(schema.ok());
  CHECK(schema->find("type")->as_string() == "array");
  CHECK(schema->find("minItems")->as_int() == 1);
  CHECK(schema->find("maxItems") == nullptr);
  CHECK(schema->find("items")->find("anyOf")->as_array().size() == 2);
  auto one = json::parse(required_tool_calls_schema(*tools, false));
  CHECK(one->find("maxItems")->as_int() == 1);
  auto r = parse_required_tool_calls(
      R"([{"name": "a", "parameters": {"x": 4}}, {"name": "b", "parameters": {}}])");
  REQUIRE(r.calls.size() == 2);
  CHECK(r.calls[0].arguments == "{\"x\": 4}");
  CHECK(parse_required_tool_calls("[{\"name\": \"a\", \"parameters\": {\"x\": 4}").calls.empty());
}

TEST_CASE("tool request validation names the field", "[tools]") {
  model_limits lim{"m", 1000, 4096};
  auto err = [&](const std::string& body, const model_limits& l) {
    auto r = parse_openai_request(body, true, l);
    REQUIRE(std::holds_alternative<api_error>(r));
    return std::get<api_error>(r);
  };
  const std::string msgs = R"("messages":[{"role":"user","content":"hi"}])";
  const std::string tools =
      R"("tools":[{"type":"function","function":{"name":"f","parameters":{"type":"object"}}}])";
  // tools with the default tool_choice ("auto") need the server's flags, as in vLLM.
  CHECK(err("{" + msgs + "," + tools + "}", lim).param == "tool_choice");
  CHECK(err("{" + msgs + "," + tools +
                R"(,"tool_choice":{"type":"function","function":{"name":"g"}}})",
            lim)
            .param == "tool_choice");
  CHECK(err("{" + msgs + R"(,"tool_choice":"required"})", lim).param == "tool_choice");
  CHECK(err("{" + msgs + "," + tools + R"(,"tool_choice":"sometimes"})", lim).param ==
        "tool_choice");
  CHECK(err("{" + msgs + R"(,"tools":[{"type":"function","function":{}}]})", lim).param == "tools");
  CHECK(err("{" + msgs + R"(,"tools":[{"type":"retrieval"}],"tool_choice":"none"})", lim).param ==
        "tools");
  CHECK(err("{" + msgs + "," + tools +
                R"(,"tool_choice":"required","response_format":{"type":"json_object"}})",
            lim)
            .param == "tool_choice");
  // Accepted: none, required, named; auto once the server has a parser.
  for (const char* tc :
       {R"("none")", R"("required")", R"({"type":"function","function":{"name":"f"}})"}) {
    auto r =
        parse_openai_request("{" + msgs + "," + tools + ",\"tool_choice\":" + tc + "}", true, lim);
    REQUIRE(std::holds_alternative<openai_request>(r));
    const auto& req = std::get<openai_request>(r);
    if (std::string(tc) == R"("none")")
      CHECK_FALSE(req.structured.has_value());
    else
      CHECK((req.structured && req.structured->param == "tool_choice"));
  }
  model_limits with_parser = lim;
  with_parser.enable_auto_tool_choice = true;
  with_parser.tool_call_parser = find_tool_parser("hermes");
  auto r = parse_openai_request("{" + msgs + "," + tools + "}", true, with_parser);
  REQUIRE(std::holds_alternative<openai_request>(r));
  CHECK(std::get<openai_request>(r).tools == tool_mode::automatic);
}

TEST_CASE(
    "tool stream: random outputs of each format, split at random points, match the whole-output "
    "parse",
    "[tools]") {
  // Fragments a model writes in each format: text (with the format's marker characters),
  // well-formed calls, malformed ones and cut-off ones; each case joins a few at random and streams
  // the result in random pieces.
  const std::vector<std::string> common = {"Sure. ", "ok\n",      " < [ { ( ", "{\"name\": \"x\"}",
                                           "é😀 ",    "'quote\" ", ""};
  const std::map<std::string, std::vector<std::string>> frags = {
      {"hermes",
       {"<tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\": 1}}\n</tool_call>",
        "<tool_call>{\"name\": \"g\", \"arguments\": {\"s\": \"</tool_call>?\"}}</tool_call>",
        "<tool_call>", "</tool_call>",
        "<tool_call>{\"name\": \"f\", \"arguments\": {broken}</tool_call>", "<tool", "_call>",
        "<tool_call>\n{\"name\": \"h\", \"arguments\": \"{\\\"k\\\": [1, 2]}\"}\n"}},
      {"llama3_json",
       {"{\"name\": \"f\", \"parameters\": {\"a\": \"b\"}}", "<|python_tag|>", "; ",
        "{\"name\": \"g\", \"arguments\": {}}", "{\"name\": \"f\", \"parameters\": {",
        "{\"nope\": 1}"}},
      {"mistral",
       {"[TOOL_CALLS]", "[{\"name\": \"f\", \"arguments\": {\"a\": 1}}]", "f[ARGS]{\"a\": [1]}",
        "[TOOL_CALLS][{\"name\": \"g\", \"arguments\": {}}, {\"name\": \"h\", \"arguments\": "
        "{\"x\": null}}]",
        "[TOOL", "_CALLS]", "[ARGS]", "[{\"name\": \"f\", \"arguments\": {]"}},
      {"pythonic",
       {"[f(a=1, b='x')]", "[g()]", "[f(a=[1, {'k': None}], b=True), g(c=\"it's\")]", "[f(a=", ")]",
        "[", "]", "f(a=1)"}},
  };
  std::mt19937 rng(20261126);
  int with_calls = 0, cases = 0;
  for (const auto& [parser, own] : frags) {
    for (int n = 0; n < 300; ++n) {
      std::string text;
      const int parts = 1 + int(rng() % 4);
      for (int k = 0; k < parts; ++k) {
        const bool use_own = rng() % 3 != 0;
        const auto& pool = use_own ? own : common;
        text += pool[rng() % pool.size()];
      }
      const tool_parser* p = find_tool_parser(parser.c_str());
      const parsed_tool_output whole = parse_tool_output(tool_mode::automatic, p, {}, text);
      with_calls += !whole.calls.empty();
      ++cases;
      // Random piece sizes (1 to 8 bytes, or the rest), cutting through multi-byte characters too.
      tool_stream ts(tool_mode::automatic, p);
      std::string sent;
      for (size_t i = 0; i < text.size();) {
        const size_t step = rng() % 5 == 0 ? text.size() : 1 + rng() % 8;
        sent += ts.push(std::string_view(text).substr(i, step));
        i += step;
      }
      auto last = ts.finish();
      sent += last.content;
      INFO(parser << ": " << text);
      REQUIRE(last.calls.size() == whole.calls.size());
      for (size_t i = 0; i < whole.calls.size(); ++i) {
        CHECK(last.calls[i].name == whole.calls[i].name);
        CHECK(last.calls[i].arguments == whole.calls[i].arguments);
      }
      CHECK(sent == (whole.calls.empty() ? text : whole.content));
    }
  }
  CHECK(with_calls > cases / 12);  // the mix really holds calls (134 of 1200 with this seed)
}
