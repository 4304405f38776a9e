// lora — a PEFT LoRA adapter folder (adapter_config.json + adapter_model.safetensors) read and
// checked against the base model it is to run on: which projections of which layers it changes,
// its low-rank factors as fp32, and its scaling (lora_alpha / r, or lora_alpha / sqrt(r) with
// rsLoRA). A projection W x of the base becomes W x + scaling * B (A x), A: [r, in], B: [out, r].
//
// Targets: q_proj, k_proj, v_proj, o_proj, gate_proj, up_proj, down_proj of the decoder layers, and
// the fused qkv_proj / gate_up_proj of Phi-3 (model_config::fused_projections). Refused, with an
// error naming the field or tensor: a pickled adapter_model.bin, another peft_type, DoRA
// (use_dora), bias other than "none", modules_to_save, fan_in_fan_out, rank_pattern /
// alpha_pattern, embedding or lm_head targets, the experts of a mixture-of-experts layer, a rank
// above `max_rank`, and factors whose shapes do not fit the base model.
//
// Threads: none (plain values).
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "base/result.hpp"
#include "model/config.hpp"

namespace coserve {

enum class lora_target : uint8_t { q, k, v, o, gate, up, down, qkv, gate_up };

std::string_view lora_target_name(lora_target t) noexcept;  // "q_proj", ..., "gate_up_proj"

// One projection's factors. a: [rank, in] row-major; b: [out, rank] row-major.
struct lora_factors {
  int32_t layer = 0;
  lora_target target = lora_target::q;
  int32_t in = 0, out = 0, rank = 0;
  std::vector<float> a, b;
};

// The largest rank read (vLLM's --max-lora-rank choices end at 512).
constexpr int32_t k_max_lora_rank = 512;

struct lora_adapter {
  std::filesystem::path dir;
  int32_t rank = 0;  // adapter_config.json's r
  double alpha = 0;
  bool rslora = false;
  float scaling = 0;                  // alpha / rank, or alpha / sqrt(rank) with rsLoRA
  std::string base_model;             // base_model_name_or_path ("" when absent)
  std::vector<lora_factors> factors;  // by layer, then target
  // factors' index per (layer, target), -1 where the adapter leaves the projection as it is.
  std::vector<int32_t> index;
  const lora_factors* find(int32_t layer, lora_target t) const noexcept {
    const size_t i = static_cast<size_t>(layer) * k_lora_targets + static_cast<size_t>(t);
    return i < index.size() && index[i] >= 0 ? &factors[static_cast<size_t>(index[i])] : nullptr;
  }
  static constexpr size_t k_lora_targets = 9;
};

// One served adapter, as vLLM's --lora-modules names it: "name=path", or the JSON form
// {"name": ..., "path": ..., "base_model_name": ...}.
struct lora_module {
  std::string name;
  std::string path;
  std::string base_model_name;  // "" when not given
};
result<lora_module> parse_lora_module(std::string_view text);

// Reads the adapter in `dir` for a base model of config `base`; a rank above min(max_rank,
// k_max_lora_rank) is refused.
result<lora_adapter> load_lora_adapter(const std::filesystem::path& dir, const model_config& base,
                                       int32_t max_rank);

}  // namespace coserve
