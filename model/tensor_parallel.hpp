// Tensor parallelism for the CPU executor, Megatron-style, over a communicator (in-process
// threads or MPI ranks):
//   - q/k/v and gate/up are column-parallel: rank r holds its heads' rows and its slice of the
//     MLP's intermediate rows (views into the mapped file, nothing copied);
//   - o and down are row-parallel: rank r holds the matching input columns (copied out of the
//     file, as the columns of a row are not contiguous there), so their products are partial sums
//     that an all-reduce adds up before the residual;
//   - the LM head is vocabulary-parallel (rank r's rows of vocab_range), its logits gathered on
//     rank 0; the embedding, norms and biases of o are whole on every rank.
// KV heads: with N dividing the KV head count, rank r holds KV heads [r K/N, (r + 1) K/N). With K
// dividing N (more ranks than KV heads, as in vLLM), each KV head is replicated on N/K ranks: rank
// r holds KV head r / (N / K). Any other N is refused. The KV cache of a rank holds its KV heads'
// slice of every block; the scheduler's single block table addresses all ranks.
// Rank 0 runs the executor (sampling, sequence state); every step it broadcasts the resolved batch
// (tokens, positions, block tables, block copies) and the other ranks run the same forward pass
// on their shards (tp_worker).
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "base/result.hpp"
#include "model/communicator.hpp"
#include "model/cpu_forward.hpp"
#include "model/dtype.hpp"
#include "model/kv_cache.hpp"
#include "model/weights.hpp"
#include "model/worker_pool.hpp"

namespace coserve {

// The tensor-parallel sizes the model can be split into (1 first): sizes dividing the attention
// heads, meeting the KV-head rule, dividing the MLP width, with o's and down's column slices in
// whole quantization blocks.
std::vector<int32_t> tensor_parallel_sizes(const model_weights& w);
// An error naming the sizes that work when `size` is not one of them.
result<void> check_tensor_parallel_size(const model_weights& w, int32_t size);
// Rank `rank`'s counts (heads, KV heads, MLP width, LM-head rows) for a size that works.
tensor_shard shard_shape(const model_config& c, int32_t rank, int32_t size);
// Rank `rank`'s shard of `full` (which it shares the mapped files with), size > 1.
result<model_weights> shard_weights(const model_weights& full, int32_t rank, int32_t size);

// What every rank needs to build its KV cache and forward pass, sent by rank 0 at startup. `error`
// non-empty: some rank failed to load (the text says which); every rank exits.
struct tp_setup {
  int32_t num_kv_blocks = 0;
  int32_t block_size = 16;
  dtype kv_type = dtype::bf16;
  bool bf16_activations = true;
  std::string error;
};
std::vector<unsigned char> encode_tp_setup(const tp_setup& s);
result<tp_setup> decode_tp_setup(const std::vector<unsigned char>& b);

// One step as rank 0 broadcasts it: stop, or the block copies and the forward batch.
struct tp_step {
  struct seq {
    std::vector<int32_t> tokens;
    int32_t start_pos = 0;
    std::vector<int32_t> block_table;
    bool want_logits = false;
    int32_t logit_rows = 1;
  };
  bool stop = false;
  std::vector<std::pair<int32_t, int32_t>> block_copies;
  std::vector<seq> seqs;

  std::vector<forward_seq> batch() const;  // views into seqs
};
std::vector<unsigned char> encode_tp_step(
    const std::vector<std::pair<int32_t, int32_t>>& block_copies,
    const std::vector<forward_seq>& batch);
std::vector<unsigned char> encode_tp_stop();
result<tp_step> decode_tp_step(const std::vector<unsigned char>& b);

// A rank's share of one step: the block copies, then the forward pass (collectives included).
// Errors before the first collective (a bad block, a token outside the vocabulary) are the same on
// every rank, since every rank sees the same batch.
result<void> run_tp_step(const std::vector<std::pair<int32_t, int32_t>>& block_copies,
                         const std::vector<forward_seq>& batch, kv_cache& cache,
                         cpu_forward& forward, std::vector<float>& logits);

// A rank other than 0: its shard, KV cache slice, worker pool and forward pass.
class tp_worker {
 public:
  // `threads`: of this rank's forward pass, its own included. `comm` must outlive the worker.
  tp_worker(model_weights shard, const tp_setup& setup, communicator& comm, int32_t threads);
  // Runs every step rank 0 broadcasts until it broadcasts stop (returns ok) or a collective fails
  // (returns the error). A step's own error (the same one rank 0 reports) does not end the loop.
  result<void> serve();
  const model_weights& weights() const noexcept { return weights_; }
  size_t kv_cache_bytes() const noexcept { return cache_.bytes(); }

 private:
  model_weights weights_;
  communicator& comm_;
  worker_pool pool_;
  kv_cache cache_;
  cpu_forward forward_;
  std::vector<float> logits_;
};

// The startup log's line for a rank: shard shapes and the bytes it holds.
std::string describe_shard(const model_weights& shard);

}  // namespace coserve
