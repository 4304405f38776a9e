// Encoder models (BERT, XLM-RoBERTa) against sentence-transformers and transformers: fixtures
// written by tests/reference/make_embedding_fixtures.py are model folders with the vectors
// sentence-transformers computed (fp32) for a batch of texts of mixed lengths, and the logits of
// cross-encoders for text pairs. The executor runs them here in one batch and one at a time.
#include <simdjson.h>

#include <catch2/catch.hpp>
#include <cmath>
#include <filesystem>
#include <fstream>

#include "fixture_json.hpp"
#include "model/encoder_executor.hpp"
#include "model/encoder_model.hpp"
#include "model/text/tokenizer/tokenizer.hpp"

namespace coserve {
namespace {

const std::filesystem::path k_dir = "tests/reference/fixtures/embedding";

using test::floats;
using test::ints;

double cosine(const std::vector<float>& a, const std::vector<float>& b) {
  double ab = 0, aa = 0, bb = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    ab += double(a[i]) * b[i];
    aa += double(a[i]) * a[i];
    bb += double(b[i]) * b[i];
  }
  return ab / std::sqrt(aa * bb);
}

struct fixture {
  simdjson::dom::parser parser;
  simdjson::dom::element doc;
  explicit fixture(const std::string& name) {
    doc = parser.load((k_dir / name / "expected.json").string());
  }
};

step_plan plan_of(const std::vector<std::vector<int32_t>>& ids,
                  const std::vector<std::vector<int32_t>>& types, uint64_t first_id,
                  pooling_params base = {}) {
  step_plan plan;
  plan.step_id = first_id;
  for (size_t i = 0; i < ids.size(); ++i) {
    new_seq n;
    n.seq_id = first_id + i;
    n.prompt_ids = ids[i];
    n.params.pooling = base;
    n.params.pooling.enabled = true;
    if (!types.empty()) n.params.pooling.token_types.assign(types[i].begin(), types[i].end());
    plan.new_seqs.push_back(n);
    scheduled_seq s;
    s.seq_id = n.seq_id;
    s.tokens.assign(ids[i].begin(), ids[i].end());
    s.sample = true;
    plan.seqs.push_back(s);
    plan.finished.push_back(n.seq_id);
  }
  return plan;
}

void check_embedding_fixture(const std::string& name) {
  INFO("fixture " << name);
  fixture f(name);
  auto tok = tokenizer::load(k_dir / name / "tokenizer.json");
  REQUIRE(tok);
  std::vector<std::vector<int32_t>> ids;
  std::vector<std::vector<float>> expected;
  for (auto x : f.doc["ids"].get_array()) ids.push_back(ints(x.get_array()));
  for (auto x : f.doc["embeddings"].get_array()) expected.push_back(floats(x.get_array()));
  size_t i = 0;
  for (auto t : f.doc["texts"].get_array()) {
    const std::string_view text = t.get_string();
    CHECK(tok->encode(text, true) == ids[i++]);
  }
  auto ex = encoder_executor::load(k_dir / name, {.num_threads = 2});
  REQUIRE(ex);
  // The sequence limit sentence-transformers truncates at (sentence_bert_config.json, or the
  // tokenizer's model_max_length in current releases).
  CHECK((*ex)->max_model_len() == std::min<int32_t>(int32_t(int64_t(f.doc["max_seq_length"])),
                                                    (*ex)->config().max_model_len()));
  // One batch of mixed lengths, then each text alone: the same vectors.
  auto batch = (*ex)->execute(plan_of(ids, {}, 100));
  if (!batch) FAIL(batch.err().message);
  REQUIRE(batch->outputs.size() == ids.size());
  for (size_t k = 0; k < ids.size(); ++k) {
    INFO("text " << k);
    const auto& got = batch->outputs[k].embedding;
    REQUIRE(got.size() == expected[k].size());
    CHECK(cosine(got, expected[k]) >= 0.99999);
    float worst = 0;
    for (size_t j = 0; j < got.size(); ++j)
      worst = std::max(worst, std::abs(got[j] - expected[k][j]));
    CHECK(worst < 2e-5f);
    auto alone = (*ex)->execute(plan_of({ids[k]}, {}, 200 + k));
    REQUIRE(alone);
    CHECK(cosine(alone->outputs[0].embedding, got) >= 0.999999);
  }
}

TEST_CASE("encoder embeddings equal sentence-transformers' (BERT mean + Normalize)") {
  check_embedding_fixture("bert-mean-normalize");
}

TEST_CASE("encoder embeddings equal sentence-transformers' (BERT cls, classic layout, bf16)") {
  check_embedding_fixture("bert-cls-classic-bf16");
}

TEST_CASE("encoder embeddings equal sentence-transformers' (XLM-R last token + Normalize)") {
  check_embedding_fixture("xlmr-last-normalize");
}

void check_cross_encoder(const std::string& name) {
  INFO("fixture " << name);
  fixture f(name);
  auto tok = tokenizer::load(k_dir / name / "tokenizer.json");
  REQUIRE(tok);
  std::vector<std::vector<int32_t>> ids, types;
  for (auto x : f.doc["ids"].get_array()) ids.push_back(ints(x.get_array()));
  for (auto x : f.doc["token_type_ids"].get_array()) types.push_back(ints(x.get_array()));
  size_t i = 0;
  for (auto p : f.doc["pairs"].get_array()) {
    auto arr = p.get_array();
    const tokenizer::encoding e =
        tok->encode_pair(std::string_view(arr.at(0)), std::string_view(arr.at(1)), true);
    CHECK(e.ids == ids[i]);
    CHECK(e.type_ids == types[i]);
    ++i;
  }
  // Truncated to max_length ids in all by `tokenizers`' longest_first.
  for (auto t : f.doc["truncated"].get_array()) {
    const auto max_length = int32_t(int64_t(t["max_length"]));
    INFO("max_length " << max_length);
    size_t k = 0;
    auto want = t["ids"].get_array();
    for (auto p : f.doc["pairs"].get_array()) {
      auto arr = p.get_array();
      const tokenizer::encoding e = tok->encode_pair(std::string_view(arr.at(0)),
                                                     std::string_view(arr.at(1)), true, max_length);
      CHECK(e.ids == ints(want.at(k++).get_array()));
      CHECK(e.type_ids.size() == e.ids.size());
    }
  }
  auto ex = encoder_executor::load(k_dir / name, {.num_threads = 2});
  REQUIRE(ex);
  CHECK((*ex)->config().num_labels == 1);
  CHECK((*ex)->max_model_len() == (*ex)->config().max_model_len());
  auto r = (*ex)->execute(plan_of(ids, types, 300));
  REQUIRE(r);
  i = 0;
  for (auto row : f.doc["logits"].get_array()) {
    const std::vector<float> want = floats(row.get_array());
    REQUIRE(r->outputs[i].embedding.size() == want.size());
    for (size_t j = 0; j < want.size(); ++j)
      CHECK(std::abs(r->outputs[i].embedding[j] - want[j]) < 1e-4f);
    ++i;
  }
}

TEST_CASE("cross-encoder logits equal transformers' (BERT, XLM-R)") {
  check_cross_encoder("bert-cross-encoder");
  check_cross_encoder("xlmr-cross-encoder");
}

TEST_CASE("encoder executor: Matryoshka dimensions and normalisation per request") {
  fixture f("bert-cls-classic-bf16");
  std::vector<std::vector<int32_t>> ids;
  for (auto x : f.doc["ids"].get_array()) ids.push_back(ints(x.get_array()));
  auto ex = encoder_executor::load(k_dir / "bert-cls-classic-bf16", {.num_threads = 1});
  REQUIRE(ex);
  CHECK_FALSE((*ex)->pooling().normalize);
  auto full = (*ex)->execute(plan_of({ids[1]}, {}, 1));
  REQUIRE(full);
  pooling_params p;
  p.dimensions = 8;
  p.normalize = true;
  auto cut = (*ex)->execute(plan_of({ids[1]}, {}, 2, p));
  REQUIRE(cut);
  const auto& a = full->outputs[0].embedding;
  const auto& b = cut->outputs[0].embedding;
  REQUIRE(b.size() == 8);
  double norm = 0;
  for (float v : b) norm += double(v) * v;
  CHECK(std::abs(norm - 1.0) < 1e-6);
  // The prefix of the full vector, scaled to unit length.
  CHECK(cosine(std::vector<float>(a.begin(), a.begin() + 8), b) > 0.999999);
}

TEST_CASE("encoder executor refuses what it cannot run, and the pooling files are checked") {
  auto ex = encoder_executor::load(k_dir / "bert-mean-normalize", {.num_threads = 1});
  REQUIRE(ex);
  step_plan plan = plan_of({{2, 10, 11, 3}}, {}, 5);
  plan.new_seqs[0].params.pooling.enabled = false;  // a generation request
  auto r = (*ex)->execute(plan);
  REQUIRE_FALSE(r);
  CHECK(r.err().message.find("generates no tokens") != std::string::npos);
  plan = plan_of({{2, 10, 11, 3}}, {}, 6);
  plan.seqs[0].start_pos = 2;  // part of a prompt
  CHECK_FALSE((*ex)->execute(plan));
  plan = plan_of({{2, 100000, 3}}, {}, 7);
  r = (*ex)->execute(plan);
  REQUIRE_FALSE(r);
  CHECK(r.err().message.find("outside the vocabulary") != std::string::npos);
  // A plan after a failed one still runs (the failed sequences were dropped with `finished`).
  CHECK((*ex)->execute(plan_of({{2, 10, 11, 3}}, {}, 8)));

  const auto tmp = std::filesystem::temp_directory_path() / "coserve_pooling_test";
  std::filesystem::remove_all(tmp);
  std::filesystem::create_directories(tmp / "1_Pooling");
  auto write = [](const std::filesystem::path& p, std::string_view s) { std::ofstream(p) << s; };
  pooling_config fallback;
  fallback.type = pooling_type::cls;
  fallback.normalize = true;
  auto none = load_pooling_config(tmp, fallback);
  REQUIRE(none);
  CHECK(none->type == pooling_type::cls);
  CHECK(none->normalize);
  write(tmp / "modules.json",
        R"([{"idx":0,"name":"0","path":"","type":"sentence_transformers.models.Transformer"},
            {"idx":1,"name":"1","path":"1_Pooling","type":"sentence_transformers.models.Pooling"},
            {"idx":2,"name":"2","path":"2_Normalize","type":"sentence_transformers.models.Normalize"}])");
  write(tmp / "1_Pooling" / "config.json", R"({"pooling_mode": "lasttoken"})");
  auto last = load_pooling_config(tmp, fallback);
  REQUIRE(last);
  CHECK(last->type == pooling_type::last);
  CHECK(last->normalize);
  write(tmp / "1_Pooling" / "config.json",
        R"({"pooling_mode_cls_token": false, "pooling_mode_mean_tokens": false})");
  auto dflt = load_pooling_config(tmp, fallback);
  REQUIRE(dflt);
  CHECK(dflt->type == pooling_type::mean);  // no mode set: sentence-transformers' default
  write(tmp / "1_Pooling" / "config.json", R"({"pooling_mode": "max"})");
  auto max = load_pooling_config(tmp, fallback);
  REQUIRE_FALSE(max);
  CHECK(max.err().message.find("'max'") != std::string::npos);
  write(tmp / "1_Pooling" / "config.json", R"({"pooling_mode": ["cls", "mean"]})");
  CHECK_FALSE(load_pooling_config(tmp, fallback));
  write(tmp / "modules.json",
        R"([{"path":"","type":"sentence_transformers.models.Transformer"},
            {"path":"1_Pooling","type":"sentence_transformers.models.Pooling"},
            {"path":"2_Dense","type":"sentence_transformers.models.Dense"}])");
  write(tmp / "1_Pooling" / "config.json", R"({"pooling_mode": "cls"})");
  auto dense = load_pooling_config(tmp, fallback);
  REQUIRE_FALSE(dense);
  CHECK(dense.err().message.find("Dense") != std::string::npos);
  std::filesystem::remove_all(tmp);
}

TEST_CASE("encoder config: architectures, RoBERTa positions, refusals") {
  auto bert = parse_encoder_config(
      R"({"architectures":["BertModel"],"model_type":"bert","hidden_size":64,
          "intermediate_size":128,"num_hidden_layers":2,"num_attention_heads":4,
          "vocab_size":100,"max_position_embeddings":512})",
      "config.json");
  REQUIRE(bert);
  CHECK(bert->max_model_len() == 512);
  CHECK_FALSE(bert->classifier());
  auto xlmr = parse_encoder_config(
      R"({"architectures":["XLMRobertaForSequenceClassification"],"model_type":"xlm-roberta",
          "hidden_size":64,"intermediate_size":128,"num_hidden_layers":2,"num_attention_heads":4,
          "vocab_size":100,"max_position_embeddings":514,"pad_token_id":1,
          "id2label":{"0":"LABEL_0"}})",
      "config.json");
  REQUIRE(xlmr);
  CHECK(xlmr->position_offset == 2);
  CHECK(xlmr->max_model_len() == 512);
  CHECK(xlmr->num_labels == 1);
  auto rel = parse_encoder_config(
      R"({"architectures":["BertModel"],"hidden_size":64,"intermediate_size":128,
          "num_hidden_layers":2,"num_attention_heads":4,"vocab_size":100,
          "position_embedding_type":"relative_key"})",
      "config.json");
  REQUIRE_FALSE(rel);
  CHECK(rel.err().message.find("relative_key") != std::string::npos);
  CHECK_FALSE(parse_encoder_config(R"({"architectures":["LlamaForCausalLM"]})", "config.json"));
  CHECK(is_encoder_architecture("XLMRobertaModel"));
  CHECK_FALSE(is_encoder_architecture("Qwen3ForCausalLM"));
}

}  // namespace
}  // namespace coserve
