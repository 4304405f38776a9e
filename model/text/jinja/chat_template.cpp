// chat_template: the public face of the interpreter; exceptions inside the interpreter end here.
#include "model/text/jinja/chat_template.hpp"

#include <fstream>
#include <sstream>

#include "model/text/jinja/builtins.hpp"
#include "model/text/jinja/evaluator.hpp"
#include "model/text/jinja/parser.hpp"

namespace coserve {

struct chat_template::tree {
  jinja::body nodes;
};

result<chat_template> chat_template::parse(std::string source) {
  auto parsed = jinja::parse_template(source);
  if (!parsed) return std::move(parsed).err();
  chat_template t;
  t.source_ = std::move(source);
  auto tr = std::make_shared<tree>();
  tr->nodes = std::move(*parsed);
  t.tree_ = std::move(tr);
  return t;
}

result<std::string> chat_template::render(const json::value& context) const {
  return render(context, std::nullopt);
}

result<std::string> chat_template::render(const json::value& context,
                                          std::optional<std::time_t> now) const {
  return render(context, now, template_limits{});
}

result<std::string> chat_template::render(const json::value& context,
                                          std::optional<std::time_t> now,
                                          const template_limits& limits) const {
  if (!tree_) return make_error("template_error", "template not parsed");
  try {
    return jinja::evaluate(tree_->nodes, context, now, limits);
  } catch (const jinja::raised_error& e) {
    return make_error("template_error", e.what());
  } catch (const jinja::template_error& e) {
    return make_error("template_error", e.what());
  } catch (const std::exception& e) {
    return make_error("template_error", e.what());
  }
}

namespace {

result<std::string> read_file(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  if (!in) return make_error("not_found", "cannot open " + p.string());
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

result<std::string> from_config_json(const std::filesystem::path& p, std::string_view name) {
  auto text = read_file(p);
  if (!text) return text;
  auto doc = json::parse(*text);
  if (!doc) return make_error("invalid_argument", p.string() + ": " + doc.err().message);
  const json::value* t = doc->find("chat_template");
  if (!t) return make_error("not_found", p.string() + " has no chat_template");
  if (t->is_string()) {
    if (!name.empty() && name != "default")
      return make_error("not_found", "no chat template named '" + std::string(name) + "'");
    return t->as_string();
  }
  if (t->is_array()) {
    std::string_view want = name.empty() ? std::string_view("default") : name;
    for (const auto& entry : t->as_array()) {
      const json::value* n = entry.find("name");
      const json::value* body = entry.find("template");
      if (n && n->is_string() && body && body->is_string() && n->as_string() == want)
        return body->as_string();
    }
    return make_error("not_found",
                      p.string() + " has no chat template named '" + std::string(want) + "'");
  }
  return make_error("invalid_argument",
                    p.string() + ": chat_template is neither a string nor a list");
}

}  // namespace

result<std::string> load_chat_template_source(const std::filesystem::path& path,
                                              std::string_view name) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) {
    if (name.empty() && std::filesystem::exists(path / "chat_template.jinja", ec))
      return read_file(path / "chat_template.jinja");
    if (std::filesystem::exists(path / "chat_template.json", ec))
      return from_config_json(path / "chat_template.json", name);
    if (std::filesystem::exists(path / "tokenizer_config.json", ec))
      return from_config_json(path / "tokenizer_config.json", name);
    return make_error("not_found", "no chat template in " + path.string());
  }
  if (path.extension() == ".json") return from_config_json(path, name);
  return read_file(path);
}

result<std::string> render_continuing_final_message(const chat_template& t, json::value context,
                                                    std::optional<std::time_t> now,
                                                    const template_limits& limits) {
  static constexpr std::string_view tag = "CONTINUE_FINAL_MESSAGE_TAG ";
  auto fail = [](std::string why) {
    return make_error("invalid_request", "continue_final_message is set but " + why);
  };
  json::value* messages = context.find("messages");
  if (!messages || !messages->is_array() || messages->as_array().empty())
    return fail("the conversation is empty");
  json::value* content = messages->as_array().back().is_object()
                             ? messages->as_array().back().find("content")
                             : nullptr;
  if (content && content->is_array()) {  // the last part with a text
    json::value* text = nullptr;
    for (auto it = content->as_array().rbegin(); it != content->as_array().rend() && !text; ++it)
      if (it->is_object()) text = it->find("text");
    content = text;
  }
  if (!content || !content->is_string()) return fail("the final message has no text to continue");
  if (t.source().find("content") == std::string::npos)
    return fail("the chat template never reads a message's content");
  const std::string final_text = jinja::python_strip(content->as_string());
  content->as_string() += tag;
  context["add_generation_prompt"] = json::value(false);
  auto rendered = t.render(context, now, limits);
  if (!rendered) return rendered;
  const std::string_view bare = tag.substr(0, tag.size() - 1);  // the marker without its space
  const size_t at = rendered->rfind(bare);
  if (rendered->find(final_text) == std::string::npos || at == std::string::npos)
    return fail("the final message does not appear in the chat after applying the chat template");
  if (std::string_view(*rendered).substr(at, tag.size()) == tag) return rendered->substr(0, at);
  return jinja::python_strip(std::string_view(*rendered).substr(0, at), false, true);
}

}  // namespace coserve
