// The CUDA executor's step, launched and collected as two halves: launch_step() has issue()
// (gpu/gpu_executor_issue.cpp) enqueue the step and a completion behind it; collect() reads the
// step's outputs from pinned memory. Here too: the head of the forward pass (the layer loop
// itself is gpu/forward_pass.cpp; then the prompt logprob rows, the LM head and device sampling),
// the graph arena's device view, and the posts to the tensor-parallel peers. Startup is
// gpu/gpu_executor_create.cpp; the class, gpu/gpu_executor_impl.hpp. What stands alone is apart:
// the graph arena (gpu/decode_graph.cpp), FlashInfer's planner and kernels
// (gpu/flashinfer_attention.cu), the draft's passes (gpu/draft_model.cpp, gpu/draft_plan.cpp) and
// the peers (gpu/tp_peer.cpp, gpu/tp_remote.cpp).
#include "gpu/gpu_executor.hpp"

#include <algorithm>
#include <asio/bind_executor.hpp>
#include <asio/io_context.hpp>
#include <cstring>

#include "gpu/async_wait.hpp"
#include "gpu/gpu_executor_impl.hpp"
#include "gpu/nvtx.hpp"

namespace coserve::gpu {

namespace detail {

namespace {

// Up to n (id, logprob as f32 bits) pairs a top-N kernel wrote at w, up to an id of -1
// (launch_sample's out_top, launch_prompt_logprobs's rows).
std::vector<token_logprob> read_top(const uint32_t* w, int32_t n) {
  std::vector<token_logprob> out;
  for (int32_t j = 0; j < n && int32_t(w[2 * j]) >= 0; ++j) {
    float lp;
    std::memcpy(&lp, &w[2 * j + 1], 4);
    out.push_back({int32_t(w[2 * j]), lp});
  }
  return out;
}

}  // namespace

gpu_executor::step_meta gpu_executor::arena_meta() const {
  const char* d = arena_dev_.as<char>();
  auto i32 = [d](size_t off) { return reinterpret_cast<const int32_t*>(d + off); };
  const graph_arena_layout& l = arena_;
  return step_meta{i32(l.ids),
                   i32(l.positions),
                   i32(l.slots),
                   i32(l.cu_seqlens),
                   i32(l.kv_lens),
                   i32(l.bt_offsets),
                   i32(l.block_tables),
                   i32(l.sample_tokens),
                   reinterpret_cast<const attn_work_item*>(d + l.work),
                   reinterpret_cast<const attn_merge_item*>(d + l.merges),
                   reinterpret_cast<const sample_row_params*>(d + l.params),
                   nullptr,
                   0,
                   nullptr,
                   nullptr,
                   0,
                   grammar_mask_words(w_.config.vocab_size),
                   i32(l.row_slots)};
}

result<size_t> gpu_executor::upload_fi_arena(const fi_schedule& sch, std::span<std::byte> staging) {
  if (auto r = write_fi_schedule(sch, fi_arena_, staging); !r) return r.err();
  const size_t from = fi_arena_.kv_indptr, to = fi_arena_.kv_indices + sch.kv_indices.size() * 4;
  COSERVE_CUDA_TRY(cuda_check(cudaMemcpyAsync(arena_dev_.as<char>() + from, staging.data() + from,
                                              to - from, cudaMemcpyHostToDevice, stream_.get()),
                              "graph FlashInfer metadata"));
  return to;
}

result<void> gpu_executor::post_to_peers(const peer_job& job) {
  for (auto& p : peers_) p->post(job);
  if (!world_) return {};
  std::vector<unsigned char> bytes = encode_peer_job(job);
  return world_->broadcast(bytes, 0);  // a failure: a rank is gone (k_executor_fatal)
}

error gpu_executor::fail_group(error e) {
  if (!tp_group_) return e;
  tp_group_->fail("rank 0: " + e.message);
  e.code = k_executor_fatal;  // the group cannot run another step
  return e;
}

gpu_executor::~gpu_executor() {
  // Ranks in other processes run until told to stop (after a failure mpirun ends them instead).
  if (world_ && serving_ && !tp_group_->failed()) {
    peer_job stop;
    stop.what = peer_job::kind::stop;
    (void)post_to_peers(stop);
  }
  // Teardown: the stream's work reads the buffers about to be freed.
  if (stream_.get() != nullptr) (void)stream_.synchronize();
  if (waiter_.get() != nullptr) (void)waiter_.synchronize();  // its host functions have posted
  for (decode_graph& g : graphs_)
    if (g.exec != nullptr) (void)cudaGraphExecDestroy(g.exec);
}

result<step_result> gpu_executor::execute(const step_plan& plan) {
  if (!launched_.empty())
    return make_error("failed_precondition",
                      "gpu: execute() while launched steps are not collected");
  // The synchronous form (tests, benchmarks): launch, wait on a private io_context, collect.
  asio::io_context io;
  launch_step(
      plan, io.get_executor(), [] {}, false);
  io.run();  // returns once the completion posted (async_wait keeps the context busy until then)
  return collect();
}

bool gpu_executor::can_launch_ahead(const step_plan& plan) const {
  for (const scheduled_seq& q : plan.seqs) {
    if (q.num_draft > 0) return false;
    auto it = seqs_.find(q.seq_id);
    if (it != seqs_.end() && q.sample && it->second->pending() > 0 &&
        it->second->needs_collected_history())
      return false;
  }
  return true;
}

void gpu_executor::launch_step(step_plan plan, const asio::any_io_executor& ex,
                               std::function<void()> ready, bool filter_failed) {
  nvtx_range range("launch");
  auto rec = std::make_shared<launched_step>();
  rec->step_id = plan.step_id;
  rec->frame = next_frame_;
  next_frame_ ^= 1;
  if (filter_failed) failed_.filter(plan);
  if (auto r = issue(plan, *rec); !r.ok()) rec->failed = std::move(r).err();
  failed_.on_step(plan, !rec->failed);
  // `finished`: their host state lives on in the launched steps that still reference it (for
  // collect); their slot is free for a sequence registered later (stream order keeps the last
  // write of an earlier step ahead of any later use).
  for (seq_id_t id : plan.finished) {
    auto it = seqs_.find(id);
    if (it == seqs_.end()) continue;
    free_slots_.push_back(it->second->slot);
    if (it->second->penalty_row >= 0) free_penalty_rows_.push_back(it->second->penalty_row);
    seqs_.erase(it);
  }
  launched_.push_back(rec);
  // Completion: a host function on the waiter stream, behind an event after the step's work, posts
  // to `ex` (gpu/async_wait.hpp); there the stream's state is recorded and `ready` runs. On the
  // waiter, so the next step queued on the stream does not wait for the host function. A step that
  // failed to issue still completes this way, in order.
  async_wait_beside(
      stream_.get(), waiter_.get(),
      asio::bind_executor(ex, [rec, ready = std::move(ready)](result<void> r) mutable {
        rec->device = std::move(r);
        ready();
      }));
}

result<step_result> gpu_executor::collect() {
  nvtx_range range("collect");
  if (launched_.empty())
    return make_error("failed_precondition", "gpu: collect() with no step launched");
  std::shared_ptr<launched_step> rec = std::move(launched_.front());
  launched_.pop_front();
  if (!rec->device.ok())  // an asynchronous fault: the context is unusable
    return make_error(k_executor_fatal, "gpu: " + rec->device.err().message);
  if (tp_group_) {  // a rank failed, or NCCL reported an error: this step's outputs cannot be
                    // trusted
    if (std::string why = tp_group_->async_error(); !why.empty()) tp_group_->fail("NCCL: " + why);
    if (tp_group_->failed())
      return make_error(k_executor_fatal,
                        "gpu: tensor parallel group failed: " + tp_group_->failure());
  }
  if (rec->failed) return std::move(*rec->failed);
  step_result out;
  out.step_id = rec->step_id;
  if (rec->events >= 0) {
    const step_events& e = events_[rec->events];
    auto busy = event::elapsed_ms(e.start, e.end);
    if (busy.ok()) {
      ++timeline_.steps;
      timeline_.busy_ms += *busy;
      if (last_events_ >= 0) {
        auto idle = event::elapsed_ms(events_[last_events_].end, e.start);
        if (idle.ok()) {
          const double gap = std::max(0.0, double(*idle));
          timeline_.idle_ms += gap;
          timeline_.max_idle_ms = std::max(timeline_.max_idle_ms, gap);
        }
      }
      timeline_.graph_steps += rec->graph;
    }
    last_events_ = rec->events;
  }
  const frame& f = frames_[rec->frame];
  if (draft_) {
    // The draft's picks: the proposals the rows verified, and what the draft's cache now holds;
    // then the model's tokens of this step (a previous token referenced on the device is the one
    // the host collected last for that sequence, before this step's outputs).
    const int32_t* picks = f.proposals.as<int32_t>();
    for (size_t i = 0; i < rec->row_pick.size(); ++i)
      if (rec->row_pick[i] >= 0) rec->row_draft[i] = picks[rec->row_pick[i]];
    draft_kv_map& map = draft_->map();
    for (const auto& dr : rec->draft_runs)
      map.note_draft(dr.seq, dr.table, dr.start, picks + dr.pick0, dr.count);
    for (auto& mr : rec->model_runs) {
      int32_t next_pick = mr.pick0;
      for (int32_t& t : mr.ids) {
        if (t == k_token_from_draft)
          t = picks[next_pick++];
        else if (t == k_token_from_last_step)
          t = mr.st->last_token;
      }
      map.note_model(mr.seq, mr.table, mr.start, mr.ids.data(), int32_t(mr.ids.size()));
    }
  }
  const size_t S = rec->rows.size();
  const size_t V = size_t(w_.config.vocab_size);
  const char* h = f.out.as<char>();
  const int32_t* toks = reinterpret_cast<const int32_t*>(h);
  const float* lps = reinterpret_cast<const float*>(h + S * 4);
  const uint32_t* pw = f.prompt_out.as<uint32_t>();
  for (size_t k = 0; k < rec->prompt_rows.size(); ++k) {
    auto& [st, pos] = rec->prompt_rows[k];
    const uint32_t* w = pw + k * size_t(k_prompt_row_words);
    prompt_logprob e;
    e.token = st->prompt[size_t(pos) + 1];
    std::memcpy(&e.logprob, &w[0], 4);
    e.rank = int32_t(w[1]);
    e.top = read_top(w + 2, std::min(st->params.prompt_logprobs, k_prompt_logprobs_max_top));
    if (st->prompt_lps.size() <= size_t(pos)) st->prompt_lps.resize(size_t(pos) + 1);
    st->prompt_lps[size_t(pos)] = std::move(e);
  }
  bool rejected =
      false;  // a proposal of the current sequence was not sampled: skip to its last row
  for (size_t i = 0; i < S; ++i) {
    const bool last_row = rec->row_draft[i] < 0;
    if (rejected) {
      --rec->rows[i]->launched;  // a row whose token is dropped
      rejected = !last_row;
      continue;
    }
    seq_output so;
    so.seq_id = rec->row_ids[i];
    so.token = toks[i];
    so.logprob = lps[i];
    if (opts_.return_logits) {
      const float* row = reinterpret_cast<const float*>(h + size_t(max_rows_) * 8) + i * V;
      so.logits.assign(row, row + V);
    }
    seq_state& st = *rec->rows[i];
    if (st.params.logprobs > 0 && rec->top_logprobs)  // computed on the device (launch_sample)
      so.top_logprobs = read_top(f.top.as<uint32_t>() + i * size_t(k_top_logprob_words),
                                 std::min(st.params.logprobs, k_top_logprobs_max));
    if (!st.prompt.empty()) {  // its first output: the prompt's entries go with it
      so.prompt_logprobs = std::move(st.prompt_lps);
      st.prompt.clear();
      st.prompt_lps.clear();
    }
    st.accept(so.token);
    out.outputs.push_back(std::move(so));
    // Outputs of a verifying sequence: the proposals its rows sampled, then the first row's own
    // token that differs (or the last row's).
    rejected = !last_row && toks[i] != rec->row_draft[i];
  }
  return out;
}

result<void> gpu_executor::forward(const forward_shape& fs, const step_meta& m, const frame* f) {
  nvtx_range range("forward");
  const model_config& c = w_.config;
  cudaStream_t s = stream_.get();
  const int32_t H = c.hidden_size;
  const float eps = c.rms_norm_eps;
  all_reduce_fn reduce;
  if (tp_group_)
    reduce = [g = tp_group_.get()](bf16* data, size_t n, cudaStream_t st) {
      return g->all_reduce_bf16(0, data, n, st);
    };
  COSERVE_CUDA_TRY(run_layers(w_, gemm_, scratch_, kv_, rope_, inputs_of(m, fs),
                              last_tokens_.as<int32_t>(), reduce, s));
  const bf16* hidden = scratch_.hidden.as<bf16>();
  bf16* residual = scratch_.residual.as<bf16>();
  if (m.num_prompt_rows > 0) {
    // Prompt logprobs: final norm and LM head over the scored positions, max_rows_ at a time
    // through the sampling rows' buffers (these rows are never sampled rows: their residual add
    // happens once), then each row reduced on the device to the entries that go back.
    nvtx_range prompt_range("prompt logprobs");
    for (int32_t r0 = 0; r0 < m.num_prompt_rows; r0 += max_rows_) {
      const int32_t R = std::min(max_rows_, m.num_prompt_rows - r0);
      COSERVE_CUDA_TRY(launch_rmsnorm(final_.as<bf16>(), hidden, residual, w_.final_norm.as<bf16>(),
                                      m.prompt_tokens + r0, R, H, eps, true, s));
      COSERVE_CUDA_TRY(gemm_.run(logits_.get(), gemm_out::f32, final_.as<bf16>(),
                                 static_cast<const bf16*>(w_.lm_head_data()), nullptr, R,
                                 c.vocab_size, H, s));
      COSERVE_CUDA_TRY(launch_prompt_logprobs(
          prompt_out_.as<uint32_t>() + size_t(r0) * k_prompt_row_words, logits_.as<float>(),
          m.prompt_targets + r0, R, c.vocab_size, m.prompt_top_n, k_prompt_row_words, s));
    }
  }
  const int32_t S = fs.num_samples;
  if (S == 0) return {};
  nvtx_range head_range("lm_head+sample");
  // Final norm on the sampled rows only (gathered), then the LM head in fp32 for sampling.
  COSERVE_CUDA_TRY(launch_rmsnorm(final_.as<bf16>(), hidden, residual, w_.final_norm.as<bf16>(),
                                  m.sample_tokens, S, H, eps, true, s));
  COSERVE_CUDA_TRY(gemm_.run(logits_.get(), gemm_out::f32, final_.as<bf16>(),
                             static_cast<const bf16*>(w_.lm_head_data()), nullptr, S, c.vocab_size,
                             H, s));
  // Raw logits (before penalties/bias) go out now, in stream order ahead of the in-place edits.
  if (opts_.return_logits && f != nullptr)
    COSERVE_CUDA_TRY(
        cuda_check(cudaMemcpyAsync(f->out.as<char>() + size_t(max_rows_) * 8, logits_.get(),
                                   size_t(S) * size_t(c.vocab_size) * 4, cudaMemcpyDeviceToHost, s),
                   "logits"));
  COSERVE_CUDA_TRY(launch_logit_edits(logits_.as<float>(), m.edits, m.num_edits, c.vocab_size, s,
                                      m.pending, m.num_pending, m.pending_slot,
                                      last_tokens_.as<int32_t>()));
  if (!penalty_counts_.empty())  // rows without a count row return at once (graphs always run it)
    COSERVE_CUDA_TRY(launch_penalty_counts(logits_.as<float>(), m.params, S, c.vocab_size,
                                           penalty_counts_.as<uint32_t>(), s));
  COSERVE_CUDA_TRY(launch_token_bitmask(logits_.as<float>(), m.grammar_rows, m.grammar_masks,
                                        m.num_grammar_rows, m.mask_words, c.vocab_size, s));
  COSERVE_CUDA_TRY(launch_sample(tok_out_.as<int32_t>(), lp_out_.as<float>(), logits_.as<float>(),
                                 m.params, S, c.vocab_size, s, top_out_.as<uint32_t>()));
  // The sampled ids stay on the device for the next step's inputs (the host gets a copy later);
  // the peers of a tensor-parallel group receive them for theirs (gpu/tp_peer.hpp).
  if (tp_group_)
    COSERVE_CUDA_TRY(tp_group_->broadcast_i32(0, tok_out_.as<int32_t>(), size_t(S), s));
  if (!penalty_counts_.empty())
    COSERVE_CUDA_TRY(launch_count_sampled(penalty_counts_.as<uint32_t>(), m.params,
                                          tok_out_.as<int32_t>(), S, c.vocab_size, s));
  return launch_scatter_tokens(last_tokens_.as<int32_t>(), m.row_slots, tok_out_.as<int32_t>(), S,
                               s);
}

}  // namespace detail

using detail::gpu_executor;

result<std::unique_ptr<executor>> make_gpu_executor(const gpu_executor_options& options) {
  auto e = gpu_executor::create(options);
  if (!e) return std::move(e).err();
  return std::unique_ptr<executor>(std::move(e.value()));
}

std::optional<step_timeline> gpu_step_timeline(const executor& e) {
  if (const auto* g = dynamic_cast<const gpu_executor*>(&e)) return g->timeline();
  return std::nullopt;
}

void reset_gpu_step_timeline(executor& e) {
  if (auto* g = dynamic_cast<gpu_executor*>(&e)) g->reset_timeline();
}

}  // namespace coserve::gpu
