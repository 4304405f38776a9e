// The abstract executor every device implements (CPU here, CUDA in gpu/). Two ways to run steps:
//
// - execute(plan): synchronous, on the calling thread (tests, `coserve generate`, benchmarks).
// - launch(plan, ex, ready) / collect(): the serving path (executor_actor). launch() issues the
//   step and returns without waiting for it; when the step has completed, `ready` is posted to
//   `ex`; collect() then takes the oldest launched step's result. Steps run, complete and are
//   collected in launch order. Up to max_in_flight() steps may be launched and not yet collected,
//   so step N+1 can be queued behind step N before the host has seen N's sampled ids: its decode
//   inputs (k_token_from_last_step) are resolved where the step runs (the CPU step thread, the
//   GPU's per-sequence last-token buffer), never on the host at launch.
//
// The default launch() is for executors that only implement execute(): it runs the step at once on
// the calling thread and posts `ready` (one step in flight, no overlap). One caller at a time: the
// owner never calls execute() while launched steps are not collected, nor any member concurrently.
#pragma once

#include <asio/any_io_executor.hpp>
#include <asio/post.hpp>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_set>
#include <vector>

#include "base/result.hpp"
#include "model/step.hpp"

namespace coserve {

// Error code of a failure after which no later step can succeed (a sticky CUDA error, a lost
// device): the engine fails at once instead of retrying. Any other error fails only the step.
inline constexpr const char* k_executor_fatal = "executor_fatal";

struct executor_info {
  int32_t num_kv_blocks = 0;
  int32_t block_size = 16;
  int32_t vocab_size = 0;
  int32_t max_model_len = 0;
  std::string device;               // e.g. "cpu (4 threads)"
  bool verifies_proposals = false;  // runs scheduled_seq::num_draft > 0 (speculative decoding)
  bool computes_prompt_logprobs = false;  // honours sampling_params::prompt_logprobs
  // What the executor's steps compute (vLLM's tasks): "generate" (sampled tokens), "embed"
  // (pooled vectors of pooling requests) or "score" (a cross-encoder's class logits).
  std::string task = "generate";
  int32_t pooled_size = 0;  // embed: the vector's size; score: the number of labels
  // embed: requests may ask for fewer dimensions (Matryoshka models); when the list is not empty,
  // only those sizes.
  bool matryoshka = false;
  std::vector<int32_t> matryoshka_dimensions;
  // Each prompt must be computed in one step (an encoder's bidirectional attention): the
  // scheduler never chunks one (planner_config::whole_prompts).
  bool whole_prompts = false;
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

// The sequences of failed steps, left out of the steps behind them until they are finished: their
// inputs depend on tokens the failed step never sampled (their requests end with the failure), and
// leaving them out keeps the failure from spreading to the other requests of the next step.
class failed_sequences {
 public:
  bool empty() const noexcept { return ids_.empty(); }
  // Removes the failed sequences from `plan` (before it runs); one the plan registers again is no
  // longer failed.
  void filter(step_plan& plan) {
    if (ids_.empty()) return;
    for (const new_seq& n : plan.new_seqs) ids_.erase(n.seq_id);
    std::erase_if(plan.seqs, [this](const scheduled_seq& s) { return ids_.count(s.seq_id) != 0; });
  }
  // After a step ran (ok: whether it succeeded): its scheduled sequences and its `finished`.
  void on_step(const std::vector<seq_id_t>& seqs, const std::vector<seq_id_t>& finished, bool ok) {
    if (!ok) ids_.insert(seqs.begin(), seqs.end());
    for (seq_id_t id : finished) ids_.erase(id);
  }
  void on_step(const step_plan& plan, bool ok) {
    if (!ok)
      for (const scheduled_seq& s : plan.seqs) ids_.insert(s.seq_id);
    for (seq_id_t id : plan.finished) ids_.erase(id);
  }

 private:
  std::unordered_set<seq_id_t> ids_;
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

  // Issues `plan` without waiting for it; `ready` is posted to `ex` once it can be collected. Never
  // fails here: a step that cannot run reports its error from collect(), in launch order, and its
  // `finished` are dropped all the same. The executor leaves the sequences of a failed step out of
  // the steps launched behind it (failed_sequences), as the caller does for later launches.
  // The executor holds outstanding work on `ex` until `ready` has run (run() does not return
  // before), and touches the context behind `ex` no more once `ready` may run: the context may go
  // as soon as `ready` has run.
  virtual void launch(step_plan plan, const asio::any_io_executor& ex,
                      std::function<void()> ready) {
    done_.push_back(execute(plan));
    asio::post(ex, std::move(ready));
  }
  // The oldest launched step's outcome; call once per `ready`, in order.
  virtual result<step_result> collect() {
    result<step_result> r = std::move(done_.front());
    done_.pop_front();
    return r;
  }
  // How many steps may be launched and not yet collected (1: no launch-ahead).
  virtual int32_t max_in_flight() const { return 1; }
  // Whether `plan` may be launched while earlier steps are not collected (false: the caller
  // collects them first). An executor that needs the host to have seen the previous step's sampled
  // ids for some plan (e.g. penalties computed on the host) answers false for it.
  virtual bool can_launch_ahead(const step_plan& /*plan*/) const { return max_in_flight() > 1; }

  virtual executor_info info() const = 0;
  // Tensor-parallel executors: their ranks' figures (null otherwise). Outlives the executor when
  // held.
  virtual std::shared_ptr<const rank_stats_board> rank_stats() const { return nullptr; }

 private:
  std::deque<result<step_result>> done_;  // the default launch(): results not yet collected
};

// Runs another executor through execute() only, so the default launch() takes each step at once,
// one at a time (no launch-ahead): the baseline of the step loop in tests and `coserve bench
// steps`.
class one_step_at_a_time final : public executor {
 public:
  explicit one_step_at_a_time(std::unique_ptr<executor> inner) : inner_(std::move(inner)) {}
  result<step_result> execute(const step_plan& p) override { return inner_->execute(p); }
  executor_info info() const override { return inner_->info(); }
  std::shared_ptr<const rank_stats_board> rank_stats() const override {
    return inner_->rank_stats();
  }

 private:
  std::unique_ptr<executor> inner_;
};

}  // namespace coserve
