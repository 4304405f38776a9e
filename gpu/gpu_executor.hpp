// The CUDA executor: the `executor` interface (model/executor.hpp) on one GPU. bf16 weights and KV
// cache, cuBLASLt GEMMs, the kernel families of gpu/kernels.hpp, sampling on the device.
//
// Thread and ownership: one executor per GPU, owned by its actor, called from one thread at a time.
// With tensor_parallel_size N > 1 this executor is rank 0 on cuda:device and drives N - 1 peers on
// the next devices, each on its own thread (gpu/tp_peer.hpp): the model split Megatron-style,
// NCCL all-reduces, the whole LM head and sampling on rank 0.
// Launch / collect (model/executor.hpp): launch() plans the step on the host, enqueues all of it on
// the executor's stream (metadata upload, forward, sampling, the sampled ids' copy into pinned
// memory) and, on a second stream waiting for an event behind that work, a host function
// (gpu::async_wait_beside) that only posts the completion to the caller's executor, so the next
// step queued on the stream does not wait for it; it never waits. collect() reads the step's
// outputs from pinned memory. Two steps may be in flight: step N+1's decode inputs come from step
// N's sampled ids on the device (a last-token buffer with one slot per live sequence, which the
// embedding gather reads and the sampler's scatter writes), so the host learns the ids one step
// later. A step that samples for a sequence under a grammar needs the host's view of its history,
// so it is not launched ahead (can_launch_ahead). No stream or device synchronize on this path;
// execute() (tests, benchmarks) is launch + wait on a private io_context + collect.
//
// Per step the host builds the batch metadata once (gpu/batch_plan.hpp), packs it into one pinned
// buffer and uploads it with one copy; every layer's kernels read it from there. The pinned
// metadata and output buffers are double-buffered (step N+1 is staged while N's copies may still be
// pending). CUDA timing events around each step give the device timeline (gpu_step_timeline).
//
// Sampling follows the CPU sampler's order: logit_bias and min_tokens masking as sparse edits, the
// repetition / presence / frequency penalties from per-sequence token counts kept on the device
// (gpu/logit_edit.hpp: a row of counts per penalised sequence, written once from the host's history
// and then counted up on the device by each step's sampled token, so penalised decode steps run
// two in flight and replay CUDA graphs), then temperature, top-k, top-p, min-p and a seeded draw
// (gpu/kernels/sampling.cuh). Where a sequence has no count row in step (a verify step of
// speculative decoding; penalty_rows 0; its row not yet rebuilt while a token is in flight) its
// penalties come as sparse edits built from the host's history instead, with a token still being
// sampled by the step before counted on the device. Seeded draws use a different random
// stream than the CPU executor, so only greedy output is expected to match it token for token.
// Top-N logprobs (logprobs > 0, at most 20) are ranked on the device by the sampling kernel over
// the same processed row it draws from; only N (id, logprob) pairs per row come back. Decode steps
// that ask for them still replay CUDA graphs.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "gpu/launch_params.hpp"
#include "model/communicator.hpp"
#include "model/config.hpp"
#include "model/executor.hpp"
#include "model/weights.hpp"

namespace coserve::gpu {

struct gpu_executor_options {
  std::string model_dir;  // Hugging Face folder (config.json [+ safetensors])
  std::optional<model_config>
      config;                        // used instead of model_dir/config.json when set (dummy only)
  std::string load_format = "auto";  // "auto": safetensors from model_dir; "dummy": random weights
  uint64_t dummy_seed = 0;
  int32_t device = 0;
  double gpu_memory_utilization = 0.9;
  int32_t block_size = 16;
  int32_t max_num_tokens = 8192;  // tokens per step at most (sizes the activations)
  int32_t max_num_seqs = 256;     // sampled rows per step at most
  // Rows of token counts on the device for sequences with repetition / presence / frequency
  // penalties (vocab x 4 bytes each, taken from the KV cache's memory): -1 gives max_num_seqs, so
  // every sequence of a step has one; 0 applies penalties as sparse edits from the host instead.
  int32_t penalty_rows = -1;
  int32_t max_model_len = 0;   // 0: the model's max_position_embeddings
  int32_t num_kv_blocks = 0;   // > 0: use exactly this many blocks instead of sizing
  bool return_logits = false;  // copy raw logits of sampled rows into seq_output::logits
  // Decode-only steps replay CUDA graphs captured at startup per batch bucket
  // (gpu/decode_graph.hpp); true runs every step eagerly (vLLM's --enforce-eager). No graphs with
  // return_logits either.
  bool enforce_eager = false;
  // Time cuBLASLt's candidate algorithms for each of the model's GEMMs at each bucket of rows at
  // startup (gemm_runner::tune; logged) instead of taking its heuristic's first choice.
  bool tune_gemms = true;
  // "fp8" (vLLM's --quantization fp8): the layer matrices in E4M3 per output channel, activations
  // quantized per token before each GEMM (W8A8, cuBLASLt fp8). "" keeps bf16, except that an fp8
  // checkpoint (config.json quantization_config) selects fp8 by itself.
  std::string quantization;
  // Small steps through the GEMV kernels instead of cuBLASLt, per weight type
  // (gpu/launch_params.hpp).
  gemv_rows gemv;
  // --kv-cache-dtype: bf16, or f8_e4m3 / f8_e5m2 (one byte per value, unscaled: twice the blocks
  // in the same memory; gpu/kernels.hpp, kv_elem).
  dtype kv_cache_dtype = dtype::bf16;
  // Speculative decoding: the most proposals a sequence verifies in one step (> 0 turns
  // verification on: executor_info::verifies_proposals). Proposals come in the plan (n-gram lookup
  // on the host) or from the draft model below; a row is sampled per proposal and one after them,
  // and a proposal is accepted when its row samples it.
  int32_t num_speculative_tokens = 0;
  // A draft model folder ({"model": DIR} in --speculative-config): proposes greedily on the device
  // for the plan's k_token_from_draft tokens (gpu/draft_model.hpp); under tensor parallelism it
  // runs on rank 0 and its picks are broadcast to the other ranks.
  std::string draft_model_dir;
  // --tensor-parallel-size: the model split over this many GPUs of this process, cuda:device ..
  // cuda:device + N - 1 (gpu/tp_peer.hpp; NCCL). Sizes follow model/tensor_parallel.hpp's rule.
  int32_t tensor_parallel_size = 1;
  // An MPI job's communicator (mpirun -np N ... --tensor-parallel-size N; this process rank 0 on
  // cuda:device): the other ranks are processes running gpu::run_remote_tp_rank, one GPU each, and
  // every step's job reaches them by MPI broadcast (gpu/tp_peer.hpp). Null: ranks are GPUs of this
  // process.
  std::shared_ptr<communicator> world;
  // --attention-backend: "native" (gpu/kernels/attention.cuh; head_dim 32/64/96/128), "flashinfer"
  // (FlashInfer's FA2 paged prefill kernel on tensor cores for every step,
  // gpu/flashinfer_attention.hpp; bf16 KV cache, head_dim 64/128, one sliding window shared by
  // every layer or none, built with its headers) or "auto": flashinfer where all of that holds,
  // else native. The draft model keeps the native kernels.
  std::string attention_backend = "auto";
  // Tests: with tensor_parallel_size 1, still run every collective through a one-rank NCCL group
  // (the tensor-parallel path on a single GPU).
  bool nccl_single_rank = false;
  load_progress progress;  // (tensors done, total, bytes) while weights load
};

// sizeof(gpu_executor_options) and sizeof(executor_info), packed: both sides of the dlopen'ed CUDA
// module must agree on them (gpu/cuda_module.cpp, actors/engine.cpp).
constexpr uint64_t module_layout() {
  return (uint64_t(sizeof(gpu_executor_options)) << 32) | uint64_t(sizeof(executor_info));
}

// Creates the CUDA executor (errors: no device, out of memory, unsupported model, bad options).
result<std::unique_ptr<executor>> make_gpu_executor(const gpu_executor_options& options);

// The device's timeline over the steps collected so far, from CUDA timing events recorded on the
// stream before and after each step: busy = a step's own span; idle = the gap between the end of
// the step before it and its start (0 when it was already queued behind that step).
struct step_timeline {
  int64_t steps = 0;
  int64_t graph_steps = 0;  // of them, replayed from a CUDA graph
  double busy_ms = 0, idle_ms = 0, max_idle_ms = 0;
};
// The CUDA executor's timeline (nullopt for any other executor); reset_gpu_step_timeline zeroes it.
std::optional<step_timeline> gpu_step_timeline(const executor& e);
void reset_gpu_step_timeline(executor& e);

}  // namespace coserve::gpu
