// chat_output_split: one chat choice's output text split as it streams, in the order every API
// dialect hands it on: reasoning first (with a --reasoning-parser; its text never reaches the
// tool parser), then tool calls and content (tool_choice and --tool-call-parser decide which is
// which). /v1/chat/completions, /v1/responses and /v1/messages all split through it.
//
// The pieces of every push() concatenate to the whole-output split (split_reasoning, then
// parse_tool_output), so streamed and non-streamed answers carry the same reasoning, content and
// calls.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "http/reasoning.hpp"
#include "http/tool_calls.hpp"

namespace coserve::http {

// How a request's choices are split.
struct split_rules {
  const reasoning_parser* reasoning = nullptr;  // null: no reasoning part
  tool_mode tools = tool_mode::none;
  const tool_parser* parser = nullptr;  // tool_mode::automatic
  std::string tool_name;                // tool_mode::named
};

// What one piece of output text adds.
struct output_part {
  std::string reasoning;  // reasoning text that may be sent now
  std::string content;    // content that may be sent now
  // tool_choice naming a function: the argument text generated now, which may be streamed as it
  // comes; `opens_call` on the first non-empty piece (the call's id and name go before it).
  std::string arguments;
  bool opens_call = false;
  // On the last piece only (the output is complete), the whole output parsed once:
  std::string held_content;      // content held back while it could have begun a call
  std::vector<tool_call> calls;  // every call (named tool_choice: its one call, streamed or not)
};

// A whole (non-streamed) output split the same way.
struct whole_output {
  std::string reasoning;
  bool has_reasoning = false;  // a reasoning part was found (it may be empty)
  std::string content;
  std::vector<tool_call> calls;
};
whole_output split_whole_output(const split_rules& rules, std::string_view text);

class chat_output_split {
 public:
  explicit chat_output_split(const split_rules& rules);

  // The next piece of output text; `last`: the output ends with it.
  output_part push(std::string_view piece, bool last);

  tool_mode tools() const noexcept { return tools_; }
  // Named tool_choice: the call's id, and whether its arguments began to stream.
  const std::string& named_id() const noexcept { return tool_.named_id(); }
  bool call_opened() const noexcept { return tool_.header_sent; }

 private:
  std::optional<reasoning_stream> reasoning_;
  tool_mode tools_;
  tool_stream tool_;
};

}  // namespace coserve::http
