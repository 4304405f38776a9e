// chat_output_split: the streamed split of a chat choice (reasoning, content, tool calls) against
// the whole-output split, whatever the pieces, for each reasoning parser and tool mode together.
#include <catch2/catch.hpp>
#include <string>
#include <vector>

#include "http/chat_output.hpp"

using namespace coserve::http;

namespace {

struct streamed {
  std::string reasoning, content, arguments;
  int opened = 0;
  std::vector<tool_call> calls;
};

streamed stream(const split_rules& rules, std::string_view text, size_t step) {
  chat_output_split split(rules);
  streamed out;
  for (size_t i = 0; i < text.size() || i == 0; i += step) {
    const bool last = i + step >= text.size();
    output_part p = split.push(text.substr(i, std::min(step, text.size() - i)), last);
    out.reasoning += p.reasoning;
    out.content += p.content;
    out.arguments += p.arguments;
    out.opened += p.opens_call ? 1 : 0;
    if (last) {
      out.content += p.held_content;
      out.calls = p.calls;
    } else {
      CHECK(p.held_content.empty());
      CHECK(p.calls.empty());
    }
    if (last) break;
  }
  return out;
}

void check_matches_whole(const split_rules& rules, std::string_view text) {
  const whole_output whole = split_whole_output(rules, text);
  for (size_t step : {1, 2, 5, 1000}) {
    INFO("text: " << text << " step " << step);
    const streamed s = stream(rules, text, step);
    CHECK(s.reasoning == whole.reasoning);
    CHECK(s.content == whole.content);
    REQUIRE(s.calls.size() == whole.calls.size());
    for (size_t i = 0; i < whole.calls.size(); ++i) {
      CHECK(s.calls[i].name == whole.calls[i].name);
      CHECK(s.calls[i].arguments == whole.calls[i].arguments);
    }
  }
}

}  // namespace

TEST_CASE("chat output split: reasoning, then tool calls and content, as the whole output",
          "[http][chat_output]") {
  const reasoning_parser* r1 = find_reasoning_parser("deepseek_r1");
  const reasoning_parser* q3 = find_reasoning_parser("qwen3");
  const tool_parser* hermes = find_tool_parser("hermes");
  REQUIRE((r1 && q3 && hermes));
  const char* hermes_call = "<tool_call>{\"name\": \"f\", \"arguments\": {\"a\": 1}}</tool_call>";
  for (const reasoning_parser* rp : {static_cast<const reasoning_parser*>(nullptr), r1, q3}) {
    split_rules rules{rp, tool_mode::automatic, hermes, {}};
    check_matches_whole(rules, std::string("<think>plan a call</think>Sure.") + hermes_call);
    check_matches_whole(rules, "<think>a <tool_call> in the reasoning stays there</think>text");
    check_matches_whole(rules, "no reasoning, no calls");
    check_matches_whole(rules, "");
    rules.tools = tool_mode::none;
    check_matches_whole(rules, std::string("<think>x</think>") + hermes_call);
    rules.tools = tool_mode::required;
    check_matches_whole(rules, R"(<think>r</think>[{"name": "f", "parameters": {"a": 1}}])");
  }
}

TEST_CASE("chat output split: a named tool's arguments stream as they come",
          "[http][chat_output]") {
  const split_rules rules{find_reasoning_parser("qwen3"), tool_mode::named, nullptr, "get"};
  const std::string text = R"(<think>hm</think>{"city": "Paris"})";
  for (size_t step : {1, 4, 1000}) {
    const streamed s = stream(rules, text, step);
    CHECK(s.reasoning == "hm");
    CHECK(s.content.empty());
    CHECK(s.arguments == R"({"city": "Paris"})");
    CHECK(s.opened == 1);
    REQUIRE(s.calls.size() == 1);  // the one call, also when streamed
    CHECK(s.calls[0].name == "get");
    CHECK(s.calls[0].arguments == s.arguments);
  }
  // No argument text: no call opened while streaming; the call is still the output's.
  const streamed empty = stream(rules, "", 1);
  CHECK(empty.opened == 0);
  CHECK(empty.calls.size() == 1);
}
