#include "model/encoder_executor.hpp"

#include <algorithm>
#include <cmath>
#include <string>
#include <utility>

namespace coserve {

result<std::unique_ptr<encoder_executor>> encoder_executor::load(
    const std::filesystem::path& dir, const encoder_executor_options& opts) {
  auto w = load_encoder_weights(dir);
  if (!w) return w.err();
  pooling_config fallback;
  fallback.type = pooling_type::cls;
  fallback.normalize = true;
  fallback.source = "no sentence-transformers modules.json: the first token, normalised";
  auto p = load_pooling_config(dir, fallback);
  if (!p) return p.err();
  return std::unique_ptr<encoder_executor>(
      new encoder_executor(std::move(*w), std::move(*p), opts));
}

encoder_executor::encoder_executor(encoder_weights w, pooling_config p,
                                   const encoder_executor_options& opts)
    : weights_(std::move(w)),
      pooling_(std::move(p)),
      opts_(opts),
      pool_((opts.num_threads > 0 ? opts.num_threads : physical_cores()) - 1),
      forward_(weights_, pool_) {
  max_model_len_ = weights_.config.max_model_len();
  if (pooling_.max_seq_length > 0)
    max_model_len_ = std::min(max_model_len_, pooling_.max_seq_length);
  if (opts.max_model_len > 0) max_model_len_ = std::min(max_model_len_, opts.max_model_len);
}

executor_info encoder_executor::info() const {
  executor_info i;
  i.num_kv_blocks = opts_.num_kv_blocks;
  i.block_size = opts_.block_size;
  i.vocab_size = weights_.config.vocab_size;
  i.max_model_len = max_model_len_;
  i.device = "cpu encoder (" + std::to_string(pool_.num_threads()) + " threads)";
  const encoder_config& c = weights_.config;
  i.task = c.classifier() ? "score" : "embed";
  i.pooled_size = c.classifier() ? c.num_labels : c.hidden_size;
  i.matryoshka = !c.classifier() && c.is_matryoshka;
  i.matryoshka_dimensions = c.matryoshka_dimensions;
  i.whole_prompts = true;
  return i;
}

result<step_result> encoder_executor::execute(const step_plan& plan) {
  struct drop_finished {
    encoder_executor* self;
    const step_plan& plan;
    ~drop_finished() {
      for (seq_id_t id : plan.finished) self->seqs_.erase(id);
    }
  } dropper{this, plan};
  for (const new_seq& n : plan.new_seqs) seqs_[n.seq_id] = n.params.pooling;
  step_result out;
  out.step_id = plan.step_id;
  std::vector<encoder_input> batch;
  std::vector<const pooling_params*> params;
  batch.reserve(plan.seqs.size());
  for (const scheduled_seq& s : plan.seqs) {
    auto it = seqs_.find(s.seq_id);
    if (it == seqs_.end())
      return make_error("internal_error", "sequence " + std::to_string(s.seq_id) +
                                              " was never registered with the encoder");
    const pooling_params& p = it->second;
    if (!p.enabled)
      return make_error("invalid_request",
                        "an encoder model computes embeddings and scores only; it generates no "
                        "tokens");
    if (s.start_pos != 0 || !s.sample || s.num_draft != 0)
      return make_error("internal_error",
                        "the encoder needs each prompt whole in one step (sequence " +
                            std::to_string(s.seq_id) + " was scheduled from position " +
                            std::to_string(s.start_pos) + ")");
    if (int64_t(s.tokens.size()) > max_model_len_)
      return make_error("invalid_request", "a sequence of " + std::to_string(s.tokens.size()) +
                                               " tokens is longer than the model's " +
                                               std::to_string(max_model_len_));
    if (!p.token_types.empty() && p.token_types.size() != s.tokens.size())
      return make_error("internal_error", "token types do not cover the prompt");
    encoder_input in;
    in.tokens = s.tokens.data();
    in.num_tokens = int32_t(s.tokens.size());
    in.token_types = p.token_types.empty() ? nullptr : p.token_types.data();
    batch.push_back(in);
    params.push_back(&p);
  }
  if (batch.empty()) return out;
  if (auto r = forward_.run(batch); !r) return r.err();
  out.outputs.reserve(batch.size());
  for (size_t i = 0; i < batch.size(); ++i) {
    seq_output o;
    o.seq_id = plan.seqs[i].seq_id;
    if (weights_.config.classifier()) {
      o.embedding = forward_.classify(i);
    } else {
      o.embedding = forward_.pool(i, pooling_.type);
      finish_pooled_vector(o.embedding, *params[i], pooling_.normalize);
    }
    out.outputs.push_back(std::move(o));
  }
  return out;
}

}  // namespace coserve
