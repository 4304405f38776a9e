// LoRA against peft + transformers: fixtures written by tests/reference/make_lora_fixtures.py hold
// random adapters (as peft saves them) over demo models rebuilt here from their make-demo-model
// flags, with peft's fp32 logits at the prompt's last position and 8 greedy tokens. On three
// architectures and every target kind (attention, MLP, Phi-3's fused projections, all linear),
// ranks 2-16, lora_alpha / r and rsLoRA: the fp32 forward pass stays within 1e-4 of peft and the
// greedy tokens are equal. A batch mixing the base model and the adapter gives each sequence what
// it gets alone.
#include <simdjson.h>

#include <catch2/catch.hpp>
#include <filesystem>

#include "fixture_json.hpp"
#include "model/cpu_forward.hpp"
#include "model/demo_args.hpp"
#include "model/lora.hpp"
#include "model_test_util.hpp"

namespace coserve {
namespace {

const char* k_fixture_dir = "tests/reference/fixtures/lora";

struct loaded {
  test::temp_dir dir{"lora-ref"};
  model_weights weights;
  lora_adapter adapter;
  worker_pool pool{2};
  kv_cache cache() const {
    const auto& c = weights.config;
    return kv_cache(c.num_hidden_layers, 16, 16, c.num_key_value_heads, c.head_dim);
  }
};

// The last position's logits of `prompt` (one sequence, prefilled whole), then `steps` greedy
// tokens decoded one at a time.
std::pair<std::vector<float>, std::vector<int32_t>> run(loaded& m, const lora_adapter* lora,
                                                        const std::vector<int32_t>& prompt,
                                                        int32_t steps) {
  cpu_forward fwd(m.weights, m.pool);
  fwd.set_bf16_activations(false);
  kv_cache cache = m.cache();
  const std::vector<int32_t> table{0, 1, 2, 3};
  std::vector<float> logits;
  forward_seq fs{prompt.data(), int32_t(prompt.size()), 0, &table, true};
  fs.lora = lora;
  REQUIRE(fwd.run({fs}, cache, false, logits).ok());
  const std::vector<float> first = logits;
  std::vector<int32_t> greedy;
  int32_t pos = int32_t(prompt.size());
  for (int32_t i = 0; i < steps; ++i) {
    const int32_t tok = int32_t(std::max_element(logits.begin(), logits.end()) - logits.begin());
    greedy.push_back(tok);
    forward_seq step{&greedy.back(), 1, pos++, &table, true};
    step.lora = lora;
    REQUIRE(fwd.run({step}, cache, false, logits).ok());
  }
  return {first, greedy};
}

}  // namespace

TEST_CASE("lora: logits and greedy tokens equal peft's on every fixture", "[model][lora]") {
  size_t checked = 0;
  for (const auto& entry : std::filesystem::directory_iterator(k_fixture_dir)) {
    if (entry.path().extension() != ".json") continue;
    simdjson::dom::parser parser;
    simdjson::dom::element fx = parser.load(entry.path().string());
    const std::string name = std::string(std::string_view(fx["name"]));
    INFO("fixture " << name);
    loaded m;
    std::vector<std::string> args;
    for (auto a : fx["make_demo_model_args"].get_array()) args.emplace_back(std::string_view(a));
    args.push_back(m.dir.str());
    auto parsed = parse_demo_args(args);
    REQUIRE(parsed.ok());
    REQUIRE(make_demo_model(parsed->dir, parsed->options).ok());
    auto w = load_weights(m.dir.str());
    REQUIRE(w.ok());
    m.weights = std::move(*w);
    auto a =
        load_lora_adapter(std::filesystem::path(k_fixture_dir) / std::string_view(fx["adapter"]),
                          m.weights.config, 64);
    REQUIRE(a.ok());
    m.adapter = std::move(*a);

    const auto prompt = test::ints(fx["prompt"].get_array());
    const auto expected = test::floats(fx["last_logits"].get_array());
    const auto greedy = test::ints(fx["greedy"].get_array());
    auto [logits, tokens] = run(m, &m.adapter, prompt, int32_t(greedy.size()));
    CHECK(test::max_abs_diff(logits, expected) <= 1e-4f);
    CHECK(tokens == greedy);
    // The adapter matters: the base model's logits are far from peft's.
    auto [base, base_tokens] = run(m, nullptr, prompt, 0);
    CHECK(test::max_abs_diff(base, expected) > 0.1f);

    // One batch: the base model and the adapter side by side (two sequences each), chunks of
    // different lengths; each row equals that sequence's run alone.
    cpu_forward fwd(m.weights, m.pool);
    fwd.set_bf16_activations(false);
    kv_cache cache = m.cache();
    const std::vector<int32_t> t0{0, 1}, t1{2, 3}, t2{4, 5}, t3{6, 7};
    const std::vector<int32_t> other(prompt.rbegin(), prompt.rend());
    std::vector<forward_seq> batch{{prompt.data(), int32_t(prompt.size()), 0, &t0, true},
                                   {prompt.data(), int32_t(prompt.size()), 0, &t1, true},
                                   {other.data(), int32_t(other.size()), 0, &t2, true},
                                   {other.data(), int32_t(other.size()), 0, &t3, true}};
    batch[1].lora = &m.adapter;
    batch[3].lora = &m.adapter;
    std::vector<float> mixed;
    REQUIRE(fwd.run(batch, cache, false, mixed).ok());
    const size_t vocab = expected.size();
    REQUIRE(mixed.size() == 4 * vocab);
    auto row = [&](size_t i) {
      return std::vector<float>(mixed.begin() + std::ptrdiff_t(i * vocab),
                                mixed.begin() + std::ptrdiff_t((i + 1) * vocab));
    };
    CHECK(test::max_abs_diff(row(0), base) <= 1e-5f);
    CHECK(test::max_abs_diff(row(1), logits) <= 1e-5f);
    CHECK(test::max_abs_diff(row(2), run(m, nullptr, other, 0).first) <= 1e-5f);
    CHECK(test::max_abs_diff(row(3), run(m, &m.adapter, other, 0).first) <= 1e-5f);
    ++checked;
  }
  CHECK(checked >= 4);
}

}  // namespace coserve
