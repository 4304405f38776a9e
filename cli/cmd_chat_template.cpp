// coserve chat-template SOURCE --input FILE [--name NAME] [--now EPOCH]: renders a chat template
// over a JSON context and prints the result exactly (no newline added).
// Exit codes: 0 rendered; 2 usage or input errors; 3 template errors (syntax or raise_exception).
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <fstream>
#include <iostream>
#include <optional>
#include <sstream>
#include <string>

#include "cli/commands.hpp"
#include "model/gguf_model.hpp"
#include "model/text/jinja/chat_template.hpp"

namespace coserve::cli {

namespace {

constexpr const char* kUsage =
    "usage: coserve chat-template SOURCE --input FILE [--name NAME] [--now EPOCH]\n"
    "\n"
    "Renders a Hugging Face chat template as transformers' apply_chat_template does.\n"
    "  SOURCE        a model folder (chat_template.jinja, chat_template.json or\n"
    "                tokenizer_config.json), a .jinja / .json file, or a GGUF model file\n"
    "                (its tokenizer.chat_template)\n"
    "  --input FILE  JSON object: {\"messages\": [...], \"tools\": [...],\n"
    "                \"add_generation_prompt\": true, \"bos_token\": \"...\", ...}; every member\n"
    "                becomes a template variable ('-' reads standard input), except\n"
    "                \"continue_final_message\": true, which leaves the final message open\n"
    "                (apply_chat_template's argument: no generation prompt, the render cut\n"
    "                after the final message's text)\n"
    "  --name NAME   pick a named template (e.g. tool_use) from a list of templates\n"
    "  --now EPOCH   the time strftime_now() formats (seconds since 1970; default: now)\n"
    "Prints the render to stdout exactly. Exit status 3 on a template error (message on stderr).\n";

}  // namespace

int cmd_chat_template(int argc, char** argv) {
  std::string source_path, input_path, name;
  std::optional<std::time_t> now;
  for (int i = 1; i < argc; ++i) {
    std::string_view a = argv[i];
    auto value = [&](const char* what) -> const char* {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "coserve chat-template: %s needs a value\n", what);
        return nullptr;
      }
      return argv[++i];
    };
    if (a == "--help" || a == "-h") {
      std::fputs(kUsage, stdout);
      return 0;
    } else if (a == "--input") {
      const char* v = value("--input");
      if (!v) return 2;
      input_path = v;
    } else if (a == "--name") {
      const char* v = value("--name");
      if (!v) return 2;
      name = v;
    } else if (a == "--now") {
      const char* v = value("--now");
      if (!v) return 2;
      now = static_cast<std::time_t>(std::strtoll(v, nullptr, 10));
    } else if (source_path.empty() && !a.starts_with("--")) {
      source_path = a;
    } else {
      std::fprintf(stderr, "coserve chat-template: unexpected argument '%s'\n\n%s", argv[i],
                   kUsage);
      return 2;
    }
  }
  if (source_path.empty() || input_path.empty()) {
    std::fputs(kUsage, stderr);
    return 2;
  }
  auto source = [&]() -> result<std::string> {
    if (!is_gguf_file(source_path)) return load_chat_template_source(source_path, name);
    auto f = gguf_file::open(source_path);
    if (!f) return f.err();
    return gguf_chat_template(**f);
  }();
  if (!source) {
    std::fprintf(stderr, "coserve chat-template: %s\n", source.err().message.c_str());
    return 2;
  }
  std::ostringstream ss;
  if (input_path == "-") {
    ss << std::cin.rdbuf();
  } else {
    std::ifstream in(input_path, std::ios::binary);
    if (!in) {
      std::fprintf(stderr, "coserve chat-template: cannot open %s\n", input_path.c_str());
      return 2;
    }
    ss << in.rdbuf();
  }
  auto context = json::parse(ss.str());
  if (!context || !context->is_object()) {
    std::fprintf(stderr, "coserve chat-template: %s: %s\n", input_path.c_str(),
                 context ? "not a JSON object" : context.err().message.c_str());
    return 2;
  }
  auto tmpl = chat_template::parse(std::move(*source));
  if (!tmpl) {
    std::fprintf(stderr, "%s\n", tmpl.err().message.c_str());
    return 3;
  }
  bool continue_final = false;
  if (const json::value* c = context->find("continue_final_message"); c && c->is_bool()) {
    continue_final = c->as_bool();
    context->as_object().erase(
        std::find_if(context->as_object().begin(), context->as_object().end(),
                     [](const auto& kv) { return kv.first == "continue_final_message"; }));
  }
  auto out = continue_final ? render_continuing_final_message(*tmpl, std::move(*context), now)
                            : tmpl->render(*context, now);
  if (!out) {
    std::fprintf(stderr, "%s\n", out.err().message.c_str());
    return 3;
  }
  std::fwrite(out->data(), 1, out->size(), stdout);
  return 0;
}

}  // namespace coserve::cli
