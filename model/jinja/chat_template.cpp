// chat_template: the public face of the interpreter; exceptions inside the interpreter end here.
#include "model/jinja/chat_template.hpp"

#include <fstream>
#include <sstream>

#include "model/jinja/evaluator.hpp"
#include "model/jinja/parser.hpp"

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

result<std::string> chat_template::render(const json::value& context, std::optional<std::time_t> now) const {
  return render(context, now, template_limits{});
}

result<std::string> chat_template::render(const json::value& context, std::optional<std::time_t> now,
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
    if (!name.empty() && name != "default") return make_error("not_found", "no chat template named '" + std::string(name) + "'");
    return t->as_string();
  }
  if (t->is_array()) {
    std::string_view want = name.empty() ? std::string_view("default") : name;
    for (const auto& entry : t->as_array()) {
      const json::value* n = entry.find("name");
      const json::value* body = entry.find("template");
      if (n && n->is_string() && body && body->is_string() && n->as_string() == want) return body->as_string();
    }
    return make_error("not_found", p.string() + " has no chat template named '" + std::string(want) + "'");
  }
  return make_error("invalid_argument", p.string() + ": chat_template is neither a string nor a list");
}

}  // namespace

result<std::string> load_chat_template_source(const std::filesystem::path& path, std::string_view name) {
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

}  // namespace coserve
