// The CPU forward pass against Hugging Face transformers: fixtures written by
// tests/reference/make_model_fixtures.py record make-demo-model flags, prompts, expected logits
// and greedy tokens. The model is rebuilt here from the same flags (no Python needed).
// The fp32 path (fp32 KV cache, fp32 activations: --dtype float32) stays within 1e-4 of
// transformers' fp32 run; the default bf16 path (bf16 KV cache, activations of bf16-weight products
// rounded to bf16) passes the logprob-close criterion at the last prompt position: transformers'
// argmax is in our top 5, and our argmax is in transformers' top 5 of the recorded columns when
// recorded.
#include <simdjson.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <filesystem>

#include "fixture_json.hpp"
#include "model/demo_args.hpp"
#include "model_test_util.hpp"

namespace coserve {
namespace {

const char* k_fixture_dir = "tests/reference/fixtures/model";

using test::floats;
using test::ints;

std::vector<float> pick(const std::vector<float>& row, const std::vector<int32_t>& cols) {
  std::vector<float> out;
  for (int32_t c : cols) out.push_back(row.at(size_t(c)));
  return out;
}

// The `k` largest entries' indices of `row`.
std::vector<int32_t> top_k(const std::vector<float>& row, size_t k) {
  std::vector<int32_t> idx(row.size());
  for (size_t i = 0; i < idx.size(); ++i) idx[i] = int32_t(i);
  k = std::min(k, idx.size());
  std::partial_sort(idx.begin(), idx.begin() + std::ptrdiff_t(k), idx.end(),
                    [&](int32_t a, int32_t b) { return row[size_t(a)] > row[size_t(b)]; });
  idx.resize(k);
  return idx;
}

// The bf16 path (bf16 activations, the default) with a bf16 KV cache (the default) or an fp8 one:
// the logprob-close criterion at the last prompt position of every prompt, and the recorded logits
// within `tolerance`.
void check_low_precision_cache(simdjson::dom::element fx, const std::string& dir, dtype kv,
                               float tolerance) {
  cpu_executor_options opts;
  REQUIRE(opts.bf16_activations);
  opts.num_kv_blocks = 512;
  opts.num_threads = 2;
  opts.return_logits = true;
  opts.kv_cache_dtype = kv;
  auto ex = cpu_executor::load(dir, opts);
  REQUIRE(ex.ok());
  const auto cols = ints(fx["columns"].get_array());
  seq_id_t id = 1;
  for (auto p : fx["prompts"].get_array()) {
    const auto prompt = ints(p["ids"].get_array());
    INFO("bf16 activations, " << dtype_name(kv) << " KV cache, prompt length " << prompt.size());
    step_plan plan;
    plan.new_seqs.push_back(test::greedy_seq(id, prompt));
    plan.seqs.push_back(
        {id, prompt, 0, test::block_range(0, int32_t(prompt.size() + 15) / 16), true});
    auto r = (*ex)->execute(plan);
    REQUIRE(r.ok());
    const auto& logits = r->outputs.at(0).logits;
    const auto ours = top_k(logits, 5);
    const int32_t ref_argmax = int32_t(int64_t(p["argmax"]));
    CHECK(std::find(ours.begin(), ours.end(), ref_argmax) != ours.end());
    const auto ref = floats(p["last_logits"].get_array());
    const auto ref_top = top_k(ref, 5);
    const auto at = std::find(cols.begin(), cols.end(), ours[0]);
    if (at != cols.end()) {
      const int32_t col = int32_t(at - cols.begin());
      CHECK(std::find(ref_top.begin(), ref_top.end(), col) != ref_top.end());
    }
    CHECK(test::max_abs_diff(pick(logits, cols), ref) <= tolerance);
    plan.seqs.clear();
    plan.finished = {id++};
    REQUIRE((*ex)->execute(plan).ok());
  }
}

void check_fixture(const std::filesystem::path& path) {
  simdjson::dom::parser parser;
  simdjson::dom::element fx = parser.load(path.string());
  const std::string name = std::string(std::string_view(fx["name"]));
  INFO("fixture " << name);
  std::vector<std::string> args;
  for (auto a : fx["make_demo_model_args"].get_array()) args.emplace_back(std::string_view(a));
  test::temp_dir dir("ref-" + name);
  args.push_back(dir.str());
  auto parsed = parse_demo_args(args);
  REQUIRE(parsed.ok());
  REQUIRE(make_demo_model(parsed->dir, parsed->options).ok());

  cpu_executor_options opts;
  opts.num_kv_blocks = 512;
  opts.num_threads = 2;
  opts.return_logits = true;
  opts.kv_cache_dtype = dtype::f32;
  opts.bf16_activations = false;
  auto ex = cpu_executor::load(dir.str(), opts);
  REQUIRE(ex.ok());
  const auto cols = ints(fx["columns"].get_array());
  const auto step_cols = ints(fx["step_columns"].get_array());

  seq_id_t id = 1;
  for (auto p : fx["prompts"].get_array()) {
    const auto prompt = ints(p["ids"].get_array());
    const auto greedy = ints(p["greedy"].get_array());
    INFO("prompt length " << prompt.size());
    step_plan plan;
    plan.new_seqs.push_back(test::greedy_seq(id, prompt));
    const int32_t blocks = int32_t(prompt.size() + greedy.size() + 15) / 16;
    REQUIRE(blocks <= opts.num_kv_blocks);
    plan.seqs.push_back({id, prompt, 0, test::block_range(0, blocks), true});
    auto r = (*ex)->execute(plan);
    REQUIRE(r.ok());
    const auto& out = r->outputs.at(0);
    CHECK(test::max_abs_diff(pick(out.logits, cols), floats(p["last_logits"].get_array())) <=
          1e-4f);
    CHECK(out.token == int32_t(int64_t(p["argmax"])));

    std::vector<int32_t> got{out.token};
    auto step_logits = p["greedy_step_logits"].get_array();
    auto expected_row = step_logits.begin();
    CHECK(test::max_abs_diff(pick(out.logits, step_cols), floats((*expected_row).get_array())) <=
          1e-4f);
    plan.new_seqs.clear();
    while (got.size() < greedy.size()) {
      plan.seqs[0].start_pos += int32_t(plan.seqs[0].tokens.size());
      plan.seqs[0].tokens = {k_token_from_last_step};
      auto s = (*ex)->execute(plan);
      REQUIRE(s.ok());
      ++expected_row;
      CHECK(test::max_abs_diff(pick(s->outputs.at(0).logits, step_cols),
                               floats((*expected_row).get_array())) <= 1e-4f);
      got.push_back(s->outputs.at(0).token);
    }
    CHECK(got == greedy);
    plan.seqs.clear();
    plan.finished = {id};
    REQUIRE((*ex)->execute(plan).ok());
    CHECK((*ex)->num_live_sequences() == 0);
    ++id;
  }
  // Largest logit differences measured over the fixtures' prompts: bf16 0.037, E4M3 0.40, E5M2 1.02
  // (phi3_fused; 0.67 over the first five fixtures): fp8 keeps 3 or 2 mantissa bits of each cached
  // K and V value. The top-5 checks hold for all. Mixtures of experts amplify it where the
  // perturbed state moves a token to another expert: E4M3 0.33-0.59, E5M2 0.51-2.48 (the largest
  // on qwen2_moe_shared's 6-token prompt).
  const bool moe = std::find(args.begin(), args.end(), "--num-experts") != args.end();
  check_low_precision_cache(fx, dir.str(), dtype::bf16, 0.1f);
  check_low_precision_cache(fx, dir.str(), dtype::f8_e4m3, moe ? 1.0f : 0.6f);
  check_low_precision_cache(fx, dir.str(), dtype::f8_e5m2, moe ? 3.0f : 1.5f);
}

}  // namespace

TEST_CASE("cpu forward matches transformers on the reference fixtures", "[model][reference]") {
  std::vector<std::filesystem::path> files;
  for (const auto& e : std::filesystem::directory_iterator(k_fixture_dir))
    if (e.path().extension() == ".json") files.push_back(e.path());
  std::sort(files.begin(), files.end());
  REQUIRE(files.size() >= 10);
  for (const auto& f : files) check_fixture(f);
}

}  // namespace coserve
