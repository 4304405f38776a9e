// Encoder models for embeddings and scores: the BERT and XLM-RoBERTa families (BertModel,
// XLMRobertaModel, RobertaModel and their *ForSequenceClassification cross-encoders), read from a
// Hugging Face folder: config.json, the safetensors weights, and the pooling the folder's
// sentence-transformers files declare (modules.json, the Pooling module's config.json, a Normalize
// module).
//
// The architecture as transformers computes it: embeddings (word + absolute position + token type)
// -> LayerNorm; per layer, bidirectional multi-head attention -> output projection -> residual ->
// LayerNorm (post-norm), then the MLP (GELU, exact or tanh) -> residual -> LayerNorm. RoBERTa-style
// models number positions from pad_token_id + 1. The classification head of a cross-encoder: BERT's
// pooler (tanh over the first token's projection) and classifier, or RoBERTa's classifier.dense
// (tanh) and classifier.out_proj, both on the first token.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "base/result.hpp"
#include "model/cpu_kernels.hpp"
#include "model/sampling_params.hpp"

namespace coserve {

class safetensors_set;

// How a sequence's token vectors become one vector (sentence-transformers' pooling modes).
enum class pooling_type : uint8_t {
  cls,   // the first token's (pooling_mode_cls_token)
  mean,  // the mean over every token, special ones included (pooling_mode_mean_tokens)
  last,  // the last token's (pooling_mode_lasttoken)
};
std::string_view pooling_type_name(pooling_type t) noexcept;

struct pooling_config {
  pooling_type type = pooling_type::cls;
  bool normalize = false;  // L2-normalised after pooling (a Normalize module)
  // What the choice came from, for startup logs ("modules.json: 1_Pooling (mean), 2_Normalize").
  std::string source;
  // sentence_bert_config.json's max_seq_length, or (current releases, which write it there) the
  // tokenizer_config.json model_max_length of a folder with modules.json; 0: none.
  // sentence-transformers truncates inputs to it, and the server takes it as the model's context.
  int32_t max_seq_length = 0;
};

// The pooling of a sentence-transformers folder: modules.json lists its modules (classic
// `sentence_transformers.models.X` types and the module paths of current releases alike);
// the Pooling module's config.json names the mode; a Normalize module turns normalisation on.
// Without modules.json: `fallback` (the architecture's default). The sequence limit
// (max_seq_length) is read either way. Errors name the file and field:
// a pooling mode this server does not compute (max, weighted mean, several at once), a module it
// does not run (Dense, a projection), a malformed file.
result<pooling_config> load_pooling_config(const std::filesystem::path& dir,
                                           const pooling_config& fallback);

// A pooling request's vector from the pooled one: its first `p.dimensions` values (Matryoshka),
// then L2-normalised when p.normalize (unset: `model_normalizes`) says so; the truncation comes
// first, so a shortened vector is a unit vector too.
void finish_pooled_vector(std::vector<float>& v, const pooling_params& p, bool model_normalizes);

// config.json's Matryoshka fields: `matryoshka_dimensions` (the sizes requests may ask for) or
// `is_matryoshka` (any size).
struct matryoshka_info {
  bool enabled = false;
  std::vector<int32_t> dimensions;
};
matryoshka_info read_matryoshka(const std::filesystem::path& dir);

enum class encoder_activation : uint8_t { gelu, gelu_tanh, relu, silu };

struct encoder_config {
  std::string architecture;  // e.g. "BertModel", "XLMRobertaForSequenceClassification"
  std::string model_type;    // "bert", "xlm-roberta", "roberta"
  int32_t hidden_size = 0;
  int32_t intermediate_size = 0;
  int32_t num_hidden_layers = 0;
  int32_t num_attention_heads = 0;
  int32_t vocab_size = 0;
  int32_t max_position_embeddings = 512;
  int32_t type_vocab_size = 2;
  float layer_norm_eps = 1e-12f;
  encoder_activation hidden_act = encoder_activation::gelu;
  int32_t pad_token_id = 0;
  // Positions of a sequence's tokens start here (RoBERTa and XLM-R: pad_token_id + 1; BERT: 0).
  int32_t position_offset = 0;
  // Cross-encoders (*ForSequenceClassification): the classifier's outputs; 0: an embedding model.
  int32_t num_labels = 0;
  // Matryoshka models (config.json's matryoshka_dimensions or is_matryoshka): requests may ask for
  // fewer dimensions. Empty and false: the full vector only.
  std::vector<int32_t> matryoshka_dimensions;
  bool is_matryoshka = false;

  int32_t head_dim() const noexcept { return hidden_size / num_attention_heads; }
  // The longest sequence: the position table less the offset.
  int32_t max_model_len() const noexcept { return max_position_embeddings - position_offset; }
  bool classifier() const noexcept { return num_labels > 0; }
};

// sentence_bert_config.json's do_lower_case in `dir`: sentence-transformers lowercases each input
// text before tokenizing it (false when the file or the field is absent).
bool read_do_lower_case(const std::filesystem::path& dir);

// Whether config.json's architecture is one of the encoders above.
bool is_encoder_architecture(std::string_view architecture);
// The first entry of config.json's `architectures` in `dir` ("" when the file has none, or
// hf_overrides, vLLM's --hf-overrides merged in first, is not a JSON object).
std::string read_architecture(const std::filesystem::path& dir, std::string_view hf_overrides = {});

// Parses config.json text; `origin` names the file in error messages.
result<encoder_config> parse_encoder_config(std::string_view json, std::string_view origin);
result<encoder_config> load_encoder_config(const std::filesystem::path& dir);

struct encoder_layer {
  weight_ref q, k, v, o;        // [hidden, hidden]
  std::vector<float> qkv_bias;  // [3 hidden]: q, k, v
  std::vector<float> o_bias;
  std::vector<float> attn_norm_w, attn_norm_b;  // attention.output.LayerNorm
  weight_ref up;                                // intermediate.dense [inter, hidden]
  std::vector<float> up_bias;
  weight_ref down;  // output.dense [hidden, inter]
  std::vector<float> down_bias;
  std::vector<float> out_norm_w, out_norm_b;  // output.LayerNorm
};

struct encoder_weights {
  encoder_config config;
  weight_ref word_embeddings;        // [vocab, hidden]
  weight_ref position_embeddings;    // [max_position_embeddings, hidden]
  weight_ref token_type_embeddings;  // [type_vocab_size, hidden] (empty when type_vocab_size 0)
  std::vector<float> embed_norm_w, embed_norm_b;
  std::vector<encoder_layer> layers;
  // The classification head (config.classifier()): a dense tanh layer on the first token (BERT's
  // pooler or RoBERTa's classifier.dense), then the output layer [num_labels, hidden].
  weight_ref head_dense;
  std::vector<float> head_dense_bias;
  weight_ref head_out;
  std::vector<float> head_out_bias;
  std::shared_ptr<const safetensors_set> files;  // what the weight_refs point into
};

// Loads config.json and the safetensors of `dir`. Tensor names with or without the model's prefix
// ("bert.", "roberta."); errors name the file and tensor.
result<encoder_weights> load_encoder_weights(const std::filesystem::path& dir);

}  // namespace coserve
