// Chat templates: any source parses or gives a syntax error; a parsed template renders against a
// fixed chat context, within step and size limits, to text or an error.
#include <cstdint>
#include <string>

#include "model/text/jinja/chat_template.hpp"
#include "model/text/json/value.hpp"

namespace {

coserve::json::value make_context() {
  auto v = coserve::json::parse(R"({
    "messages": [
      {"role": "system", "content": "You are terse."},
      {"role": "user", "content": "Weather in Paris? <b>&amp;</b> \u00e9\ud83d\ude00"},
      {"role": "assistant", "content": null, "tool_calls": [{"id": "c1", "type": "function",
        "function": {"name": "get_weather", "arguments": {"city": "Paris", "days": 3}}}]},
      {"role": "tool", "tool_call_id": "c1", "content": "{\"temp\": 21.5}"},
      {"role": "assistant", "content": "21.5 C.", "reasoning_content": "look it up"}
    ],
    "tools": [{"type": "function", "function": {"name": "get_weather", "description": "Forecast",
      "parameters": {"type": "object", "properties": {"city": {"type": "string"},
      "days": {"type": "integer", "enum": [1, 3]}}, "required": ["city"]}}}],
    "add_generation_prompt": true, "bos_token": "<s>", "eos_token": "</s>",
    "enable_thinking": false, "n": 3, "x": 2.5, "big": 9223372036854775807
  })");
  return v ? *v : coserve::json::value{};
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const coserve::json::value context = make_context();
  auto tmpl = coserve::chat_template::parse(std::string(reinterpret_cast<const char*>(data), size));
  if (!tmpl) return 0;
  const coserve::template_limits limits{
      .max_depth = 400, .max_steps = 100000, .max_bytes = 1 << 20};
  (void)tmpl->render(context, std::time_t{1700000000}, limits);
  return 0;
}
