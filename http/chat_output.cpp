#include "http/chat_output.hpp"

namespace coserve::http {

whole_output split_whole_output(const split_rules& rules, std::string_view text) {
  whole_output out;
  out.content = std::string(text);
  if (rules.reasoning) {
    reasoning_split sp = split_reasoning(*rules.reasoning, text);
    out.reasoning = std::move(sp.reasoning);
    out.has_reasoning = sp.has_reasoning;
    out.content = std::move(sp.content);
  }
  if (rules.tools != tool_mode::none) {
    parsed_tool_output p =
        parse_tool_output(rules.tools, rules.parser, rules.tool_name, out.content);
    out.content = std::move(p.content);
    out.calls = std::move(p.calls);
  }
  return out;
}

chat_output_split::chat_output_split(const split_rules& rules)
    : tools_(rules.tools), tool_(rules.tools, rules.parser, rules.tool_name) {
  if (rules.reasoning) reasoning_.emplace(*rules.reasoning);
}

output_part chat_output_split::push(std::string_view piece, bool last) {
  output_part out;
  std::string text(piece);
  if (reasoning_) {
    reasoning_split part = reasoning_->push(text);
    if (last) {
      reasoning_split rest = reasoning_->finish();
      part.reasoning += rest.reasoning;
      part.content += rest.content;
    }
    out.reasoning = std::move(part.reasoning);
    text = std::move(part.content);
  }
  out.content = tool_.push(text);
  if (tools_ == tool_mode::named && !text.empty()) {
    out.opens_call = !tool_.header_sent;
    tool_.header_sent = true;
    out.arguments = text;
  }
  if (last) {
    tool_stream::final_part fin = tool_.finish();
    out.held_content = std::move(fin.content);
    out.calls = std::move(fin.calls);
  }
  return out;
}

}  // namespace coserve::http
