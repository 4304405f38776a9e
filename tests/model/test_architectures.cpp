#include <catch2/catch.hpp>
#include <set>
#include <string>

#include "model/architectures.hpp"
#include "model/config.hpp"
#include "model/demo_args.hpp"
#include "model/weights.hpp"
#include "model_test_util.hpp"

namespace coserve {

namespace {

// The lines of `text` between the line starting with `begin` and the line `end`, each with its
// newline.
std::string between(const std::string& text, const std::string& begin, const std::string& end) {
  const size_t b = text.find("\n" + begin);
  if (b == std::string::npos) return {};
  const size_t first = text.find('\n', b + 1);
  const size_t e = text.find("\n" + end + "\n", first);
  if (first == std::string::npos || e == std::string::npos) return {};
  return text.substr(first + 1, e - first);
}

}  // namespace

TEST_CASE("architectures: docs/models.md's table is the registry's", "[model][architectures]") {
  auto doc = read_text_file(std::string(COSERVE_SOURCE_DIR) + "/docs/models.md");
  REQUIRE(doc.ok());
  const std::string table =
      between(*doc, "<!-- architectures table", "<!-- end of the architectures table -->");
  REQUIRE_FALSE(table.empty());
  INFO("scripts/models-table rewrites the table from `coserve architectures --markdown`");
  CHECK(table == architecture_table_markdown());
}

TEST_CASE("architectures: each name belongs to one entry, and finds it", "[model][architectures]") {
  std::set<std::string_view> names, hf_names, gguf_names;
  for (const architecture& a : architectures()) {
    CHECK(names.insert(a.name).second);
    CHECK(hf_names.insert(a.hf_name).second);
    CHECK(find_architecture(a.hf_name) == &a);
    CHECK(find_architecture_by_model_type(a.name) == &a);
    CHECK_FALSE(a.title.empty());
    CHECK_FALSE(a.summary.empty());
    CHECK_FALSE(a.differences.empty());
    if (!a.gguf.name.empty()) {
      CHECK(gguf_names.insert(a.gguf.name).second);
      CHECK(find_gguf_architecture(a.gguf.name) == &a);
    }
    if (!a.gguf.with_experts.empty()) {
      const architecture* moe = find_architecture_by_model_type(a.gguf.with_experts);
      REQUIRE(moe != nullptr);
      CHECK(moe->config.experts.layout != expert_layout::none);
    }
    // The CUDA executor's forward pass has no expert routing.
    if (a.config.experts.layout != expert_layout::none) CHECK_FALSE(a.cuda);
  }
  CHECK(find_architecture("GPTNeoXForCausalLM") == nullptr);
  CHECK(find_architecture("") == nullptr);
  CHECK(find_gguf_architecture("") == nullptr);  // SmolLM3 has no GGUF name
  CHECK(find_gguf_architecture("gpt2") == nullptr);
}

TEST_CASE("architectures: every demo model reads back as its architecture, with its rules",
          "[model][architectures]") {
  for (const architecture& a : architectures()) {
    INFO(a.name);
    test::temp_dir d("arch");
    demo_options o = test::tiny_options();
    o.architecture = std::string(a.name);
    o.num_experts = 4;
    REQUIRE(make_demo_model(d.str(), o).ok());
    auto c = load_model_config(d.str());
    REQUIRE(c.ok());
    CHECK(c->architecture == a.hf_name);
    CHECK(c->model_type == a.name);
    CHECK(c->qk_norm == a.config.qk_norm);
    CHECK(c->fused_projections == a.config.fused_projections);
    CHECK(c->is_moe() == (a.config.experts.layout != expert_layout::none));
    CHECK((c->shared_expert_intermediate_size > 0) ==
          (a.config.experts.shared_expert_intermediate_size > 0));
    CHECK(c->qkv_bias == (a.config.bias != attention_bias_rule::attention_bias));
    CHECK_FALSE(c->o_bias);
    CHECK(c->rope_layers.empty() == !a.config.no_rope_layers);
    CHECK(c->head_dim == 8);  // given in config.json where the architecture's default differs
    auto w = load_weights(d.str());
    REQUIRE(w.ok());
    CHECK(w->layers.size() == 2);
  }
}

TEST_CASE("architectures: the --help lists name every architecture within 100 columns",
          "[model][architectures]") {
  const std::string serve = with_architecture_lists(
      "  MODEL_DIR                     a folder\n"
      "                                ({architectures}; docs/models.md),\n"
      "                                or a GGUF file ({gguf_architectures}; F32)\n");
  const std::string demo = demo_help();
  for (const architecture& a : architectures()) {
    CHECK_THAT(serve, Catch::Contains(std::string(a.hf_name)));
    if (!a.gguf.name.empty()) CHECK_THAT(serve, Catch::Contains(std::string(a.gguf.name)));
    CHECK_THAT(demo, Catch::Contains(std::string(a.name) + "  "));
    CHECK_THAT(demo, Catch::Contains(std::string(a.summary)));
  }
  std::string words;  // serve's text with its line breaks and indentation as single spaces
  for (char ch : serve)
    if (ch != ' ' && ch != '\n')
      words += ch;
    else if (!words.empty() && words.back() != ' ')
      words += ' ';
  CHECK_THAT(words, Catch::Contains("Qwen3MoeForCausalLM on --device cpu; docs/models.md),"));
  CHECK(serve.find('{') == std::string::npos);
  CHECK(demo.find('{') == std::string::npos);
  const std::string demo_list =
      with_architecture_lists(std::string(34, ' ') + "{demo_architectures}");
  for (const std::string& text : {serve, demo_list}) {
    size_t start = 0;
    while (start < text.size()) {
      const size_t end = std::min(text.find('\n', start), text.size());
      INFO(text.substr(start, end - start));
      CHECK(end - start <= 100);
      start = end + 1;
    }
  }
  // The placeholder's line keeps its text around the list and its indentation.
  CHECK(with_architecture_lists("    x {gguf_architectures} y") ==
        "    x " + gguf_architecture_list() + " y");
}

TEST_CASE("architectures: the readers' errors list the registry's names",
          "[model][architectures]") {
  auto c = parse_model_config(R"({"architectures":["GPTNeoXForCausalLM"]})", "c");
  REQUIRE_FALSE(c.ok());
  CHECK_THAT(c.err().message, Catch::Contains("(supported: " + hf_architecture_list() + ")"));
  test::temp_dir d("arch-bad");
  demo_options o = test::tiny_options();
  o.architecture = "gpt2";
  auto r = make_demo_model(d.str(), o);
  REQUIRE_FALSE(r.ok());
  CHECK_THAT(r.err().message, Catch::Contains(model_type_list()));
}

}  // namespace coserve
