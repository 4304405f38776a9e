#include "actors/step_planner.hpp"

#include <algorithm>

#include "model/executor.hpp"

namespace coserve::actors {

const sequence* step_planner::find(seq_id_t id) const { return seqs_.find(id); }

// ---- requests
// ------------------------------------------------------------------------------------

void step_planner::add_request(uint64_t request_id, std::vector<int32_t> prompt,
                               const sampling_params& params, int32_t priority,
                               clock::time_point submitted, step_emission& out,
                               finish_reason cancelled) {
  if (failed_) {
    out.ends.push_back({request_id, finish_reason::error, failure_});
    return;
  }
  if (cancelled != finish_reason::none) {
    out.ends.push_back(
        {request_id, cancelled,
         cancelled == finish_reason::error ? "the request was failed before it was queued" : ""});
    return;
  }
  const int32_t n = std::max(1, params.n);
  request& r = requests_[request_id];
  r.samples = r.live = n;
  r.submitted = submitted;
  for (int32_t i = 0; i < n; ++i) {
    sequence s;
    s.id = make_seq_id(request_id, i);
    s.request_id = request_id;
    s.index = i;
    s.priority = priority;
    s.arrival = request_id;
    s.prompt = i + 1 < n ? prompt : std::move(prompt);
    s.params = params;
    if (!s.params.ignore_eos)
      s.params.stop_token_ids.insert(s.params.stop_token_ids.end(), config_.extra_eos.begin(),
                                     config_.extra_eos.end());
    s.seed = params.seed ? *params.seed + static_cast<uint64_t>(i)
                         : request_id * 7919 + static_cast<uint64_t>(i);
    s.fork_parent = i == 0 ? 0 : make_seq_id(request_id, 0);
    add(std::move(s));
  }
}

void step_planner::end_request(uint64_t request_id, finish_reason reason,
                               const std::string& message, step_emission& out) {
  auto it = requests_.find(request_id);
  if (it == requests_.end()) return;
  for (int32_t i = 0; i < it->second.samples; ++i)
    if (finish(make_seq_id(request_id, i), reason)) release(make_seq_id(request_id, i));
  requests_.erase(it);
  out.ends.push_back({request_id, reason, message});
}

void step_planner::finish_sample(seq_id_t id) {
  if (!finish(id, finish_reason::stop)) return;
  release(id);
  sample_finished(request_of(id));
}

void step_planner::sample_finished(uint64_t request_id) {
  auto it = requests_.find(request_id);
  if (it != requests_.end() && --it->second.live <= 0) requests_.erase(it);
}

void step_planner::fail_all(const std::string& reason, step_emission& out) {
  if (failed_) return;
  failed_ = true;
  failure_ = reason;
  std::vector<uint64_t> all;
  all.reserve(requests_.size());
  for (const auto& [rid, r] : requests_) all.push_back(rid);
  std::sort(all.begin(), all.end());
  for (uint64_t rid : all) end_request(rid, finish_reason::error, reason, out);
}

void step_planner::add(sequence seq) {
  seq.state = seq_state::waiting;
  seq.num_computed = 0;
  seq.pending = 0;
  seq.kv_sent = 0;
  // Room for the outputs it may sample, up to k_output_reserve: sequences admitted together
  // would otherwise grow their outputs past the same powers of two on the same step, each
  // reallocating and copying at once.
  const int64_t may_sample =
      std::min<int64_t>(seq.params.max_tokens,
                        int64_t{config_.max_model_len} - static_cast<int64_t>(seq.prompt.size()));
  if (may_sample > 0)
    seq.output.reserve(static_cast<size_t>(std::min(may_sample, k_output_reserve)));
  if (config_.speculation.backoff) {
    seq.backoff.penalty = spec_prior_.penalty;
    seq.backoff.skip = spec_prior_.penalty;
  }
  const seq_id_t id = seq.id;
  const bool fork = seq.fork_parent != 0;
  seqs_[id] = std::move(seq);
  if (fork) {
    forking_.push_back(id);
  } else {
    insert_waiting(id);
  }
}

void step_planner::insert_waiting(seq_id_t id) {
  auto pos = std::upper_bound(waiting_.begin(), waiting_.end(), id, [&](seq_id_t a, seq_id_t b) {
    const sequence& x = *seqs_.find(a);
    const sequence& y = *seqs_.find(b);
    return x.priority != y.priority ? x.priority < y.priority : x.arrival < y.arrival;
  });
  waiting_.insert(pos, id);
}

void step_planner::drop(seq_id_t id) {
  auto erase_from = [id](std::vector<seq_id_t>& v) {
    auto it = std::find(v.begin(), v.end(), id);
    if (it != v.end()) v.erase(it);
  };
  erase_from(running_);
  erase_from(waiting_);
  erase_from(forking_);
}

bool step_planner::finish(seq_id_t id, finish_reason reason) {
  sequence* found = seqs_.find(id);
  if (found == nullptr || found->state == seq_state::finished) return false;
  sequence& s = *found;
  drop(id);
  s.state = seq_state::finished;
  s.finish = reason;
  finished_.push_back(id);  // results of steps still in flight are ignored for it
  return true;
}

// ---- drafting
// ------------------------------------------------------------------------------------

new_seq step_planner::announce_of(const sequence& s) const {
  new_seq ns;
  ns.seq_id = s.id;
  ns.prompt_ids = s.prompt;
  ns.output_ids = s.output;
  ns.params = s.params;
  ns.seed = s.seed;
  return ns;
}

void step_planner::send_unsent_tokens(sequence& s, draft_entry& e, std::vector<int32_t>& appended) {
  const int32_t known = s.num_known();
  e.append_begin = static_cast<uint32_t>(appended.size());
  e.append_count = static_cast<uint32_t>(std::max(0, known - s.kv_sent));
  for (int32_t pos = s.kv_sent; pos < known; ++pos) appended.push_back(s.token_at(pos));
  s.kv_sent = known;
}

bool step_planner::can_draft() const noexcept {
  return !failed_ && in_flight_ < 2 && !outstanding_ && has_work();
}

bool step_planner::can_schedule() const {
  if (!forking_.empty()) return true;
  for (seq_id_t id : running_) {
    const sequence& s = *seqs_.find(id);
    if (!unresolved(s) && !at_limit(s) && s.num_tokens() > s.num_computed) return true;
  }
  return !waiting_.empty() && seqs_.find(waiting_.front())->pending == 0 &&
         num_running() < config_.max_num_seqs;
}

int32_t step_planner::proposal_limit(const sequence& s) const {
  const speculative_config& sc = config_.speculation;
  if (!sc.enabled() || s.params.grammar) return 0;
  if (sc.disable_by_batch_size > 0 && num_running() > sc.disable_by_batch_size) return 0;
  // The step yields up to k + 1 tokens, each needing a position: stay inside both limits.
  return std::max(0,
                  std::min({sc.num_speculative_tokens, s.params.max_tokens - s.num_generated() - 1,
                            config_.max_model_len - s.num_tokens() - 1}));
}

void step_planner::propose(sequence& s, draft_entry& e, step_draft& d, int32_t budget,
                           uint64_t step_id) {
  const int32_t k = std::min(proposal_limit(s), budget);
  if (k <= 0) return;
  if (s.backoff.skip > 0 && config_.speculation.backoff) {
    --s.backoff.skip;
    return;
  }
  const speculative_config& sc = config_.speculation;
  e.proposal_begin = static_cast<uint32_t>(d.proposals.size());
  int32_t got = k;
  if (sc.method == "draft_model") {  // the executor's draft model fills them in
    d.proposals.insert(d.proposals.end(), static_cast<size_t>(k), k_token_from_draft);
  } else {
    // With the last token still being sampled (two steps in flight), the lookup predicts it too.
    got = ngram_propose(token_view{&s.prompt, &s.output}, sc.prompt_lookup_min,
                        sc.prompt_lookup_max, k, s.pending, d.proposals);
  }
  if (got <= 0) {
    s.backoff.on_outcome(false);
    return;
  }
  e.proposal_count = static_cast<uint32_t>(got);
  e.tokens += got;
  e.num_tokens += got;
  s.spec_proposed = got;
  s.spec_step = step_id;
}

// n > 1 children join once their parent's prompt (but its last token) is planned.
void step_planner::apply_forks(step_draft& d) {
  for (size_t k = 0; k < forking_.size();) {
    sequence& child = at(forking_[k]);
    const auto prompt_len = static_cast<int32_t>(child.prompt.size());
    const sequence* pit = seqs_.find(child.fork_parent);
    const bool orphan = pit == nullptr || pit->state == seq_state::finished ||
                        pit->num_preemptions > 0 || prompt_len < 2;
    if (orphan) {  // parent gone or preempted (or nothing to share): an ordinary waiting sequence
      child.fork_parent = 0;
      forking_.erase(forking_.begin() + static_cast<ptrdiff_t>(k));
      insert_waiting(child.id);
      continue;
    }
    const sequence& parent = *pit;
    if (parent.state != seq_state::running || parent.num_computed < prompt_len - 1 ||
        num_running() >= config_.max_num_seqs) {
      ++k;
      continue;
    }
    draft_fork f;
    f.child = child.id;
    f.parent = parent.id;
    f.shared_tokens = prompt_len - 1;  // the child computes its last prompt token (its own logits)
    f.announce = announce_of(child);
    d.forks.push_back(std::move(f));
    child.num_computed = prompt_len - 1;
    child.num_cached_prompt = 0;
    child.kv_sent = prompt_len;
    child.fork_parent = 0;
    child.state = seq_state::running;
    running_.push_back(child.id);
    forking_.erase(forking_.begin() + static_cast<ptrdiff_t>(k));
  }
}

// Running sequences, oldest first.
void step_planner::draft_running(step_draft& d, int32_t& budget, uint64_t step_id) {
  for (seq_id_t id : running_) {
    if (budget <= 0) break;
    sequence& s = at(id);
    // A sequence verifying proposals waits for that result: its next input is not known yet.
    const int32_t n = std::min(s.num_tokens() - s.num_computed, budget);
    if (unresolved(s) || at_limit(s) || n <= 0) continue;
    draft_entry e;
    e.seq_id = id;
    e.tokens = n;
    e.num_tokens = s.num_tokens();
    e.num_computed = s.num_computed;
    send_unsent_tokens(s, e, d.appended);
    if (n == 1) propose(s, e, d, budget - 1, step_id);
    budget -= e.tokens;
    d.entries.push_back(std::move(e));
  }
}

// Waiting sequences, by (priority, arrival), chunked into the remaining budget.
void step_planner::draft_waiting(step_draft& d, int32_t& budget) {
  int32_t admitted = 0;
  for (size_t k = 0;
       k < waiting_.size() && budget > 0 && num_running() + admitted < config_.max_num_seqs; ++k) {
    sequence& s = at(waiting_[k]);
    if (s.pending > 0) break;  // preempted with a token still in flight: wait for it (FCFS)
    if (config_.whole_prompts && s.num_tokens() - s.num_computed > budget) break;  // FCFS too
    draft_entry e;
    e.seq_id = s.id;
    e.admit = true;
    e.count_query = s.num_preemptions == 0;
    e.num_tokens = s.num_tokens();
    e.tokens = std::min(e.num_tokens, budget);
    e.num_computed = s.num_computed;
    s.kv_sent = 0;
    send_unsent_tokens(s, e, d.appended);
    e.announce = static_cast<int32_t>(d.announcements.size());
    d.announcements.push_back(announce_of(s));
    budget -= e.tokens;
    d.entries.push_back(std::move(e));
    ++admitted;
  }
}

step_draft step_planner::draft() {
  step_draft d;
  d.ops = take_kv_ops();
  for (seq_id_t id : finished_) seqs_.erase(id);
  finished_.clear();
  if (failed_) return d;
  const uint64_t step_id = next_step_;
  apply_forks(d);
  int32_t budget = config_.max_num_batched_tokens;
  d.entries.reserve(running_.size() + std::min<size_t>(waiting_.size(), 64));
  d.appended.reserve(running_.size() + 64);
  draft_running(d, budget, step_id);
  draft_waiting(d, budget);
  if (d.entries.empty() && d.forks.empty()) return d;  // step_id 0: nothing to run
  d.step_id = step_id;
  ++next_step_;
  last_step_ = step_id;
  outstanding_ = true;
  ++in_flight_;
  return d;
}

// ---- allocations and results
// ---------------------------------------------------------------------

void step_planner::apply_preemptions(const step_allocation& alloc) {
  for (seq_id_t id : alloc.preempted) {
    sequence* found = seqs_.find(id);
    if (found == nullptr || found->state != seq_state::running) continue;
    sequence& s = *found;
    drop(id);
    s.state = seq_state::waiting;
    s.num_computed = 0;
    s.kv_sent = 0;
    if (s.spec_step == alloc.step_id) s.spec_proposed = 0;  // preempted instead of verifying
    ++s.num_preemptions;
    ++preemptions_;
    insert_waiting(id);
  }
}

void step_planner::apply_scheduled(const step_allocation& alloc, step_emission& out) {
  for (const auto& sc : alloc.seqs) {
    sequence* found = seqs_.find(sc.seq_id);
    if (found == nullptr || found->state == seq_state::finished) continue;
    sequence& s = *found;
    if (s.state == seq_state::waiting) {  // admitted
      waiting_.erase(std::find(waiting_.begin(), waiting_.end(), s.id));
      s.state = seq_state::running;
      running_.push_back(s.id);
      if (s.num_preemptions == 0) s.num_cached_prompt = sc.cached_tokens;
      if (auto r = requests_.find(s.request_id); r != requests_.end() && r->second.queued) {
        r->second.queued = false;
        out.first_scheduled.push_back(r->second.submitted);
      }
    }
    if (s.spec_proposed > 0 && s.spec_step == alloc.step_id) {
      // Verifying: only the last known token counts as computed until the result says how many
      // proposals hold; one token (at least) is on its way.
      s.num_computed = sc.start_pos + 1;
      ++s.pending;
      s.pending_step = alloc.step_id;
      continue;
    }
    s.num_computed = sc.start_pos + sc.tokens;
    if (s.num_computed == s.num_tokens()) {
      ++s.pending;
      s.pending_step = alloc.step_id;
    }
  }
}

void step_planner::on_allocation(const step_allocation& alloc, step_emission& out) {
  outstanding_ = false;
  apply_preemptions(alloc);
  apply_scheduled(alloc, out);
  for (seq_id_t id : alloc.deferred) {
    if (sequence* s = seqs_.find(id)) s->kv_sent = 0;  // the allocator kept nothing of it
  }
  if (alloc.seqs.empty()) {
    --in_flight_;  // nothing runs: no result will come
  } else {         // the sequences it runs, for its failure (vectors reused step after step)
    std::vector<seq_id_t> ids;
    if (!spare_ids_.empty()) {
      ids = std::move(spare_ids_.back());
      spare_ids_.pop_back();
    }
    for (const auto& sc : alloc.seqs) ids.push_back(sc.seq_id);
    steps_.emplace_back(alloc.step_id, std::move(ids));
  }
  // An admission deferred while nothing else holds blocks can never fit. "Nothing holds" as the
  // allocator saw it, and not when this step preempted: the blocks it freed are there for the next.
  if (alloc.seqs.empty() && !alloc.deferred.empty() && alloc.preempted.empty() &&
      alloc.num_holders == 0) {
    end_request(request_of(alloc.deferred.front()), finish_reason::error,
                "the request needs more KV cache blocks than the cache has (" +
                    std::to_string(config_.num_kv_blocks) +
                    "); raise --num-kv-blocks or shorten the prompt",
                out);
  }
}

finish_reason step_planner::finish_of(const sequence& s, int32_t token) const {
  const auto generated = static_cast<int32_t>(s.output.size());
  const bool may_stop = generated >= s.params.min_tokens;
  if (may_stop && !s.params.ignore_eos && config_.eos_id >= 0 && token == config_.eos_id)
    return finish_reason::stop;
  if (may_stop && std::find(s.params.stop_token_ids.begin(), s.params.stop_token_ids.end(),
                            token) != s.params.stop_token_ids.end())
    return finish_reason::stop;
  if (generated >= s.params.max_tokens || s.num_known() >= config_.max_model_len)
    return finish_reason::length;
  return finish_reason::none;
}

void step_planner::count_verification(sequence& s, int32_t accepted, seq_event& ev) {
  if (s.state == seq_state::running) s.num_computed += accepted;  // their K/V hold
  spec_stats_.drafts += 1;
  spec_stats_.draft_tokens += s.spec_proposed;
  spec_stats_.accepted_tokens += accepted;
  if (spec_stats_.accepted_per_position.size() < size_t(s.spec_proposed))
    spec_stats_.accepted_per_position.resize(size_t(s.spec_proposed), 0);
  for (int32_t p = 0; p < accepted; ++p) ++spec_stats_.accepted_per_position[size_t(p)];
  s.backoff.on_outcome(2 * accepted >= s.spec_proposed);
  spec_prior_.on_outcome(2 * accepted >= s.spec_proposed);
  ev.proposed = s.spec_proposed;
  ev.accepted = accepted;
  s.spec_proposed = 0;
}

seq_event step_planner::apply_output(sequence& s, const step_result& result, size_t i) {
  const seq_output& o = result.outputs[i];
  seq_event ev;
  if (s.spec_proposed > 0 && s.spec_step == result.step_id && s.pending > 0) {
    // The first of this sequence's outputs: 1 + accepted proposals, consecutive.
    size_t m = 1;
    while (i + m < result.outputs.size() && result.outputs[i + m].seq_id == o.seq_id) ++m;
    count_verification(s, static_cast<int32_t>(m) - 1, ev);
  }
  if (s.pending > 0) --s.pending;
  s.output.push_back(o.token);
  ev.seq_id = s.id;
  ev.request_id = s.request_id;
  ev.index = s.index;
  ev.token = o.token;
  ev.output = &o;
  ev.finish = finish_of(s, o.token);
  ev.prompt_tokens = static_cast<int32_t>(s.prompt.size());
  ev.completion_tokens = static_cast<int32_t>(s.output.size());
  ev.cached_prompt_tokens = s.num_cached_prompt;
  return ev;
}

std::vector<seq_id_t> step_planner::take_step(uint64_t step_id) {
  std::vector<seq_id_t> ids;
  for (auto it = steps_.begin(); it != steps_.end(); ++it)
    if (it->first == step_id) {
      ids = std::move(it->second);
      steps_.erase(it);
      break;
    }
  return ids;
}

void step_planner::on_result(const step_result& result, step_emission& out, bool ran) {
  --in_flight_;
  if (std::vector<seq_id_t> ids = take_step(result.step_id); ids.capacity() > 0) {
    ids.clear();
    spare_ids_.push_back(std::move(ids));
  }
  kv_ops_.push_back({kv_op::kind::step_succeeded, result.step_id});
  if (ran) consecutive_failures_ = 0;
  out.tokens.reserve(out.tokens.size() + result.outputs.size());
  for (size_t i = 0; i < result.outputs.size(); ++i) {
    sequence* found = seqs_.find(result.outputs[i].seq_id);
    if (found == nullptr || found->state == seq_state::finished) continue;
    sequence& s = *found;
    const seq_event ev = apply_output(s, result, i);
    if (ev.finish != finish_reason::none) {
      finish(s.id, ev.finish);
      release(s.id);
      sample_finished(s.request_id);
    }
    out.tokens.push_back(ev);
  }
}

void step_planner::on_failed_step(uint64_t step_id, const error& e, step_emission& out) {
  --in_flight_;
  std::vector<uint64_t> in_step;
  for (seq_id_t id : take_step(step_id)) in_step.push_back(request_of(id));
  std::sort(in_step.begin(), in_step.end());
  in_step.erase(std::unique(in_step.begin(), in_step.end()), in_step.end());
  kv_ops_.push_back({kv_op::kind::step_failed, step_id});
  ++consecutive_failures_;
  const std::string why = "the executor failed step " + std::to_string(step_id) + ": " + e.message;
  if (e.code == k_executor_fatal) {
    fail_all(why, out);
  } else if (consecutive_failures_ >= std::max(1, config_.max_consecutive_failures)) {
    fail_all(why + " (" + std::to_string(consecutive_failures_) + " failed steps in a row)", out);
  } else {
    for (uint64_t rid : in_step) end_request(rid, finish_reason::error, why, out);
  }
}

// ---- views
// ---------------------------------------------------------------------------------------

int64_t step_planner::num_waiting_tokens() const {
  int64_t n = 0;
  for (seq_id_t id : waiting_)  // forking children share their parent's prompt: not counted
    if (const sequence* s = seqs_.find(id)) n += s->num_tokens() - s->num_computed;
  return n;
}

std::pair<uint64_t, uint64_t> step_planner::lora_masks() const {
  uint64_t running = 0, waiting = 0;
  if (config_.num_loras == 0) return {0, 0};
  auto bit = [&](seq_id_t id) -> uint64_t {
    const sequence* s = seqs_.find(id);
    const int32_t lora = s == nullptr ? 0 : s->params.lora_id;
    return lora >= 1 && lora <= 64 ? uint64_t{1} << (lora - 1) : 0;
  };
  for (seq_id_t id : running_) running |= bit(id);
  for (seq_id_t id : waiting_) waiting |= bit(id);
  for (seq_id_t id : forking_) waiting |= bit(id);
  return {running, waiting};
}

std::vector<request_status> step_planner::requests(clock::time_point now, size_t limit) const {
  std::unordered_map<uint64_t, request_status> by_id;
  seqs_.for_each([&](uint64_t, const sequence& s) {
    if (s.state == seq_state::finished) return;
    request_status& r = by_id[s.request_id];
    r.id = s.request_id;
    r.running = r.running || s.state == seq_state::running;
    r.prompt_tokens = static_cast<int32_t>(s.prompt.size());
    r.generated_tokens += s.num_generated();
    r.cached_prompt_tokens = std::max(r.cached_prompt_tokens, s.num_cached_prompt);
    r.max_tokens = s.params.max_tokens;
    r.preemptions += s.num_preemptions;
  });
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
  if (out.size() > limit) out.resize(limit);
  return out;
}

}  // namespace coserve::actors
