// The CUDA executor's class behind gpu/gpu_executor.hpp: its state and the declarations of its
// steps, shared by its three sources: gpu/gpu_executor.cpp (launch, collect, the head of the
// forward pass, the tensor-parallel posts), gpu/gpu_executor_create.cpp (startup: the options'
// checks, the weights, the buffers and KV cache, GEMM tuning, the decode graphs' capture) and
// gpu/gpu_executor_issue.cpp (a step's host planning and enqueues). Included by those alone: it
// needs the CUDA headers, which the executor's public header keeps away from its users.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <future>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "gpu/batch_plan.hpp"
#include "gpu/cuda_stream.hpp"
#include "gpu/decode_graph.hpp"
#include "gpu/device_buffer.hpp"
#include "gpu/device_weights.hpp"
#include "gpu/draft_model.hpp"
#include "gpu/draft_plan.hpp"
#include "gpu/flashinfer_attention.hpp"
#include "gpu/forward_pass.hpp"
#include "gpu/gemm.hpp"
#include "gpu/gpu_executor.hpp"
#include "gpu/kernels.hpp"
#include "gpu/logit_edit.hpp"
#include "gpu/sample_row_params.hpp"
#include "gpu/tp_peer.hpp"
#include "model/sampler.hpp"
#include "model/structured_output.hpp"

namespace coserve::gpu::detail {

constexpr size_t k_metadata_bytes = size_t(16) << 20;  // per-step metadata (pinned + device)
// FlashInfer's split-KV workspace, in rows of num_q_heads x head_dim (every rank the same count):
// a step whose split plan needs more runs unsplit; a graph bucket that needs more is not captured.
constexpr int64_t k_fi_tmp_rows = 8192;

// The sliding window every layer uses (0: none), or -1 when the layers differ.
inline int32_t shared_window(const model_config& c) {
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
  // The prompt logprob rows of the chunks that follow on from the last one scored.
  result<void> plan_prompt_logprobs(const step_plan& plan, step_host& hs, launched_step& rec);
  // The sampled rows (sample_row); an error when there are more than max_rows_.
  result<void> plan_sample_rows(const step_plan& plan, step_host& hs) const;
  // Each sampled row's parameters, logit edits, grammar mask, penalty rows and slot.
  result<void> plan_sampling(const step_plan& plan, step_host& hs, launched_step& rec);
  // Adds the row's allowed-token mask (grammar and/or allowed_token_ids); returns `generated`,
  // raised to min_tokens when the mask allows nothing but the ids min_tokens would mask.
  int32_t add_allowed_tokens(seq_state& st, size_t row, int32_t generated, step_host& hs) const;
  // Everything is enqueued: the sampled rows are now pending until collect().
  void commit_rows(const step_plan& plan, const step_host& hs, launched_step& rec);
  // The draft's passes, enqueued ahead of the model's forward, which reads their picks.
  result<void> run_draft_passes(const step_plan& plan, const step_host& hs,
                                const launched_step& rec, cudaStream_t s);
  // Whether the step may replay a decode graph (decode only, no edits, masks or rows to write).
  bool is_graph_step(const step_plan& plan, const step_host& hs) const;
  // Replays the bucket's graph and downloads its outputs (true), or enqueues nothing when the
  // batch does not fit the graph (false: the step runs eagerly).
  result<bool> replay_graph(int32_t bucket, const step_plan& plan, const step_host& hs,
                            launched_step& rec, const step_events& ev, cudaStream_t s);
  // The eager step's batch plan (without splits when they would exceed the workspace).
  result<batch_plan> plan_eager_batch(const step_plan& plan) const;
  // Packs the eager step's arrays (and FlashInfer's plan) into the frame's metadata.
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
  cuda_stream stream_;
  cuda_stream waiter_;  // completions' host functions (async_wait_beside), off the step stream
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

}  // namespace coserve::gpu::detail
