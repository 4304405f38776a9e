// Reasoning parsers (vLLM's --reasoning-parser): the model's thinking, written between <think> and
// </think>, is split from the answer and returned as `reasoning_content` (messages and deltas);
// tool calls are looked for in the answer only.
//
//   deepseek_r1  the chat template opens <think> in the prompt: the output starts inside the
//                reasoning (a leading <think> is dropped) and the answer follows </think>; with no
//                </think> the whole output is reasoning
//   qwen3        reasoning only when the output starts with <think> (thinking can be switched off
//                in Qwen3's template); otherwise all of it is the answer
#pragma once

#include <string>
#include <string_view>

namespace coserve::http {

struct reasoning_parser {
  const char* name;
  bool starts_in_reasoning;  // deepseek_r1: true; qwen3: only after a leading <think>
};

// The parser named `name`, or null; reasoning_parser_names(): "deepseek_r1, qwen3".
const reasoning_parser* find_reasoning_parser(std::string_view name);
std::string reasoning_parser_names();

struct reasoning_split {
  std::string reasoning;
  std::string content;
  bool has_reasoning = false;  // a reasoning part was found (it may be empty)
};

// The whole output split (non-streamed responses).
reasoning_split split_reasoning(const reasoning_parser& p, std::string_view text);

// The same split made as the text streams in: push() returns the reasoning and the answer text
// that may be sent now (a tail that may be the start of a tag is held back); finish() returns the
// rest. The pieces concatenate to split_reasoning() of the whole text.
class reasoning_stream {
 public:
  explicit reasoning_stream(const reasoning_parser& p) : p_(p) {}
  reasoning_split push(std::string_view piece);
  reasoning_split finish();

 private:
  enum class state { start, reasoning, content };
  reasoning_split drain(bool final);
  const reasoning_parser& p_;
  std::string buf_;  // text not yet classified
  state st_ = state::start;
};

}  // namespace coserve::http
