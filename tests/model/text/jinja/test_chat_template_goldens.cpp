// Every golden render in testdata/chat-templates/goldens (made with Python jinja2 configured as
// Hugging Face's apply_chat_template) reproduced byte for byte, expected errors included.
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

// 2024-07-26 12:00:00 UTC: the date the goldens' strftime_now formats.
constexpr std::time_t kGoldenNow = 1721995200;

}  // namespace

TEST_CASE("chat template goldens reproduce Python jinja2 byte for byte", "[chat_template]") {
  const fs::path data = test::testdata();
  fs::path dir = data / "chat-templates" / "goldens";
  COSERVE_SKIP_UNLESS_EXISTS(dir / "index.json");
  auto index = json::parse(slurp(dir / "index.json"));
  auto inputs = json::parse(slurp(dir / "inputs.json"));
  REQUIRE(index.ok());
  REQUIRE(inputs.ok());
  const json::value& convs = *inputs->find("conversations");
  const json::value& templates = *inputs->find("templates");
  size_t checked = 0;
  for (const auto& c : index->as_array()) {
    std::string tname = c.find("template")->as_string();
    std::string conv = c.find("conversation")->as_string();
    INFO("template " << tname << ", conversation " << conv);
    const json::value* tinfo = templates.find(tname);
    REQUIRE(tinfo);
    std::string tpath = tinfo->find("template")->as_string();
    std::string name;
    if (auto hash = tpath.find('#'); hash != std::string::npos) tpath.resize(hash);
    auto source = load_chat_template_source(data / tpath, name);
    REQUIRE(source.ok());
    auto tmpl = chat_template::parse(*source);
    if (!tmpl) FAIL("parse error: " << tmpl.err().message);
    json::value ctx = json::object{};
    for (const auto& [k, v] : tinfo->find("context")->as_object()) ctx[k] = v;
    if (const json::value* st = c.find("special_tokens"))
      for (const auto& [k, v] : st->as_object()) ctx[k] = v;
    if (conv == "basic_no_genprompt") {
      json::array msgs(convs.find("basic")->as_array().begin(),
                       convs.find("basic")->as_array().begin() + 5);
      ctx["messages"] = json::value(std::move(msgs));
    } else {
      ctx["messages"] = *convs.find(conv);
    }
    ctx["add_generation_prompt"] = *c.find("add_generation_prompt");
    for (const auto& extra : c.find("extra")->as_array())
      if (extra.as_string() == "tools") ctx["tools"] = *inputs->find("tools");
    auto out = tmpl->render(ctx, kGoldenNow);
    if (c.find("ok")->as_bool()) {
      if (!out) FAIL("render error: " << out.err().message);
      CHECK(*out == slurp(dir / c.find("output_file")->as_string()));
    } else {
      REQUIRE_FALSE(out.ok());
      CHECK(out.err().code == "template_error");
      CHECK("raise_exception: " + out.err().message == c.find("error")->as_string());
    }
    ++checked;
  }
  CHECK(checked == index->size());
}

// llama.cpp's inline template cases, against what Python jinja2 renders for them (the
// jinja2-vs-llama.cpp file records jinja2's output or error for each, over the basic conversation).
TEST_CASE("llama.cpp inline template cases render as jinja2 does", "[chat_template]") {
  fs::path dir = test::testdata() / "chat-templates";
  fs::path cmp_path = dir / "goldens" / "llama.cpp-inline-cases.jinja2-vs-llama.cpp.json";
  COSERVE_SKIP_UNLESS_EXISTS(cmp_path);
  auto cmp = json::parse(slurp(cmp_path));
  auto inputs = json::parse(slurp(dir / "goldens" / "inputs.json"));
  REQUIRE(cmp.ok());
  REQUIRE(inputs.ok());
  std::vector<json::value> sources;
  for (const char* f :
       {"llama.cpp-inline-cases.feb2025.json", "llama.cpp-inline-cases.newer.json"}) {
    auto v = json::parse(slurp(dir / f));
    REQUIRE(v.ok());
    for (const auto& c : v->as_array()) sources.push_back(c);
  }
  size_t checked = 0;
  for (const auto& c : cmp->as_array()) {
    const std::string& name = c.find("name")->as_string();
    INFO("case " << name);
    const json::value* src = nullptr;
    for (const auto& s : sources)
      if (!src && s.find("name")->as_string() == name) src = &s;  // feb2025 first, as compared
    REQUIRE(src);
    auto tmpl = chat_template::parse(src->find("template_str")->as_string());
    if (!tmpl) FAIL("parse error: " << tmpl.err().message);
    json::value ctx = json::object{};
    ctx["messages"] = *inputs->find("conversations")->find("basic");
    ctx["add_generation_prompt"] = true;
    for (const char* tok : {"bos_token", "eos_token"})
      ctx[tok] = src->find(tok) ? *src->find(tok) : json::value("");  // absent: empty, as rendered
    auto out = tmpl->render(ctx, kGoldenNow);
    const json::value* expected = c.find("jinja2_output");
    if (expected && expected->is_string()) {
      if (!out)
        FAIL_CHECK("render error: " << out.err().message);
      else
        CHECK(*out == expected->as_string());
    } else {
      CHECK_FALSE(out.ok());
    }
    ++checked;
  }
  CHECK(checked == cmp->size());
}
