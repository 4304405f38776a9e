// The CUDA executor's issue() and its steps: a step's host planning (input ids with the plan's
// placeholders resolved, the draft's passes, prompt logprob rows, the sampled rows and their
// sampling metadata, gathered in one step_host), then its enqueues: the draft's passes, and either
// a decode graph's replay or the eager batch's metadata upload, forward pass and output copies.
// Over 500 lines: one function per step of issue(), in the order it runs them.
#include <algorithm>
#include <string>

#include "gpu/gpu_executor_impl.hpp"
#include "gpu/metadata_packer.hpp"
#include "gpu/nvtx.hpp"

namespace coserve::gpu::detail {

namespace {

// Whether every token the grammar mask allows is one of `a` or `b`.
bool grammar_allows_only(std::span<const uint32_t> mask, const std::vector<int32_t>& a,
                         const std::vector<int32_t>& b) {
  std::vector<uint32_t> rest(mask.begin(), mask.end());
  for (const auto* ids : {&a, &b})
    for (int32_t t : *ids)
      if (t >= 0 && size_t(t) / 32 < rest.size()) rest[size_t(t) / 32] &= ~(1u << (t % 32));
  return std::all_of(rest.begin(), rest.end(), [](uint32_t w) { return w == 0; });
}

}  // namespace

result<std::pair<fi_step, size_t>> gpu_executor::pack_fi(const batch_plan& p, frame& f, size_t used,
                                                         const void* dev,
                                                         const int32_t* cu_seqlens) {
  fi_options fo = fi_plan_options(false);
  auto r = plan_flashinfer(p, fo, fi_plan_);
  if (r && fi_plan_.tmp_rows() > k_fi_tmp_rows) {  // a split beyond the workspace: plan it unsplit
    fo.disable_split_kv = true;
    r = plan_flashinfer(p, fo, fi_plan_);
  }
  if (!r) return r.err();
  const fi_offsets at = fi_exact_offsets(used, fi_plan_);
  if (auto w = write_fi_schedule(
          fi_plan_, at,
          std::span<std::byte>(static_cast<std::byte*>(f.meta.get()), f.meta.bytes()));
      !w)
    return w.err();
  return std::pair<fi_step, size_t>{fi_step_at(fi_plan_, at, dev, cu_seqlens), at.end};
}

bool gpu_executor::penalty_row_in_step(seq_state& st, const step_plan& plan,
                                       std::vector<int32_t>& resets,
                                       std::vector<penalty_count_entry>& entries) {
  if (penalty_counts_.empty()) return false;
  if (st.penalty_synced && st.penalty_row >= 0) return true;
  // The row is written from the host's history, which lacks a token still being sampled.
  if (st.pending() > 0) return false;
  if (st.penalty_row < 0) {
    if (free_penalty_rows_
            .empty())  // taken from a sequence this step does not run (at most max_num_seqs do)
      for (auto& [id, other] : seqs_) {
        if (other->penalty_row < 0 ||
            std::any_of(plan.seqs.begin(), plan.seqs.end(),
                        [id = id](const scheduled_seq& q) { return q.seq_id == id; }))
          continue;
        free_penalty_rows_.push_back(other->penalty_row);
        other->penalty_row = -1;
        other->penalty_synced = false;
        break;
      }
    if (free_penalty_rows_.empty()) return false;
    st.penalty_row = free_penalty_rows_.back();
    free_penalty_rows_.pop_back();
  }
  resets.push_back(st.penalty_row);
  st.penalties.device_entries(st.penalty_row, entries);
  return true;
}

result<void> gpu_executor::issue(const step_plan& plan, launched_step& rec) {
  // The calling thread may not be the one that created the executor: select our device.
  COSERVE_CUDA_TRY(cuda_check(cudaSetDevice(opts_.device), "cudaSetDevice"));
  if (tp_group_ && tp_group_->failed())
    return make_error(k_executor_fatal,
                      "gpu: tensor parallel group failed: " + tp_group_->failure());
  COSERVE_CUDA_TRY(register_new_seqs(plan));
  cudaStream_t s = stream_.get();
  const step_events& ev = events_[next_events_];
  COSERVE_CUDA_TRY(ev.start.record(s));
  rec.events = next_events_;
  next_events_ = (next_events_ + 1) % 3;
  COSERVE_CUDA_TRY(copy_blocks(plan, s));
  if (plan.seqs.empty()) return ev.end.record(s);

  // Host planning: nothing below is enqueued until the draft's passes.
  step_host hs;
  COSERVE_CUDA_TRY(resolve_inputs(plan, hs));
  COSERVE_CUDA_TRY(plan_draft_passes(plan, hs, rec));
  COSERVE_CUDA_TRY(plan_prompt_logprobs(plan, hs, rec));
  COSERVE_CUDA_TRY(plan_sample_rows(plan, hs));
  COSERVE_CUDA_TRY(plan_sampling(plan, hs, rec));

  COSERVE_CUDA_TRY(run_draft_passes(plan, hs, rec, s));
  if (const int32_t bucket =
          is_graph_step(plan, hs) ? bucket_for(buckets_, int32_t(plan.seqs.size())) : 0;
      bucket > 0) {
    nvtx_range gr("graph replay");
    auto replayed = replay_graph(bucket, plan, hs, rec, ev, s);
    if (!replayed) return std::move(replayed).err();
    if (*replayed) {
      commit_rows(plan, hs, rec);
      return {};
    }
  }

  auto pl = plan_eager_batch(plan);
  if (!pl) return std::move(pl).err();
  const batch_plan& p = *pl;
  frame& f = frames_[rec.frame];
  auto packed = pack_metadata(p, hs, f);
  if (!packed) return std::move(packed).err();
  COSERVE_CUDA_TRY(upload_metadata(*packed, hs, f, s));
  COSERVE_CUDA_TRY(run_forward(p, *packed, f, rec, s));
  COSERVE_CUDA_TRY(download_outputs(p, hs, f, rec, s));
  COSERVE_CUDA_TRY(ev.end.record(s));
  commit_rows(plan, hs, rec);
  return {};
}

result<void> gpu_executor::register_new_seqs(const step_plan& plan) {
  const model_config& c = w_.config;
  for (const new_seq& n : plan.new_seqs) {
    auto st = std::make_shared<seq_state>();
    st->params = n.params;
    st->seed = n.seed;
    if (st->params.grammar) st->matcher.emplace(st->params.grammar);
    if (n.params.prompt_logprobs >= 0 && n.output_ids.empty() && n.prompt_ids.size() > 1)
      st->prompt = n.prompt_ids;
    st->penalties = penalty_edits(n.params, n.prompt_ids, c.vocab_size);
    for (int32_t t : n.output_ids) st->accept(t);
    st->launched = st->generated;
    if (auto it = seqs_.find(n.seq_id); it != seqs_.end()) {  // registered again (after preemption)
      st->slot = it->second->slot;
      // Its count row is rewritten from the new history before it is used again.
      if (it->second->penalty_row >= 0) {
        if (st->has_penalties())
          st->penalty_row = it->second->penalty_row;
        else
          free_penalty_rows_.push_back(it->second->penalty_row);
      }
    } else {
      if (free_slots_.empty())
        return make_error("resource_exhausted", "gpu: more live sequences than last-token slots");
      st->slot = free_slots_.back();
      free_slots_.pop_back();
    }
    seqs_[n.seq_id] = std::move(st);
  }
  return {};
}

result<void> gpu_executor::copy_blocks(const step_plan& plan, cudaStream_t s) {
  const model_config& c = w_.config;
  // Copy-on-write block copies, every layer, K and V, before the forward (every rank its slice).
  for (auto [src, dst] : plan.block_copies)
    if (src < 0 || dst < 0 || src >= info_.num_kv_blocks || dst >= info_.num_kv_blocks)
      return make_error("invalid_argument", "gpu: block copy out of range");
  for (auto [src, dst] : plan.block_copies) {
    COSERVE_CUDA_TRY(kv_.copy_block(c.num_hidden_layers, src, dst, s));
    if (draft_) {
      COSERVE_CUDA_TRY(draft_->kv().copy_block(draft_->config().num_hidden_layers, src, dst, s));
      draft_->map().note_copy(src, dst);
    }
  }
  if (has_peers() && !plan.block_copies.empty()) {
    peer_job j;
    j.block_copies = plan.block_copies;
    if (auto r = post_to_peers(j); !r) return fail_group(std::move(r).err());
  }
  return {};
}

result<void> gpu_executor::resolve_inputs(const step_plan& plan, step_host& hs) const {
  const model_config& c = w_.config;
  // Input ids: literal, or for a decode whose previous token the host has not collected yet, a
  // reference -(slot + 1) to the sequence's entry in the device's last-token buffer.
  for (const scheduled_seq& q : plan.seqs) {
    auto it = seqs_.find(q.seq_id);
    if (it == seqs_.end())
      return make_error("invalid_argument", "gpu: unknown sequence " + std::to_string(q.seq_id));
    seq_state& st = *it->second;
    if (q.num_draft < 0 || q.num_draft >= int32_t(q.tokens.size()) ||
        (q.num_draft > 0 && !q.sample) || q.num_draft > opts_.num_speculative_tokens)
      return make_error("invalid_argument",
                        "gpu: sequence " + std::to_string(q.seq_id) + " has " +
                            std::to_string(q.num_draft) + " proposals in a slice of " +
                            std::to_string(q.tokens.size()) + " (at most " +
                            std::to_string(opts_.num_speculative_tokens) + " per step)");
    if (q.num_draft > 0 && st.matcher)
      return make_error("unsupported", "gpu: proposals for a sequence under a grammar");
    for (int32_t t : q.tokens) {
      if (t == k_token_from_last_step) {
        if (st.pending() > 0) {
          hs.ids.push_back(-(st.slot + 1));
          continue;
        }
        t = st.last_token;
      }
      if (t == k_token_from_draft) {
        if (!draft_)
          return make_error("invalid_argument",
                            "gpu: a plan asks for draft-model proposals; the CUDA executor has no "
                            "draft model");
        hs.placeholders.push_back(hs.ids.size());  // a pick of the draft (below)
        hs.ids.push_back(0);
        continue;
      }
      if (t < 0 || t >= c.vocab_size)
        return make_error("invalid_argument", "gpu: token id out of range");
      hs.ids.push_back(t);
    }
    for (int32_t b : q.block_table)
      if (b < 0 || b >= info_.num_kv_blocks)
        return make_error("invalid_argument", "gpu: block id out of range");
    hs.states.push_back(&st);
  }
  return {};
}

result<void> gpu_executor::plan_draft_passes(const step_plan& plan, step_host& hs,
                                             launched_step& rec) const {
  // Draft model: its passes for this step, their picks' slots in place of the proposals' ids.
  if (!draft_) return {};
  // Per sequence: literal ids, k_token_from_last_step for a previous token still on the device,
  // k_token_from_draft for a proposal.
  std::vector<int32_t> marked = hs.ids;
  for (int32_t& t : marked)
    if (t < 0) t = k_token_from_last_step;
  for (size_t at : hs.placeholders) marked[at] = k_token_from_draft;
  std::vector<std::vector<int32_t>> inputs;
  for (size_t i = 0, at = 0; i < plan.seqs.size(); at += plan.seqs[i].tokens.size(), ++i)
    inputs.emplace_back(marked.begin() + ptrdiff_t(at),
                        marked.begin() + ptrdiff_t(at + plan.seqs[i].tokens.size()));
  auto ds = plan_draft(plan, inputs, draft_->map(), pick_slot_base_, opts_.num_speculative_tokens,
                       opts_.max_num_tokens);
  if (!ds) return std::move(ds).err();
  hs.drafted = std::move(ds.value());
  std::vector<size_t> seq_at(plan.seqs.size() + 1, 0);
  for (size_t i = 0; i < plan.seqs.size(); ++i)
    seq_at[i + 1] = seq_at[i] + plan.seqs[i].tokens.size();
  for (const draft_step::proposer& pr : hs.drafted->proposers)
    for (int32_t j = 0; j < pr.count; ++j)
      hs.ids[seq_at[pr.seq] + size_t(pr.first + j)] = -(pr.slot0 + j + 1);
  for (size_t i = 0; i < plan.seqs.size(); ++i) {
    const scheduled_seq& q = plan.seqs[i];
    launched_step::model_run mr{seqs_.at(q.seq_id),
                                q.seq_id,
                                q.block_table,
                                q.start_pos,
                                std::vector<int32_t>(inputs[i]),
                                0};
    for (const draft_step::proposer& pr : hs.drafted->proposers)
      if (pr.seq == i) mr.pick0 = pr.slot0 - pick_slot_base_;
    rec.model_runs.push_back(std::move(mr));
  }
  for (const draft_step::proposer& pr : hs.drafted->proposers) {
    const scheduled_seq& q = plan.seqs[pr.seq];
    rec.draft_runs.push_back(
        {q.seq_id, q.block_table, q.start_pos + pr.first, pr.count, pr.slot0 - pick_slot_base_});
    rec.num_picks = std::max(rec.num_picks, pr.slot0 - pick_slot_base_ + pr.count);
  }
  return {};
}

result<void> gpu_executor::plan_prompt_logprobs(const step_plan& plan, step_host& hs,
                                                launched_step& rec) {
  const model_config& c = w_.config;
  // Prompt logprob rows: each position of a chunk below the sequence's last prompt position (whose
  // logits give its first output) scores the prompt token after it. Chunks arrive in order.
  for (size_t i = 0, at = 0; i < plan.seqs.size(); at += plan.seqs[i].tokens.size(), ++i) {
    const scheduled_seq& q = plan.seqs[i];
    seq_state& st = *hs.states[i];
    if (st.prompt.empty() || q.start_pos >= int32_t(st.prompt.size()) - 1) continue;
    if (q.num_draft > 0)
      return make_error("invalid_argument",
                        "gpu: sequence " + std::to_string(q.seq_id) +
                            " verifies proposals before its prompt logprobs are complete");
    const int32_t end =
        std::min(q.start_pos + int32_t(q.tokens.size()), int32_t(st.prompt.size()) - 1);
    if (q.start_pos != st.prompt_next)
      continue;  // as the CPU executor: only a chunk that follows on
    for (int32_t pos = q.start_pos; pos < end; ++pos) {
      const int32_t target = st.prompt[size_t(pos) + 1];
      if (target < 0 || target >= c.vocab_size)
        return make_error("invalid_argument", "gpu: token id out of range");
      hs.prompt_tokens.push_back(int32_t(at) + (pos - q.start_pos));
      hs.prompt_targets.push_back(target);
      rec.prompt_rows.emplace_back(seqs_.at(q.seq_id), pos);
    }
    st.prompt_next = end;
    hs.prompt_top_n =
        std::max(hs.prompt_top_n, std::min(st.params.prompt_logprobs, k_prompt_logprobs_max_top));
  }
  return {};
}

result<void> gpu_executor::plan_sample_rows(const step_plan& plan, step_host& hs) const {
  const model_config& c = w_.config;
  for (size_t i = 0; i < plan.seqs.size(); ++i) {
    const scheduled_seq& q = plan.seqs[i];
    if (!q.sample) continue;
    hs.sample_seqs.push_back(int32_t(i));
    const size_t first_draft = q.tokens.size() - size_t(q.num_draft);
    int32_t pick0 = -1;
    if (hs.drafted)
      for (const draft_step::proposer& pr : hs.drafted->proposers)
        if (pr.seq == i) pick0 = pr.slot0 - pick_slot_base_;
    for (int32_t j = 0; j <= q.num_draft; ++j) {
      const bool last = j == q.num_draft;
      if (!last && pick0 >= 0)
        hs.sample_rows.push_back({int32_t(i), j, c.vocab_size, pick0 + j});
      else
        hs.sample_rows.push_back(
            {int32_t(i), j, last ? -1 : q.tokens[first_draft + size_t(j)], -1});
    }
  }
  if (int32_t(hs.sample_rows.size()) > max_rows_)
    return make_error("invalid_argument", "gpu: step exceeds max_num_tokens or max_num_seqs");
  return {};
}

int32_t gpu_executor::add_allowed_tokens(seq_state& st, size_t row, int32_t generated,
                                         step_host& hs) const {
  // The allowed tokens, filled on the host (xgrammar, and/or allowed_token_ids) and applied by
  // a mask kernel.
  hs.grammar_rows.push_back(int32_t(row));
  hs.grammar_masks.resize(hs.grammar_masks.size() + size_t(hs.mask_words));
  std::span<uint32_t> mask(
      hs.grammar_masks.data() + hs.grammar_masks.size() - size_t(hs.mask_words),
      size_t(hs.mask_words));
  if (st.matcher)
    st.matcher->fill_mask(mask);
  else
    std::fill(mask.begin(), mask.end(), ~uint32_t{0});
  if (!st.params.allowed_token_ids.empty()) {
    std::vector<uint32_t> allowed(mask.size(), 0);
    for (int32_t id : st.params.allowed_token_ids)
      if (id >= 0 && id / 32 < int32_t(allowed.size()))
        allowed[size_t(id / 32)] |= uint32_t{1} << (id % 32);
    for (size_t w = 0; w < mask.size(); ++w) mask[w] &= allowed[w];
  }
  // The grammar wins over min_tokens (model/sampler.hpp): when it allows nothing but the ids
  // min_tokens would mask, that mask is dropped for this row.
  if (generated < st.params.min_tokens &&
      grammar_allows_only(mask, st.params.ignore_eos ? std::vector<int32_t>{} : eos_ids_,
                          st.params.stop_token_ids))
    generated = st.params.min_tokens;
  return generated;
}

result<void> gpu_executor::plan_sampling(const step_plan& plan, step_host& hs, launched_step& rec) {
  hs.mask_words = grammar_mask_words(w_.config.vocab_size);
  penalty_edits with_proposals;  // a verifying row's history with the proposals before it accepted
  for (size_t row = 0; row < hs.sample_rows.size(); ++row) {
    const sample_row& sr = hs.sample_rows[row];
    seq_state& st = *hs.states[size_t(sr.seq)];
    if ((st.pending() > 0 && st.needs_collected_history()) ||
        (st.pending() > 1 && st.has_penalties()))
      return make_error("failed_precondition",
                        "gpu: a step needing the host's history was launched ahead");
    // The draw's counter and min_tokens count every token sampled before this one, collected or
    // not, and the proposals before this row (it is used only if they are accepted). So row j
    // draws what plain decoding would draw at that output index: a proposal is accepted when the
    // row samples it, which for a proposal made without a distribution (n-gram lookup) is the
    // speculative-sampling rule (accepted with probability p(proposal); otherwise the draw is
    // from p without it, renormalised) and keeps seeded outputs equal to plain decoding's.
    hs.sp.push_back({st.params.temperature, st.params.top_p, st.params.min_p, st.params.top_k,
                     st.seed, uint64_t(st.launched + sr.j),
                     std::min(std::max(st.params.logprobs, 0), k_top_logprobs_max)});
    int32_t generated = st.launched + sr.j;
    if (st.matcher || !st.params.allowed_token_ids.empty())
      generated = add_allowed_tokens(st, row, generated, hs);
    const int32_t edits_before = int32_t(hs.edits.size());
    if (sr.j == 0 && st.has_penalties() && plan.seqs[size_t(sr.seq)].num_draft == 0 &&
        penalty_row_in_step(st, plan, hs.penalty_resets, hs.penalty_entries)) {
      // Penalties from its counts on the device, which hold every token launched before this one
      // (each step counts its own): only logit_bias and min_tokens as edits.
      st.penalties.append(int32_t(row), st.params, generated, eos_ids_, hs.edits, false);
      sample_row_params& x = hs.sp.back();
      x.penalty_row = st.penalty_row;
      x.repetition = st.params.repetition_penalty > 0.0f ? st.params.repetition_penalty : 1.0f;
      x.presence = st.params.presence_penalty;
      x.frequency = st.params.frequency_penalty;
      hs.penalty_synced.push_back(&st);
    } else if (sr.j == 0 || !st.has_penalties()) {
      st.penalty_synced = false;  // its count row, if any, will miss this step's token
      st.penalties.append(int32_t(row), st.params, generated, eos_ids_, hs.edits);
      if (st.pending() > 0 &&
          st.has_penalties()) {  // the previous step's token: counted on the device
        hs.pending.push_back({int32_t(row), st.slot, edits_before, int32_t(hs.edits.size()),
                              st.params.repetition_penalty, st.params.presence_penalty,
                              st.params.frequency_penalty});
        hs.pending_slot.resize(hs.sample_rows.size(), -1);
        hs.pending_slot[row] = st.slot;
      }
    } else if (hs.sample_rows[row - 1].pick >= 0) {
      // The draft's picks are on the device only: rows after the first verify nothing for a
      // sequence with penalties (commit_rows() leaves its picks unmatched), so their edits do not
      // matter.
      st.penalties.append(int32_t(row), st.params, generated, eos_ids_, hs.edits);
    } else {  // penalties see the proposals before this row as generated tokens
      if (sr.j == 1) with_proposals = st.penalties;
      with_proposals.accept(hs.sample_rows[row - 1].draft);
      with_proposals.append(int32_t(row), st.params, generated, eos_ids_, hs.edits);
    }
    if (st.params.logprobs > 0) rec.top_logprobs = true;
    // Only a sequence's last row feeds the next step's input on the device: a verifying sequence
    // waits for the host to learn how many of its proposals held.
    hs.row_slots.push_back(sr.draft < 0 ? st.slot : -1);
  }
  return {};
}

void gpu_executor::commit_rows(const step_plan& plan, const step_host& hs, launched_step& rec) {
  for (const sample_row& sr : hs.sample_rows) {
    ++hs.states[size_t(sr.seq)]
          ->launched;  // collect() takes back the rows after a rejected proposal
    rec.rows.push_back(seqs_.at(plan.seqs[size_t(sr.seq)].seq_id));
    rec.row_ids.push_back(plan.seqs[size_t(sr.seq)].seq_id);
    rec.row_draft.push_back(sr.draft);
    rec.row_pick.push_back(sr.pick >= 0 && !hs.states[size_t(sr.seq)]->has_penalties() ? sr.pick
                                                                                       : -1);
  }
  for (seq_state* st : hs.penalty_synced) st->penalty_synced = true;
}

result<void> gpu_executor::run_draft_passes(const step_plan& plan, const step_host& hs,
                                            const launched_step& rec, cudaStream_t s) {
  // The draft's passes run ahead of the model's forward, which reads their picks. (A step with any
  // for the draft has a sequence of several tokens: never a graph step.)
  if (hs.drafted && !hs.drafted->passes.empty()) {
    COSERVE_CUDA_TRY(draft_->run(*hs.drafted, frames_[rec.frame].draft_meta, gemm_,
                                 last_tokens_.as<int32_t>(), logits_.as<float>(), s));
    for (const draft_step::computed& cd : hs.drafted->first)
      draft_->map().note_draft(plan.seqs[cd.seq].seq_id, plan.seqs[cd.seq].block_table, cd.start,
                               cd.tokens.data(), int32_t(cd.tokens.size()));
  }
  return {};
}

bool gpu_executor::is_graph_step(const step_plan& plan, const step_host& hs) const {
  // A decode-only step without sparse logit edits (logit_bias, min_tokens, penalties not in count
  // rows), grammars or count rows to write replays its bucket's graph (penalties from count rows
  // run inside it).
  return !graphs_.empty() && hs.sample_seqs.size() == plan.seqs.size() && hs.edits.empty() &&
         hs.prompt_tokens.empty() && hs.grammar_rows.empty() && hs.penalty_resets.empty() &&
         std::all_of(plan.seqs.begin(), plan.seqs.end(),
                     [](const scheduled_seq& q) { return q.tokens.size() == 1; });
}

result<bool> gpu_executor::replay_graph(int32_t bucket, const step_plan& plan, const step_host& hs,
                                        launched_step& rec, const step_events& ev, cudaStream_t s) {
  frame& f = frames_[rec.frame];
  const auto g = std::find_if(graphs_.begin(), graphs_.end(),
                              [&](const decode_graph& x) { return x.bucket == bucket; });
  graph_arena_layout layout = arena_;  // the same addresses, this graph's grid as the capacity
  layout.max_work = g->cap.max_work;
  layout.max_merges = g->cap.max_merges;
  graph_step_input in{plan.seqs, hs.ids, hs.sp, hs.row_slots, pad_block_, pad_slot_};
  const std::span<std::byte> staging(static_cast<std::byte*>(f.meta.get()), f.meta.bytes());
  batch_plan planned;
  auto bytes =
      fill_graph_arena(in, bucket, layout, graph_opts_, staging, fi_on_ ? &planned : nullptr);
  // FlashInfer: the step's plan must have the captured grid (it does for a bucket's batches).
  bool replay = bytes.ok();
  if (replay && fi_on_)
    replay = plan_flashinfer(planned, fi_plan_options(true), fi_plan_).ok() &&
             fi_plan_.padded_batch_size == g->fi.padded_batch_size &&
             fi_plan_.cta_tile_q == g->fi.cta_tile_q && fi_plan_.split_kv == g->fi.split_kv &&
             fi_plan_.total_num_rows == g->fi.total_num_rows;
  // A batch the graph cannot take (more attention work than its grid) runs eagerly.
  if (!replay) return false;
  COSERVE_CUDA_TRY(
      cuda_check(cudaMemcpyAsync(arena_dev_.get(), f.meta.get(), *bytes, cudaMemcpyHostToDevice, s),
                 "graph metadata upload"));
  size_t meta_n = *bytes;
  if (fi_on_) {
    auto up = upload_fi_arena(fi_plan_, staging);
    if (!up) return std::move(up).err();
    meta_n = *up;
  }
  if (has_peers()) {
    peer_job j = peer_forward_job(
        arena_meta(), forward_shape{bucket, bucket, g->cap.max_work, g->cap.max_merges, nullptr},
        f.meta.get(), meta_n, arena_dev_.get());
    j.graph = true;
    j.bucket = bucket;
    if (auto r = post_to_peers(j); !r) return fail_group(std::move(r).err());
  }
  if (auto r = cuda_check(cudaGraphLaunch(g->exec, s), "cudaGraphLaunch"); !r)
    return fail_group(std::move(r).err());
  // The real rows come first.
  COSERVE_CUDA_TRY(download_samples(f, hs.sample_seqs.size(), rec.top_logprobs, s));
  COSERVE_CUDA_TRY(ev.end.record(s));
  rec.graph = true;
  return true;
}

result<batch_plan> gpu_executor::plan_eager_batch(const step_plan& plan) const {
  batch_plan_options po = plan_options();
  auto pl = plan_batch(plan.seqs, po);
  if (!pl) return std::move(pl).err();
  if (pl->num_partial_rows > k_max_partial_rows) {  // too many split rows: plan without splits
    po.num_sms = 0;
    pl = plan_batch(plan.seqs, po);
    if (!pl) return std::move(pl).err();
  }
  if (pl->num_tokens > opts_.max_num_tokens)
    return make_error("invalid_argument", "gpu: step exceeds max_num_tokens or max_num_seqs");
  return pl;
}

result<gpu_executor::packed_step> gpu_executor::pack_metadata(const batch_plan& p,
                                                              const step_host& hs, frame& f) {
  metadata_packer pk(f.meta);
  size_t off[13];
  int k = 0;
  for (auto r : {pk.add(hs.ids), pk.add(p.positions), pk.add(p.slot_mapping),
                 pk.add(p.cu_seqlens_q), pk.add(p.kv_lens), pk.add(p.block_table_offsets),
                 pk.add(p.block_tables), pk.add(p.sample_tokens)}) {
    if (!r) return std::move(r).err();
    off[k++] = *r;
  }
  auto ow = pk.add(p.work);
  auto om = pk.add(p.merges);
  auto op = pk.add(hs.sp);
  auto oe = pk.add(hs.edits);
  auto ogr = pk.add(hs.grammar_rows);
  auto ogm = pk.add(hs.grammar_masks);
  auto ors = pk.add(hs.row_slots);
  auto opt = pk.add(hs.prompt_tokens);
  auto opg = pk.add(hs.prompt_targets);
  auto opp = pk.add(hs.pending);
  auto ops = pk.add(hs.pending_slot);
  auto opr = pk.add(hs.penalty_resets);
  auto ope = pk.add(hs.penalty_entries);
  if (!ow || !om || !op || !oe || !ogr || !ogm || !ors || !opt || !opg || !opp || !ops || !opr ||
      !ope)
    return make_error("resource_exhausted", "gpu: step metadata exceeds its buffer");
  off[8] = *ow;
  off[9] = *om;
  off[10] = *op;
  size_t used = pk.used();
  fi_step fis;
  if (fi_on_) {
    auto packed = pack_fi(p, f, used, meta_dev_.get(),
                          reinterpret_cast<const int32_t*>(meta_dev_.as<char>() + off[3]));
    if (!packed) return std::move(packed).err();
    fis = packed->first;
    used = packed->second;
  }
  const char* d = meta_dev_.as<char>();
  return packed_step{step_meta{reinterpret_cast<const int32_t*>(d + off[0]),
                               reinterpret_cast<const int32_t*>(d + off[1]),
                               reinterpret_cast<const int32_t*>(d + off[2]),
                               reinterpret_cast<const int32_t*>(d + off[3]),
                               reinterpret_cast<const int32_t*>(d + off[4]),
                               reinterpret_cast<const int32_t*>(d + off[5]),
                               reinterpret_cast<const int32_t*>(d + off[6]),
                               reinterpret_cast<const int32_t*>(d + off[7]),
                               reinterpret_cast<const attn_work_item*>(d + off[8]),
                               reinterpret_cast<const attn_merge_item*>(d + off[9]),
                               reinterpret_cast<const sample_row_params*>(d + off[10]),
                               reinterpret_cast<const logit_edit*>(d + *oe),
                               int32_t(hs.edits.size()),
                               reinterpret_cast<const int32_t*>(d + *ogr),
                               reinterpret_cast<const uint32_t*>(d + *ogm),
                               int32_t(hs.grammar_rows.size()),
                               hs.mask_words,
                               reinterpret_cast<const int32_t*>(d + *ors),
                               reinterpret_cast<const int32_t*>(d + *opt),
                               reinterpret_cast<const int32_t*>(d + *opg),
                               int32_t(hs.prompt_tokens.size()),
                               hs.prompt_top_n,
                               reinterpret_cast<const pending_penalty*>(d + *opp),
                               int32_t(hs.pending.size()),
                               reinterpret_cast<const int32_t*>(d + *ops)},
                     reinterpret_cast<const int32_t*>(d + *opr),
                     reinterpret_cast<const penalty_count_entry*>(d + *ope), used, fis};
}

result<void> gpu_executor::upload_metadata(const packed_step& pk, const step_host& hs,
                                           const frame& f, cudaStream_t s) {
  COSERVE_CUDA_TRY(
      cuda_check(cudaMemcpyAsync(meta_dev_.get(), f.meta.get(), pk.used, cudaMemcpyHostToDevice, s),
                 "metadata upload"));
  // Count rows taken in this step, written before the sampling reads them.
  if (!hs.penalty_resets.empty())
    COSERVE_CUDA_TRY(launch_penalty_rows_init(
        penalty_counts_.as<uint32_t>(), pk.penalty_resets, int32_t(hs.penalty_resets.size()),
        pk.penalty_entries, int32_t(hs.penalty_entries.size()), w_.config.vocab_size, s));
  return {};
}

result<void> gpu_executor::run_forward(const batch_plan& p, const packed_step& pk, frame& f,
                                       const launched_step& rec, cudaStream_t s) {
  const step_meta& m = pk.m;
  const forward_shape fs{p.num_tokens,
                         int32_t(p.sample_tokens.size()),
                         int32_t(p.work.size()),
                         int32_t(p.merges.size()),
                         nullptr,
                         pk.fis};
  if (has_peers()) {
    peer_job j = peer_forward_job(m, fs, f.meta.get(), pk.used, meta_dev_.get());
    j.pick_base = pick_slot_base_;
    j.num_picks = rec.num_picks;
    if (auto r = post_to_peers(j); !r) return fail_group(std::move(r).err());
  }
  // The draft's picks (on this device only) to every rank's last-token buffer, where the model's
  // forward reads the proposals.
  if (tp_group_ && rec.num_picks > 0)
    if (auto r = tp_group_->broadcast_i32(0, last_tokens_.as<int32_t>() + pick_slot_base_,
                                          size_t(rec.num_picks), s);
        !r)
      return fail_group(std::move(r).err());
  if (auto r = forward(fs, m, &f); !r) return fail_group(std::move(r).err());
  return {};
}

result<void> gpu_executor::download_samples(frame& f, size_t S, bool top_logprobs, cudaStream_t s) {
  char* h = f.out.as<char>();
  COSERVE_CUDA_TRY(
      cuda_check(cudaMemcpyAsync(h, tok_out_.get(), S * 4, cudaMemcpyDeviceToHost, s), "tokens"));
  COSERVE_CUDA_TRY(cuda_check(
      cudaMemcpyAsync(h + S * 4, lp_out_.get(), S * 4, cudaMemcpyDeviceToHost, s), "logprobs"));
  if (top_logprobs)
    COSERVE_CUDA_TRY(
        cuda_check(cudaMemcpyAsync(f.top.get(), top_out_.get(), S * size_t(k_top_logprob_words) * 4,
                                   cudaMemcpyDeviceToHost, s),
                   "top logprobs"));
  return {};
}

result<void> gpu_executor::download_outputs(const batch_plan& p, const step_host& hs, frame& f,
                                            const launched_step& rec, cudaStream_t s) {
  const size_t S = p.sample_tokens.size();
  if (S > 0) COSERVE_CUDA_TRY(download_samples(f, S, rec.top_logprobs, s));
  if (!hs.prompt_tokens.empty())
    COSERVE_CUDA_TRY(
        cuda_check(cudaMemcpyAsync(f.prompt_out.get(), prompt_out_.get(),
                                   hs.prompt_tokens.size() * size_t(k_prompt_row_words) * 4,
                                   cudaMemcpyDeviceToHost, s),
                   "prompt logprobs"));
  if (rec.num_picks > 0)  // the draft's proposals, for collect() to compare with the sampled rows
    COSERVE_CUDA_TRY(
        cuda_check(cudaMemcpyAsync(f.proposals.get(), last_tokens_.as<int32_t>() + pick_slot_base_,
                                   size_t(rec.num_picks) * 4, cudaMemcpyDeviceToHost, s),
                   "draft proposals"));
  return {};
}

}  // namespace coserve::gpu::detail
