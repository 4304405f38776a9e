// executor_actor — runs step plans on a model executor (CPU, or CUDA in gpu/), in the order the KV
// allocator sent them, and answers the scheduler with each step's sampled tokens. Each step is
// traced once on the "<name> steps" track and once per request in it.
//
// Launch / await (model/executor.hpp): a plan is launched as soon as it arrives while fewer than
// the executor's max_in_flight() steps are outstanding (and the executor can take it ahead of the
// ones before it), so step N+1 is queued on the device (or the CPU step thread) while step N runs.
// The actor awaits each step's completion: the executor resumes it on the actor's own thread
// (never a mailbox message), where it collects the result, answers the scheduler and launches what
// waited. The actor's thread never blocks on a step; it runs on a dedicated thread, so a
// completion and a handler never overlap.
//
// Block tables: a plan brings each sequence's table as a change to the last one (most decode steps
// change nothing); the actor keeps the tables and hands the executor whole ones.
//
// Allocations: each plan comes with the allocation the scheduler needs to draft the step after
// next. The actor returns it with its next step_done — at once when no earlier step is running,
// since otherwise the scheduler would wait for the plan's own result.
//
// After a failed step its sequences are left out of the steps launched behind it (their inputs
// depend on tokens the failed step never sampled, and the scheduler ends their requests): a
// failure never spreads to the requests of the next step. They stay left out until the KV
// allocator reports them finished.
//
// Sends to: the scheduler (step_done).
#pragma once

#include <asio/any_io_executor.hpp>
#include <asio/awaitable.hpp>
#include <deque>
#include <memory>
#include <vector>

#include "actors/engine_shared.hpp"
#include "actors/executor_messages.hpp"
#include "actors/scheduler_messages.hpp"
#include "actors/sequence.hpp"
#include "model/executor.hpp"
#include "model/held_block_tables.hpp"
#include "runtime/actor.hpp"

namespace coserve::actors {

class executor_actor {
 public:
  using messages = executor_protocol::messages;

  struct links {
    rt::actor_ref<scheduler_protocol> scheduler;
  };
  executor_actor(std::shared_ptr<engine_shared> shared, links to, std::unique_ptr<executor> exec)
      : shared_(std::move(shared)), to_(std::move(to)), exec_(std::move(exec)) {}
  ~executor_actor() { *alive_ = false; }
  executor_actor(const executor_actor&) = delete;
  executor_actor& operator=(const executor_actor&) = delete;
  // Throws when the actor is not on a dedicated thread (completions would race its handlers).
  void on_start(rt::actor_context<executor_actor>& ctx);
  void handle(run_step& m);

 private:
  struct in_flight {
    uint64_t step_id = 0;
    int64_t launched_ns = 0;
    std::vector<seq_id_t> seqs;      // scheduled
    std::vector<seq_id_t> finished;  // dropped after it
    std::vector<uint64_t> requests;  // for the trace (empty when tracing is off)
  };
  void launch_waiting();
  // On the actor's thread, when the oldest launched step has completed.
  void on_step_complete();
  void trace_step(const in_flight& f, int64_t ran_from, int64_t done_ns);
  // Sends in order from a handler or a completion: a send that finds the scheduler's mailbox full
  // is delivered, with every later one, by a coroutine on this actor's thread.
  void send_to_scheduler(step_done d);
  asio::awaitable<void> deliver_backlog(std::shared_ptr<bool> alive);

  std::shared_ptr<engine_shared> shared_;
  links to_;
  std::unique_ptr<executor> exec_;
  asio::any_io_executor thread_;  // the actor's own thread
  uint32_t trace_id_ = 0;
  uint32_t steps_trace_id_ = 0;      // the "executor steps" track: one "step" span per step
  int64_t last_done_ns_ = 0;         // when the step collected last completed (about)
  std::deque<step_plan> waiting_;    // arrived, not launched yet
  std::deque<in_flight> in_flight_;  // launched, not collected, in launch order
  std::vector<step_allocation> allocations_;  // not yet returned to the scheduler
  failed_sequences failed_;                   // seen at collect, applied to later launches
  held_block_tables tables_;       // every sequence's block table, from the plans' changes
  std::deque<step_done> backlog_;  // sends waiting for room in the scheduler's mailbox
  bool delivering_ = false;
  // False once the behavior is gone: completions and deliveries still queued on the thread then
  // touch nothing.
  std::shared_ptr<bool> alive_ = std::make_shared<bool>(true);
};

}  // namespace coserve::actors
