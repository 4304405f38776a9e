// Hugging Face chat templates: parse once, render many times. Semantics follow Python jinja2 as
// transformers' apply_chat_template configures it (ImmutableSandboxedEnvironment, trim_blocks,
// lstrip_blocks, loopcontrols, tojson without HTML escaping, raise_exception, strftime_now, the
// {% generation %} tag). A parsed template is immutable: render() may run on several threads.
#pragma once

#include <cstddef>
#include <cstdint>
#include <ctime>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "base/result.hpp"
#include "model/text/json/value.hpp"

namespace coserve {

namespace jinja {
struct node;
}

// Bounds on one render, so that no template runs away with the stack, the CPU or memory. Going past
// one is a render error (code "template_error"). 0 disables a bound.
struct template_limits {
  std::size_t max_depth = 400;  // nested statements, expressions and macro calls under evaluation
  // Statements run + expressions evaluated + loop iterations, plus one per 32 bytes or items of
  // each string or list an expression yields.
  std::uint64_t max_steps = 0;
  std::size_t max_bytes = std::size_t{1}
                          << 28;  // length of the output and of each string or list built
};

class chat_template {
 public:
  // Syntax errors (and unknown filters, as jinja2 reports them at compile time) come back as
  // errors with code "template_syntax".
  static result<chat_template> parse(std::string source);

  // context: an object whose members become template variables (messages, tools,
  // add_generation_prompt, bos_token, eos_token, ...). raise_exception(msg) in the template gives
  // an error with code "template_error" and message msg; other run-time errors (undefined
  // attribute access, type errors) also use code "template_error".
  result<std::string> render(const json::value& context) const;
  // As above with strftime_now() formatting the fixed time `now` (reproducible renders).
  result<std::string> render(const json::value& context, std::optional<std::time_t> now) const;
  // As above within `limits` (the others use template_limits{}).
  result<std::string> render(const json::value& context, std::optional<std::time_t> now,
                             const template_limits& limits) const;

  const std::string& source() const { return source_; }

 private:
  struct tree;
  std::string source_;
  std::shared_ptr<const tree> tree_;
};

// Renders `context` with its final message left open (continue_final_message), as transformers'
// apply_chat_template does: the final message's text (a string content, or the last text part
// of a list) gets a marker appended, the template renders without a generation prompt, and the
// render is cut where the marker begins (right-stripped when the template dropped the marker's
// trailing space). An error (code "invalid_request") when there is no final message text, when
// the template never reads `content`, or when the render lost the text or the marker; template
// errors as render()'s.
result<std::string> render_continuing_final_message(const chat_template& t, json::value context,
                                                    std::optional<std::time_t> now = std::nullopt,
                                                    const template_limits& limits = {});

// Reads a chat template: `path` is a folder (chat_template.jinja, else chat_template.json, else
// tokenizer_config.json's chat_template) or a file (.jinja: the text; .json: its chat_template).
// A chat_template list of {name, template} yields `name`, or "default" when name is empty.
result<std::string> load_chat_template_source(const std::filesystem::path& path,
                                              std::string_view name = {});

}  // namespace coserve
