#include "model/hf_overrides.hpp"

#include "model/config.hpp"
#include "model/text/json/value.hpp"

namespace coserve {
namespace {

void merge_into(json::value& into, const json::value& from) {
  for (const auto& [key, v] : from.as_object()) {
    json::value* have = into.find(key);
    if (have != nullptr && have->is_object() && v.is_object())
      merge_into(*have, v);
    else
      into[key] = v;
  }
}

}  // namespace

result<std::string> apply_hf_overrides(std::string_view config_json, std::string_view overrides,
                                       std::string_view origin) {
  if (overrides.empty()) return std::string(config_json);
  auto over = json::parse(overrides);
  if (!over || !over->is_object())
    return error{"invalid_argument",
                 "--hf-overrides must be a JSON object, e.g. '{\"architectures\": "
                 "[\"Qwen3ForSequenceClassification\"]}'",
                 "hf_overrides"};
  auto cfg = json::parse(config_json);
  if (!cfg || !cfg->is_object())
    return make_error("invalid_model", std::string(origin) + ": not a JSON object");
  merge_into(*cfg, *over);
  std::string out;
  json::dump_compact(*cfg, out);
  return out;
}

result<std::string> read_config_json(const std::filesystem::path& dir, std::string_view overrides) {
  const std::string path = (dir / "config.json").string();
  auto text = read_text_file(path);
  if (!text) return text.err();
  return apply_hf_overrides(*text, overrides, path);
}

}  // namespace coserve
