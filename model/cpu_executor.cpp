#include "model/cpu_executor.hpp"

#include <algorithm>
#include <fstream>
#include <set>
#include <string>
#include <thread>

namespace coserve {
namespace {

// Physical cores: distinct thread-sibling sets in sysfs (logical CPUs when sysfs has none).
int32_t physical_cores() {
  std::set<std::string> cores;
  for (int cpu = 0;; ++cpu) {
    std::ifstream f("/sys/devices/system/cpu/cpu" + std::to_string(cpu) + "/topology/thread_siblings_list");
    if (!f) break;
    std::string s;
    std::getline(f, s);
    cores.insert(s);
  }
  const int32_t logical = int32_t(std::thread::hardware_concurrency());
  if (cores.empty()) return std::max(1, logical);
  return std::max<int32_t>(1, int32_t(cores.size()));
}

int32_t default_workers(int32_t asked) { return (asked > 0 ? asked : physical_cores()) - 1; }

}  // namespace

cpu_executor::cpu_executor(model_weights weights, generation_config gen, const cpu_executor_options& opts)
    : weights_(std::move(weights)),
      gen_(std::move(gen)),
      opts_(opts),
      pool_(default_workers(opts.num_threads)),
      cache_(weights_.config.num_hidden_layers, opts.num_kv_blocks, opts.block_size,
             weights_.config.num_key_value_heads, weights_.config.head_dim, opts.kv_cache_dtype),
      forward_(weights_, pool_) {
  if (opts_.max_model_len <= 0 || opts_.max_model_len > weights_.config.max_position_embeddings)
    opts_.max_model_len = weights_.config.max_position_embeddings;
  forward_.set_bf16_activations(opts_.bf16_activations);
}

result<std::unique_ptr<cpu_executor>> cpu_executor::create(model_weights weights, generation_config gen,
                                                           const cpu_executor_options& opts) {
  if (opts.num_kv_blocks <= 0 || opts.block_size <= 0)
    return make_error("invalid_argument", "cpu executor: num_kv_blocks and block_size must be positive");
  if (gen.eos_token_ids.empty()) gen.eos_token_ids = weights.config.eos_token_ids;
  return std::unique_ptr<cpu_executor>(new cpu_executor(std::move(weights), std::move(gen), opts));
}

result<std::unique_ptr<cpu_executor>> cpu_executor::load(const std::string& dir, const cpu_executor_options& opts,
                                                         const load_progress& progress) {
  auto w = load_weights(dir, progress);
  if (!w) return w.err();
  auto g = load_generation_config(dir);
  if (!g) return g.err();
  auto made = create(std::move(*w), std::move(*g), opts);
  if (!made || opts.draft_model_dir.empty()) return made;
  cpu_executor& ex = **made;
  auto dw = load_weights(opts.draft_model_dir, progress);
  if (!dw) return error{dw.err().code, "draft model " + opts.draft_model_dir + ": " + dw.err().message, "model"};
  const model_config& dc = dw->config;
  if (dc.vocab_size != ex.weights_.config.vocab_size)
    return error{"invalid_argument",
                 "--speculative-config: 'model' " + opts.draft_model_dir + " has a vocabulary of " +
                     std::to_string(dc.vocab_size) + " tokens; the model's has " +
                     std::to_string(ex.weights_.config.vocab_size),
                 "model"};
  if (dc.max_position_embeddings < ex.opts_.max_model_len)
    return error{"invalid_argument",
                 "--speculative-config: 'model' " + opts.draft_model_dir + " has a context of " +
                     std::to_string(dc.max_position_embeddings) + " tokens, less than max_model_len " +
                     std::to_string(ex.opts_.max_model_len),
                 "model"};
  ex.draft_ = std::make_unique<draft_model>(std::move(*dw), ex.cache_.num_blocks(), ex.cache_.block_size(),
                                            ex.cache_.type(), ex.pool_);
  ex.draft_->forward.set_bf16_activations(ex.opts_.bf16_activations);
  return made;
}

executor_info cpu_executor::info() const {
  executor_info i;
  i.num_kv_blocks = cache_.num_blocks();
  i.block_size = cache_.block_size();
  i.vocab_size = weights_.config.vocab_size;
  i.max_model_len = opts_.max_model_len;
  i.verifies_proposals = true;
  i.device = "cpu (" + std::to_string(pool_.num_threads()) + " threads, " + cpu_isa() + ", kv " +
             std::string(dtype_name(cache_.type())) + (forward_.bf16_activations() && weights_.lm_head.type == dtype::bf16 ? ", bf16 activations" : "") +
             (draft_ ? ", draft model " + std::to_string(draft_->weights.config.num_hidden_layers) + " layers" : "") + ")";
  return i;
}

result<step_result> cpu_executor::execute(const step_plan& plan) {
  result<step_result> r = run_step(plan);
  for (seq_id_t id : plan.finished) seqs_.erase(id);
  return r;
}

result<step_result> cpu_executor::run_step(const step_plan& plan) {
  draft_q_.clear();
  for (const new_seq& ns : plan.new_seqs) {
    seqs_.erase(ns.seq_id);
    seq_state st{sampling_state(ns.params, ns.seed, ns.prompt_ids, ns.output_ids, gen_.eos_token_ids), -1};
    if (!ns.output_ids.empty()) st.last_token = ns.output_ids.back();
    seqs_.emplace(ns.seq_id, std::move(st));
  }
  for (auto [src, dst] : plan.block_copies)
    if (!cache_.copy_block(src, dst) || (draft_ && !draft_->cache.copy_block(src, dst)))
      return make_error("invalid_argument", "block copy " + std::to_string(src) + " -> " + std::to_string(dst) +
                                                " outside the cache");

  // Resolve k_token_from_last_step and lay out the forward batch.
  std::vector<std::vector<int32_t>> inputs(plan.seqs.size());
  std::vector<forward_seq> batch(plan.seqs.size());
  for (size_t i = 0; i < plan.seqs.size(); ++i) {
    const scheduled_seq& s = plan.seqs[i];
    auto it = seqs_.find(s.seq_id);
    if (it == seqs_.end())
      return make_error("invalid_argument", "sequence " + std::to_string(s.seq_id) + " was never registered");
    inputs[i] = s.tokens;
    for (int32_t& t : inputs[i]) {
      if (t != k_token_from_last_step) continue;
      if (it->second.last_token < 0)
        return make_error("invalid_argument", "sequence " + std::to_string(s.seq_id) + " has no token from a last step");
      t = it->second.last_token;
    }
    if (s.start_pos + int32_t(s.tokens.size()) > opts_.max_model_len)
      return make_error("invalid_argument", "sequence " + std::to_string(s.seq_id) + " exceeds max_model_len " +
                                                std::to_string(opts_.max_model_len));
    if (s.num_draft < 0 || s.num_draft >= int32_t(s.tokens.size()) || (s.num_draft > 0 && !s.sample))
      return make_error("invalid_argument", "sequence " + std::to_string(s.seq_id) + " has " +
                                                std::to_string(s.num_draft) + " draft tokens in a slice of " +
                                                std::to_string(s.tokens.size()));
    batch[i] = forward_seq{inputs[i].data(), int32_t(inputs[i].size()), s.start_pos, &s.block_table, s.sample,
                           1 + s.num_draft};
  }
  if (draft_) {
    if (auto r = run_draft(batch, inputs, plan); !r) return r.err();
  } else {
    for (const auto& in : inputs)
      if (std::find(in.begin(), in.end(), k_token_from_draft) != in.end())
        return make_error("invalid_argument", "a plan asks for draft proposals, and there is no draft model");
  }
  if (auto r = forward_.run(batch, cache_, false, logits_); !r) return r.err();

  // Sampling: each row has its own state, so rows sample in parallel on the forward pass's pool.
  // A sequence with proposals verifies them in order on its 1 + num_draft rows.
  struct sampled {
    seq_state* st;
    const scheduled_seq* seq;
    const std::vector<int32_t>* input;  // the tokens computed (proposals filled in)
    const std::vector<std::vector<float>>* draft_q;  // the draft's distributions (sampled draft proposals)
    size_t first_row;
    std::vector<seq_output> outs;
  };
  std::vector<sampled> rows;
  size_t next_row = 0;
  for (size_t i = 0; i < plan.seqs.size(); ++i) {
    const scheduled_seq& s = plan.seqs[i];
    if (!s.sample) continue;
    const auto q = draft_q_.find(s.seq_id);
    rows.push_back({&seqs_.at(s.seq_id), &s, &inputs[i], q == draft_q_.end() ? nullptr : &q->second, next_row, {}});
    next_row += size_t(1 + s.num_draft);
  }
  const size_t vocab = size_t(weights_.config.vocab_size);
  pool_.parallel_for(int64_t(rows.size()), [&](int64_t r) {
    sampled& sm = rows[size_t(r)];
    seq_state& st = *sm.st;
    const scheduled_seq& s = *sm.seq;
    const std::vector<int32_t>& in = *sm.input;
    const size_t draft_at = in.size() - size_t(s.num_draft);
    for (int32_t j = 0; j <= s.num_draft; ++j) {
      std::span<const float> logits(logits_.data() + (sm.first_row + size_t(j)) * vocab, vocab);
      bool accepted = false;
      const std::vector<float>* q = nullptr;
      if (j < s.num_draft && sm.draft_q != nullptr && size_t(j) < sm.draft_q->size()) q = &(*sm.draft_q)[size_t(j)];
      sample_output so = j >= s.num_draft ? sample_token(logits, st.sampling)
                         : q != nullptr   ? verify_token_q(logits, st.sampling, in[draft_at + size_t(j)], *q, accepted)
                                          : verify_token(logits, st.sampling, in[draft_at + size_t(j)], accepted);
      st.sampling.accept(so.token);
      st.last_token = so.token;
      seq_output o;
      o.seq_id = s.seq_id;
      o.token = so.token;
      o.logprob = so.logprob;
      o.top_logprobs = std::move(so.top_logprobs);
      if (opts_.return_logits) o.logits.assign(logits.begin(), logits.end());
      sm.outs.push_back(std::move(o));
      if (j < s.num_draft && !accepted) break;
    }
  });
  step_result out;
  out.step_id = plan.step_id;
  out.outputs.reserve(rows.size());
  for (sampled& sm : rows)
    for (seq_output& o : sm.outs) out.outputs.push_back(std::move(o));
  return out;
}

result<void> cpu_executor::run_draft(const std::vector<forward_seq>& batch, std::vector<std::vector<int32_t>>& inputs,
                                     const step_plan& plan) {
  draft_model& dm = *draft_;
  // 1. Every sequence's tokens up to its first draft proposal (all of them for the others), with
  //    the draft's logits at that point for sequences it proposes for.
  std::vector<forward_seq> first(batch.size());
  std::vector<size_t> proposing;  // batch indices, in order
  std::vector<int32_t> proposal_at(batch.size(), -1);  // index into inputs[i] of the first proposal
  for (size_t i = 0; i < batch.size(); ++i) {
    const scheduled_seq& s = plan.seqs[i];
    int32_t n = batch[i].num_tokens;
    if (s.num_draft > 0 && inputs[i][size_t(n - s.num_draft)] == k_token_from_draft) {
      n -= s.num_draft;
      proposal_at[i] = n;
      proposing.push_back(i);
    }
    first[i] = forward_seq{inputs[i].data(), n, s.start_pos, &s.block_table, proposal_at[i] >= 0, 1};
  }
  if (auto r = dm.forward.run(first, dm.cache, false, dm.logits); !r) return r;
  // 2. Proposal j of each sequence: the argmax of the draft's last logits, then computed into the
  //    draft's cache (its logits give proposal j + 1).
  const size_t vocab = size_t(dm.weights.config.vocab_size);
  for (int32_t j = 0; !proposing.empty(); ++j) {
    std::vector<forward_seq> step;
    std::vector<size_t> next;
    for (size_t r = 0; r < proposing.size(); ++r) {
      const size_t i = proposing[r];
      const float* l = dm.logits.data() + r * vocab;
      // Greedy requests take the draft's argmax; sampled ones draw from the draft's distribution
      // (kept for the acceptance rule).
      seq_state& st = seqs_.at(plan.seqs[i].seq_id);
      int32_t tok = 0;
      if (st.sampling.params.greedy()) {
        tok = int32_t(std::max_element(l, l + vocab) - l);
      } else {
        auto& qs = draft_q_[plan.seqs[i].seq_id];
        if (j == 0) qs.clear();
        qs.emplace_back();
        tok = draft_sample(std::span<const float>(l, vocab), st.sampling.params, st.sampling.rng, qs.back());
      }
      const size_t at = size_t(proposal_at[i] + j);
      inputs[i][at] = tok;
      const bool more = j + 1 < plan.seqs[i].num_draft;
      step.push_back(forward_seq{inputs[i].data() + at, 1, plan.seqs[i].start_pos + int32_t(at),
                                 &plan.seqs[i].block_table, more, 1});
      if (more) next.push_back(i);
    }
    // Computing the last proposal too keeps the draft's cache whole when all of them are accepted.
    if (auto r = dm.forward.run(step, dm.cache, false, dm.logits); !r) return r;
    proposing = std::move(next);
  }
  return {};
}

}  // namespace coserve
