// Tensor parallelism on GPUs (--device cuda --tensor-parallel-size N): the split of
// model/tensor_parallel.hpp (q/k/v and gate/up column-parallel, o and down row-parallel with an
// all-reduce after each), one rank per device, NCCL between them; the ranks are GPUs of one
// process, or one GPU per MPI rank (run_remote_tp_rank below).
//
// Rank 0 is the CUDA executor (gpu/gpu_executor.hpp): it plans each step, keeps every sequence's
// state, and alone holds the final norm's output path: the whole LM head (not vocabulary-split: a
// decode step's logits would otherwise cross NVLink every step), sampling, logprobs. Ranks 1..N-1
// are tp_peers: each owns its device, stream, shard, KV cache slice (its KV heads of every block:
// one block table for all ranks), scratch and CUDA graphs, and runs on its own thread. Per step
// rank 0 posts the step's packed metadata and block copies to every peer (a copy of the bytes it
// uploads itself; to another process, by MPI broadcast); each peer uploads them to its device and
// runs the same layer loop
// (gpu/forward_pass.hpp), joining rank 0's all-reduces, then receives the sampled ids by an NCCL
// broadcast from rank 0 into its last-token buffer, so the next step's decode inputs resolve on
// every device. Peers never block the serving path: rank 0 only posts to their queues.
//
// Faults: a rank that fails (a CUDA or NCCL error) marks the group failed and aborts every
// communicator of its process, so no rank there waits forever inside a collective; rank 0 then
// fails its steps with k_executor_fatal (the engine fails and clients get errors). A rank in
// another process exits instead, and mpirun ends the job.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <future>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "base/result.hpp"
#include "gpu/forward_pass.hpp"
#include "gpu/rank_config.hpp"
#include "model/communicator.hpp"
#include "model/config.hpp"
#include "model/weights.hpp"

namespace coserve::gpu {

// Whether this build has NCCL (the GPU tensor-parallel backend).
bool nccl_available() noexcept;

// A group's NCCL communicators held by this process, and the group's failure: every rank's (one per
// device of this process, ncclCommInitAll), or one rank's of a group spread over processes
// (ncclCommInitRank from rank 0's unique id, which the caller sends to the others over MPI).
class nccl_group {
 public:
  static result<std::shared_ptr<nccl_group>> create(const std::vector<int32_t>& devices);
  static result<std::vector<unsigned char>> new_unique_id();
  // This process's rank of `size` on the current device.
  static result<std::shared_ptr<nccl_group>> create_rank(
      const std::vector<unsigned char>& unique_id, int32_t size, int32_t rank);
  ~nccl_group();
  nccl_group(const nccl_group&) = delete;
  nccl_group& operator=(const nccl_group&) = delete;

  int32_t size() const noexcept { return size_; }
  // data[0, n) bf16 summed over the ranks in place, on `s` (rank's communicator).
  result<void> all_reduce_bf16(int32_t rank, void* data, size_t n, cudaStream_t s);
  // data[0, n) int32 of rank 0 copied to every rank, on `s`.
  result<void> broadcast_i32(int32_t rank, int32_t* data, size_t n, cudaStream_t s);
  // Marks the group failed (the first reason is kept) and aborts every communicator, so that
  // collectives pending on any rank return instead of waiting for the failed one. Any thread.
  void fail(const std::string& why);
  bool failed() const noexcept { return failed_.load(std::memory_order_acquire); }
  std::string failure() const;
  // An NCCL error some communicator reported asynchronously (ncclCommGetAsyncError), if any.
  std::string async_error() const;

 private:
  nccl_group() = default;
  std::vector<void*> comms_;  // ncclComm_t of ranks first_rank_, first_rank_ + 1, ...
  int32_t first_rank_ = 0;
  int32_t size_ = 0;
  void* comm(int32_t rank) const { return comms_[size_t(rank - first_rank_)]; }
  std::atomic<bool> failed_{false};
  mutable std::mutex mu_;
  std::string why_;
  bool aborted_ = false;
};

// What rank 0 posts to a peer per step (or at startup). Addresses are rank 0's (peers rebase them).
struct peer_job {
  enum class kind { step, capture, allocate_kv, stop } what = kind::step;
  std::vector<std::pair<int32_t, int32_t>> block_copies;
  bool forward = false;  // a forward pass follows the block copies
  bool graph = false;    // the metadata goes to the graph arena and bucket's graph is replayed
  int32_t bucket = 0;
  std::vector<unsigned char> meta;  // the bytes rank 0 uploaded, at its metadata (or arena) base
  const void* base = nullptr;       // that base on rank 0's device: the addresses below are rebased
  layer_inputs in;
  const int32_t* row_slots =
      nullptr;  // per sampled row, the last-token slot its id goes to (-1: none)
  int32_t num_samples = 0;
  size_t arena_bytes = 0;     // capture: the arena's size
  int32_t num_kv_blocks = 0;  // allocate_kv
  // Rank 0's draft-model picks for this step, broadcast into last_tokens[pick_base, + num_picks)
  // before the forward pass (the proposals' ids reference them).
  int32_t pick_base = 0, num_picks = 0;
  // Set once the job has run (startup jobs wait on it).
  std::shared_ptr<std::promise<result<void>>> done;
};

// A job as bytes, for ranks in other processes (MPI broadcast); `done` does not travel.
std::vector<unsigned char> encode_peer_job(const peer_job& job);
result<peer_job> decode_peer_job(const std::vector<unsigned char>& bytes);

class tp_peer {
 public:
  struct options {
    int32_t rank = 1;
    int32_t device = 1;
    std::shared_ptr<nccl_group> group;
    int32_t max_num_tokens = 2048;
    int32_t block_size = 16;
    kv_elem kv_type = kv_elem::bf16;
    double gpu_memory_utilization = 0.9;
    int32_t last_token_slots = 0;
    size_t metadata_bytes = 0;
    bool tune_gemms = true;
    bool fp8 = false;
    gemv_rows gemv;  // gpu_executor_options::gemv
    int64_t fi_tmp_rows =
        0;  // FlashInfer's split-KV workspace rows (--attention-backend flashinfer)
    // The rank's host shard (load_format auto) or, for load_format dummy, its config and seed.
    std::shared_ptr<const model_weights> shard;
    model_config dummy_config;
    uint64_t dummy_seed = 0;
  };
  // Starts the rank's thread, which selects the device, uploads the weights and allocates its
  // buffers; returns once that is done, with the KV blocks that would fit on the device
  // (kv_blocks_fit). Errors: that step's.
  static result<std::unique_ptr<tp_peer>> start(options o);
  ~tp_peer();  // posts stop and joins
  tp_peer(const tp_peer&) = delete;
  tp_peer& operator=(const tp_peer&) = delete;

  int32_t kv_blocks_fit() const noexcept { return kv_fit_; }
  const std::string& description() const noexcept { return description_; }
  // Queues a job; jobs run in order on the peer's thread.
  void post(peer_job job);

 private:
  tp_peer() = default;
  void run(std::promise<result<int32_t>> started);
  result<int32_t> setup();
  result<void> handle(peer_job& job);
  result<void> forward(const peer_job& job, const layer_inputs& in, const int32_t* row_slots);

  options o_;
  std::thread thread_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<peer_job> jobs_;
  int32_t kv_fit_ = 0;
  std::string description_;

  // Owned by the peer's thread once started.
  struct state;
  std::unique_ptr<state> st_;
};

// ---- ranks in other processes (mpirun -np N coserve serve MODEL --device cuda -tp N) ----------
//
// Rank 0's CUDA executor (gpu_executor_options::world) and every other rank's process
// (run_remote_tp_rank) talk over MPI in this order: rank 0 broadcasts the setup below and an NCCL
// unique id; every rank creates its communicator (ncclCommInitRank, one GPU per process: the
// process's local rank on its host); each other rank loads its shard and starts a tp_peer, then
// all ranks gather their KV block fit (or their error) on rank 0; from then on rank 0 broadcasts
// every job (peer_job as bytes) and the other ranks post them to their peer, until a stop job. A
// rank whose peer fails logs it and exits, and mpirun ends the job.

struct remote_tp_setup {
  int32_t max_num_tokens = 0, block_size = 16, last_token_slots = 0;
  kv_elem kv_type = kv_elem::bf16;
  double gpu_memory_utilization = 0.9;
  uint64_t metadata_bytes = 0, dummy_seed = 0;
  int64_t fi_tmp_rows = 0;
  bool tune_gemms = true, fp8 = false, dummy = false;
};
std::vector<unsigned char> encode_remote_tp_setup(const remote_tp_setup& s);
result<remote_tp_setup> decode_remote_tp_setup(const std::vector<unsigned char>& b);

// What each rank reports after loading: the KV blocks that fit on its device, or its error.
constexpr size_t k_remote_report_bytes = 512;
std::vector<unsigned char> encode_remote_report(int32_t blocks, const std::string& error);
// Per rank (the gathered reports in rank order): the fit, or an error naming the rank.
result<std::vector<int32_t>> decode_remote_reports(const std::vector<unsigned char>& all,
                                                   int32_t ranks);

// A rank other than 0 (its process started by mpirun): runs until rank 0 broadcasts stop (ok) or
// fails (the error; the caller exits non-zero). `device`: this process's GPU.
result<void> run_remote_tp_rank(const std::string& model_dir, communicator& world, int32_t device);

}  // namespace coserve::gpu
