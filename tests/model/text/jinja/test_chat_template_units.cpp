// Interpreter features one at a time (filters, tests, loops, macros, whitespace control, errors),
// each case rendered by Python jinja2 in tests/reference/fixtures/chat_template/units.json; plus
// the template loader and errors as values.
#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "model/text/jinja/chat_template.hpp"
#include "tests/skip.hpp"

using namespace coserve;
namespace fs = std::filesystem;

namespace {

std::string slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

result<std::string> render(const std::string& src, const json::value& ctx = json::object{}) {
  auto t = chat_template::parse(src);
  if (!t) return t.err();
  return t->render(ctx, 1721995200);
}

}  // namespace

TEST_CASE("interpreter features match jinja2 (units.json)", "[chat_template]") {
  auto cases = json::parse(slurp("tests/reference/fixtures/chat_template/units.json"));
  REQUIRE(cases.ok());
  REQUIRE(cases->size() >= 40);
  for (const auto& c : cases->as_array()) {
    const std::string& src = c.find("template")->as_string();
    INFO("template: " << src);
    auto parsed = chat_template::parse(src);
    if (c.find("syntax_error")) {
      CHECK_FALSE(parsed.ok());
      if (!parsed.ok()) CHECK(parsed.err().code == "template_syntax");
      continue;
    }
    if (!parsed) FAIL("parse error: " << parsed.err().message);
    auto out = parsed->render(*c.find("context"), 1721995200);
    if (c.find("ok")->as_bool()) {
      if (!out)
        FAIL_CHECK("render error: " << out.err().message);
      else
        CHECK(*out == c.find("output")->as_string());
    } else {
      REQUIRE_FALSE(out.ok());
      CHECK(out.err().code == "template_error");
      if (const json::value* raised = c.find("raised"))
        CHECK(out.err().message == raised->as_string());
    }
  }
}

TEST_CASE("errors are values with jinja2's messages", "[chat_template]") {
  auto undefined = render("{{ a.b }}");
  REQUIRE_FALSE(undefined.ok());
  CHECK(undefined.err().message == "'a' is undefined");
  auto unsafe = render("{{ [1].append(2) }}");
  REQUIRE_FALSE(unsafe.ok());
  CHECK(unsafe.err().message == "access to attribute 'append' of 'list' object is unsafe.");
  auto unclosed = chat_template::parse("{% if x %}");
  REQUIRE_FALSE(unclosed.ok());
  CHECK(unclosed.err().code == "template_syntax");
  CHECK_FALSE(chat_template::parse("{{ 'open }}").ok());
  CHECK_FALSE(chat_template::parse("{% unknown %}").ok());
  auto gen_len = render("{{ [1]|map('string')|length }}");
  CHECK_FALSE(gen_len.ok());
}

TEST_CASE("json values reach templates with their types", "[chat_template]") {
  auto ctx =
      json::parse(R"({"m": {"n": 1, "f": 2.5, "s": "x", "b": false, "z": null, "l": [1, "a"]}})");
  REQUIRE(ctx.ok());
  auto out = render(
      "{{ m.n + 1 }} {{ m.f * 2 }} {{ m.s * 2 }} {{ m.b }} {{ m.z }} {{ m.l }} {{ m|tojson }}",
      *ctx);
  REQUIRE(out.ok());
  CHECK(
      *out ==
      R"(2 5.0 xx False None [1, 'a'] {"n": 1, "f": 2.5, "s": "x", "b": false, "z": null, "l": [1, "a"]})");
}

TEST_CASE("loader reads tokenizer_config.json, named lists and .jinja files", "[chat_template]") {
  fs::path dir = fs::temp_directory_path() / "coserve_chat_template_loader";
  fs::remove_all(dir);
  fs::create_directories(dir / "single");
  fs::create_directories(dir / "named");
  std::ofstream(dir / "single" / "tokenizer_config.json") << R"({"chat_template": "A{{ x }}"})";
  std::ofstream(dir / "named" / "tokenizer_config.json")
      << R"({"chat_template": [{"name": "default", "template": "D"}, {"name": "tool_use", "template": "T"}]})";
  std::ofstream(dir / "t.jinja") << "J{{ 1 }}";
  CHECK(*load_chat_template_source(dir / "single") == "A{{ x }}");
  CHECK(*load_chat_template_source(dir / "named") == "D");
  CHECK(*load_chat_template_source(dir / "named", "tool_use") == "T");
  CHECK_FALSE(load_chat_template_source(dir / "named", "missing").ok());
  CHECK(*load_chat_template_source(dir / "t.jinja") == "J{{ 1 }}");
  CHECK_FALSE(load_chat_template_source(dir / "absent").ok());
  fs::create_directories(dir / "both");
  std::ofstream(dir / "both" / "tokenizer_config.json") << R"({"chat_template": "old"})";
  std::ofstream(dir / "both" / "chat_template.jinja") << "new";
  CHECK(*load_chat_template_source(dir / "both") == "new");
  fs::remove_all(dir);
}

TEST_CASE("loader reads a real tokenizer_config.json", "[chat_template]") {
  const fs::path qwen = test::testdata() / "tokenizers" / "qwen2";
  COSERVE_SKIP_UNLESS_EXISTS(qwen / "tokenizer_config.json");
  auto src = load_chat_template_source(qwen);
  REQUIRE(src.ok());
  CHECK(src->find("im_start") != std::string::npos);
}
