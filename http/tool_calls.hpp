// Tool calling: the parsers that turn a model's output text into OpenAI tool calls, one entry per
// output format in a table (vLLM's --tool-call-parser names), and the per-choice streaming state
// that decides which text streams as content and which becomes tool calls.
//
//   hermes       <tool_call>{"name": ..., "arguments": {...}}</tool_call> ... (Qwen2.5, Hermes)
//   llama3_json  {"name": ..., "parameters": {...}}; {...}   (optionally after <|python_tag|>)
//   mistral      [TOOL_CALLS][{"name": ..., "arguments": {...}}, ...]  or
//   [TOOL_CALLS]name[ARGS]{...} pythonic     [get_weather(city="Paris", days=3), other()]   (Python
//   literal arguments)
//
// A call that does not parse leaves the whole output as content (no tool calls), as vLLM does.
// Arguments are re-serialised as JSON text the way Python's json.dumps(ensure_ascii=False) writes
// them, so streamed and non-streamed responses carry identical calls.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "model/text/json/value.hpp"

namespace coserve::http {

struct tool_call {
  std::string id;  // "chatcmpl-tool-<hex>"
  std::string name;
  std::string arguments;  // JSON text of an object
};

struct parsed_tool_output {
  std::string content;  // text outside the calls ("" when none)
  std::vector<tool_call> calls;
};

struct tool_parser {
  const char* name;
  // Text that starts a call anywhere in the output (hermes, mistral) ...
  std::vector<std::string_view> markers;
  // ... or only as the output's first non-blank text (llama3_json, pythonic).
  bool at_start_only;
  parsed_tool_output (*parse)(std::string_view text);
};

// The parser named `name`, or null. tool_parser_names(): "hermes, llama3_json, mistral, pythonic".
const tool_parser* find_tool_parser(std::string_view name);
std::string tool_parser_names();

// A fresh call id.
std::string new_tool_call_id();

// How a chat request uses its tools.
enum class tool_mode : uint8_t {
  none,       // no tools, or tool_choice "none": the output is content
  automatic,  // tool_choice "auto": the server's parser finds calls in free output
  required,   // tool_choice "required": grammar-forced JSON array of {name, parameters}
  named,  // tool_choice {"type":"function","function":{"name":...}}: the output is the arguments
};

// The JSON schema that forces tool_choice "required" output: an array (at least one item; one
// at most without parallel calls) of {"name": <a tool's name>, "parameters": <its schema>}.
std::string required_tool_calls_schema(const json::value& tools, bool parallel);
// The output of "required": its array parsed into calls (none when it does not parse).
parsed_tool_output parse_required_tool_calls(std::string_view text);

// One chat choice's output as it streams. push() takes each new piece of text and returns what
// may be sent as content now; held text is text that may still turn out to be a call. finish()
// parses the whole output (the same parse as a non-streamed response) and returns the calls and
// the content not sent yet.
class tool_stream {
 public:
  tool_stream(tool_mode mode, const tool_parser* parser, std::string tool_name = {});

  std::string push(std::string_view piece);
  struct final_part {
    std::string content;  // content still to send
    std::vector<tool_call> calls;
  };
  final_part finish();

  // Named mode: the call's id (sent in the first delta), and whether the header has been sent.
  const std::string& named_id() const noexcept { return named_id_; }
  bool header_sent = false;

 private:
  tool_mode mode_;
  const tool_parser* parser_;
  std::string name_;
  std::string named_id_;
  std::string text_;      // the whole output so far
  size_t sent_ = 0;       // bytes of text_ sent as content
  bool in_call_ = false;  // a call marker was seen: everything from it on is held
  bool plain_ = false;    // at_start_only parsers: the output did not start with a call
};

// The whole output of a non-streamed choice: content and calls.
parsed_tool_output parse_tool_output(tool_mode mode, const tool_parser* parser,
                                     std::string_view tool_name, std::string_view text);

}  // namespace coserve::http
