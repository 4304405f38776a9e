#include "actors/scheduler_core.hpp"

#include <algorithm>

namespace coserve::actors {

const sequence* scheduler_core::find(seq_id_t id) const {
  auto it = seqs_.find(id);
  return it == seqs_.end() ? nullptr : &it->second;
}

void scheduler_core::insert_waiting(seq_id_t id) {
  auto pos = std::upper_bound(waiting_.begin(), waiting_.end(), id, [&](seq_id_t a, seq_id_t b) {
    const sequence& x = seqs_.at(a);
    const sequence& y = seqs_.at(b);
    return x.priority != y.priority ? x.priority < y.priority : x.arrival < y.arrival;
  });
  waiting_.insert(pos, id);
}

void scheduler_core::add(sequence seq) {
  seq.state = seq_state::waiting;
  seq.num_computed = 0;
  seq.pending = 0;
  seq.kv_sent = 0;
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

void scheduler_core::drop(seq_id_t id) {
  auto erase_from = [id](std::vector<seq_id_t>& v) {
    auto it = std::find(v.begin(), v.end(), id);
    if (it != v.end()) v.erase(it);
  };
  erase_from(running_);
  erase_from(waiting_);
  erase_from(forking_);
}

bool scheduler_core::finish(seq_id_t id, finish_reason reason) {
  auto it = seqs_.find(id);
  if (it == seqs_.end() || it->second.state == seq_state::finished) return false;
  sequence& s = it->second;
  drop(id);
  s.state = seq_state::finished;
  s.finish = reason;
  finished_.push_back(id);  // results of steps still in flight are ignored for it
  return true;
}

new_seq scheduler_core::announce_of(const sequence& s) const {
  new_seq ns;
  ns.seq_id = s.id;
  ns.prompt_ids = s.prompt;
  ns.output_ids = s.output;
  ns.params = s.params;
  ns.seed = s.seed;
  return ns;
}

void scheduler_core::send_unsent_tokens(sequence& s, draft_entry& e,
                                        std::vector<int32_t>& appended) {
  const int32_t known = s.num_known();
  e.append_begin = static_cast<uint32_t>(appended.size());
  e.append_count = static_cast<uint32_t>(std::max(0, known - s.kv_sent));
  for (int32_t pos = s.kv_sent; pos < known; ++pos) appended.push_back(s.token_at(pos));
  s.kv_sent = known;
}

bool scheduler_core::can_schedule() const {
  if (!forking_.empty()) return true;
  for (seq_id_t id : running_) {
    const sequence& s = seqs_.at(id);
    const bool unresolved =
        s.pending > 1 || (s.pending == 1 && (s.pending_step != last_step_ || s.spec_proposed > 0));
    const bool at_limit =
        s.num_generated() >= s.params.max_tokens || s.num_tokens() >= config_.max_model_len;
    if (!unresolved && !at_limit && s.num_tokens() > s.num_computed) return true;
  }
  return !waiting_.empty() && seqs_.at(waiting_.front()).pending == 0 &&
         num_running() < config_.max_num_seqs;
}

int32_t scheduler_core::proposal_limit(const sequence& s) const {
  const speculative_config& sc = config_.speculation;
  if (!sc.enabled() || s.params.grammar) return 0;
  if (sc.disable_by_batch_size > 0 && num_running() > sc.disable_by_batch_size) return 0;
  // The step yields up to k + 1 tokens, each needing a position: stay inside both limits.
  return std::max(0,
                  std::min({sc.num_speculative_tokens, s.params.max_tokens - s.num_generated() - 1,
                            config_.max_model_len - s.num_tokens() - 1}));
}

void scheduler_core::propose(sequence& s, draft_entry& e, step_draft& d, int32_t budget,
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

step_draft scheduler_core::draft() {
  step_draft d;
  for (seq_id_t id : finished_) seqs_.erase(id);
  finished_.clear();
  const uint64_t step_id = next_step_;

  // n > 1 children join once their parent's prompt (but its last token) is planned.
  for (size_t k = 0; k < forking_.size();) {
    sequence& child = at(forking_[k]);
    const auto prompt_len = static_cast<int32_t>(child.prompt.size());
    auto pit = seqs_.find(child.fork_parent);
    const bool orphan = pit == seqs_.end() || pit->second.state == seq_state::finished ||
                        pit->second.num_preemptions > 0 || prompt_len < 2;
    if (orphan) {  // parent gone or preempted (or nothing to share): an ordinary waiting sequence
      child.fork_parent = 0;
      forking_.erase(forking_.begin() + static_cast<ptrdiff_t>(k));
      insert_waiting(child.id);
      continue;
    }
    const sequence& parent = pit->second;
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

  int32_t budget = config_.max_num_batched_tokens;
  d.entries.reserve(running_.size() + std::min<size_t>(waiting_.size(), 64));
  d.appended.reserve(running_.size() + 64);
  // 1. Running sequences, oldest first.
  for (seq_id_t id : running_) {
    if (budget <= 0) break;
    sequence& s = at(id);
    // A sequence verifying proposals waits for that result: its next input is not known yet.
    const bool unresolved =
        s.pending > 1 || (s.pending == 1 && (s.pending_step != last_step_ || s.spec_proposed > 0));
    const bool at_limit =
        s.num_generated() >= s.params.max_tokens || s.num_tokens() >= config_.max_model_len;
    const int32_t n = std::min(s.num_tokens() - s.num_computed, budget);
    if (unresolved || at_limit || n <= 0) continue;
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

  // 2. Waiting sequences, by (priority, arrival), chunked into the remaining budget.
  int32_t admitted = 0;
  for (size_t k = 0;
       k < waiting_.size() && budget > 0 && num_running() + admitted < config_.max_num_seqs; ++k) {
    sequence& s = at(waiting_[k]);
    if (s.pending > 0) break;  // preempted with a token still in flight: wait for it (FCFS)
    draft_entry e;
    e.seq_id = s.id;
    e.admit = true;
    e.count_query = s.num_preemptions == 0;
    e.num_tokens = s.num_tokens();
    e.tokens = std::min(e.num_tokens, budget);
    e.num_computed = s.num_computed;
    s.kv_sent = 0;
    send_unsent_tokens(s, e, d.appended);
    e.announce = announce_of(s);
    budget -= e.tokens;
    d.entries.push_back(std::move(e));
    ++admitted;
  }

  if (d.entries.empty() && d.forks.empty()) return d;  // step_id 0: nothing to run
  d.step_id = step_id;
  ++next_step_;
  last_step_ = step_id;
  outstanding_ = true;
  return d;
}

void scheduler_core::on_allocation(const step_allocation& alloc) {
  outstanding_ = false;
  for (seq_id_t id : alloc.preempted) {
    auto it = seqs_.find(id);
    if (it == seqs_.end() || it->second.state != seq_state::running) continue;
    sequence& s = it->second;
    drop(id);
    s.state = seq_state::waiting;
    s.num_computed = 0;
    s.kv_sent = 0;
    if (s.spec_step == alloc.step_id) s.spec_proposed = 0;  // preempted instead of verifying
    ++s.num_preemptions;
    ++preemptions_;
    insert_waiting(id);
  }
  for (const auto& sc : alloc.seqs) {
    auto it = seqs_.find(sc.seq_id);
    if (it == seqs_.end() || it->second.state == seq_state::finished) continue;
    sequence& s = it->second;
    if (s.state == seq_state::waiting) {  // admitted
      waiting_.erase(std::find(waiting_.begin(), waiting_.end(), s.id));
      s.state = seq_state::running;
      running_.push_back(s.id);
      if (s.num_preemptions == 0) s.num_cached_prompt = sc.cached_tokens;
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
  for (seq_id_t id : alloc.deferred) {
    auto it = seqs_.find(id);
    if (it != seqs_.end()) it->second.kv_sent = 0;  // the allocator kept nothing of it
  }
}

std::vector<seq_event> scheduler_core::on_result(const step_result& result) {
  std::vector<seq_event> events;
  events.reserve(result.outputs.size());
  for (size_t i = 0; i < result.outputs.size(); ++i) {
    const seq_output& o = result.outputs[i];
    auto it = seqs_.find(o.seq_id);
    if (it == seqs_.end() || it->second.state == seq_state::finished) continue;
    sequence& s = it->second;
    int32_t proposed = 0, accepted_now = 0;
    if (s.spec_proposed > 0 && s.spec_step == result.step_id && s.pending > 0) {
      // The first of this sequence's outputs: 1 + accepted proposals, consecutive.
      size_t m = 1;
      while (i + m < result.outputs.size() && result.outputs[i + m].seq_id == o.seq_id) ++m;
      const auto accepted = static_cast<int32_t>(m) - 1;
      if (s.state == seq_state::running) s.num_computed += accepted;  // their K/V hold
      spec_stats_.drafts += 1;
      spec_stats_.draft_tokens += s.spec_proposed;
      spec_stats_.accepted_tokens += accepted;
      if (spec_stats_.accepted_per_position.size() < size_t(s.spec_proposed))
        spec_stats_.accepted_per_position.resize(size_t(s.spec_proposed), 0);
      for (int32_t p = 0; p < accepted; ++p) ++spec_stats_.accepted_per_position[size_t(p)];
      s.backoff.on_outcome(2 * accepted >= s.spec_proposed);
      spec_prior_.on_outcome(2 * accepted >= s.spec_proposed);
      proposed = s.spec_proposed;
      accepted_now = accepted;
      s.spec_proposed = 0;
    }
    if (s.pending > 0) --s.pending;
    s.output.push_back(o.token);
    seq_event ev;
    ev.seq_id = s.id;
    ev.request_id = s.request_id;
    ev.index = s.index;
    ev.token = o.token;
    ev.output = &o;
    const auto generated = static_cast<int32_t>(s.output.size());
    const bool may_stop = generated >= s.params.min_tokens;
    if (may_stop && !s.params.ignore_eos && config_.eos_id >= 0 && o.token == config_.eos_id) {
      ev.finish = finish_reason::stop;
    } else if (may_stop && std::find(s.params.stop_token_ids.begin(), s.params.stop_token_ids.end(),
                                     o.token) != s.params.stop_token_ids.end()) {
      ev.finish = finish_reason::stop;
    } else if (generated >= s.params.max_tokens || s.num_known() >= config_.max_model_len) {
      ev.finish = finish_reason::length;
    }
    ev.prompt_tokens = static_cast<int32_t>(s.prompt.size());
    ev.completion_tokens = generated;
    ev.cached_prompt_tokens = s.num_cached_prompt;
    ev.proposed = proposed;
    ev.accepted = accepted_now;
    if (ev.finish != finish_reason::none) finish(s.id, ev.finish);
    events.push_back(ev);
  }
  return events;
}

int64_t scheduler_core::num_waiting_tokens() const {
  int64_t n = 0;
  for (seq_id_t id : waiting_)  // forking children share their parent's prompt: not counted
    if (auto it = seqs_.find(id); it != seqs_.end())
      n += it->second.num_tokens() - it->second.num_computed;
  return n;
}

}  // namespace coserve::actors
