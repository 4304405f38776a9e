// config.json reading, one test per section of model/config.cpp (and hf overrides, which feed it).
// Over 500 lines: every case edits the same base configs (k_llama and the `with` helper).
#include <array>
#include <catch2/catch.hpp>
#include <cmath>

#include "model/config.hpp"
#include "model/hf_overrides.hpp"

namespace coserve {

namespace {
const char* k_llama =
    R"({"architectures":["LlamaForCausalLM"],"model_type":"llama","hidden_size":64,
 "intermediate_size":128,"num_hidden_layers":2,"num_attention_heads":8,"num_key_value_heads":2,
 "vocab_size":100,"rms_norm_eps":1e-5,"rope_theta":500000.0,"max_position_embeddings":4096,
 "rope_scaling":{"rope_type":"llama3","factor":8.0,"low_freq_factor":1.0,"high_freq_factor":4.0,
 "original_max_position_embeddings":8192},"eos_token_id":[5,7],"bos_token_id":1,"tie_word_embeddings":true,
 "torch_dtype":"bfloat16"})";

std::string with(std::string base, const std::string& from, const std::string& to) {
  auto pos = base.find(from);
  REQUIRE(pos != std::string::npos);
  return base.replace(pos, from.size(), to);
}
}  // namespace

TEST_CASE("config: llama with GQA and llama3 rope scaling", "[model][config]") {
  auto c = parse_model_config(k_llama, "config.json");
  REQUIRE(c.ok());
  CHECK(c->model_type == "llama");
  CHECK(c->head_dim == 8);
  CHECK(c->num_key_value_heads == 2);
  CHECK(c->rope_theta == 500000.0f);
  CHECK(c->rope_scaling.kind == rope_kind::llama3);
  CHECK(c->rope_scaling.factor == 8.0f);
  CHECK(c->rope_scaling.original_max_position_embeddings == 8192);
  CHECK(c->eos_token_ids == std::vector<int32_t>{5, 7});
  CHECK(c->bos_token_id == 1);
  CHECK(c->tie_word_embeddings);
  CHECK_FALSE(c->qkv_bias);
  CHECK(c->torch_dtype == dtype::bf16);
}

TEST_CASE("config: the older 'type' key, head_dim, qwen2 bias, mistral window", "[model][config]") {
  auto c = parse_model_config(with(k_llama, "\"rope_type\"", "\"type\""), "c");
  REQUIRE(c.ok());
  CHECK(c->rope_scaling.kind == rope_kind::llama3);
  auto hd =
      parse_model_config(with(k_llama, "\"vocab_size\"", "\"head_dim\":32,\"vocab_size\""), "c");
  REQUIRE(hd.ok());
  CHECK(hd->head_dim == 32);
  auto q = parse_model_config(
      with(with(k_llama, "LlamaForCausalLM", "Qwen2ForCausalLM"), "\"llama\"", "\"qwen2\""), "c");
  REQUIRE(q.ok());
  CHECK(q->qkv_bias);
  CHECK_FALSE(q->o_bias);
  auto m = parse_model_config(with(with(k_llama, "LlamaForCausalLM", "MistralForCausalLM"),
                                   "\"llama\"", "\"mistral\",\"sliding_window\":1024"),
                              "c");
  REQUIRE(m.ok());
  CHECK(m->max_position_embeddings == 4096);  // the window is applied in attention, not as a cap
  CHECK(m->sliding_window == 1024);
  CHECK(m->sliding_layers.empty());  // every layer
  auto wide = parse_model_config(with(with(k_llama, "LlamaForCausalLM", "MistralForCausalLM"),
                                      "\"llama\"", "\"mistral\",\"sliding_window\":4096"),
                                 "c");
  REQUIRE(wide.ok());
  CHECK(wide->sliding_window == 0);  // a window as long as the context never bites
  auto bias = parse_model_config(
      with(k_llama, "\"vocab_size\"", "\"attention_bias\":true,\"vocab_size\""), "c");
  REQUIRE(bias.ok());
  CHECK(bias->qkv_bias);
  CHECK(bias->o_bias);
}

TEST_CASE(
    "config: qwen3 has per-head q/k norms, head_dim 128 unless given, biases only with "
    "attention_bias",
    "[model][config]") {
  const std::string q3 =
      with(with(k_llama, "LlamaForCausalLM", "Qwen3ForCausalLM"), "\"llama\"", "\"qwen3\"");
  auto c = parse_model_config(q3, "c");
  REQUIRE(c.ok());
  CHECK(c->model_type == "qwen3");
  CHECK(c->qk_norm);
  CHECK(c->head_dim == 128);  // transformers' Qwen3Config default, not hidden / heads (8)
  CHECK_FALSE(c->qkv_bias);
  CHECK_FALSE(c->o_bias);
  auto hd = parse_model_config(
      with(q3, "\"vocab_size\"", "\"head_dim\":16,\"attention_bias\":true,\"vocab_size\""), "c");
  REQUIRE(hd.ok());
  CHECK(hd->head_dim == 16);
  CHECK(hd->qkv_bias);
  CHECK(hd->o_bias);
  auto by_type = parse_model_config(with(q3, "\"architectures\":[\"Qwen3ForCausalLM\"],", ""), "c");
  REQUIRE(by_type.ok());
  CHECK(by_type->qk_norm);
  // use_sliding_window: the window on the layers from max_window_layers on, or as layer_types says.
  CHECK(parse_model_config(with(q3, "\"vocab_size\"", "\"sliding_window\":64,\"vocab_size\""), "c")
            ->sliding_window == 0);
  auto sliding = parse_model_config(with(q3, "\"vocab_size\"",
                                         "\"use_sliding_window\":true,\"sliding_window\":64,\"max_"
                                         "window_layers\":1,\"vocab_size\""),
                                    "c");
  REQUIRE(sliding.ok());
  CHECK(sliding->sliding_window == 64);
  CHECK(sliding->sliding_layers == std::vector<uint8_t>{0, 1});
  auto typed = parse_model_config(
      with(
          q3, "\"vocab_size\"",
          R"("use_sliding_window":true,"sliding_window":64,"layer_types":["sliding_attention","full_attention"],"vocab_size")"),
      "c");
  REQUIRE(typed.ok());
  CHECK(typed->sliding_layers == std::vector<uint8_t>{1, 0});
  auto none = parse_model_config(with(q3, "\"vocab_size\"",
                                      "\"use_sliding_window\":true,\"sliding_window\":64,\"max_"
                                      "window_layers\":2,\"vocab_size\""),
                                 "c");
  REQUIRE(none.ok());
  CHECK(none->sliding_window == 0);  // max_window_layers covers every layer: full attention
  auto bad_types = parse_model_config(
      with(q3, "\"vocab_size\"",
           R"("use_sliding_window":true,"sliding_window":64,"layer_types":["x","y"],"vocab_size")"),
      "c");
  REQUIRE_FALSE(bad_types.ok());
  CHECK_THAT(bad_types.err().message, Catch::Contains("layer_types"));
  auto llama = parse_model_config(k_llama, "c");
  REQUIRE(llama.ok());
  CHECK_FALSE(llama->qk_norm);
}

TEST_CASE(
    "config: linear and yarn rope scaling, yarn's defaults and attention factor as transformers "
    "computes them",
    "[model][config]") {
  const std::string llama3 =
      R"("rope_scaling":{"rope_type":"llama3","factor":8.0,"low_freq_factor":1.0,"high_freq_factor":4.0,
 "original_max_position_embeddings":8192})";
  auto scaled = [&](const std::string& rs) {
    return parse_model_config(with(k_llama, llama3, "\"rope_scaling\":" + rs), "c");
  };
  auto lin = scaled(R"({"type":"linear","factor":2.0})");
  REQUIRE(lin.ok());
  CHECK(lin->rope_scaling.kind == rope_kind::linear);
  CHECK(lin->rope_scaling.factor == 2.0f);
  // Qwen2.5's long-context setting: attention factor 0.1 ln 4 + 1.
  auto y = scaled(R"({"rope_type":"yarn","factor":4.0,"original_max_position_embeddings":1024})");
  REQUIRE(y.ok());
  CHECK(y->rope_scaling.kind == rope_kind::yarn);
  CHECK(y->rope_scaling.original_max_position_embeddings == 1024);
  CHECK(y->rope_scaling.attention_factor == Approx(0.1 * std::log(4.0) + 1.0));
  CHECK(y->rope_scaling.beta_fast == 32.0f);
  CHECK(y->rope_scaling.beta_slow == 1.0f);
  CHECK(y->rope_scaling.truncate);
  // No factor: max_position_embeddings (4096) / original; mscale over mscale_all_dim (DeepSeek's
  // form).
  auto d = scaled(
      R"({"rope_type":"yarn","original_max_position_embeddings":1024,"mscale":1.0,"mscale_all_dim":0.5,
 "beta_fast":0,"truncate":false})");
  REQUIRE(d.ok());
  CHECK(d->rope_scaling.factor == 4.0f);
  CHECK(d->rope_scaling.attention_factor ==
        Approx((0.1 * std::log(4.0) + 1.0) / (0.05 * std::log(4.0) + 1.0)));
  CHECK(d->rope_scaling.beta_fast == 32.0f);  // 0 means the default, as in transformers
  CHECK_FALSE(d->rope_scaling.truncate);
  auto given = scaled(R"({"rope_type":"yarn","factor":2.0,"attention_factor":1.5})");
  REQUIRE(given.ok());
  CHECK(given->rope_scaling.attention_factor == 1.5f);
  CHECK(given->rope_scaling.original_max_position_embeddings == 4096);  // max_position_embeddings
  auto bad = scaled(R"({"rope_type":"yarn","factor":"big"})");
  REQUIRE_FALSE(bad.ok());
  CHECK_THAT(bad.err().message, Catch::Contains("factor"));
  auto neg = scaled(R"({"rope_type":"linear","factor":-1})");
  REQUIRE_FALSE(neg.ok());
  auto other = scaled(R"({"rope_type":"dynamic","factor":2.0})");
  REQUIRE_FALSE(other.ok());
  CHECK_THAT(other.err().message, Catch::Contains("dynamic"));
  CHECK_THAT(other.err().message, Catch::Contains("yarn"));
}

TEST_CASE(
    "config: phi3 has fused projections, a sliding window, partial rotary and longrope "
    "as transformers computes them",
    "[model][config]") {
  const std::string p3 = with(
      with(with(k_llama, "LlamaForCausalLM", "Phi3ForCausalLM"), "\"llama\"", "\"phi3\""),
      R"("rope_scaling":{"rope_type":"llama3","factor":8.0,"low_freq_factor":1.0,"high_freq_factor":4.0,
 "original_max_position_embeddings":8192})",
      "\"rope_scaling\":null,\"sliding_window\":2047");
  auto c = parse_model_config(p3, "c");
  REQUIRE(c.ok());
  CHECK(c->fused_projections);
  CHECK(c->sliding_window == 2047);
  CHECK(c->max_position_embeddings == 4096);
  CHECK(c->rotary_dim == c->head_dim);
  CHECK_FALSE(parse_model_config(k_llama, "c")->fused_projections);
  // partial_rotary_factor: int(head_dim * factor) dimensions rotate (head_dim 8 here).
  auto partial = parse_model_config(
      with(p3, "\"vocab_size\"", "\"partial_rotary_factor\":0.75,\"vocab_size\""), "c");
  REQUIRE(partial.ok());
  CHECK(partial->rotary_dim == 6);
  auto odd = parse_model_config(
      with(p3, "\"vocab_size\"", "\"partial_rotary_factor\":0.7,\"vocab_size\""), "c");
  REQUIRE_FALSE(odd.ok());
  CHECK_THAT(odd.err().message, Catch::Contains("partial_rotary_factor"));
  auto llama_partial = parse_model_config(
      with(k_llama, "\"vocab_size\"", "\"partial_rotary_factor\":0.5,\"vocab_size\""), "c");
  REQUIRE_FALSE(llama_partial.ok());
  // longrope: factors per rotated pair; the attention factor from max / original positions
  // (4096 / 512 = 8: sqrt(1 + ln 8 / ln 512)) unless given.
  const std::string lr = with(
      with(p3, "\"rope_scaling\":null",
           R"("rope_scaling":{"type":"longrope","short_factor":[1,1.5,2],"long_factor":[4,5,6]},)"
           R"("original_max_position_embeddings":512)"),
      "\"vocab_size\"", "\"partial_rotary_factor\":0.75,\"vocab_size\"");
  auto longrope = parse_model_config(lr, "c");
  REQUIRE(longrope.ok());
  CHECK(longrope->rope_scaling.kind == rope_kind::longrope);
  CHECK(longrope->rope_scaling.original_max_position_embeddings == 512);
  CHECK(longrope->rope_scaling.long_factor == std::vector<float>{4, 5, 6});
  CHECK(longrope->rope_scaling.attention_factor ==
        Approx(std::sqrt(1.0 + std::log(8.0) / std::log(512.0))));
  auto given = parse_model_config(
      with(lr, "\"long_factor\"", "\"attention_factor\":1.25,\"long_factor\""), "c");
  REQUIRE(given.ok());
  CHECK(given->rope_scaling.attention_factor == 1.25f);
  auto short_list = parse_model_config(with(lr, "[4,5,6]", "[4,5]"), "c");
  REQUIRE_FALSE(short_list.ok());
  CHECK_THAT(short_list.err().message,
             Catch::Contains("short_factor and long_factor need 3 entries"));
}

TEST_CASE("config: smollm3's layers without RoPE, from the list or the interval",
          "[model][config]") {
  const std::string sm =
      with(with(k_llama, "LlamaForCausalLM", "SmolLM3ForCausalLM"), "\"llama\"", "\"smollm3\"");
  auto c = parse_model_config(sm, "c");  // 2 layers, interval 4: RoPE on both
  REQUIRE(c.ok());
  CHECK(c->rope_layers == std::vector<uint8_t>{1, 1});
  auto listed = parse_model_config(
      with(sm, "\"vocab_size\"", "\"no_rope_layers\":[1,0],\"vocab_size\""), "c");
  REQUIRE(listed.ok());
  CHECK(listed->rope_layers == std::vector<uint8_t>{1, 0});
  auto every = parse_model_config(
      with(sm, "\"vocab_size\"", "\"no_rope_layer_interval\":1,\"vocab_size\""), "c");
  REQUIRE(every.ok());
  CHECK(every->rope_layers == std::vector<uint8_t>{0, 0});
  auto wrong = parse_model_config(
      with(sm, "\"vocab_size\"", "\"no_rope_layers\":[1,1,0],\"vocab_size\""), "c");
  REQUIRE_FALSE(wrong.ok());
  CHECK_THAT(wrong.err().message, Catch::Contains("no_rope_layers"));
  auto untied = parse_model_config(with(sm, "\"tie_word_embeddings\":true", "\"x\":0"), "c");
  REQUIRE(untied.ok());
  CHECK(untied->tie_word_embeddings);  // SmolLM3Config's default when absent
  CHECK(parse_model_config(k_llama, "c")->rope_layers.empty());
}

TEST_CASE("config: mixtral's and qwen3_moe's experts, with transformers' defaults and dense layers",
          "[model][config]") {
  const std::string mx =
      with(with(k_llama, "LlamaForCausalLM", "MixtralForCausalLM"), "\"llama\"", "\"mixtral\"");
  auto m = parse_model_config(mx, "c");  // no expert fields: MixtralConfig's 8 experts, top 2
  REQUIRE(m.ok());
  CHECK(m->is_moe());
  CHECK(m->num_experts == 8);
  CHECK(m->num_experts_per_tok == 2);
  CHECK(m->moe_intermediate_size == 128);  // intermediate_size
  CHECK(m->norm_topk_prob);
  CHECK(m->moe_layers == std::vector<uint8_t>{1, 1});
  auto m4 =
      parse_model_config(with(mx, "\"vocab_size\"",
                              "\"num_local_experts\":4,\"num_experts_per_tok\":1,\"vocab_size\""),
                         "c");
  REQUIRE(m4.ok());
  CHECK(m4->num_experts == 4);
  CHECK(m4->num_experts_per_tok == 1);

  const std::string qm = with(
      with(with(k_llama, "LlamaForCausalLM", "Qwen3MoeForCausalLM"), "\"llama\"", "\"qwen3_moe\""),
      "\"num_hidden_layers\":2", "\"num_hidden_layers\":4");
  auto q = parse_model_config(qm, "c");  // Qwen3MoeConfig's defaults
  REQUIRE(q.ok());
  CHECK(q->num_experts == 128);
  CHECK(q->num_experts_per_tok == 8);
  CHECK(q->moe_intermediate_size == 768);
  CHECK_FALSE(q->norm_topk_prob);
  CHECK(q->qk_norm);
  CHECK(q->head_dim == 8);  // hidden / heads: Qwen3MoeConfig has no head_dim default
  CHECK(q->moe_layers == std::vector<uint8_t>{1, 1, 1, 1});
  auto q2 = parse_model_config(
      with(qm, "\"vocab_size\"",
           "\"num_experts\":6,\"num_experts_per_tok\":2,"
           "\"moe_intermediate_size\":32,\"norm_topk_prob\":true,\"decoder_sparse_step\":2,"
           "\"mlp_only_layers\":[3],\"vocab_size\""),
      "c");
  REQUIRE(q2.ok());
  CHECK(q2->num_experts == 6);
  CHECK(q2->moe_intermediate_size == 32);
  CHECK(q2->norm_topk_prob);
  CHECK(q2->moe_layers == std::vector<uint8_t>{0, 1, 0, 0});  // (l + 1) % 2 == 0, but not layer 3
  CHECK_FALSE(q2->moe_layer(0));
  CHECK(q2->moe_layer(1));
  auto q5 =
      parse_model_config(with(qm, "\"vocab_size\"",
                              "\"num_local_experts\":5,\"num_experts_per_tok\":2,\"vocab_size\""),
                         "c");
  REQUIRE(q5.ok());  // transformers 5 writes num_local_experts for both
  CHECK(q5->num_experts == 5);
  CHECK_FALSE(parse_model_config(k_llama, "c")->is_moe());
  CHECK(q->shared_expert_intermediate_size == 0);

  // Qwen2-MoE: Qwen2MoeConfig's defaults, q/k/v biases unless qkv_bias is false, a shared expert.
  const std::string q2m =
      with(with(k_llama, "LlamaForCausalLM", "Qwen2MoeForCausalLM"), "\"llama\"", "\"qwen2_moe\"");
  auto w = parse_model_config(q2m, "c");
  REQUIRE(w.ok());
  CHECK(w->num_experts == 60);
  CHECK(w->num_experts_per_tok == 4);
  CHECK(w->moe_intermediate_size == 1408);
  CHECK(w->shared_expert_intermediate_size == 5632);
  CHECK_FALSE(w->norm_topk_prob);
  CHECK(w->qkv_bias);
  CHECK_FALSE(w->o_bias);
  CHECK_FALSE(w->qk_norm);
  auto w2 = parse_model_config(with(q2m, "\"vocab_size\"",
                                    "\"qkv_bias\":false,\"shared_expert_intermediate_size\":32,"
                                    "\"vocab_size\""),
                               "c");
  REQUIRE(w2.ok());
  CHECK_FALSE(w2->qkv_bias);
  CHECK(w2->shared_expert_intermediate_size == 32);
  auto w3 = parse_model_config(
      with(q2m, "\"vocab_size\"", "\"shared_expert_intermediate_size\":0,\"vocab_size\""), "c");
  REQUIRE_FALSE(w3.ok());
  CHECK_THAT(w3.err().message, Catch::Contains("shared_expert_intermediate_size"));

  for (const auto& [field, json] : std::vector<std::array<std::string, 2>>{
           {"num_experts_per_tok", "\"num_local_experts\":4,\"num_experts_per_tok\":5,"},
           {"num_experts_per_tok", "\"num_experts_per_tok\":0,"},
           {"number of experts", "\"num_local_experts\":0,"},
           {"moe_intermediate_size", "\"moe_intermediate_size\":-1,"},
           {"decoder_sparse_step", "\"decoder_sparse_step\":0,"},
           {"mlp_only_layers", "\"mlp_only_layers\":\"all\","}}) {
    const std::string base = field == "moe_intermediate_size" || field == "decoder_sparse_step" ||
                                     field == "mlp_only_layers"
                                 ? qm
                                 : mx;
    auto r = parse_model_config(with(base, "\"vocab_size\"", json + "\"vocab_size\""), "c");
    REQUIRE_FALSE(r.ok());
    CHECK_THAT(r.err().message, Catch::Contains(field));
  }
}

TEST_CASE("config: transformers 5 rope_parameters (theta inside)", "[model][config]") {
  auto c = parse_model_config(
      with(with(k_llama, "\"rope_scaling\":{", "\"rope_parameters\":{\"rope_theta\":123.0,"),
           "\"rope_theta\":500000.0,", ""),
      "c");
  REQUIRE(c.ok());
  CHECK(c->rope_theta == 123.0f);
  CHECK(c->rope_scaling.kind == rope_kind::llama3);
  auto d = parse_model_config(
      with(k_llama, "\"rope_scaling\":{\"rope_type\":\"llama3\",",
           "\"rope_parameters\":{\"rope_type\":\"default\",\"rope_theta\":7.0},\"x\":{"),
      "c");
  REQUIRE(d.ok());
  CHECK(d->rope_scaling.kind == rope_kind::standard);
  CHECK(d->rope_theta == 7.0f);
  CHECK_FALSE(
      parse_model_config(with(k_llama, "\"rope_scaling\":{", "\"rope_scaling\":3,\"y\":{"), "c")
          .ok());
}

TEST_CASE("config: unsupported or malformed configs are clear errors", "[model][config]") {
  auto arch = parse_model_config(with(k_llama, "LlamaForCausalLM", "GPTNeoXForCausalLM"),
                                 "dir/config.json");
  REQUIRE_FALSE(arch.ok());
  CHECK_THAT(arch.err().message,
             Catch::Contains("GPTNeoXForCausalLM") && Catch::Contains("dir/config.json"));
  auto rope = parse_model_config(with(k_llama, "\"llama3\"", "\"dynamic\""), "c");
  REQUIRE_FALSE(rope.ok());
  CHECK_THAT(rope.err().message, Catch::Contains("dynamic"));
  auto heads = parse_model_config(
      with(k_llama, "\"num_key_value_heads\":2", "\"num_key_value_heads\":3"), "c");
  REQUIRE_FALSE(heads.ok());
  CHECK_THAT(heads.err().message, Catch::Contains("num_key_value_heads"));
  auto missing = parse_model_config(with(k_llama, "\"hidden_size\":64,", ""), "c");
  REQUIRE_FALSE(missing.ok());
  CHECK_THAT(missing.err().message, Catch::Contains("hidden_size"));
  auto type =
      parse_model_config(with(k_llama, "\"vocab_size\":100", "\"vocab_size\":\"100\""), "c");
  REQUIRE_FALSE(type.ok());
  CHECK_THAT(type.err().message, Catch::Contains("vocab_size"));
  auto neg = parse_model_config(with(with(k_llama, "LlamaForCausalLM", "MistralForCausalLM"),
                                     "\"llama\"", "\"mistral\",\"sliding_window\":-3"),
                                "c");
  REQUIRE_FALSE(neg.ok());
  CHECK_THAT(neg.err().message, Catch::Contains("sliding_window"));
  // Only SiLU-gated MLPs are implemented: another hidden_act is refused, not run as SiLU.
  auto act = parse_model_config(
      with(k_llama, "\"vocab_size\"", "\"hidden_act\":\"gelu\",\"vocab_size\""), "c");
  REQUIRE_FALSE(act.ok());
  CHECK_THAT(act.err().message, Catch::Contains("hidden_act 'gelu'"));
  CHECK(parse_model_config(
            with(k_llama, "\"vocab_size\"", "\"hidden_act\":\"silu\",\"vocab_size\""), "c")
            .ok());
  CHECK(
      parse_model_config(with(k_llama, "\"vocab_size\"", "\"hidden_act\":null,\"vocab_size\""), "c")
          .ok());
  // Values that would give NaN logits or no context are named.
  for (const auto& [field, from, to] :
       std::vector<std::array<std::string, 3>>{{"rope_theta", "500000.0", "-1"},
                                               {"rope_theta", "500000.0", "0"},
                                               {"rms_norm_eps", "1e-5", "-0.5"},
                                               {"max_position_embeddings", "4096", "0"}}) {
    auto r = parse_model_config(
        with(k_llama, "\"" + field + "\":" + from, "\"" + field + "\":" + to), "c");
    REQUIRE_FALSE(r.ok());
    CHECK_THAT(r.err().message, Catch::Contains(field));
  }
  CHECK_FALSE(parse_model_config("[1,2]", "c").ok());
  CHECK_FALSE(parse_model_config("{not json", "c").ok());
  auto io = load_model_config("/nonexistent/coserve-model");
  REQUIRE_FALSE(io.ok());
  CHECK(io.err().code == "io");
}

TEST_CASE("generation config: eos int or list, sampling defaults", "[model][config]") {
  auto g = parse_generation_config(
      R"({"eos_token_id":3,"temperature":0.6,"top_p":0.9,"top_k":20,"do_sample":true})", "g");
  REQUIRE(g.ok());
  CHECK(g->eos_token_ids == std::vector<int32_t>{3});
  CHECK(g->temperature == Approx(0.6f));
  CHECK(g->top_p == Approx(0.9f));
  CHECK(g->top_k == 20);
  CHECK(g->do_sample == true);
  auto l = parse_generation_config(R"({"eos_token_id":[1,2,3]})", "g");
  REQUIRE(l.ok());
  CHECK(l->eos_token_ids == std::vector<int32_t>{1, 2, 3});
  CHECK_FALSE(l->temperature.has_value());
  CHECK_FALSE(parse_generation_config(R"({"eos_token_id":"x"})", "g").ok());
  auto absent = load_generation_config("/nonexistent/coserve-model");
  REQUIRE(absent.ok());
  CHECK(absent->eos_token_ids.empty());
}

TEST_CASE("config: decoder sequence classifiers and classifier_from_token", "[model][config]") {
  const std::string q3 = with(with(k_llama, "LlamaForCausalLM", "Qwen3ForSequenceClassification"),
                              "\"llama\"", "\"qwen3\"");
  auto two = parse_model_config(q3, "c");  // no id2label, no num_labels: transformers' 2
  REQUIRE(two.ok());
  CHECK(two->qk_norm);  // Qwen3's layers
  CHECK(two->num_labels == 2);
  CHECK(two->classifier_from_token.empty());
  auto one = parse_model_config(
      with(q3, "\"vocab_size\"", "\"id2label\":{\"0\":\"LABEL_0\"},\"vocab_size\""), "c");
  REQUIRE(one.ok());
  CHECK(one->num_labels == 1);
  auto yes_no = parse_model_config(
      with(q3, "\"vocab_size\"", "\"classifier_from_token\":[\"no\",\"yes\"],\"vocab_size\""), "c");
  REQUIRE(yes_no.ok());
  CHECK(yes_no->num_labels == 1);
  CHECK(yes_no->two_way_softmax);
  CHECK(yes_no->classifier_from_token == std::vector<std::string>{"no", "yes"});
  auto listed = parse_model_config(
      with(q3, "\"vocab_size\"",
           "\"classifier_from_token\":[\"Yes\"],\"method\":\"no_post_processing\",\"vocab_size\""),
      "c");
  REQUIRE(listed.ok());
  CHECK(listed->num_labels == 1);
  CHECK_FALSE(listed->two_way_softmax);
  for (const char* bad :
       {"\"classifier_from_token\":[],", "\"classifier_from_token\":[\"a\",3],",
        "\"classifier_from_token\":[\"a\"],\"method\":\"from_2_way_softmax\",",
        "\"classifier_from_token\":[\"a\",\"b\"],\"method\":\"softmax\",", "\"num_labels\":0,"}) {
    INFO(bad);
    CHECK_FALSE(
        parse_model_config(with(q3, "\"vocab_size\"", std::string(bad) + "\"vocab_size\""), "c")
            .ok());
  }
  // A language model stays one; an unknown base architecture is still unsupported.
  CHECK(parse_model_config(k_llama, "c")->num_labels == 0);
  CHECK_FALSE(
      parse_model_config(with(k_llama, "LlamaForCausalLM", "GPT2ForSequenceClassification"), "c")
          .ok());
}

TEST_CASE("hf overrides: keys replaced, nested objects merged, refusals", "[model][config]") {
  auto merged = apply_hf_overrides(
      k_llama,
      R"({"architectures":["LlamaForSequenceClassification"],"rope_scaling":{"factor":2.0},)"
      R"("classifier_from_token":["a","b"]})",
      "c");
  REQUIRE(merged.ok());
  auto c = parse_model_config(*merged, "c");
  REQUIRE(c.ok());
  CHECK(c->architecture == "LlamaForSequenceClassification");
  CHECK(c->num_labels == 1);
  CHECK(c->rope_scaling.kind == rope_kind::llama3);  // rope_type kept, factor replaced
  CHECK(c->rope_scaling.factor == 2.0f);
  CHECK(c->rope_scaling.low_freq_factor == 1.0f);
  CHECK(*apply_hf_overrides(k_llama, "", "c") == k_llama);
  auto bad = apply_hf_overrides(k_llama, "[1]", "c");
  REQUIRE_FALSE(bad.ok());
  CHECK(bad.err().param == "hf_overrides");
  CHECK_FALSE(apply_hf_overrides(k_llama, "{nope", "c").ok());
  CHECK_FALSE(apply_hf_overrides("[]", "{}", "c").ok());
}

}  // namespace coserve

TEST_CASE(
    "config: sampling defaults from a generation config as vLLM reads them, overrides winning",
    "[model][config]") {
  using namespace coserve;
  auto g =
      parse_generation_config(R"({"eos_token_id": [1, 2], "do_sample": false, "temperature": 0.6,
                                       "top_p": 0.9, "top_k": 20, "min_p": 0.05, "repetition_penalty": 1.05,
                                       "max_new_tokens": 512})",
                              "g");
  REQUIRE(g.ok());
  auto d = sampling_defaults_of(*g);
  REQUIRE(d.ok());
  CHECK(*d->temperature == 0.6f);  // do_sample is not read (vLLM does not either)
  CHECK(*d->top_p == 0.9f);
  CHECK(*d->top_k == 20);
  CHECK(*d->min_p == 0.05f);
  CHECK(*d->repetition_penalty == 1.05f);
  CHECK(*d->max_tokens == 512);
  CHECK(
      describe(*d) ==
      "temperature=0.6, top_p=0.9, top_k=20, min_p=0.05, repetition_penalty=1.05, max_tokens=512");
  auto over = parse_generation_config(R"({"temperature": 0, "max_new_tokens": 8})", "o");
  REQUIRE(over.ok());
  auto both = sampling_defaults_of(*g, *over);
  REQUIRE(both.ok());
  CHECK(*both->temperature == 0.0f);
  CHECK(*both->top_p == 0.9f);
  CHECK(*both->max_tokens == 8);
  CHECK(sampling_defaults_of(generation_config{})->empty());
  for (const char* bad : {R"({"top_p": 0})", R"({"temperature": 3})", R"({"min_p": 1.5})",
                          R"({"repetition_penalty": 0})", R"({"max_new_tokens": 0})"}) {
    auto b = parse_generation_config(bad, "b");
    REQUIRE(b.ok());
    CHECK_FALSE(sampling_defaults_of(*b).ok());
  }
  CHECK_FALSE(parse_generation_config(R"({"min_p": "x"})", "b").ok());
}
