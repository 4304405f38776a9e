// The CUDA executor's startup, gpu_executor::create() and its steps: the options' checks, the
// streams, the tensor-parallel group, the weights (rank 0's uploaded here while the other ranks
// start on their threads), the attention backend, the draft model, the buffers and the KV cache,
// GEMM tuning, and the decode CUDA graphs' capture. Over 500 lines: one function per startup step,
// in the order create() runs them.
#include <algorithm>
#include <chrono>
#include <cstdio>

#include "gpu/gpu_executor_impl.hpp"
#include "gpu/kv_cache_sizing.hpp"
#include "gpu/launch_params.hpp"
#include "model/tensor_parallel.hpp"

namespace coserve::gpu::detail {

namespace {

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
}  // namespace

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
  auto s = cuda_stream::create();
  if (!s) return std::move(s).err();
  stream_ = std::move(s.value());
  auto waiter = cuda_stream::create();
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

}  // namespace coserve::gpu::detail
