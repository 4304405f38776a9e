// Every template in testdata (also newer/) over several conversations, against renders made with
// Python jinja2 by tests/reference/make_chat_template_fixtures.py: byte for byte, and a failure
// wherever jinja2 failed (raise_exception messages compared exactly).
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

constexpr std::time_t kFixtureNow = 1721995200;  // 2024-07-26 12:00:00 UTC, as the script fixes

}  // namespace

TEST_CASE("chat templates match Python jinja2 fixtures", "[chat_template]") {
  const fs::path data = test::testdata();
  const fs::path fixtures = "tests/reference/fixtures/chat_template";
  COSERVE_SKIP_UNLESS_EXISTS(data / "chat-templates");
  auto contexts = json::parse(slurp(fixtures / "conversations.json"));
  REQUIRE(contexts.ok());
  size_t templates = 0, rendered = 0, failures = 0;
  std::vector<fs::path> files;
  for (const auto& entry : fs::directory_iterator(fixtures))
    if (entry.path().filename().string().rfind("t__", 0) == 0) files.push_back(entry.path());
  std::sort(files.begin(), files.end());
  for (const auto& file : files) {
    auto fx = json::parse(slurp(file));
    REQUIRE(fx.ok());
    std::string rel = fx->find("template")->as_string();
    INFO("template " << rel);
    auto source = load_chat_template_source(data / rel);
    REQUIRE(source.ok());
    auto tmpl = chat_template::parse(*source);
    ++templates;
    if (fx->find("syntax_error")) {
      CHECK_FALSE(tmpl.ok());
      continue;
    }
    if (!tmpl) FAIL("parse error: " << tmpl.err().message);
    for (const auto& c : fx->find("cases")->as_array()) {
      std::string name = c.find("name")->as_string();
      INFO("conversation " << name);
      auto out = tmpl->render(*contexts->find(name), kFixtureNow);
      if (c.find("ok")->as_bool()) {
        if (!out)
          FAIL_CHECK("render error: " << out.err().message);
        else
          CHECK(*out == c.find("output")->as_string());
        ++rendered;
      } else {
        CHECK_FALSE(out.ok());
        if (!out.ok() && c.find("raised"))
          CHECK(out.err().message == c.find("raised")->as_string());
        ++failures;
      }
    }
  }
  CHECK(templates >= 70);
  CHECK(rendered > 300);
  INFO("rendered " << rendered << ", expected failures " << failures);
  SUCCEED();
}

TEST_CASE("continue_final_message renders as transformers' apply_chat_template",
          "[chat_template]") {
  // Fixtures from tests/reference/make_continue_final_fixtures.py (transformers' own
  // render_jinja_template with continue_final_message=True) over every testdata template.
  const fs::path data = test::testdata();
  COSERVE_SKIP_UNLESS_EXISTS(data / "chat-templates");
  auto fx = json::parse(slurp("tests/reference/fixtures/chat_template/continue_final.json"));
  REQUIRE(fx.ok());
  const json::value& conversations = *fx->find("conversations");
  size_t rendered = 0, refused = 0;
  for (const auto& c : fx->find("cases")->as_array()) {
    const std::string rel = c.find("template")->as_string();
    const std::string name = c.find("conversation")->as_string();
    INFO("template " << rel << ", conversation " << name);
    auto source = load_chat_template_source(data / rel);
    REQUIRE(source.ok());
    auto tmpl = chat_template::parse(*source);
    REQUIRE(tmpl.ok());
    json::value context = *fx->find("context");
    context["messages"] = *conversations.find(name);
    auto out = render_continuing_final_message(*tmpl, std::move(context), kFixtureNow);
    if (c.find("ok")->as_bool()) {
      if (!out)
        FAIL_CHECK("error: " << out.err().message);
      else
        CHECK(*out == c.find("output")->as_string());
      ++rendered;
    } else {
      CHECK_FALSE(out.ok());
      ++refused;
    }
  }
  CHECK(rendered >= 400);
  CHECK(refused >= 1);
}
