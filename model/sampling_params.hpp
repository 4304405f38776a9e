// Per-request sampling parameters, shared by the sampler (CPU and GPU), the scheduler and the HTTP
// layer. Plain data; the HTTP layer validates ranges before a request reaches the engine.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace coserve {

class compiled_grammar;  // model/structured_output.hpp

// Defaults a server gives what a request leaves out (vLLM's --generation-config: the model's
// generation_config.json, --override-generation-config). Unset: the API's own default.
struct sampling_defaults {
  std::optional<float> temperature, top_p, min_p, repetition_penalty;
  std::optional<int32_t> top_k;
  std::optional<int32_t> max_tokens;  // chat requests without max_tokens (max_new_tokens)
  bool empty() const noexcept {
    return !temperature && !top_p && !min_p && !repetition_penalty && !top_k && !max_tokens;
  }
};

// A pooling request (embeddings, scores): its prompt is computed once, nothing is sampled, and the
// step's output carries the pooled vector (seq_output::embedding) instead of a token.
struct pooling_params {
  bool enabled = false;
  int32_t dimensions = 0;         // keep the first `dimensions` values (Matryoshka); 0: all
  std::optional<bool> normalize;  // unset: as the model's pooling says (its Normalize module)
  // Per prompt token, its token type (a text pair's second text: 1); empty: all 0.
  std::vector<uint8_t> token_types;
};

struct sampling_params {
  float temperature = 1.0f;         // 0 => greedy (argmax); otherwise logits / temperature
  float top_p = 1.0f;               // nucleus mass in (0, 1]; 1 disables
  int32_t top_k = 0;                // <= 0 disables
  float min_p = 0.0f;               // keep tokens with p >= min_p * p_max; 0 disables
  float repetition_penalty = 1.0f;  // HF semantics over prompt + output tokens; 1 disables
  float presence_penalty = 0.0f;    // OpenAI semantics over output tokens
  float frequency_penalty = 0.0f;   // OpenAI semantics over output tokens
  std::vector<std::pair<int32_t, float>> logit_bias;  // added to the raw logits
  std::optional<uint64_t> seed;                       // reproducible sampling when set
  int32_t logprobs = -1;  // -1: none; 0: the sampled token's; N > 0: plus top-N
  // Log-probabilities of the prompt tokens (vLLM's prompt_logprobs) from the raw logits: -1 none;
  // 0: each prompt token's own (with its rank); N > 0: plus the top N. The prefix cache is not
  // read for such a request (cached positions are not computed).
  int32_t prompt_logprobs = -1;
  int32_t max_tokens = 16;  // generated tokens at most
  int32_t min_tokens = 0;   // eos / stop ids are masked until this many are generated
  bool ignore_eos = false;
  std::vector<int32_t> stop_token_ids;  // finish (reason "stop") when one is sampled
  // vLLM's allowed_token_ids: when not empty, only these ids are ever sampled (every other logit
  // is -inf before the penalties and filters).
  std::vector<int32_t> allowed_token_ids;
  std::vector<std::string> stop;  // stop strings, matched on the detokenized text
  bool include_stop_str_in_output = false;
  bool skip_special_tokens = true;
  int32_t n = 1;  // parallel samples of one prompt (copy-on-write fork)
  // Structured output: every sampled token must keep the output inside this grammar (null: none).
  std::shared_ptr<const compiled_grammar> grammar;
  pooling_params pooling;
  // vLLM's cache_salt, hashed (cache_salt_hash): the request's prompt blocks are found in, and
  // enter, the prefix cache only under this salt (its first block chained onto it instead of 0),
  // so requests with different salts, or one with and one without, never share a block. 0: none.
  uint64_t cache_salt = 0;
  // The LoRA adapter the request runs with: 1 + its index among the served adapters
  // (--lora-modules); 0: the base model. Its blocks are cached apart from other adapters'
  // (prefix_cache_salt).
  int32_t lora_id = 0;

  bool greedy() const noexcept { return temperature <= 0.0f; }
};

// A cache_salt string's 64-bit hash (FNV-1a), never 0.
inline uint64_t cache_salt_hash(const std::string& salt) noexcept {
  uint64_t h = 14695981039346656037ull;
  for (unsigned char c : salt) {
    h ^= c;
    h *= 1099511628211ull;
  }
  return h == 0 ? 1 : h;
}

// The parent hash of a request's first KV block: its cache_salt, with its LoRA adapter folded in
// (0: no salt, the base model). Requests share prefix-cache blocks only when both agree.
inline uint64_t prefix_cache_salt(const sampling_params& p) noexcept {
  if (p.lora_id == 0) return p.cache_salt;
  uint64_t h = (p.cache_salt ^ 0x9e3779b97f4a7c15ull) * 1099511628211ull;
  h ^= static_cast<uint64_t>(p.lora_id) * 0xc2b2ae3d27d4eb4full;
  h *= 1099511628211ull;
  return h == 0 ? 1 : h;
}

}  // namespace coserve
