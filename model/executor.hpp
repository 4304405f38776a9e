// The abstract executor every device implements (CPU here, CUDA in gpu/). It runs a step_plan
// on whatever thread calls execute(); the actor that wraps it owns that thread and never calls
// execute() concurrently.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "model/step.hpp"
#include "runtime/expected.hpp"

namespace coserve {

// Error code of a failure after which no later step can succeed (a sticky CUDA error, a lost
// device): the engine fails at once instead of retrying. Any other error fails only the step.
inline constexpr const char* k_executor_fatal = "executor_fatal";

struct executor_info {
  int32_t num_kv_blocks = 0;
  int32_t block_size = 16;
  int32_t vocab_size = 0;
  int32_t max_model_len = 0;
  std::string device;  // e.g. "cpu (4 threads)"
  bool verifies_proposals = false;  // runs scheduled_seq::num_draft > 0 (speculative decoding)
};

// Per tensor-parallel rank: seconds of its forward passes spent computing and in collectives
// (waiting for the slowest rank included), and its steps. Rank 0 learns the others' figures
// with each step's logits gather, so they trail by at most one step.
struct rank_stats {
  int32_t rank = 0;
  double compute_seconds = 0;
  double collective_seconds = 0;
  int64_t steps = 0;
};

// Written by the executor after each step, read by any thread (the /metrics scrape).
class rank_stats_board {
 public:
  void set(std::vector<rank_stats> s) {
    std::lock_guard lk(mu_);
    stats_ = std::move(s);
  }
  std::vector<rank_stats> snapshot() const {
    std::lock_guard lk(mu_);
    return stats_;
  }

 private:
  mutable std::mutex mu_;
  std::vector<rank_stats> stats_;
};

class executor {
 public:
  virtual ~executor() = default;
  // Registers new_seqs, applies block_copies, runs the forward pass, samples every scheduled
  // sequence with sample == true, then drops the state of `finished`. On an error the step's
  // new_seqs stay registered, the state of `finished` is dropped all the same (the plan is the
  // only notice the executor gets), the KV contents of its slots are unspecified, and no running
  // sequence's sampling state has advanced. A plan may schedule no sequence at all (only new_seqs
  // and finished); the result then has no outputs.
  virtual result<step_result> execute(const step_plan& plan) = 0;
  virtual executor_info info() const = 0;
  // Tensor-parallel executors: their ranks' figures (null otherwise). Outlives the executor when held.
  virtual std::shared_ptr<const rank_stats_board> rank_stats() const { return nullptr; }
};

}  // namespace coserve
