// PEFT LoRA adapter folders: written here as peft saves them (adapter_config.json, and
// adapter_model.safetensors with base_model.model.model.layers.N.<block>.<proj>.lora_{A,B}.weight),
// read against a base model's config; every refusal names its field or tensor.
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "model/lora.hpp"
#include "model/safetensors.hpp"

using namespace coserve;
namespace fs = std::filesystem;

namespace {

model_config llama_like() {
  model_config c;
  c.architecture = "LlamaForCausalLM";
  c.hidden_size = 16;
  c.intermediate_size = 24;
  c.num_hidden_layers = 2;
  c.num_attention_heads = 4;
  c.num_key_value_heads = 2;
  c.head_dim = 4;
  c.vocab_size = 32;
  return c;
}

tensor_data factor(const std::string& name, int64_t rows, int64_t cols, float base) {
  tensor_data t{name, dtype::f32, {rows, cols}, {}};
  std::vector<float> v(static_cast<size_t>(rows * cols));
  for (size_t i = 0; i < v.size(); ++i) v[i] = base + 0.001f * static_cast<float>(i);
  t.bytes.resize(v.size() * sizeof(float));
  std::memcpy(t.bytes.data(), v.data(), t.bytes.size());
  return t;
}

std::string name(int layer, const std::string& block, const std::string& proj, char ab) {
  return "base_model.model.model.layers." + std::to_string(layer) + "." + block + "." + proj +
         ".lora_" + ab + ".weight";
}

struct adapter_dir {
  fs::path dir;
  explicit adapter_dir(const std::string& tag)
      : dir(fs::temp_directory_path() /
            ("coserve-lora-" + tag + "-" + std::to_string(::getpid()))) {
    fs::remove_all(dir);
    fs::create_directories(dir);
  }
  ~adapter_dir() { fs::remove_all(dir); }
  void config(const std::string& json) const { std::ofstream(dir / "adapter_config.json") << json; }
  void tensors(const std::vector<tensor_data>& t) const {
    REQUIRE(write_safetensors((dir / "adapter_model.safetensors").string(), t));
  }
};

const char* k_config =
    R"({"peft_type": "LORA", "r": 4, "lora_alpha": 8, "target_modules": ["q_proj", "v_proj", "down_proj"],
        "bias": "none", "use_rslora": false, "use_dora": false, "modules_to_save": null,
        "fan_in_fan_out": false, "rank_pattern": {}, "alpha_pattern": {},
        "base_model_name_or_path": "tiny-llama"})";

std::vector<tensor_data> q_v_down(int32_t rank) {
  std::vector<tensor_data> t;
  for (int layer = 0; layer < 2; ++layer) {
    t.push_back(factor(name(layer, "self_attn", "q_proj", 'A'), rank, 16, 0.1f));
    t.push_back(factor(name(layer, "self_attn", "q_proj", 'B'), 16, rank, 0.2f));
    t.push_back(factor(name(layer, "self_attn", "v_proj", 'A'), rank, 16, 0.3f));
    t.push_back(factor(name(layer, "self_attn", "v_proj", 'B'), 8, rank, 0.4f));
  }
  t.push_back(factor(name(1, "mlp", "down_proj", 'A'), rank, 24, 0.5f));
  t.push_back(factor(name(1, "mlp", "down_proj", 'B'), 16, rank, 0.6f));
  return t;
}

// The error message of loading `dir` (which must fail).
std::string refusal(const adapter_dir& d, const model_config& base, int32_t max_rank = 64) {
  auto r = load_lora_adapter(d.dir, base, max_rank);
  REQUIRE_FALSE(r);
  CHECK(r.err().code == "invalid_argument");
  return r.err().message;
}

}  // namespace

TEST_CASE("lora: a PEFT folder is read with its targets, factors and scaling", "[model][lora]") {
  adapter_dir d("ok");
  d.config(k_config);
  d.tensors(q_v_down(4));
  auto a = load_lora_adapter(d.dir, llama_like(), 16);
  REQUIRE(a);
  CHECK(a->rank == 4);
  CHECK(a->scaling == Approx(2.0f));  // lora_alpha / r
  CHECK(a->base_model == "tiny-llama");
  REQUIRE(a->factors.size() == 5);
  const lora_factors& q0 = a->factors[0];
  CHECK(q0.layer == 0);
  CHECK(q0.target == lora_target::q);
  CHECK(q0.in == 16);
  CHECK(q0.out == 16);
  CHECK(q0.a.size() == 4 * 16);
  CHECK(q0.b.size() == 16 * 4);
  CHECK(q0.a[3] == Approx(0.103f));
  const lora_factors& down = a->factors.back();
  CHECK(down.layer == 1);
  CHECK(lora_target_name(down.target) == "down_proj");
  CHECK(down.in == 24);
  CHECK(down.out == 16);

  // rsLoRA: lora_alpha / sqrt(r).
  d.config(R"({"peft_type": "LORA", "r": 4, "lora_alpha": 8, "use_rslora": true})");
  auto rs = load_lora_adapter(d.dir, llama_like(), 16);
  REQUIRE(rs);
  CHECK(rs->scaling == Approx(4.0f));
  // No lora_alpha: peft's default, 8.
  d.config(R"({"r": 4})");
  auto dflt = load_lora_adapter(d.dir, llama_like(), 16);
  REQUIRE(dflt);
  CHECK(dflt->scaling == Approx(2.0f));
}

TEST_CASE("lora: Phi-3's fused projections take fused factors only", "[model][lora]") {
  model_config phi = llama_like();
  phi.architecture = "Phi3ForCausalLM";
  phi.fused_projections = true;
  adapter_dir d("phi");
  d.config(R"({"peft_type": "LORA", "r": 2, "lora_alpha": 4})");
  d.tensors({factor(name(0, "self_attn", "qkv_proj", 'A'), 2, 16, 0.1f),
             factor(name(0, "self_attn", "qkv_proj", 'B'), 32, 2, 0.1f),  // (4 + 2 * 2) * 4
             factor(name(0, "mlp", "gate_up_proj", 'A'), 2, 16, 0.1f),
             factor(name(0, "mlp", "gate_up_proj", 'B'), 48, 2, 0.1f)});
  auto a = load_lora_adapter(d.dir, phi, 16);
  REQUIRE(a);
  CHECK(a->factors.size() == 2);
  d.tensors({factor(name(0, "self_attn", "q_proj", 'A'), 2, 16, 0.1f),
             factor(name(0, "self_attn", "q_proj", 'B'), 16, 2, 0.1f)});
  CHECK_THAT(refusal(d, phi), Catch::Contains("layers.0.q_proj cannot be adapted") &&
                                  Catch::Contains("fuses its projections"));
  d.tensors({factor(name(0, "self_attn", "qkv_proj", 'A'), 2, 16, 0.1f),
             factor(name(0, "self_attn", "qkv_proj", 'B'), 32, 2, 0.1f)});
  CHECK_THAT(refusal(d, llama_like()), Catch::Contains("no fused projection"));
}

TEST_CASE("lora: unsupported adapters are refused naming the field or tensor", "[model][lora]") {
  const model_config base = llama_like();
  adapter_dir d("bad");
  d.tensors(q_v_down(4));
  struct config_case {
    const char* json;
    const char* says;
  };
  for (const config_case& c : {
           config_case{R"({"r": 4, "use_dora": true})", "use_dora is set"},
           config_case{R"({"r": 4, "modules_to_save": ["lm_head"]})", "modules_to_save is set"},
           config_case{R"({"r": 4, "bias": "all"})", "bias must be \"none\""},
           config_case{R"({"r": 4, "fan_in_fan_out": true})", "fan_in_fan_out is set"},
           config_case{R"({"r": 4, "rank_pattern": {"q_proj": 8}})", "rank_pattern is set"},
           config_case{R"({"r": 4, "peft_type": "PREFIX_TUNING"})", "peft_type must be \"LORA\""},
           config_case{R"({"r": 0})", "r must be a positive integer"},
           config_case{R"({"lora_alpha": 16})", "r must be a positive integer"},
           config_case{R"({"r": 4, "lora_alpha": "x"})", "lora_alpha must be a number"},
           config_case{R"([4])", "adapter_config.json is not a JSON object"},
       }) {
    d.config(c.json);
    INFO(c.json);
    CHECK_THAT(refusal(d, base), Catch::Contains(c.says));
  }
  d.config(R"({"r": 32})");
  CHECK_THAT(refusal(d, base, 16), Catch::Contains("r is 32, above --max-lora-rank 16"));

  // Rank in the config and in the factors disagree: the shapes are refused.
  d.config(R"({"r": 8})");
  CHECK_THAT(refusal(d, base), Catch::Contains("layers.0.q_proj has lora_A [4, 16]") &&
                                   Catch::Contains("need [8, 16] and [16, 8]"));

  d.config(R"({"r": 2})");
  struct tensor_case {
    std::vector<tensor_data> tensors;
    const char* says;
  };
  std::vector<tensor_case> cases;
  cases.push_back(
      {{factor(name(0, "self_attn", "q_proj", 'A'), 2, 16, 0.1f)}, "lora_A without lora_B"});
  cases.push_back(
      {{factor("base_model.model.lm_head.lora_A.weight", 2, 16, 0.1f)}, "targets lm_head"});
  cases.push_back({{factor("base_model.model.model.embed_tokens.lora_embedding_A", 2, 32, 0.1f)},
                   "targets the embeddings"});
  cases.push_back({{factor("base_model.model.model.layers.0.mlp.experts.3.gate_proj.lora_A.weight",
                           2, 16, 0.1f)},
                   "experts"});
  cases.push_back({{factor(name(5, "self_attn", "q_proj", 'A'), 2, 16, 0.1f),
                    factor(name(5, "self_attn", "q_proj", 'B'), 16, 2, 0.1f)},
                   "is for layer 5; the base model has 2"});
  cases.push_back(
      {{factor(name(0, "self_attn", "rotary", 'A'), 2, 16, 0.1f)}, "not a supported projection"});
  cases.push_back({{factor(name(0, "self_attn", "k_proj", 'A'), 2, 16, 0.1f),
                    factor(name(0, "self_attn", "k_proj", 'B'), 16, 2, 0.1f)},  // k is 2 heads * 4
                   "need [2, 16] and [8, 2]"});
  for (const tensor_case& c : cases) {
    INFO(c.says);
    d.tensors(c.tensors);
    CHECK_THAT(refusal(d, base), Catch::Contains(c.says));
  }

  // A mixture-of-experts layer's MLP has no dense projection to adapt.
  model_config moe = base;
  moe.num_experts = 4;
  moe.num_experts_per_tok = 2;
  moe.moe_intermediate_size = 8;
  moe.moe_layers = {1, 1};
  d.tensors({factor(name(1, "mlp", "down_proj", 'A'), 2, 24, 0.1f),
             factor(name(1, "mlp", "down_proj", 'B'), 16, 2, 0.1f)});
  CHECK_THAT(refusal(d, moe), Catch::Contains("layer 1 is a mixture of experts"));

  // Weights pickled: refused with how to convert; no weights at all: said so.
  fs::remove(d.dir / "adapter_model.safetensors");
  std::ofstream(d.dir / "adapter_model.bin") << "not read";
  CHECK_THAT(refusal(d, base), Catch::Contains("adapter_model.bin is a pickled PyTorch file"));
  fs::remove(d.dir / "adapter_model.bin");
  CHECK_THAT(refusal(d, base), Catch::Contains("adapter_model.safetensors not found"));
  fs::remove(d.dir / "adapter_config.json");
  CHECK_THAT(refusal(d, base), Catch::Contains("adapter_config.json not found"));
}
