#include "actors/batch_planner.hpp"

#include <algorithm>

namespace coserve::actors {

namespace {
int32_t ceil_div(int32_t a, int32_t b) { return (a + b - 1) / b; }
}  // namespace

batch_planner::batch_planner(planner_config config, block_pool_options pool_options)
    : config_(config), pool_(std::move(pool_options)) {}

const sequence* batch_planner::find(seq_id_t id) const {
  auto it = seqs_.find(id);
  return it == seqs_.end() ? nullptr : &it->second;
}

void batch_planner::insert_waiting(seq_id_t id) {
  const sequence& s = at(id);
  auto pos = std::upper_bound(waiting_.begin(), waiting_.end(), id, [&](seq_id_t a, seq_id_t b) {
    const sequence& x = seqs_.at(a);
    const sequence& y = seqs_.at(b);
    return x.priority != y.priority ? x.priority < y.priority : x.arrival < y.arrival;
  });
  (void)s;
  waiting_.insert(pos, id);
}

void batch_planner::add(sequence seq) {
  seq.state = seq_state::waiting;
  seq.num_computed = 0;
  seq.pending = 0;
  seq.block_table.clear();
  seq.num_hashed_blocks = 0;
  seq.last_hash = 0;
  seq.known_to_executor = false;
  const seq_id_t id = seq.id;
  const bool fork = seq.fork_parent != 0;
  seqs_[id] = std::move(seq);
  if (fork) {
    forking_.push_back(id);
  } else {
    insert_waiting(id);
  }
}

void batch_planner::release_blocks(sequence& s) {
  // Reverse order: a sequence's tail blocks become the most recently freed (evicted last is the
  // prefix head, which other requests are likeliest to share).
  for (auto it = s.block_table.rbegin(); it != s.block_table.rend(); ++it) pool_.free(*it);
  s.block_table.clear();
  s.num_computed = 0;
  s.num_hashed_blocks = 0;
  s.last_hash = 0;
}

void batch_planner::drop(seq_id_t id) {
  auto erase_from = [id](std::vector<seq_id_t>& v) {
    auto it = std::find(v.begin(), v.end(), id);
    if (it != v.end()) v.erase(it);
  };
  erase_from(running_);
  erase_from(waiting_);
  erase_from(forking_);
}

void batch_planner::finish(seq_id_t id, finish_reason reason) {
  auto it = seqs_.find(id);
  if (it == seqs_.end() || it->second.state == seq_state::finished) return;
  sequence& s = it->second;
  drop(id);
  release_blocks(s);
  s.state = seq_state::finished;
  s.finish = reason;
  // The executor drops its state after the next step; the record itself goes then too (results
  // of a step still in flight are ignored for finished sequences).
  to_finish_.push_back(id);
}

void batch_planner::preempt(sequence& s, step_plan& plan) {
  drop(s.id);
  release_blocks(s);
  s.state = seq_state::waiting;
  ++s.num_preemptions;
  ++preemptions_;
  if (s.known_to_executor) {
    plan.finished.push_back(s.id);
    s.known_to_executor = false;
  }
  insert_waiting(s.id);
}

bool batch_planner::try_fork(sequence& child) {
  auto it = seqs_.find(child.fork_parent);
  const auto prompt_len = static_cast<int32_t>(child.prompt.size());
  if (it == seqs_.end() || it->second.state == seq_state::finished ||
      (it->second.state == seq_state::waiting && it->second.num_preemptions > 0) || prompt_len < 2) {
    // Parent gone or preempted (or nothing to share): an ordinary waiting sequence.
    child.fork_parent = 0;
    forking_.erase(std::find(forking_.begin(), forking_.end(), child.id));
    insert_waiting(child.id);
    return false;
  }
  const sequence& parent = it->second;
  if (parent.state != seq_state::running || parent.num_computed < prompt_len - 1)
    return false;  // parent's prompt not planned yet
  if (num_running() >= config_.max_num_seqs) return false;
  // Share the blocks covering [0, prompt_len - 1); the child computes the last prompt token itself
  // (its own logits), writing through copy-on-write into the shared partial block if any.
  const int32_t shared = ceil_div(prompt_len - 1, pool_.block_size());
  child.block_table.assign(parent.block_table.begin(), parent.block_table.begin() + shared);
  for (int32_t b : child.block_table) pool_.incref(b);
  child.num_computed = prompt_len - 1;
  child.num_cached_prompt = 0;
  child.num_hashed_blocks = std::min(parent.num_hashed_blocks, (prompt_len - 1) / pool_.block_size());
  child.last_hash = child.num_hashed_blocks == parent.num_hashed_blocks ? parent.last_hash : 0;
  if (child.num_hashed_blocks != parent.num_hashed_blocks) child.num_hashed_blocks = 0;
  child.fork_parent = 0;
  child.state = seq_state::running;
  forking_.erase(std::find(forking_.begin(), forking_.end(), child.id));
  running_.push_back(child.id);
  return true;
}

int32_t batch_planner::apply_prefix_cache(sequence& s) {
  const int32_t bs = pool_.block_size();
  // Leave at least one token to compute: its logits are sampled.
  const int32_t max_blocks = (s.num_known() - 1) / bs;
  std::vector<int32_t> tokens(static_cast<size_t>(bs));
  int32_t hits = 0;
  uint64_t parent = 0;
  for (; hits < max_blocks && pool_.prefix_caching(); ++hits) {
    for (int32_t j = 0; j < bs; ++j) tokens[static_cast<size_t>(j)] = s.token_at(hits * bs + j);
    const uint64_t h = pool_.hash_block(parent, tokens);
    const int32_t b = pool_.lookup(h, parent, tokens);
    if (b < 0) break;
    s.block_table.push_back(b);
    parent = h;
  }
  s.num_computed = hits * bs;
  s.num_hashed_blocks = hits;
  s.last_hash = parent;
  return hits;
}

int32_t batch_planner::blocks_needed(const sequence& s, int32_t n) const {
  const int32_t bs = pool_.block_size();
  const auto have = static_cast<int32_t>(s.block_table.size());
  int32_t need = std::max(0, ceil_div(s.num_computed + n, bs) - have);
  const int32_t first = s.num_computed / bs;
  if (first < have && pool_.ref_count(s.block_table[static_cast<size_t>(first)]) > 1) ++need;
  return need;
}

void batch_planner::grow(sequence& s, int32_t n, step_plan& plan) {
  const int32_t bs = pool_.block_size();
  const int32_t first = s.num_computed / bs;
  if (first < static_cast<int32_t>(s.block_table.size())) {
    int32_t& b = s.block_table[static_cast<size_t>(first)];
    if (pool_.ref_count(b) > 1) {  // copy-on-write: the partial block is shared with a fork
      const int32_t fresh = pool_.allocate();
      plan.block_copies.emplace_back(b, fresh);
      pool_.free(b);
      b = fresh;
    }
  }
  while (static_cast<int32_t>(s.block_table.size()) < ceil_div(s.num_computed + n, bs))
    s.block_table.push_back(pool_.allocate());
}

void batch_planner::register_full_blocks(sequence& s) {
  if (!pool_.prefix_caching()) return;
  const int32_t bs = pool_.block_size();
  const int32_t limit = std::min(s.num_computed, s.num_known()) / bs;  // full, computed, known
  std::vector<int32_t> tokens(static_cast<size_t>(bs));
  while (s.num_hashed_blocks < limit) {
    const int32_t i = s.num_hashed_blocks;
    for (int32_t j = 0; j < bs; ++j) tokens[static_cast<size_t>(j)] = s.token_at(i * bs + j);
    const uint64_t h = pool_.hash_block(s.last_hash, tokens);
    pool_.register_full(s.block_table[static_cast<size_t>(i)], h, s.last_hash, tokens);
    s.last_hash = h;
    ++s.num_hashed_blocks;
  }
}

void batch_planner::schedule(sequence& s, int32_t n, step_plan& plan) {
  if (!s.known_to_executor) {
    new_seq ns;
    ns.seq_id = s.id;
    ns.prompt_ids = s.prompt;
    ns.output_ids = s.output;
    ns.params = s.params;
    ns.seed = s.seed;
    plan.new_seqs.push_back(std::move(ns));
    s.known_to_executor = true;
  }
  grow(s, n, plan);
  scheduled_seq out;
  out.seq_id = s.id;
  out.start_pos = s.num_computed;
  out.tokens.resize(static_cast<size_t>(n));
  const int32_t known = s.num_known();
  for (int32_t k = 0; k < n; ++k) {
    const int32_t pos = s.num_computed + k;
    out.tokens[static_cast<size_t>(k)] = pos < known ? s.token_at(pos) : k_token_from_last_step;
  }
  out.block_table = s.block_table;
  s.num_computed += n;
  out.sample = s.num_computed == s.num_tokens();
  if (out.sample) {
    ++s.pending;
    s.pending_step = plan.step_id;
  }
  register_full_blocks(s);
  plan.seqs.push_back(std::move(out));
}

step_plan batch_planner::plan() {
  step_plan plan;
  plan.step_id = next_step_++;
  for (seq_id_t id : to_finish_) {
    auto it = seqs_.find(id);
    if (it == seqs_.end()) continue;
    if (it->second.known_to_executor) plan.finished.push_back(id);
    seqs_.erase(it);
  }
  to_finish_.clear();

  for (size_t k = 0; k < forking_.size();) {
    const size_t before = forking_.size();
    try_fork(at(forking_[k]));
    if (forking_.size() == before) ++k;
  }

  int32_t budget = config_.max_num_batched_tokens;
  // 1. Running sequences, oldest first.
  for (size_t i = 0; i < running_.size() && budget > 0;) {
    sequence& s = at(running_[i]);
    const bool unresolved = s.pending > 1 || (s.pending == 1 && s.pending_step != last_step_);
    const bool at_limit = s.num_generated() >= s.params.max_tokens ||
                          s.num_tokens() >= config_.max_model_len;
    const int32_t n = std::min(s.num_tokens() - s.num_computed, budget);
    if (unresolved || at_limit || n <= 0) {
      ++i;
      continue;
    }
    bool self_preempted = false;
    while (!pool_.can_allocate(blocks_needed(s, n))) {
      if (running_.size() - 1 > i) {
        preempt(at(running_.back()), plan);
      } else {
        preempt(s, plan);
        self_preempted = true;
        break;
      }
    }
    if (self_preempted) break;  // s was the newest; nothing after it
    schedule(s, n, plan);
    budget -= n;
    ++i;
  }

  // 2. Waiting sequences, by (priority, arrival), chunked into the remaining budget.
  while (budget > 0 && !waiting_.empty() && num_running() < config_.max_num_seqs) {
    sequence& s = at(waiting_.front());
    if (s.pending > 0) break;  // preempted with a token still in flight: wait for it (FCFS)
    if (s.num_preemptions > 0 && std::find(plan.finished.begin(), plan.finished.end(), s.id) !=
                                     plan.finished.end())
      break;  // preempted in this very plan: the executor drops it after this step
    const bool first_admission = s.num_preemptions == 0;
    const int32_t hits = apply_prefix_cache(s);
    const int32_t n = std::min(s.num_tokens() - s.num_computed, budget);
    if (!pool_.can_allocate(blocks_needed(s, n))) {
      release_blocks(s);  // undo the prefix hits; it waits for blocks
      break;
    }
    if (first_admission) {
      pool_.count_query(static_cast<int64_t>(s.prompt.size()),
                        std::min<int64_t>(int64_t{hits} * pool_.block_size(),
                                          static_cast<int64_t>(s.prompt.size())));
      s.num_cached_prompt = std::min(hits * pool_.block_size(), static_cast<int32_t>(s.prompt.size()));
    }
    waiting_.erase(waiting_.begin());
    s.state = seq_state::running;
    running_.push_back(s.id);
    schedule(s, n, plan);
    budget -= n;
  }
  last_step_ = plan.step_id;
  return plan;
}

std::vector<seq_event> batch_planner::on_result(const step_result& result) {
  std::vector<seq_event> events;
  events.reserve(result.outputs.size());
  for (const seq_output& o : result.outputs) {
    auto it = seqs_.find(o.seq_id);
    if (it == seqs_.end() || it->second.state == seq_state::finished) continue;
    sequence& s = it->second;
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
    if (ev.finish != finish_reason::none) finish(s.id, ev.finish);
    events.push_back(ev);
  }
  return events;
}

}  // namespace coserve::actors
