#include "actors/scheduler.hpp"

#include <algorithm>
#include <chrono>
#include <cstdio>

#include "actors/stream_impl.hpp"
#include "runtime/system.hpp"

namespace coserve::actors {

const char* verify_span_name(int32_t proposed, int32_t accepted) {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> v;
    for (int32_t p = 0; p <= 16; ++p)
      for (int32_t a = 0; a <= 16; ++a)
        v.push_back("verify " + std::to_string(a) + "/" + std::to_string(p) + " accepted");
    return v;
  }();
  if (proposed < 0 || proposed > 16 || accepted < 0 || accepted > proposed) return "verify";
  return names[static_cast<size_t>(proposed * 17 + accepted)].c_str();
}

void scheduler::publish() {
  auto& m = shared_->metrics;
  m.running.store(planner_.num_running(), std::memory_order_relaxed);
  m.waiting.store(planner_.num_waiting(), std::memory_order_relaxed);
  m.waiting_tokens.store(planner_.num_waiting_tokens(), std::memory_order_relaxed);
  const auto [lora_running, lora_waiting] = planner_.lora_masks();
  m.lora_running.store(lora_running, std::memory_order_relaxed);
  m.lora_waiting.store(lora_waiting, std::memory_order_relaxed);
  m.preemptions.store(planner_.num_preemptions(), std::memory_order_relaxed);
  const speculation_stats& sp = planner_.speculation();
  m.spec_drafts.store(sp.drafts, std::memory_order_relaxed);
  m.spec_draft_tokens.store(sp.draft_tokens, std::memory_order_relaxed);
  m.spec_accepted_tokens.store(sp.accepted_tokens, std::memory_order_relaxed);
  for (size_t i = 0; i < sp.accepted_per_position.size() && i < m.spec_accepted_per_position.size();
       ++i)
    m.spec_accepted_per_position[i].store(sp.accepted_per_position[i], std::memory_order_relaxed);
}

// ---- the step loop
// -------------------------------------------------------------------------------

rt::maybe_async scheduler::handle(step_done& m) {
  shared_->fault_point("scheduler", "step_done");
  rt::outbox out;
  step(m, out);
  return out.finish();
}

void scheduler::step(step_done& m, rt::outbox& out) {
  step_emission em;
  collect(m, em);            // what ran, and what it sampled
  emit(em, m.step_id, out);  // tokens and ended requests to the streamer
  plan(out);                 // the next steps to the KV allocator (and on to the executor)
}

void scheduler::collect(step_done& m, step_emission& em) {
  for (const step_allocation& a : m.allocations) {
    if (journal_) journal_({.what = planner_call::kind::allocation, .allocation = a});
    planner_.on_allocation(a, em);
  }
  if (m.step_id == 0) return;
  shared_->metrics.steps.fetch_add(1, std::memory_order_relaxed);
  if (m.outcome.ok()) {
    if (journal_)
      journal_({.what = planner_call::kind::result, .result = *m.outcome, .ran = m.ran});
    planner_.on_result(*m.outcome, em, m.ran);
    return;
  }
  const error& e = m.outcome.err();
  if (journal_)
    journal_({.what = planner_call::kind::failed_step, .step_id = m.step_id, .failure = e});
  std::fprintf(stderr, "coserve engine: the executor failed step %llu: %s\n",
               static_cast<unsigned long long>(m.step_id), e.message.c_str());
  const bool was_failed = planner_.failed();
  const size_t ends_before = em.ends.size();
  planner_.on_failed_step(m.step_id, e, em);
  if (!was_failed && planner_.failed())
    mark_failed(planner_.failure(), em.ends.size() - ends_before);
}

void scheduler::emit(step_emission& em, uint64_t step_id, rt::outbox& out) {
  for (const auto& submitted : em.first_scheduled)
    shared_->metrics.queue.observe(
        std::chrono::duration<double>(std::chrono::steady_clock::now() - submitted).count());
  publish();  // before the sends: the KV release and the streamed ends follow the gauges
  auto& tr = shared_->sys->trace();
  token_batch batch;
  batch.step_id = step_id;
  batch.events.reserve(em.tokens.size());
  const int64_t t_result = tr.now_ns();
  for (const seq_event& e : em.tokens) {
    if (e.proposed > 0 && tr.enabled())  // speculation, in the request's timeline
      trace_for_request(*shared_->sys, trace_id_, verify_span_name(e.proposed, e.accepted),
                        e.request_id, t_result, tr.now_ns());
    token_event t;
    t.request_id = e.request_id;
    t.seq_id = e.seq_id;
    t.index = e.index;
    t.token = e.token;
    t.finish = e.finish;
    if (e.output != nullptr) {
      auto& o = const_cast<seq_output&>(*e.output);  // the result is ours: move its vectors
      t.logprob = o.logprob;
      t.top_logprobs = std::move(o.top_logprobs);
      t.prompt_logprobs = std::move(o.prompt_logprobs);
      t.logits = std::move(o.logits);
      t.embedding = std::move(o.embedding);
    }
    t.prompt_tokens = e.prompt_tokens;
    t.completion_tokens = e.completion_tokens;
    t.cached_prompt_tokens = e.cached_prompt_tokens;
    batch.events.push_back(std::move(t));
  }
  if (!batch.events.empty()) out.tell(to_.streamer, std::move(batch));
  for (request_end& end : em.ends)
    out.tell(to_.streamer, end_request{end.request_id, end.reason, std::move(end.message)});
}

// Drafts while the planner allows (two steps in flight at most); the blocks to free and the
// outcomes of steps travel with each draft, or alone when nothing can be drafted (but while a
// draft's allocation is on its way: its arrival runs this again).
void scheduler::plan(rt::outbox& out) {
  auto& tr = shared_->sys->trace();
  while (planner_.can_draft()) {
    const int64_t t0 = tr.now_ns();
    step_draft d = planner_.draft();
    if (journal_) journal_({.what = planner_call::kind::draft, .step_id = d.step_id});
    if (d.step_id == 0) {
      if (!d.ops.empty()) out.tell(to_.kv_allocator, kv_step{std::move(d)});
      break;  // nothing can run until a result comes back
    }
    if (tr.enabled()) {
      rt::span s;
      s.message = "plan_step";
      s.enqueue_ns = s.start_ns = t0;
      s.end_ns = tr.now_ns();
      s.track_id = trace_id_;
      tr.record(s);
    }
    out.tell(to_.kv_allocator, kv_step{std::move(d)});
  }
  // Held while a draft's allocation is on its way: the draft its arrival allows takes them.
  if (planner_.draft_outstanding()) {
    publish();
    return;
  }
  if (std::vector<kv_op> ops = planner_.take_kv_ops(); !ops.empty()) {
    if (journal_) journal_({.what = planner_call::kind::take_kv_ops});
    out.tell(to_.kv_allocator, kv_step{{.ops = std::move(ops)}});
  }
  publish();
}

// ---- requests
// ------------------------------------------------------------------------------------

rt::maybe_async scheduler::handle(add_request& m) {
  shared_->fault_point("scheduler", "add_request");
  rt::outbox out;
  // Cancelled while it was being tokenized (the cancel, if it came, found nothing here).
  const finish_reason cancelled = m.stream ? m.stream->cancel_reason() : finish_reason::none;
  if (!planner_.failed() && cancelled == finish_reason::none)
    shared_->metrics.prompt_tokens.fetch_add(static_cast<int64_t>(m.prompt.size()),
                                             std::memory_order_relaxed);
  if (journal_)
    journal_({.what = planner_call::kind::add_request,
              .request_id = m.request_id,
              .prompt = m.prompt,
              .params = m.params,
              .priority = m.priority,
              .reason = cancelled});
  step_emission em;
  planner_.add_request(m.request_id, std::move(m.prompt), m.params, m.priority, m.submitted, em,
                       cancelled);
  emit(em, 0, out);
  plan(out);
  return out.finish();
}

rt::maybe_async scheduler::handle(cancel_sequences& m) {
  shared_->fault_point("scheduler", "cancel_sequences");
  rt::outbox out;
  if (journal_)
    journal_(
        {.what = planner_call::kind::end_request, .request_id = m.request_id, .reason = m.reason});
  step_emission em;
  // Not held: ended already, or not arrived yet (add_request then sees the stream's cancel reason).
  planner_.end_request(m.request_id, m.reason, {}, em);
  emit(em, 0, out);
  plan(out);
  return out.finish();
}

rt::maybe_async scheduler::handle(finish_sequence& m) {
  shared_->fault_point("scheduler", "finish_sequence");
  rt::outbox out;
  if (journal_) journal_({.what = planner_call::kind::finish_sample, .seq_id = m.seq_id});
  planner_.finish_sample(m.seq_id);
  plan(out);
  return out.finish();
}

void scheduler::mark_failed(const std::string& reason, size_t ended) {
  if (shared_->health.fail(reason)) shared_->open_cv.notify_all();
  std::fprintf(stderr, "coserve engine: failed: %s; %zu open requests ended with an error\n",
               reason.c_str(), ended);
}

rt::maybe_async scheduler::handle(engine_failed& m) {
  rt::outbox out;
  if (planner_.failed()) return out.finish();
  if (journal_) journal_({.what = planner_call::kind::fail_all, .message = m.reason});
  step_emission em;
  planner_.fail_all(m.reason, em);
  mark_failed(m.reason, em.ends.size());
  emit(em, 0, out);
  plan(out);  // the blocks of the ended requests go back
  return out.finish();
}

void scheduler::handle(list_requests& m) {
  m.reply->complete(planner_.requests(std::chrono::steady_clock::now(), m.limit));
}

}  // namespace coserve::actors
