// The CUDA executor's step: host planning, one metadata upload (a copy posted to each
// tensor-parallel peer, gpu/tp_peer.hpp), the layer loop (gpu/forward_pass.cpp), device sampling
// (rows for proposals to verify included), prompt logprob rows, launched and collected as two
// halves, and the decode CUDA graphs captured from the same forward pass. create() and issue() run
// named steps in order (listed where they are declared); a step's host planning lives in one
// step_host, which issue()'s steps fill and read. Longer than most files (about 2100 lines)
// because launch, collect, the head of the forward pass, the graph capture and the draft model's
// and tensor-parallel peers' share of a step use one set of device buffers and per-sequence state
// (its penalty count rows among them); what stands alone is apart: the layer loop
// (gpu/forward_pass.cpp), the graph arena (gpu/decode_graph.cpp), FlashInfer's planner and kernels
// (gpu/flashinfer_attention.cu), the draft's passes (gpu/draft_model.cpp, gpu/draft_plan.cpp) and
// the peers (gpu/tp_peer.cpp, gpu/tp_remote.cpp).
#include "gpu/gpu_executor.hpp"

#include <algorithm>
#include <asio/bind_executor.hpp>
#include <asio/io_context.hpp>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <deque>
#include <future>
#include <unordered_map>

#include "gpu/async_wait.hpp"
#include "gpu/batch_plan.hpp"
#include "gpu/decode_graph.hpp"
#include "gpu/device_buffer.hpp"
#include "gpu/device_weights.hpp"
#include "gpu/draft_model.hpp"
#include "gpu/draft_plan.hpp"
#include "gpu/flashinfer_attention.hpp"
#include "gpu/forward_pass.hpp"
#include "gpu/gemm.hpp"
#include "gpu/kernels.hpp"
#include "gpu/kv_cache_sizing.hpp"
#include "gpu/launch_params.hpp"
#include "gpu/logit_edit.hpp"
#include "gpu/metadata_packer.hpp"
#include "gpu/nvtx.hpp"
#include "gpu/stream.hpp"
#include "gpu/tp_peer.hpp"
#include "model/rope.hpp"
#include "model/sampler.hpp"
#include "model/structured_output.hpp"
#include "model/tensor_parallel.hpp"

namespace coserve::gpu {

namespace {

constexpr size_t k_metadata_bytes = size_t(16) << 20;  // per-step metadata (pinned + device)
// FlashInfer's split-KV workspace, in rows of num_q_heads x head_dim (every rank the same count):
// a step whose split plan needs more runs unsplit; a graph bucket that needs more is not captured.
constexpr int64_t k_fi_tmp_rows = 8192;

// The sliding window every layer uses (0: none), or -1 when the layers differ.
int32_t shared_window(const model_config& c) {
  if (c.sliding_window <= 0) return 0;
  if (c.sliding_layers.empty()) return c.sliding_window;
  const bool all =
      std::all_of(c.sliding_layers.begin(), c.sliding_layers.end(), [](auto v) { return v != 0; });
  const bool none =
      std::none_of(c.sliding_layers.begin(), c.sliding_layers.end(), [](auto v) { return v != 0; });
  return all ? c.sliding_window : none ? 0 : -1;
}

constexpr int32_t k_prompt_row_words =
    2 + 2 * k_prompt_logprobs_max_top;  // one prompt logprob row's output

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

// Whether every token the grammar mask allows is one of `a` or `b`.
bool grammar_allows_only(std::span<const uint32_t> mask, const std::vector<int32_t>& a,
                         const std::vector<int32_t>& b) {
  std::vector<uint32_t> rest(mask.begin(), mask.end());
  for (const auto* ids : {&a, &b})
    for (int32_t t : *ids)
      if (t >= 0 && size_t(t) / 32 < rest.size()) rest[size_t(t) / 32] &= ~(1u << (t % 32));
  return std::all_of(rest.begin(), rest.end(), [](uint32_t w) { return w == 0; });
}

// A tensor-parallel rank starting on a thread of its own (gpu_executor::create joins them).
using peer_start = std::future<result<std::unique_ptr<tp_peer>>>;

class gpu_executor final : public executor {
 public:
  static result<std::unique_ptr<gpu_executor>> create(const gpu_executor_options& o);
  ~gpu_executor() override;
  result<step_result> execute(const step_plan& plan) override;
  void launch(step_plan plan, const asio::any_io_executor& ex,
              std::function<void()> ready) override {
    launch_step(std::move(plan), ex, std::move(ready), true);
  }
  result<step_result> collect() override;
  int32_t max_in_flight() const override { return 2; }
  bool can_launch_ahead(const step_plan& plan) const override;
  executor_info info() const override { return info_; }
  step_timeline timeline() const { return timeline_; }
  void reset_timeline() { timeline_ = {}; }

 private:
  struct seq_state {
    sampling_params params;
    uint64_t seed = 0;
    int32_t slot = -1;        // its entry in the device's last-token buffer
    int32_t generated = 0;    // tokens the host has collected
    int32_t launched = 0;     // sampled rows launched (generated + those not collected yet)
    int32_t last_token = -1;  // the last token the host has collected (or the last output id)
    penalty_edits penalties;  // repetition / presence / frequency edits of the collected history
    // Its row of token counts on the device (-1: none), and whether that row holds its history up
    // to the last launched token (written from `penalties` when taken, counted up by each step
    // after).
    int32_t penalty_row = -1;
    bool penalty_synced = false;
    std::optional<grammar_matcher> matcher;  // structured output (params.grammar)
    // Prompt logprobs (params.prompt_logprobs >= 0, first registration): the prompt while entries
    // are owed; position p's entry scores prompt[p + 1]. prompt_next: the next position a launched
    // step scores; the entries go out with the sequence's first output.
    std::vector<int32_t> prompt;
    int32_t prompt_next = 0;
    std::vector<prompt_logprob> prompt_lps;
    int32_t pending() const noexcept { return launched - generated; }
    // Penalties come from the sequence's count row on the device, or as edits built from the
    // host's view of the history, with a token still being sampled counted on the device
    // (pending_penalty). A grammar's mask needs every earlier token on the host: a step that
    // samples under one waits until the previous step is collected.
    bool has_penalties() const noexcept {
      return params.repetition_penalty != 1.0f || params.presence_penalty != 0.0f ||
             params.frequency_penalty != 0.0f;
    }
    bool needs_collected_history() const noexcept { return matcher.has_value(); }
    void accept(int32_t t) {
      penalties.accept(t);
      ++generated;
      last_token = t;
      if (matcher && !matcher->terminated()) (void)matcher->accept(t);
    }
  };
  using seq_ptr = std::shared_ptr<seq_state>;
  // Host staging of one step: the pinned metadata it uploads and the pinned outputs it downloads.
  // Two, used alternately, so step N+1's staging cannot overwrite step N's while N's copies are
  // pending (a third step is launched only after step N is collected).
  struct frame {
    pinned_buffer meta, out, top, prompt_out;  // top: [max_rows_, k_top_logprob_words] top logprobs
    pinned_buffer draft_meta, proposals;       // the draft's passes' metadata; its picks, read back
  };
  // CUDA timing events around one step.
  struct step_events {
    event start, end;
  };
  struct launched_step {
    uint64_t step_id = 0;
    std::optional<error> failed;     // issue() failed: nothing (or part) of the step ran
    result<void> device;             // the stream's state when the step's completion ran
    int32_t frame = 0, events = -1;  // events: -1 when no timing events were recorded
    std::vector<seq_ptr> rows;       // per sampled row, the sequence's state
    std::vector<seq_id_t> row_ids;
    std::vector<int32_t>
        row_draft;  // per row, the proposal it verifies (-1: the sequence's last row)
    // Draft model: per row, the index of its proposal among the step's picks read back into
    // frame::proposals (-1: none; row_draft is filled from there by collect()). A row whose
    // sequence has penalties verifies nothing (its row_draft is the vocabulary size, never
    // sampled): its later rows' penalties would need the proposals on the host.
    std::vector<int32_t> row_pick;
    int32_t num_picks = 0;
    // What the draft and the model computed this step, recorded in the draft's map at collect()
    // (the picks and the ids of the step before are known only then).
    struct proposals_run {
      seq_id_t seq;
      std::vector<int32_t> table;
      int32_t start, count, pick0;  // proposal j at position start + j is pick pick0 + j
    };
    std::vector<proposals_run> draft_runs;
    struct model_run {
      seq_ptr st;
      seq_id_t seq;
      std::vector<int32_t> table;
      int32_t start;
      std::vector<int32_t>
          ids;  // literal; k_token_from_last_step: its previous token; k_token_from_draft: a pick
      int32_t pick0;  // its first pick (its k_token_from_draft ids in order)
    };
    std::vector<model_run> model_runs;
    bool top_logprobs = false;  // some row asked for top logprobs (frame::top was filled)
    // Prompt logprob rows, in the order of frame::prompt_out: the sequence and the position scored.
    std::vector<std::pair<seq_ptr, int32_t>> prompt_rows;
    bool graph = false;  // replayed a decode graph
  };
  // Device addresses of this step's metadata (inside meta_dev_).
  struct step_meta {
    const int32_t *ids, *positions, *slots, *cu_seqlens, *kv_lens, *bt_offsets, *block_tables,
        *sample_tokens;
    const attn_work_item* work;
    const attn_merge_item* merges;
    const sample_row_params* params;
    const logit_edit* edits;
    int32_t num_edits;
    const int32_t* grammar_rows;    // sampled rows under a grammar
    const uint32_t* grammar_masks;  // [num_grammar_rows, mask_words] allowed-token bitmasks
    int32_t num_grammar_rows;
    int32_t mask_words;
    const int32_t* row_slots;  // per sampled row, its sequence's last-token slot
    // Prompt logprobs: token indices (batch order) whose logits score targets, top-N per row.
    const int32_t* prompt_tokens = nullptr;
    const int32_t* prompt_targets = nullptr;
    int32_t num_prompt_rows = 0;
    int32_t prompt_top_n = 0;
    // Rows whose previous token is still on the device (launch_logit_edits).
    const pending_penalty* pending = nullptr;
    int32_t num_pending = 0;
    const int32_t* pending_slot = nullptr;
  };
  // What one forward pass computes: tokens, sampled rows, attention grid (capacities when
  // attn_counts points at the step's real counts in device memory: graphs).
  struct forward_shape {
    int32_t num_tokens, num_samples, num_work, num_merges;
    const int32_t* attn_counts;
    fi_step fi{};  // FlashInfer's plan of the step (on: --attention-backend flashinfer)
  };
  static layer_inputs inputs_of(const step_meta& m, const forward_shape& fs) {
    layer_inputs in;
    in.ids = m.ids;
    in.positions = m.positions;
    in.slots = m.slots;
    in.cu_seqlens = m.cu_seqlens;
    in.kv_lens = m.kv_lens;
    in.bt_offsets = m.bt_offsets;
    in.block_tables = m.block_tables;
    in.work = m.work;
    in.merges = m.merges;
    in.attn_counts = fs.attn_counts;
    in.num_tokens = fs.num_tokens;
    in.num_work = fs.num_work;
    in.num_merges = fs.num_merges;
    in.fi = fs.fi;
    return in;
  }
  // The job a peer runs for a forward pass whose metadata rank 0 uploaded from `bytes` to `base`.
  static peer_job peer_forward_job(const step_meta& m, const forward_shape& fs, const void* bytes,
                                   size_t n, const void* base) {
    peer_job j;
    j.forward = true;
    j.meta.assign(static_cast<const unsigned char*>(bytes),
                  static_cast<const unsigned char*>(bytes) + n);
    j.base = base;
    j.in = inputs_of(m, fs);
    j.row_slots = m.row_slots;
    j.num_samples = fs.num_samples;
    return j;
  }
  struct decode_graph {
    int32_t bucket = 0;
    graph_capacity cap;
    cudaGraphExec_t exec = nullptr;
    fi_schedule fi;  // FlashInfer: the captured plan's grid (a replay's plan must match it)
  };
  // FlashInfer's planning options for this rank's model (with its sliding window, which every
  // layer shares when FlashInfer runs: the kernel splits only the keys inside it).
  fi_options fi_plan_options(bool cuda_graph) const {
    const model_config& c = w_.config;
    fi_options f;
    f.num_qo_heads = c.num_attention_heads;
    f.num_kv_heads = c.num_key_value_heads;
    f.head_dim = c.head_dim;
    f.page_size = opts_.block_size;
    f.num_sms = num_sms_;
    f.cuda_graph = cuda_graph;
    if (const int32_t w = shared_window(c); w > 0)
      f.window_left = w - 1;  // ours: keys (pos - w, pos]
    return f;
  }
  // FlashInfer's plan of a step placed after `used` bytes of the staging buffer; returns its step
  // view (addresses at `dev`, query offsets at cu_seqlens) and the bytes now used.
  result<std::pair<fi_step, size_t>> pack_fi(const batch_plan& p, frame& f, size_t used,
                                             const void* dev, const int32_t* cu_seqlens);
  // Writes a graph step's FlashInfer plan at fi_arena_ in staging and uploads that region to the
  // arena; returns the end of the bytes used (the peers' copy reaches that far).
  result<size_t> upload_fi_arena(const fi_schedule& sch, std::span<std::byte> staging);
  batch_plan_options plan_options() const {
    const model_config& c = w_.config;
    return {opts_.block_size, c.num_key_value_heads, c.num_attention_heads / c.num_key_value_heads,
            num_sms_, 32};
  }
  // Captures one graph per decode bucket (startup; logs time and memory): plans the buckets and
  // the arena, allocates it, then captures each bucket's graph.
  result<void> capture_graphs();
  // The buckets, how graph steps are planned, each bucket's grid, and the arena's layout.
  void plan_graph_buckets(int32_t max_len, int32_t max_blocks);
  // FlashInfer: each bucket's plan (buckets it cannot take dropped) and its arrays after the arena
  // (fi_arena_; left as it was when no graph is kept).
  result<void> plan_fi_graphs(int32_t max_blocks);
  // One bucket's graph: its metadata uploaded to the arena, the peers' capture posted, then the
  // forward pass run once eagerly and captured (capture_graph).
  result<void> capture_decode_graph(decode_graph& g, const step_meta& m, const int32_t* counts,
                                    size_t arena_end, cudaStream_t s);
  // Times the GEMM candidates of the model's five matrix shapes (layer 0's operands stand for every
  // layer's) at every bucket of rows up to max_num_tokens (the LM head: the sampling rows) and logs
  // the outcome. Startup only: it synchronizes.
  result<void> tune_gemms();
  // The arena's device addresses as a step_meta (graphs read their metadata there).
  step_meta arena_meta() const;
  gpu_executor() = default;
  // filter_failed: leave out the sequences of failed steps (launch()); execute() runs what it is
  // given.
  void launch_step(step_plan plan, const asio::any_io_executor& ex, std::function<void()> ready,
                   bool filter_failed);
  // The steps of create() after the options' checks, in order: the streams and the GEMM runner;
  // the tensor-parallel group (what the other ranks start with); the weights (rank 0's uploaded
  // here while the other ranks start on their threads); the attention backend; the draft model;
  // the buffers and the KV cache; the description; GEMM tuning; the decode graphs.
  result<void> create_streams();
  // The NCCL group of the ranks (MPI: the other processes told the setup), and the options every
  // other rank starts with. fi_workspace: FlashInfer may run (its split workspace is reserved).
  result<tp_peer::options> create_tp_group(const gpu_executor_options& o, kv_elem kv_type,
                                           bool fi_workspace);
  // Random weights (load_format dummy; per rank under tensor parallelism).
  result<void> load_dummy_weights(const gpu_executor_options& o, const tp_peer::options& peer_base,
                                  std::vector<peer_start>& starting);
  // The checkpoint's weights (rank 0's shard and the whole LM head; the other ranks' shards to
  // their threads) and generation_config's eos ids.
  result<void> load_checkpoint(const gpu_executor_options& o, const tp_peer::options& peer_base,
                               std::vector<peer_start>& starting);
  result<void> load_draft_model(const gpu_executor_options& o);
  result<void> allocate_buffers();
  // executor_info (the device line included); logs rank 0's share under tensor parallelism.
  void describe(const gpu_executor_options& o, const cudaDeviceProp& prop);
  // Live sequences: those running (at most max_num_seqs, max_rows_ rows) plus those registered for
  // a prefill that is still being chunked or whose finish notice has not arrived yet.
  size_t last_token_slots() const { return 4 * size_t(max_rows_) + 64; }
  // The draft model's pick slots after them: max_num_seqs proposing sequences x k (tensor-parallel
  // peers keep the same region: rank 0 broadcasts the picks into it before the model's forward).
  static size_t pick_slots(const gpu_executor_options& o) {
    return o.draft_model_dir.empty() ? 0
                                     : size_t(o.max_num_seqs) * size_t(o.num_speculative_tokens);
  }
  // Host planning and every enqueue of a step (the caller records the outcome). In order: register
  // the new sequences, record the start event, copy KV blocks; then on the host resolve the input
  // ids, plan the draft's passes, the prompt logprob rows, the sampled rows and their sampling
  // metadata; then enqueue the draft's passes, and either replay a decode graph or plan the batch,
  // pack and upload its metadata, run the forward pass and download the outputs; record the end
  // event and commit the rows.
  result<void> issue(const step_plan& plan, launched_step& rec);
  // One sampled row of a step. The rows are in batch order (plan_batch's sample_tokens): one per
  // sampling sequence, or 1 + num_draft for a sequence verifying proposals (row j scores proposal
  // j; the last row gives the token after all of them).
  struct sample_row {
    int32_t seq;    // index into plan.seqs
    int32_t j;      // position among the sequence's rows
    int32_t draft;  // the proposal row j verifies; -1 on the sequence's last row; the vocabulary
                    // size (never sampled) for a draft pick not known yet
    int32_t pick;   // the draft's pick row j verifies (index among the step's picks), or -1
  };
  // What the host plans for one step in issue(), before and while it is enqueued: the arrays the
  // metadata upload packs (or the graph arena takes) and the sequences' state they were made from.
  struct step_host {
    // Input ids: literal, or -(slot + 1) for a token in the device's last-token buffer.
    std::vector<int32_t> ids;
    std::vector<size_t> placeholders;   // indices into ids of k_token_from_draft
    std::vector<seq_state*> states;     // per plan.seqs entry
    std::optional<draft_step> drafted;  // the draft model's passes (draft model only)
    // Prompt logprob rows: token indices (batch order) whose logits score targets, top-N per row.
    std::vector<int32_t> prompt_tokens, prompt_targets;
    int32_t prompt_top_n = 0;
    std::vector<sample_row> sample_rows;
    std::vector<int32_t> sample_seqs;  // indices into plan.seqs of the sampling sequences
    // Per sampled row: its sampling parameters, its sequence's last-token slot (-1: none).
    std::vector<sample_row_params> sp;
    std::vector<int32_t> row_slots;
    std::vector<logit_edit> edits;
    std::vector<int32_t> grammar_rows;    // sampled rows under a grammar or allowed_token_ids
    std::vector<uint32_t> grammar_masks;  // [grammar rows, mask_words]
    int32_t mask_words = 0;
    std::vector<pending_penalty> pending;
    std::vector<int32_t> pending_slot;    // per row once a row has a pending token: its slot, or -1
    std::vector<int32_t> penalty_resets;  // count rows written from the host's history in this step
    std::vector<penalty_count_entry> penalty_entries;
    std::vector<seq_state*> penalty_synced;  // their sequences (in step once it is launched)
  };
  // A step's metadata packed into its frame: its device view (at meta_dev_ once uploaded), the
  // count rows to write, the bytes to upload and FlashInfer's plan.
  struct packed_step {
    step_meta m;
    const int32_t* penalty_resets;
    const penalty_count_entry* penalty_entries;
    size_t used;
    fi_step fis;
  };
  // Registers plan.new_seqs (a slot each; a sequence registered again keeps its slot).
  result<void> register_new_seqs(const step_plan& plan);
  // The plan's copy-on-write block copies (draft cache and peers too).
  result<void> copy_blocks(const step_plan& plan, cudaStream_t s);
  // The input ids with the plan's placeholders resolved, and each sequence's state (checks ids,
  // proposals and block ids).
  result<void> resolve_inputs(const step_plan& plan, step_host& hs) const;
  // Draft model: plans its passes, puts their picks' slots in place of the proposals' ids and
  // records the runs collect() notes in the draft's map.
  result<void> plan_draft_passes(const step_plan& plan, step_host& hs, launched_step& rec) const;
  result<void> plan_prompt_logprobs(const step_plan& plan, step_host& hs, launched_step& rec);
  result<void> plan_sample_rows(const step_plan& plan, step_host& hs) const;
  // Each sampled row's parameters, logit edits, grammar mask, penalty rows and slot.
  result<void> plan_sampling(const step_plan& plan, step_host& hs, launched_step& rec);
  // Adds row's allowed-token mask; returns `generated` as min_tokens is to count it.
  int32_t add_allowed_tokens(seq_state& st, size_t row, int32_t generated, step_host& hs) const;
  // Everything is enqueued: the sampled rows are now pending until collect().
  void commit_rows(const step_plan& plan, const step_host& hs, launched_step& rec);
  result<void> run_draft_passes(const step_plan& plan, const step_host& hs,
                                const launched_step& rec, cudaStream_t s);
  bool is_graph_step(const step_plan& plan, const step_host& hs) const;
  // Replays the bucket's graph and downloads its outputs (true), or enqueues nothing when the
  // batch does not fit the graph (false: the step runs eagerly).
  result<bool> replay_graph(int32_t bucket, const step_plan& plan, const step_host& hs,
                            launched_step& rec, const step_events& ev, cudaStream_t s);
  // The eager step's batch plan (without splits when they would exceed the workspace).
  result<batch_plan> plan_eager_batch(const step_plan& plan) const;
  result<packed_step> pack_metadata(const batch_plan& p, const step_host& hs, frame& f);
  // The packed metadata to the device, and the count rows taken in this step written there.
  result<void> upload_metadata(const packed_step& pk, const step_host& hs, const frame& f,
                               cudaStream_t s);
  // The peers' job, the draft's picks to every rank, and the forward pass.
  result<void> run_forward(const batch_plan& p, const packed_step& pk, frame& f,
                           const launched_step& rec, cudaStream_t s);
  // The first S sampled ids and logprobs (and top logprobs) into the frame's pinned outputs.
  result<void> download_samples(frame& f, size_t S, bool top_logprobs, cudaStream_t s);
  // Sampled rows, prompt logprob rows and the draft's proposals into the frame.
  result<void> download_outputs(const batch_plan& p, const step_host& hs, frame& f,
                                const launched_step& rec, cudaStream_t s);
  result<void> forward(const forward_shape& fs, const step_meta& m, const frame* f);

  gpu_executor_options opts_;
  executor_info info_;
  stream stream_;
  stream waiter_;  // completions' host functions (async_wait_beside), off the step stream
  device_weights w_;
  gemm_runner gemm_;
  layer_scratch scratch_;
  rope_tables rope_;
  kv_store kv_;
  device_buffer final_, logits_, tok_out_, lp_out_, top_out_, meta_dev_;
  device_buffer prompt_out_;  // [max_num_tokens, k_prompt_row_words] prompt logprob rows
                              // (launch_prompt_logprobs)
  device_buffer
      last_tokens_;  // [slot capacity] each live sequence's last sampled id, on the device
  device_buffer
      penalty_counts_;  // [penalty rows, vocab] token counts (gpu/logit_edit.hpp), or none
  std::vector<int32_t> free_penalty_rows_;
  // A row of counts for `st`, written from its host history in this step (into resets / entries),
  // unless it has one already in step; false when none can be had (its penalties then go as edits).
  bool penalty_row_in_step(seq_state& st, const step_plan& plan, std::vector<int32_t>& resets,
                           std::vector<penalty_count_entry>& entries);
  frame frames_[2];
  int32_t next_frame_ = 0;
  step_events
      events_[3];  // timing events of launched steps, in turn (two in flight + the last collected)
  int32_t next_events_ = 0;
  int32_t last_events_ = -1;  // events of the step collected last (-1: none)
  step_timeline timeline_;
  kv_elem kv_type_ = kv_elem::bf16;
  int32_t num_sms_ = 0;
  std::unordered_map<seq_id_t, seq_ptr> seqs_;
  std::vector<int32_t> free_slots_;
  std::deque<std::shared_ptr<launched_step>> launched_;
  // CUDA graphs (none with enforce_eager or return_logits): buckets ascending, one graph each.
  std::vector<int32_t> buckets_;
  std::vector<decode_graph> graphs_;
  batch_plan_options graph_opts_;  // how graph steps are planned (splits bounded by the workspace)
  graph_arena_layout arena_;
  fi_offsets fi_arena_;  // FlashInfer's arrays after the arena (flashinfer backend)
  fi_schedule fi_plan_;  // each step's FlashInfer plan (its arrays' capacity reused)
  bool fi_on_ = false;   // --attention-backend flashinfer
  device_buffer arena_dev_;
  int32_t pad_block_ = 0;  // scratch KV block past the allocator's blocks (padding rows)
  int32_t pad_slot_ = 0;   // scratch last-token slot (padding rows)
  // Tensor parallel (tensor_parallel_size > 1): the group and ranks 1..N-1; this executor is rank
  // 0.
  std::unique_ptr<gpu_draft_model> draft_;
  int32_t pick_slot_base_ =
      0;  // last-token slots [base, base + max_num_seqs * k) hold the draft's picks
  std::shared_ptr<nccl_group> tp_group_;
  std::vector<std::unique_ptr<tp_peer>> peers_;  // ranks that are GPUs of this process
  std::shared_ptr<communicator> world_;          // ranks that are other processes (MPI)
  bool has_peers() const noexcept { return !peers_.empty() || world_ != nullptr; }
  bool serving_ = false;  // create() finished: the other processes wait for jobs (or stop)
  // Posts a copy of a step (or a capture) to every peer; `base` is where its metadata lies on this
  // device. A failure after posting leaves the peers inside collectives: fail_group releases them.
  result<void> post_to_peers(const peer_job& job);
  error fail_group(error e);
  // Sampled rows a step may have: max_num_seqs, times 1 + num_speculative_tokens when proposals
  // are verified (each verifying sequence samples 1 + num_draft rows), within max_num_tokens.
  int32_t max_rows_ = 0;

  failed_sequences failed_;
  std::vector<int32_t>
      eos_ids_;  // generation_config eos ids, else config.json's (min_tokens masking)
};

// The tensor-parallel options against NCCL, the MPI job and the devices there are.
result<void> check_tensor_parallel(const gpu_executor_options& o) {
  if (o.tensor_parallel_size < 1)
    return make_error("invalid_argument", "gpu: tensor_parallel_size must be at least 1");
  if (o.tensor_parallel_size > 1 || o.nccl_single_rank) {
    if (!nccl_available())
      return make_error("unavailable", "--tensor-parallel-size " +
                                           std::to_string(o.tensor_parallel_size) +
                                           ": this build of the CUDA executor has no NCCL");
    if (o.world && o.world->size() != o.tensor_parallel_size)
      return error{"invalid_argument",
                   "--tensor-parallel-size " + std::to_string(o.tensor_parallel_size) + " with " +
                       std::to_string(o.world->size()) + " MPI ranks: start one rank per GPU",
                   "tensor_parallel_size"};
    if (const int n = device_count(); o.world && o.device >= n)
      return error{"invalid_argument",
                   "--tensor-parallel-size under mpirun: this rank's GPU is cuda:" +
                       std::to_string(o.device) + " (its local rank), and this host has " +
                       std::to_string(n) + " CUDA devices",
                   "tensor_parallel_size"};
    if (const int n = device_count(); !o.world && o.device + o.tensor_parallel_size > n)
      return error{"invalid_argument",
                   "--tensor-parallel-size " + std::to_string(o.tensor_parallel_size) + " needs " +
                       std::to_string(o.tensor_parallel_size) + " CUDA devices from cuda:" +
                       std::to_string(o.device) + "; this machine has " + std::to_string(n) +
                       " (sizes up to " + std::to_string(n - o.device) + " can run here)",
                   "tensor_parallel_size"};
  }
  return {};
}

// The options' checks that need no model, and what they decide of the KV cache and the attention
// backend.
struct backend_choice {
  kv_elem kv_type = kv_elem::bf16;
  // --attention-backend auto where FlashInfer may take the model (decided once the config is
  // known); --attention-backend flashinfer.
  bool fi_auto = false, fi_on = false;
};
result<backend_choice> check_options(const gpu_executor_options& o) {
  COSERVE_CUDA_TRY(check_tensor_parallel(o));
  if (device_count() == 0) return make_error("unavailable", "gpu: no CUDA device");
  if (o.load_format != "auto" && o.load_format != "dummy")
    return make_error("invalid_argument", "gpu: load_format must be auto or dummy");
  if (o.block_size <= 0 || o.max_num_tokens <= 0 || o.max_num_seqs <= 0)
    return make_error("invalid_argument",
                      "gpu: block_size, max_num_tokens and max_num_seqs must be positive");
  if (o.penalty_rows < -1)
    return make_error("invalid_argument", "gpu: penalty_rows must be -1 (max_num_seqs), 0 or more");
  if (o.gemv.fp8 < 0 || o.gemv.fp8 > k_gemv_max_rows || o.gemv.bf16 < 0 ||
      o.gemv.bf16 > k_gemv_max_rows)
    return make_error("invalid_argument", "gpu: gemv rows (fp8 and bf16) must be in [0, " +
                                              std::to_string(k_gemv_max_rows) + "]");
  if (o.num_speculative_tokens < 0 || o.num_speculative_tokens > 64)
    return make_error("invalid_argument", "gpu: num_speculative_tokens must be in [0, 64]");
  if (!o.quantization.empty() && o.quantization != "fp8")
    return make_error("invalid_argument",
                      "gpu: quantization must be fp8 (or none), not '" + o.quantization + "'");
  if (!o.draft_model_dir.empty() && o.num_speculative_tokens <= 0)
    return error{"invalid_argument",
                 "--speculative-config: a draft model needs num_speculative_tokens > 0",
                 "num_speculative_tokens"};
  kv_elem kv_type = kv_elem::bf16;
  switch (o.kv_cache_dtype) {
    case dtype::bf16:
      break;
    case dtype::f8_e4m3:
      kv_type = kv_elem::fp8_e4m3;
      break;
    case dtype::f8_e5m2:
      kv_type = kv_elem::fp8_e5m2;
      break;
    default:
      return make_error("invalid_argument",
                        std::string("gpu: the KV cache is bf16, fp8_e4m3 or fp8_e5m2, not ") +
                            std::string(dtype_name(o.kv_cache_dtype)));
  }
  if (o.attention_backend != "auto" && o.attention_backend != "native" &&
      o.attention_backend != "flashinfer")
    return error{
        "invalid_argument",
        "--attention-backend must be auto, native or flashinfer, not '" + o.attention_backend + "'",
        "attention_backend"};
  // auto: FlashInfer where it is built and takes the model (decided once the config is known,
  // below); FlashInfer's workspace is sized for the other ranks up front.
  const bool fi_auto =
      o.attention_backend == "auto" && flashinfer_built() && kv_type == kv_elem::bf16;
  bool fi_on = o.attention_backend == "flashinfer";
  if (fi_on && !flashinfer_built())
    return error{"unavailable",
                 "--attention-backend flashinfer: this build has no FlashInfer headers "
                 "(scripts/deps fetches them; "
                 "reconfigure with CMake afterwards)",
                 "attention_backend"};
  if (fi_on && kv_type != kv_elem::bf16)
    return error{"invalid_argument",
                 "--attention-backend flashinfer reads a bf16 KV cache; use --kv-cache-dtype auto",
                 "attention_backend"};
  return backend_choice{kv_type, fi_auto, fi_on};
}

// Starts rank r of the tensor-parallel group on a thread of its own (on cuda:device + r).
void start_peer(const gpu_executor_options& o, tp_peer::options po, int32_t r,
                std::vector<peer_start>& starting) {
  if (o.world) return;  // that rank's own process starts it (run_remote_tp_rank)
  po.rank = r;
  po.device = o.device + r;
  starting.push_back(std::async(std::launch::async, [po = std::move(po)]() mutable {
    return tp_peer::start(std::move(po));
  }));
}

// The model's attention on this GPU: an error for a shape no kernel takes; whether FlashInfer
// runs (fi_on: asked for; fi_auto: wherever it takes the model).
result<bool> choose_attention(const model_config& c, bool fi_on, bool fi_auto) {
  if (c.num_attention_heads % c.num_key_value_heads != 0 ||
      !attention_supported(c.num_attention_heads / c.num_key_value_heads, c.head_dim))
    return make_error(
        "unsupported",
        "gpu: attention supports head_dim 32, 64, 96 and 128 and GQA ratios up to 32");
  if (fi_on && !flashinfer_supports(c.num_attention_heads, c.num_key_value_heads, c.head_dim))
    return error{"unsupported",
                 "--attention-backend flashinfer: head_dim " + std::to_string(c.head_dim) +
                     " is not instantiated (64 and 128 are)",
                 "attention_backend"};
  // FlashInfer's split-KV plan depends on the window (its kernel splits only the keys in it), and a
  // step has one plan: every layer must share it.
  if (fi_on && shared_window(c) < 0)
    return error{
        "unsupported",
        "--attention-backend flashinfer: the model's layers have different sliding windows (" +
            std::to_string(c.sliding_window) +
            " on some, none on others); use --attention-backend native",
        "attention_backend"};
  if (fi_auto)
    fi_on = flashinfer_supports(c.num_attention_heads, c.num_key_value_heads, c.head_dim) &&
            shared_window(c) >= 0;
  return fi_on;
}

result<std::unique_ptr<gpu_executor>> gpu_executor::create(const gpu_executor_options& o) {
  auto checked = check_options(o);
  if (!checked) return std::move(checked).err();
  const kv_elem kv_type = checked->kv_type;
  const bool fi_auto = checked->fi_auto, fi_on = checked->fi_on;
  COSERVE_CUDA_TRY(cuda_check(cudaSetDevice(o.device), "cudaSetDevice"));
  std::unique_ptr<gpu_executor> e(new gpu_executor());
  e->opts_ = o;
  e->kv_type_ = kv_type;
  e->max_rows_ =
      o.num_speculative_tokens > 0
          ? int32_t(std::min<int64_t>(int64_t(o.max_num_seqs) * (1 + o.num_speculative_tokens),
                                      std::max(o.max_num_seqs, o.max_num_tokens)))
          : o.max_num_seqs;
  COSERVE_CUDA_TRY(e->create_streams());

  // Tensor parallel: ranks 1..N-1 start on their own threads (each uploads its shard) while this
  // thread uploads rank 0's.
  std::vector<peer_start> starting;
  auto peer_base = e->create_tp_group(o, kv_type, fi_on || fi_auto);
  if (!peer_base) return std::move(peer_base).err();
  if (o.load_format == "dummy")
    COSERVE_CUDA_TRY(e->load_dummy_weights(o, *peer_base, starting));
  else
    COSERVE_CUDA_TRY(e->load_checkpoint(o, *peer_base, starting));
  e->w_.gemv = o.gemv;
  for (auto& f : starting) {
    auto p = f.get();
    if (!p) return std::move(p).err();
    e->peers_.push_back(std::move(p.value()));
  }
  const model_config& c = e->w_.config;
  if (e->eos_ids_.empty()) e->eos_ids_ = c.eos_token_ids;
  auto attention = choose_attention(c, fi_on, fi_auto);
  if (!attention) return std::move(attention).err();
  e->fi_on_ = *attention;
  cudaDeviceProp prop{};
  COSERVE_CUDA_TRY(cuda_check(cudaGetDeviceProperties(&prop, o.device), "cudaGetDeviceProperties"));
  e->num_sms_ = prop.multiProcessorCount;
  if (!o.draft_model_dir.empty()) COSERVE_CUDA_TRY(e->load_draft_model(o));
  COSERVE_CUDA_TRY(e->allocate_buffers());
  e->describe(o, prop);
  if (o.tune_gemms) COSERVE_CUDA_TRY(e->tune_gemms());
  if (!o.enforce_eager && !o.return_logits) {
    // A failed capture may leave peers inside a collective of its eager run: release them.
    if (auto r = e->capture_graphs(); !r) return e->fail_group(std::move(r).err());
  }
  e->serving_ = true;
  return e;
}

result<void> gpu_executor::create_streams() {
  auto s = stream::create();
  if (!s) return std::move(s).err();
  stream_ = std::move(s.value());
  auto waiter = stream::create();
  if (!waiter) return std::move(waiter).err();
  waiter_ = std::move(waiter.value());
  auto g = gemm_runner::create();
  if (!g) return std::move(g).err();
  gemm_ = std::move(g.value());
  return {};
}

result<tp_peer::options> gpu_executor::create_tp_group(const gpu_executor_options& o,
                                                       kv_elem kv_type, bool fi_workspace) {
  const int32_t N = o.tensor_parallel_size;
  // What every other rank is started with (a thread here, or a process told by MPI).
  tp_peer::options peer_base;
  peer_base.max_num_tokens = o.max_num_tokens;
  peer_base.block_size = o.block_size;
  peer_base.kv_type = kv_type;
  peer_base.gpu_memory_utilization = o.gpu_memory_utilization;
  peer_base.last_token_slots = int32_t(last_token_slots() + pick_slots(o));
  peer_base.metadata_bytes = k_metadata_bytes;
  peer_base.tune_gemms = o.tune_gemms;
  peer_base.gemv = o.gemv;
  peer_base.fi_tmp_rows = fi_workspace ? k_fi_tmp_rows : 0;
  if (N > 1 && o.world) {
    // Ranks in other processes: the setup, then the NCCL unique id; every rank joins the group.
    remote_tp_setup rs;
    rs.max_num_tokens = peer_base.max_num_tokens;
    rs.block_size = peer_base.block_size;
    rs.last_token_slots = peer_base.last_token_slots;
    rs.kv_type = peer_base.kv_type;
    rs.gpu_memory_utilization = peer_base.gpu_memory_utilization;
    rs.metadata_bytes = peer_base.metadata_bytes;
    rs.tune_gemms = peer_base.tune_gemms;
    rs.fi_tmp_rows = peer_base.fi_tmp_rows;
    rs.dummy_seed = o.dummy_seed;
    rs.fp8 = o.quantization == "fp8";  // an fp8 checkpoint is seen by every rank's loader alike
    rs.dummy = o.load_format == "dummy";
    std::vector<unsigned char> setup = encode_remote_tp_setup(rs);
    COSERVE_CUDA_TRY(o.world->broadcast(setup, 0));
    auto id = nccl_group::new_unique_id();
    if (!id) return std::move(id).err();
    COSERVE_CUDA_TRY(o.world->broadcast(*id, 0));
    auto group = nccl_group::create_rank(*id, N, 0);
    if (!group) return std::move(group).err();
    tp_group_ = std::move(group.value());
    world_ = o.world;
  } else if (N > 1 || o.nccl_single_rank) {
    auto group = nccl_group::create([&] {
      std::vector<int32_t> d;
      for (int32_t r = 0; r < N; ++r) d.push_back(o.device + r);
      return d;
    }());
    if (!group) return std::move(group).err();
    tp_group_ = std::move(group.value());
    peer_base.group = tp_group_;
  }
  return peer_base;
}

result<void> gpu_executor::load_dummy_weights(const gpu_executor_options& o,
                                              const tp_peer::options& peer_base,
                                              std::vector<peer_start>& starting) {
  const int32_t N = o.tensor_parallel_size;
  model_config c;
  if (o.config) {
    c = *o.config;
  } else {
    auto lc = load_model_config(o.model_dir);
    if (!lc) return std::move(lc).err();
    c = std::move(lc.value());
  }
  const bool fp8 = o.quantization == "fp8";
  model_config c0 = c;
  if (N > 1) {  // random weights per rank (a benchmark's model, not one to compare across sizes)
    model_weights probe;
    probe.config = c;
    COSERVE_CUDA_TRY(check_tensor_parallel_size(probe, N));
    for (int32_t r = 1; r < N && !o.world; ++r) {
      tp_peer::options po = peer_base;
      po.fp8 = fp8;
      po.dummy_config = rank_config(c, shard_shape(c, r, N));
      po.dummy_seed = o.dummy_seed + uint64_t(r);
      start_peer(o, std::move(po), r, starting);
    }
    c0 = rank_config(c, shard_shape(c, 0, N));
  }
  auto w = dummy_weights(c0, o.dummy_seed, stream_.get(), o.progress, fp8);
  if (!w) return std::move(w).err();
  w_ = std::move(w.value());
  return {};
}

result<void> gpu_executor::load_checkpoint(const gpu_executor_options& o,
                                           const tp_peer::options& peer_base,
                                           std::vector<peer_start>& starting) {
  const int32_t N = o.tensor_parallel_size;
  auto hw = load_weights(o.model_dir, o.progress);
  if (!hw) return std::move(hw).err();
  const bool fp8 = o.quantization == "fp8" || !hw->config.quantization.method.empty();
  if (const std::string note = describe_fp8(*hw); !note.empty())
    std::fprintf(stderr, "coserve: %s, requantized to fp8 per output channel on the GPU\n",
                 note.c_str());
  if (N > 1) {
    for (int32_t r = 1; r < N && !o.world; ++r) {
      auto sh = shard_weights(*hw, r, N);
      if (!sh) return std::move(sh).err();
      tp_peer::options po = peer_base;
      po.fp8 = fp8;
      po.shard = std::make_shared<const model_weights>(std::move(sh.value()));
      start_peer(o, std::move(po), r, starting);
    }
    auto s0 = shard_weights(*hw, 0, N);
    if (!s0) return std::move(s0).err();
    s0->lm_head = hw->lm_head;  // rank 0 keeps the whole LM head: it alone samples
    s0->config = rank_config(hw->config, s0->shard);
    auto w = upload_weights(*s0, stream_.get(), o.progress, fp8);
    if (!w) return std::move(w).err();
    w_ = std::move(w.value());
  } else {
    auto w = upload_weights(*hw, stream_.get(), o.progress, fp8);
    if (!w) return std::move(w).err();
    w_ = std::move(w.value());
  }
  auto gen = load_generation_config(o.model_dir);
  if (gen) eos_ids_ = gen->eos_token_ids;
  return {};
}

result<void> gpu_executor::load_draft_model(const gpu_executor_options& o) {
  gpu_draft_model::options dopt;
  dopt.dir = o.draft_model_dir;
  dopt.max_num_tokens = o.max_num_tokens;
  dopt.max_picks = o.max_num_seqs;
  dopt.block_size = o.block_size;
  dopt.kv_type = kv_type_;
  dopt.num_sms = num_sms_;
  const model_config& tc = w_.config;
  auto d = gpu_draft_model::load(dopt, tc,
                                 o.max_model_len > 0 ? o.max_model_len : tc.max_position_embeddings,
                                 stream_.get(), o.progress);
  if (!d) return std::move(d).err();
  draft_ = std::move(d.value());
  return {};
}

void gpu_executor::describe(const gpu_executor_options& o, const cudaDeviceProp& prop) {
  const int32_t N = o.tensor_parallel_size;
  const model_config& c = w_.config;
  info_.block_size = o.block_size;
  info_.verifies_proposals = o.num_speculative_tokens > 0;
  info_.computes_prompt_logprobs = true;
  info_.vocab_size = c.vocab_size;
  info_.max_model_len = o.max_model_len > 0 ? o.max_model_len : c.max_position_embeddings;
  info_.device = "cuda:" + std::to_string(o.device) + " (" + prop.name + ")" +
                 (w_.fp8 ? ", fp8 W8A8 weights " : ", bf16 weights ") +
                 std::to_string(w_.bytes >> 20) + " MiB, kv " +
                 std::string(dtype_name(o.kv_cache_dtype)) +
                 (fi_on_ ? ", FlashInfer attention" : "");
  if (draft_)
    info_.device += ", draft model " + std::to_string(draft_->config().num_hidden_layers) +
                    " layers (" + std::to_string(draft_->weight_bytes() >> 20) + " MiB)";
  if (!free_penalty_rows_.empty())
    info_.device += ", penalty counts for " + std::to_string(free_penalty_rows_.size()) +
                    " sequences (" + std::to_string(penalty_counts_.bytes() >> 20) + " MiB)";
  if (N > 1) {
    info_.device += ", tensor parallel " + std::to_string(N) + " (NCCL)";
    std::fprintf(stderr,
                 "coserve gpu: rank 0: cuda:%d, %d query / %d KV heads, MLP width %d, weights %lld "
                 "MiB (with the "
                 "whole LM head), %d KV blocks on every rank\n",
                 o.device, c.num_attention_heads, c.num_key_value_heads, c.intermediate_size,
                 static_cast<long long>(w_.bytes >> 20), info_.num_kv_blocks);
    for (const auto& p : peers_)
      std::fprintf(stderr, "coserve gpu: %s\n", p->description().c_str());
  }
}

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

result<void> gpu_executor::tune_gemms() {
  const model_config& c = w_.config;
  const int32_t H = c.hidden_size;
  auto layer_shapes = layer_gemm_shapes(w_, scratch_);
  if (!layer_shapes) return std::move(layer_shapes).err();
  std::vector<gemm_runner::shape> shapes = std::move(*layer_shapes);
  gemm_runner::shape head;
  head.n = c.vocab_size;
  head.k = H;
  head.out = gemm_out::f32;
  head.w = w_.lm_head_data();
  head.x = final_.get();
  head.y = logits_.get();
  head.max_m = max_rows_;
  shapes.push_back(head);
  auto rep = gemm_.tune(shapes, stream_.get());
  if (!rep) return std::move(rep).err();
  std::fprintf(
      stderr,
      "coserve gpu: GEMMs tuned in %.2f s: %d (rows bucket, shape) pairs, %d candidates timed; one "
      "other "
      "than cuBLASLt's first choice won %d of them, saving %.3f ms per pass over all pairs\n",
      rep->seconds, rep->shapes, rep->candidates, rep->not_first, rep->saved_ms_per_pass);
  return {};
}

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

result<size_t> gpu_executor::upload_fi_arena(const fi_schedule& sch, std::span<std::byte> staging) {
  if (auto r = write_fi_schedule(sch, fi_arena_, staging); !r) return r.err();
  const size_t from = fi_arena_.kv_indptr, to = fi_arena_.kv_indices + sch.kv_indices.size() * 4;
  COSERVE_CUDA_TRY(cuda_check(cudaMemcpyAsync(arena_dev_.as<char>() + from, staging.data() + from,
                                              to - from, cudaMemcpyHostToDevice, stream_.get()),
                              "graph FlashInfer metadata"));
  return to;
}

result<void> gpu_executor::capture_graphs() {
  const auto t0 = std::chrono::steady_clock::now();
  size_t free0 = 0, free1 = 0, total = 0;
  COSERVE_CUDA_TRY(cuda_check(cudaMemGetInfo(&free0, &total), "cudaMemGetInfo"));
  cudaStream_t s = stream_.get();
  const int32_t max_len = info_.max_model_len;
  const int32_t max_blocks = (max_len + opts_.block_size - 1) / opts_.block_size;
  plan_graph_buckets(max_len, max_blocks);
  size_t arena_end = arena_.bytes;
  if (fi_on_) {
    COSERVE_CUDA_TRY(plan_fi_graphs(max_blocks));
    if (graphs_.empty()) return {};
    arena_end = fi_arena_.end;
  }
  if (arena_end > frames_[0].meta.bytes()) {  // very long contexts x many sequences: stay eager
    std::fprintf(
        stderr,
        "coserve gpu: CUDA graphs off: their metadata (%zu MiB for %d sequences x %d blocks) "
        "exceeds the %zu MiB staging buffer\n",
        arena_end >> 20, buckets_.back(), max_blocks, frames_[0].meta.bytes() >> 20);
    graphs_.clear();
    buckets_.clear();
    return {};
  }
  auto ad = device_buffer::allocate(arena_end);
  if (!ad) return std::move(ad).err();
  arena_dev_ = std::move(ad.value());
  const step_meta m = arena_meta();
  const int32_t* counts = reinterpret_cast<const int32_t*>(arena_dev_.as<char>() + arena_.counts);
  for (decode_graph& g : graphs_)
    COSERVE_CUDA_TRY(capture_decode_graph(g, m, counts, arena_end, s));
  // The capture batches wrote the scratch block: zero it again (each peer did its own).
  COSERVE_CUDA_TRY(kv_.zero_scratch_block(w_.config.num_hidden_layers, s));
  COSERVE_CUDA_TRY(stream_.synchronize());
  COSERVE_CUDA_TRY(cuda_check(cudaMemGetInfo(&free1, &total), "cudaMemGetInfo"));
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::fprintf(
      stderr,
      "coserve gpu: captured %zu CUDA graphs for decode batches 1..%d in %.2f s (%.1f MiB; "
      "--enforce-eager turns them off)\n",
      graphs_.size(), buckets_.back(), secs,
      double(int64_t(free0) - int64_t(free1)) / double(1 << 20));
  return {};
}

void gpu_executor::plan_graph_buckets(int32_t max_len, int32_t max_blocks) {
  for (int32_t b : decode_graph_buckets(opts_.max_num_seqs))
    if (b <= opts_.max_num_tokens) buckets_.push_back(b);
  // Splits are bounded by the partial-output workspace: plan graph steps without them if the
  // largest bucket at the longest context would exceed it.
  graph_opts_ = plan_options();
  for (int32_t b : buckets_) {
    auto pl = plan_batch(
        std::vector<scheduled_seq>(
            size_t(b),
            scheduled_seq{0, {0}, max_len - 1, std::vector<int32_t>(size_t(max_blocks), 0), true}),
        graph_opts_);
    if (pl && pl->num_partial_rows > k_max_partial_rows) graph_opts_.num_sms = 0;
  }
  graph_capacity most;
  for (int32_t b : buckets_) {
    decode_graph g;
    g.bucket = b;
    g.cap = decode_graph_capacity(b, max_len, graph_opts_);
    most.max_work = std::max(most.max_work, g.cap.max_work);
    most.max_merges = std::max(most.max_merges, g.cap.max_merges);
    graphs_.push_back(g);
  }
  arena_ = make_graph_arena_layout(buckets_.back(), max_blocks, most.max_work, most.max_merges);
}

result<void> gpu_executor::plan_fi_graphs(int32_t max_blocks) {
  // FlashInfer's CUDA-graph grid depends on the bucket's size only: plan each capture batch; a
  // bucket whose split workspace would exceed FlashInfer's is left to eager steps.
  int32_t max_padded = 0;
  std::vector<decode_graph> kept;
  for (decode_graph& g : graphs_) {
    auto pl = plan_batch(
        std::vector<scheduled_seq>(size_t(g.bucket), scheduled_seq{0, {0}, 0, {pad_block_}, true}),
        graph_opts_);
    if (!pl) return std::move(pl).err();
    auto sch = plan_flashinfer(*pl, fi_plan_options(true));
    if (!sch) return std::move(sch).err();
    if (sch->tmp_rows() > k_fi_tmp_rows) {
      std::fprintf(
          stderr,
          "coserve gpu: no CUDA graph for decode batches of %d: FlashInfer's split workspace "
          "would need %lld rows (%lld reserved)\n",
          g.bucket, static_cast<long long>(sch->tmp_rows()), static_cast<long long>(k_fi_tmp_rows));
      continue;
    }
    max_padded = std::max(max_padded, sch->padded_batch_size);
    g.fi = std::move(sch.value());  // the capture below runs this plan
    kept.push_back(std::move(g));
  }
  graphs_ = std::move(kept);
  buckets_.clear();
  for (const decode_graph& g : graphs_) buckets_.push_back(g.bucket);
  if (graphs_.empty()) return {};
  fi_arena_ = fi_graph_offsets(arena_.bytes, arena_.rows, max_blocks, max_padded);
  return {};
}

result<void> gpu_executor::capture_decode_graph(decode_graph& g, const step_meta& m,
                                                const int32_t* counts, size_t arena_end,
                                                cudaStream_t s) {
  // Metadata of a batch whose rows all sit on the scratch block, then one eager run (cuBLASLt
  // plans for this batch size, lazy module loading) and the capture of the same launches.
  std::vector<scheduled_seq> seqs(size_t(g.bucket), scheduled_seq{0, {0}, 0, {pad_block_}, true});
  const std::vector<int32_t> ids(size_t(g.bucket), 0), slots(size_t(g.bucket), pad_slot_);
  const std::vector<sample_row_params> params(size_t(g.bucket),
                                              sample_row_params{0.0f, 1.0f, 0.0f, 0, 0, 0});
  const std::span<std::byte> staging(static_cast<std::byte*>(frames_[0].meta.get()),
                                     frames_[0].meta.bytes());
  auto bytes = fill_graph_arena(graph_step_input{seqs, ids, params, slots, pad_block_, pad_slot_},
                                g.bucket, arena_, graph_opts_, staging);
  if (!bytes) return std::move(bytes).err();
  // Padding-only rows would write no KV; here every row is "real" and writes the scratch block.
  COSERVE_CUDA_TRY(cuda_check(
      cudaMemcpyAsync(arena_dev_.get(), frames_[0].meta.get(), *bytes, cudaMemcpyHostToDevice, s),
      "graph metadata"));
  forward_shape fs{g.bucket, g.bucket, g.cap.max_work, g.cap.max_merges, counts};
  size_t meta_n = *bytes;
  if (fi_on_) {  // the bucket's plan, made above for the same batch
    auto up = upload_fi_arena(g.fi, staging);
    if (!up) return std::move(up).err();
    meta_n = *up;
    fs.fi = fi_step_at(g.fi, fi_arena_, arena_dev_.get(), m.cu_seqlens);
  }
  // Peers run the same eager pass (its collectives need every rank) and capture theirs.
  std::vector<std::future<result<void>>> peers_done;
  if (has_peers()) {
    peer_job j = peer_forward_job(m, fs, frames_[0].meta.get(), meta_n, arena_dev_.get());
    j.what = peer_job::kind::capture;
    j.bucket = g.bucket;
    j.arena_bytes = arena_end;
    for (auto& p : peers_) {
      peer_job mine = j;
      mine.done = std::make_shared<std::promise<result<void>>>();
      peers_done.push_back(mine.done->get_future());
      p->post(std::move(mine));
    }
    if (world_) COSERVE_CUDA_TRY(post_to_peers(j));  // other processes: nothing to wait on here
  }
  auto exec = capture_graph(s, [&] { return forward(fs, m, nullptr); });
  if (!exec) return std::move(exec).err();
  g.exec = *exec;
  for (auto& f : peers_done) COSERVE_CUDA_TRY(f.get());
  return {};
}

result<void> gpu_executor::allocate_buffers() {
  const model_config& c = w_.config;
  const size_t T = size_t(opts_.max_num_tokens), S = size_t(max_rows_);
  const size_t H = size_t(c.hidden_size), V = size_t(c.vocab_size);
  COSERVE_CUDA_TRY(scratch_.allocate(c, opts_.max_num_tokens, w_.fp8, fi_on_ ? k_fi_tmp_rows : 0));
  struct want {
    device_buffer* b;
    size_t bytes;
  };
  for (want x : {want{&final_, S * H * 2}, want{&logits_, S * V * 4}, want{&tok_out_, S * 4},
                 want{&top_out_, S * size_t(k_top_logprob_words) * 4}, want{&lp_out_, S * 4},
                 want{&meta_dev_, k_metadata_bytes},
                 want{&prompt_out_, T * size_t(k_prompt_row_words) * 4}}) {
    auto b = device_buffer::allocate(x.bytes);
    if (!b) return std::move(b).err();
    *x.b = std::move(b.value());
  }
  for (frame& f : frames_) {
    auto mh = pinned_buffer::allocate(k_metadata_bytes);
    if (!mh) return std::move(mh).err();
    f.meta = std::move(mh.value());
    auto oh = pinned_buffer::allocate(S * 8 + (opts_.return_logits ? S * V * 4 : 0));
    if (!oh) return std::move(oh).err();
    f.out = std::move(oh.value());
    auto th = pinned_buffer::allocate(S * size_t(k_top_logprob_words) * 4);
    if (!th) return std::move(th).err();
    f.top = std::move(th.value());
    auto ph = pinned_buffer::allocate(T * size_t(k_prompt_row_words) * 4);
    if (!ph) return std::move(ph).err();
    f.prompt_out = std::move(ph.value());
  }
  for (step_events& e : events_) {
    auto a = event::create(true);
    auto b = event::create(true);
    if (!a) return std::move(a).err();
    if (!b) return std::move(b).err();
    e.start = std::move(a.value());
    e.end = std::move(b.value());
  }
  // The sequences' slots, then (draft model) the picks' slots: max_num_seqs proposing sequences x
  // k.
  const size_t slots = last_token_slots();
  const size_t picks = draft_ ? pick_slots(opts_) : 0;
  pick_slot_base_ = int32_t(slots);
  auto lt = device_buffer::allocate((slots + picks) * 4);
  if (!lt) return std::move(lt).err();
  last_tokens_ = std::move(lt.value());
  COSERVE_CUDA_TRY(
      cuda_check(cudaMemset(last_tokens_.get(), 0, (slots + picks) * 4), "last-token buffer"));
  // Token counts of penalised sequences, before the KV cache takes what is left.
  if (const int32_t rows = opts_.penalty_rows < 0 ? opts_.max_num_seqs : opts_.penalty_rows;
      rows > 0) {
    auto pc = device_buffer::allocate(size_t(rows) * V * 4);
    if (!pc) return std::move(pc).err();
    penalty_counts_ = std::move(pc.value());
    for (int32_t r = rows; r-- > 0;) free_penalty_rows_.push_back(r);
  }
  if (draft_)
    for (frame& f : frames_) {
      auto dm = pinned_buffer::allocate(size_t(8) << 20);
      if (!dm) return std::move(dm).err();
      f.draft_meta = std::move(dm.value());
      auto pp = pinned_buffer::allocate(picks * 4);
      if (!pp) return std::move(pp).err();
      f.proposals = std::move(pp.value());
    }
  pad_slot_ = int32_t(slots - 1);  // reserved for graph padding rows
  for (size_t i = slots - 1; i-- > 0;) free_slots_.push_back(int32_t(i));
  // The inverse frequencies the CPU executor uses (model/rope.cpp: every scaling type, GGUF's
  // rope_freqs.weight), and LongRoPE's long table.
  COSERVE_CUDA_TRY(rope_.upload(c));

  // KV cache last, from what is left (tensor parallel: the fewest blocks any rank fits, so one
  // block table addresses every rank). One more block than the allocator hands out: the scratch
  // block CUDA-graph padding rows attend over (zeroed, never written: padding rows write no KV).
  int32_t blocks = opts_.num_kv_blocks;
  auto fit = kv_blocks_that_fit(c, opts_.block_size, kv_type_, opts_.gpu_memory_utilization,
                                draft_ ? draft_->kv_block_bytes() : 0);
  std::vector<int32_t> fits;
  if (world_) {  // every rank reports (its fit or its error), whatever this one found
    const auto mine = encode_remote_report(fit ? *fit : 0, fit ? "" : fit.err().message);
    std::vector<unsigned char> all;
    COSERVE_CUDA_TRY(world_->gather(mine.data(), mine.size(), &all, 0));
    auto reports = decode_remote_reports(all, world_->size());
    if (!reports) return std::move(reports).err();
    fits = std::move(reports.value());
  }
  if (blocks <= 0) {
    if (!fit) return std::move(fit).err();
    blocks = *fit;
    for (const auto& p : peers_) blocks = std::min(blocks, p->kv_blocks_fit());
    for (int32_t f : fits) blocks = std::min(blocks, f);
  }
  COSERVE_CUDA_TRY(kv_.allocate(c, opts_.block_size, blocks, kv_type_));
  if (draft_) COSERVE_CUDA_TRY(draft_->allocate_kv(blocks));  // the same block ids
  std::vector<std::future<result<void>>> peers_done;
  for (auto& p : peers_) {
    peer_job j;
    j.what = peer_job::kind::allocate_kv;
    j.num_kv_blocks = blocks;
    j.done = std::make_shared<std::promise<result<void>>>();
    peers_done.push_back(j.done->get_future());
    p->post(std::move(j));
  }
  for (auto& f : peers_done) COSERVE_CUDA_TRY(f.get());
  if (world_) {
    peer_job j;
    j.what = peer_job::kind::allocate_kv;
    j.num_kv_blocks = blocks;
    COSERVE_CUDA_TRY(post_to_peers(j));
  }
  info_.num_kv_blocks = blocks;
  pad_block_ = blocks;
  return {};
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

}  // namespace

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
