#include "actors/scheduler.hpp"

#include <algorithm>
#include <cstdio>

#include "actors/kv_allocator.hpp"
#include "actors/streamer.hpp"
#include "model/executor.hpp"
#include "runtime/system.hpp"

namespace coserve::actors {

// "verify 2/3 accepted": a static name per (proposed, accepted) for the trace's spans.
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
  auto& m = p_->metrics;
  m.running.store(core_.num_running(), std::memory_order_relaxed);
  m.waiting.store(core_.num_waiting(), std::memory_order_relaxed);
  m.waiting_tokens.store(core_.num_waiting_tokens(), std::memory_order_relaxed);
  m.preemptions.store(core_.num_preemptions(), std::memory_order_relaxed);
  const speculation_stats& sp = core_.speculation();
  m.spec_drafts.store(sp.drafts, std::memory_order_relaxed);
  m.spec_draft_tokens.store(sp.draft_tokens, std::memory_order_relaxed);
  m.spec_accepted_tokens.store(sp.accepted_tokens, std::memory_order_relaxed);
  for (size_t i = 0; i < sp.accepted_per_position.size() && i < m.spec_accepted_per_position.size();
       ++i)
    m.spec_accepted_per_position[i].store(sp.accepted_per_position[i], std::memory_order_relaxed);
}

void scheduler::pump(rt::outbox& out) {
  auto& tr = p_->sys->trace();
  while (!failed_ && in_flight_ < 2 && !core_.draft_outstanding() && core_.has_work()) {
    const int64_t t0 = tr.now_ns();
    step_draft d = core_.draft();
    if (d.step_id == 0) break;  // nothing can run until a result comes back
    ++in_flight_;
    if (tr.enabled()) {
      rt::span s;
      s.message = "plan_step";
      s.enqueue_ns = s.start_ns = t0;
      s.end_ns = tr.now_ns();
      s.actor_id = trace_id_;
      tr.record(s);
    }
    out.tell(p_->kv_ref, kv_step{std::move(d)});
  }
  publish();
}

rt::maybe_async scheduler::handle(add_request& m) {
  p_->fault_point("scheduler", "add_request");
  rt::outbox out;
  const uint64_t rid = m.request_id;
  if (failed_) {
    out.tell(p_->streamer_ref, end_request{rid, finish_reason::error, failed_reason_});
    return out.finish();
  }
  // Cancelled while it was being tokenized (the cancel, if it came, found nothing here).
  if (const finish_reason why = m.stream ? m.stream->cancel_reason() : finish_reason::none;
      why != finish_reason::none) {
    out.tell(p_->streamer_ref,
             end_request{
                 rid, why,
                 why == finish_reason::error ? "the request was failed before it was queued" : ""});
    return out.finish();
  }
  const int32_t n = std::max(1, m.params.n);
  request& r = requests_[rid];
  r.samples = r.live = n;
  r.submitted = m.submitted;
  p_->metrics.prompt_tokens.fetch_add(static_cast<int64_t>(m.prompt.size()),
                                      std::memory_order_relaxed);
  for (int32_t i = 0; i < n; ++i) {
    sequence s;
    s.id = make_seq_id(rid, i);
    s.request_id = rid;
    s.index = i;
    s.priority = m.priority;
    s.arrival = rid;
    s.prompt = i + 1 < n ? m.prompt : std::move(m.prompt);
    s.params = m.params;
    if (!s.params.ignore_eos)
      s.params.stop_token_ids.insert(s.params.stop_token_ids.end(), extra_eos_.begin(),
                                     extra_eos_.end());
    s.seed = m.params.seed ? *m.params.seed + static_cast<uint64_t>(i)
                           : rid * 7919 + static_cast<uint64_t>(i);
    s.fork_parent = i == 0 ? 0 : make_seq_id(rid, 0);
    core_.add(std::move(s));
  }
  pump(out);
  return out.finish();
}

void scheduler::sample_finished(uint64_t rid) {
  auto it = requests_.find(rid);
  if (it != requests_.end() && --it->second.live <= 0) requests_.erase(it);
}

void scheduler::end_request_now(uint64_t rid, finish_reason reason, const std::string& message,
                                rt::outbox& out) {
  auto it = requests_.find(rid);
  if (it == requests_.end()) return;
  kv_release rel;
  for (int32_t i = 0; i < it->second.samples; ++i)
    if (core_.finish(make_seq_id(rid, i), reason)) rel.seqs.push_back(make_seq_id(rid, i));
  requests_.erase(it);
  publish();  // before the messages below: whoever sees their effects sees these gauges too
  if (!rel.seqs.empty()) out.tell(p_->kv_ref, std::move(rel));
  out.tell(p_->streamer_ref, end_request{rid, reason, message});
}

void scheduler::fail_all(const std::string& reason, rt::outbox& out) {
  if (failed_) return;
  failed_ = true;
  failed_reason_ = reason;
  if (p_->health.fail(reason)) p_->open_cv.notify_all();
  std::vector<uint64_t> all;
  all.reserve(requests_.size());
  for (const auto& [rid, r] : requests_) all.push_back(rid);
  std::sort(all.begin(), all.end());
  for (uint64_t rid : all) end_request_now(rid, finish_reason::error, reason, out);
  std::fprintf(stderr, "coserve engine: failed: %s; %zu open requests ended with an error\n",
               reason.c_str(), all.size());
}

rt::maybe_async scheduler::handle(engine_failed& m) {
  rt::outbox out;
  fail_all(m.reason, out);
  publish();
  return out.finish();
}

rt::maybe_async scheduler::handle(list_requests& m) {
  std::unordered_map<uint64_t, request_status> by_id;
  core_.for_each_sequence([&](const sequence& s) {
    request_status& r = by_id[s.request_id];
    r.id = s.request_id;
    r.running = r.running || s.state == seq_state::running;
    r.prompt_tokens = static_cast<int32_t>(s.prompt.size());
    r.generated_tokens += s.num_generated();
    r.cached_prompt_tokens = std::max(r.cached_prompt_tokens, s.num_cached_prompt);
    r.max_tokens = s.params.max_tokens;
    r.preemptions += s.num_preemptions;
  });
  const auto now = std::chrono::steady_clock::now();
  std::vector<request_status> out;
  out.reserve(by_id.size());
  for (auto& [rid, r] : by_id) {
    if (auto it = requests_.find(rid); it != requests_.end()) {
      r.samples = it->second.samples;
      r.age_seconds = std::chrono::duration<double>(now - it->second.submitted).count();
    }
    out.push_back(r);
  }
  std::sort(out.begin(), out.end(), [](const request_status& a, const request_status& b) {
    if (a.running != b.running) return a.running;
    if (a.age_seconds != b.age_seconds) return a.age_seconds > b.age_seconds;
    return a.id < b.id;
  });
  if (out.size() > m.limit) out.resize(m.limit);
  m.reply->complete(std::move(out));
  return {};
}

rt::maybe_async scheduler::handle(cancel_sequences& m) {
  p_->fault_point("scheduler", "cancel_sequences");
  rt::outbox out;
  // Not here: ended already, or not arrived yet (add_request then sees the stream's cancel reason).
  if (requests_.count(m.request_id) == 0) return out.finish();
  end_request_now(m.request_id, m.reason, {}, out);
  pump(out);
  return out.finish();
}

rt::maybe_async scheduler::handle(finish_sequence& m) {
  p_->fault_point("scheduler", "finish_sequence");
  rt::outbox out;
  if (core_.finish(m.seq_id, finish_reason::stop)) {
    publish();
    out.tell(p_->kv_ref, kv_release{{m.seq_id}});
    sample_finished(request_of(m.seq_id));
  }
  pump(out);
  return out.finish();
}

rt::maybe_async scheduler::handle(step_allocated& m) {
  p_->fault_point("scheduler", "step_allocated");
  rt::outbox out;
  const step_allocation& a = m.allocation;
  core_.on_allocation(a);
  if (a.seqs.empty()) {
    --in_flight_;  // nothing ran: the executor will not answer
  } else {
    std::vector<uint64_t>& rids = step_requests_[a.step_id];
    for (const auto& sc : a.seqs) rids.push_back(request_of(sc.seq_id));
    std::sort(rids.begin(), rids.end());
    rids.erase(std::unique(rids.begin(), rids.end()), rids.end());
  }
  const auto now = std::chrono::steady_clock::now();
  for (const auto& sc : a.seqs) {
    auto it = requests_.find(request_of(sc.seq_id));
    if (it == requests_.end() || !it->second.queued) continue;
    it->second.queued = false;
    p_->metrics.queue.observe(std::chrono::duration<double>(now - it->second.submitted).count());
  }
  // An admission deferred while nothing else holds blocks can never fit: fail it. "Nothing holds"
  // as the allocator saw it (this answer may arrive after a result whose releases it has not
  // seen yet), and not when this step preempted: the blocks it freed are there for the next one.
  if (a.seqs.empty() && !a.deferred.empty() && a.preempted.empty() && a.num_holders == 0) {
    const uint64_t rid = request_of(a.deferred.front());
    end_request_now(rid, finish_reason::error,
                    "the request needs more KV cache blocks than the cache has (" +
                        std::to_string(kv_blocks_) +
                        "); raise --num-kv-blocks or shorten the prompt",
                    out);
  }
  pump(out);
  return out.finish();
}

rt::maybe_async scheduler::handle(step_done& m) {
  p_->fault_point("scheduler", "step_done");
  rt::outbox out;
  --in_flight_;
  p_->metrics.steps.fetch_add(1, std::memory_order_relaxed);
  std::vector<uint64_t> in_step;
  if (auto node = step_requests_.extract(m.step_id)) in_step = std::move(node.mapped());
  // Before any release below: the KV allocator registers (or drops) the step's full blocks first.
  out.tell(p_->kv_ref, kv_step_outcome{m.step_id, m.outcome.ok()});
  if (!m.outcome.ok()) {
    const error& e = m.outcome.err();
    ++consecutive_failures_;
    const std::string why =
        "the executor failed step " + std::to_string(m.step_id) + ": " + e.message;
    std::fprintf(stderr, "coserve engine: %s (%zu requests in it)\n", why.c_str(), in_step.size());
    if (e.code == k_executor_fatal) {
      fail_all(why, out);
    } else if (consecutive_failures_ >= max_consecutive_failures_) {
      fail_all(why + " (" + std::to_string(consecutive_failures_) + " failed steps in a row)", out);
    } else {
      for (uint64_t rid : in_step) end_request_now(rid, finish_reason::error, why, out);
    }
    pump(out);
    return out.finish();
  }
  if (m.ran) consecutive_failures_ = 0;  // a step with nothing left to run proves nothing
  step_result& result = *m.outcome;
  token_batch batch;
  batch.step_id = result.step_id;
  kv_release rel;
  auto& tr = p_->sys->trace();
  const int64_t t_result = tr.now_ns();
  for (const seq_event& e : core_.on_result(result)) {
    if (e.proposed > 0 && tr.enabled())  // speculation, in the request's timeline
      trace_for_request(*p_->sys, trace_id_, verify_span_name(e.proposed, e.accepted), e.request_id,
                        t_result, tr.now_ns());
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
    }
    t.prompt_tokens = e.prompt_tokens;
    t.completion_tokens = e.completion_tokens;
    t.cached_prompt_tokens = e.cached_prompt_tokens;
    if (e.finish != finish_reason::none) {
      rel.seqs.push_back(e.seq_id);
      sample_finished(e.request_id);
    }
    batch.events.push_back(std::move(t));
  }
  publish();  // before the sends: the KV release and the streamed ends follow the gauges
  if (!rel.seqs.empty()) out.tell(p_->kv_ref, std::move(rel));
  if (!batch.events.empty()) out.tell(p_->streamer_ref, std::move(batch));
  pump(out);
  return out.finish();
}

}  // namespace coserve::actors
