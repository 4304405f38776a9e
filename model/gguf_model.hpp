// A GGUF file as a model: the config from its `{arch}.*` metadata, the generation defaults and the
// tokenizer from `tokenizer.ggml.*`, the chat template from `tokenizer.chat_template`, and the
// weights used in place from the mapped file (quantized matrices stay quantized).
//
// Architectures: the general.architecture names of model/architectures.hpp, read by their
// gguf_rules (experts, fused attn_qkv and gate+up ffn_up read as row ranges, attn_q_norm /
// attn_k_norm). llama.cpp's converter stores the Q and K projections of the llama architecture
// with each head's rows interleaved (row 2i is Hugging Face row i, row 2i+1 is row i + D/2) and
// rotates adjacent pairs; the config says so (rope_interleaved) and the forward pass rotates the
// same pairs. Llama 3.1's frequency scaling arrives as the tensor rope_freqs.weight
// (per-frequency divisors).
//
// Tokenizers: "gpt2" (byte-level BPE: tokens, merges and a pre-tokenizer named by
// tokenizer.ggml.pre), "llama" (SentencePiece BPE: tokens and scores; the merges are derived
// from the scores as Hugging Face's converter derives them) and "bert" (WordPiece, BERT's
// normalizer lowercasing as llama.cpp does, [CLS]/[SEP] from tokenizer.ggml.cls_token_id and
// seperator_token_id). Each becomes a tokenizer.json document for our tokenizer. Anything else is
// an error naming the key and value.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "base/result.hpp"
#include "model/config.hpp"
#include "model/gguf.hpp"
#include "model/text/tokenizer/tokenizer.hpp"
#include "model/weights.hpp"

namespace coserve {

result<model_config> gguf_model_config(const gguf_file& f);

// Where Hugging Face's row r of a head of size d sits in a q/k projection stored with interleaved
// RoPE pairs (llama.cpp's llama layout, model_config::rope_interleaved): rows r < d/2 at 2r,
// the others at 2(r - d/2) + 1. The CUDA upload uses it to restore the Hugging Face order.
inline int64_t interleaved_row(int64_t r, int64_t d) noexcept {
  return r < d / 2 ? 2 * r : 2 * (r - d / 2) + 1;
}
result<generation_config> gguf_generation_config(const gguf_file& f);
result<model_weights> load_gguf_weights(std::shared_ptr<const gguf_file> f,
                                        const load_progress& progress = {});

// The tokenizer.json and tokenizer_config.json documents equivalent to the file's tokenizer.
struct gguf_tokenizer_documents {
  std::string tokenizer_json;
  std::string tokenizer_config_json;
};
result<gguf_tokenizer_documents> gguf_tokenizer_json(const gguf_file& f);
result<tokenizer> load_gguf_tokenizer(const gguf_file& f);

// One line for startup logs: "GGUF v3, llama, 111 tensors (Q4_K 61, Q6_K 13, F32 37), 96.0 MiB".
std::string gguf_summary(const gguf_file& f);

// tokenizer.chat_template; an error when the file has none.
result<std::string> gguf_chat_template(const gguf_file& f);

}  // namespace coserve
