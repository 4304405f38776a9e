// The CUDA executor: the `executor` interface (model/executor.hpp) on one GPU. bf16 weights and KV
// cache, cuBLASLt GEMMs, the kernel families of gpu/kernels.hpp, sampling on the device.
//
// Thread and ownership: one executor per GPU, owned by its actor; execute() runs on the actor's
// thread, never concurrently. It issues the whole step on its own stream and waits for the sampled
// ids with a blocking stream synchronize, because the interface is synchronous: the actor runs it on
// the executor's own thread, not on a runtime thread. (gpu::async_wait is the awaitable form for a
// split issue/collect interface; the executor does not expose one yet.)
//
// Per step the host builds the batch metadata once (gpu/batch_plan.hpp), packs it into one pinned
// buffer and uploads it with one copy; every layer's kernels read it from there.
//
// Sampling follows the CPU sampler's order: logit_bias, min_tokens masking and the repetition /
// presence / frequency penalties as sparse edits (gpu/logit_edit.hpp), then temperature, top-k,
// top-p, min-p and a seeded draw (gpu/kernels/sampling.cuh). Seeded draws use a different random
// stream than the CPU executor, so only greedy output is expected to match it token for token.
// Top-N logprobs (logprobs > 0): the edited row of that sequence is copied back and ranked on the
// host with the CPU sampler's functions.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "model/config.hpp"
#include "model/executor.hpp"
#include "model/weights.hpp"

namespace coserve::gpu {

struct gpu_executor_options {
  std::string model_dir;                 // Hugging Face folder (config.json [+ safetensors])
  std::optional<model_config> config;    // used instead of model_dir/config.json when set (dummy only)
  std::string load_format = "auto";      // "auto": safetensors from model_dir; "dummy": random weights
  uint64_t dummy_seed = 0;
  int32_t device = 0;
  double gpu_memory_utilization = 0.9;
  int32_t block_size = 16;
  int32_t max_num_tokens = 8192;         // tokens per step at most (sizes the activations)
  int32_t max_num_seqs = 256;            // sampled rows per step at most
  int32_t max_model_len = 0;             // 0: the model's max_position_embeddings
  int32_t num_kv_blocks = 0;             // > 0: use exactly this many blocks instead of sizing
  bool return_logits = false;            // copy raw logits of sampled rows into seq_output::logits
  load_progress progress;                // (tensors done, total, bytes) while weights load
};

// Creates the CUDA executor (errors: no device, out of memory, unsupported model, bad options).
result<std::unique_ptr<executor>> make_gpu_executor(const gpu_executor_options& options);

}  // namespace coserve::gpu
