#include "actors/kv_manager.hpp"

#include <algorithm>

namespace coserve::actors {

namespace {
int32_t ceil_div(int32_t a, int32_t b) { return (a + b - 1) / b; }
}  // namespace

kv_manager::kv_manager(block_pool_options options) : pool_(std::move(options)) {
  scratch_.resize(static_cast<size_t>(pool_.block_size()));
}

const std::vector<int32_t>* kv_manager::block_table(seq_id_t id) const {
  const seq_kv* s = seqs_.find(id);
  return s == nullptr ? nullptr : &s->table;
}

void kv_manager::free_table(seq_kv& s) {
  register_full_blocks(s);  // its queued blocks enter the cache before they are freed
  // Reverse order: a sequence's tail blocks become the most recently freed, so the prefix head —
  // the part other requests are likeliest to share — is evicted last.
  for (auto it = s.table.rbegin(); it != s.table.rend(); ++it) pool_.free(*it);
  s.table.clear();
  s.table_sent = 0;
  s.fork_shared = 0;
  s.num_computed = 0;
  s.num_committed = 0;
  s.num_hashed = 0;
  s.last_hash = s.salt;
}

void kv_manager::release(seq_id_t id) {
  seq_kv* s = seqs_.find(id);
  if (s == nullptr) return;
  free_table(*s);
  if (s->known_to_executor) drop_next_.push_back(id);
  auto h = std::find(holders_.begin(), holders_.end(), id);
  if (h != holders_.end()) holders_.erase(h);
  seqs_.erase(id);
}

void kv_manager::step_outcome(uint64_t step_id, bool ok) {
  auto it = std::find_if(pending_.begin(), pending_.end(),
                         [&](const pending_step& p) { return p.step_id == step_id; });
  if (it == pending_.end()) return;
  std::vector<step_write> writes = std::move(it->writes);
  pending_.erase(it);
  if (ok) commit(writes);
  writes.clear();
  spare_.push_back(std::move(writes));
}

void kv_manager::commit(const std::vector<step_write>& writes) {
  for (const step_write& w : writes) {
    seq_kv* found = seqs_.find(w.id);
    if (found == nullptr || found->generation != w.generation) continue;  // released since
    seq_kv& s = *found;
    s.num_committed = std::max(s.num_committed, std::min(w.end, s.num_computed));
    queue_registration(w.id, s);
  }
}

void kv_manager::queue_registration(seq_id_t id, seq_kv& s) {
  if (s.registration_queued || !pool_.prefix_caching() || full_blocks_committed(s) <= s.num_hashed)
    return;
  to_register_.push_back({id, s.generation});
  s.registration_queued = true;
}

void kv_manager::register_queued(int32_t budget) {
  while (budget > 0 && to_register_head_ < to_register_.size()) {
    const to_register& r = to_register_[to_register_head_];
    seq_kv* s = seqs_.find(r.id);
    if (s != nullptr && s->generation == r.generation) {
      budget -= register_full_blocks(*s, budget);
      if (full_blocks_committed(*s) > s->num_hashed) break;  // budget spent inside this one
      s->registration_queued = false;
    }
    ++to_register_head_;
  }
  if (to_register_head_ == to_register_.size()) {
    to_register_.clear();
    to_register_head_ = 0;
  } else if (to_register_head_ > 1024 && 2 * to_register_head_ > to_register_.size()) {
    to_register_.erase(to_register_.begin(),
                       to_register_.begin() + static_cast<ptrdiff_t>(to_register_head_));
    to_register_head_ = 0;
  }
}

void kv_manager::preempt(seq_id_t id, step_plan& plan, step_allocation& alloc) {
  seq_kv* s = seqs_.find(id);
  if (s == nullptr) return;
  free_table(*s);
  if (s->known_to_executor) plan.finished.push_back(id);
  holders_.erase(std::find(holders_.begin(), holders_.end(), id));
  seqs_.erase(id);
  alloc.preempted.push_back(id);
}

void kv_manager::fork(draft_fork& f) {
  seq_kv* pit = seqs_.find(f.parent);
  if (pit == nullptr) return;  // the scheduler only forks running parents; defensive
  seq_kv& parent = *pit;
  const int32_t bs = pool_.block_size();
  seq_kv child;
  const int32_t shared =
      std::min(ceil_div(f.shared_tokens, bs), static_cast<int32_t>(parent.table.size()));
  child.table.assign(parent.table.begin(), parent.table.begin() + shared);
  for (int32_t b : child.table) pool_.incref(b);
  child.fork_shared = shared;
  child.tokens = f.announce.prompt_ids;  // the whole prompt: the child computes its last token
  child.num_computed = f.shared_tokens;
  child.num_committed = std::min(parent.num_committed, f.shared_tokens);
  child.generation = next_generation_++;
  child.salt = child.last_hash = parent.salt;
  // The child's hashed prefix is the parent's, up to the shared full blocks.
  const int32_t full = f.shared_tokens / bs;
  if (parent.num_hashed <= full) {
    child.num_hashed = parent.num_hashed;
    child.last_hash = parent.last_hash;
  }
  child.announce = std::make_unique<new_seq>(std::move(f.announce));
  parent.fork_shared = std::max(parent.fork_shared, shared);
  seqs_[f.child] = std::move(child);  // (parent may move from here on)
  holders_.push_back(f.child);
}

int32_t kv_manager::lookup_prefix(seq_kv& s) {
  if (!pool_.prefix_caching()) return 0;
  register_queued(INT32_MAX);  // every committed block findable, as if registered at commit
  // Prompt logprobs need every prompt position computed (vLLM skips the cache for them too); the
  // sequence's blocks still enter the cache for others.
  if (s.announce && s.announce->params.prompt_logprobs >= 0) return 0;
  const int32_t bs = pool_.block_size();
  // Leave at least one token to compute: its logits are sampled.
  const int32_t max_blocks = (num_known(s) - 1) / bs;
  int32_t hits = 0;
  uint64_t parent = s.salt;
  for (; hits < max_blocks; ++hits) {
    const std::span<const int32_t> block = block_tokens(s, hits);
    const uint64_t h = pool_.hash_block(parent, block);
    const int32_t b = pool_.lookup(h, parent, block);
    if (b < 0) break;
    s.table.push_back(b);
    parent = h;
  }
  s.num_computed = hits * bs;
  s.num_committed = s.num_computed;
  s.num_hashed = hits;
  s.last_hash = parent;
  return hits;
}

int32_t kv_manager::blocks_needed(const seq_kv& s, int32_t n) const {
  const int32_t bs = pool_.block_size();
  const auto have = static_cast<int32_t>(s.table.size());
  int32_t need = std::max(0, ceil_div(s.num_computed + n, bs) - have);
  const int32_t first = s.num_computed / bs;
  if (first < std::min(have, s.fork_shared) &&
      pool_.ref_count(s.table[static_cast<size_t>(first)]) > 1)
    ++need;
  return need;
}

void kv_manager::grow(seq_kv& s, int32_t n, step_plan& plan) {
  const int32_t bs = pool_.block_size();
  const int32_t first = s.num_computed / bs;
  if (first < std::min(static_cast<int32_t>(s.table.size()), s.fork_shared)) {
    int32_t& b = s.table[static_cast<size_t>(first)];
    if (pool_.ref_count(b) > 1) {  // copy-on-write: the partial block is shared with a fork
      const int32_t fresh = pool_.allocate();
      plan.block_copies.emplace_back(b, fresh);
      pool_.free(b);
      b = fresh;
      s.table_sent = std::min(s.table_sent, first);  // the executor holds the old block there
    }
  }
  while (static_cast<int32_t>(s.table.size()) < ceil_div(s.num_computed + n, bs))
    s.table.push_back(pool_.allocate());
}

int32_t kv_manager::register_full_blocks(seq_kv& s, int32_t budget) {
  if (!pool_.prefix_caching()) return 0;
  const int32_t full = full_blocks_committed(s);
  const int32_t limit = budget >= full - s.num_hashed ? full : s.num_hashed + budget;
  const int32_t first = s.num_hashed;
  while (s.num_hashed < limit) {
    const int32_t i = s.num_hashed;
    const std::span<const int32_t> block = block_tokens(s, i);
    const uint64_t h = pool_.hash_block(s.last_hash, block);
    pool_.register_full(s.table[static_cast<size_t>(i)], h, s.last_hash, block, i == 0);
    s.last_hash = h;
    ++s.num_hashed;
  }
  return s.num_hashed - first;
}

void kv_manager::schedule(seq_id_t id, seq_kv& s, int32_t n, int32_t num_tokens, int32_t cached,
                          std::span<const int32_t> proposals, step_plan& plan,
                          step_allocation& alloc) {
  if (!s.known_to_executor) {
    if (s.announce) plan.new_seqs.push_back(std::move(*s.announce));
    s.announce.reset();
    s.known_to_executor = true;
  }
  grow(s, n, plan);
  scheduled_seq out;  // default-initialised: plan.seqs.emplace_back() would zero it first
  out.seq_id = id;
  out.start_pos = s.num_computed;
  out.tokens.resize(static_cast<size_t>(n));
  const int32_t known = num_known(s);
  // Known tokens, then a token still being sampled (the executor's placeholder), then proposals.
  const int32_t first_proposal = num_tokens - static_cast<int32_t>(proposals.size());
  for (int32_t k = 0; k < n; ++k) {
    const int32_t pos = s.num_computed + k;
    out.tokens[static_cast<size_t>(k)] = pos < known ? token_at(s, pos)
                                         : pos < first_proposal
                                             ? k_token_from_last_step
                                             : proposals[static_cast<size_t>(pos - first_proposal)];
  }
  out.num_draft = static_cast<int32_t>(proposals.size());
  // The table as a change to what the executor's side holds: nothing new for most decode steps.
  out.table_kept = s.table_sent;
  if (s.table_sent < static_cast<int32_t>(s.table.size()))
    out.block_table.assign(s.table.begin() + s.table_sent, s.table.end());
  s.table_sent = static_cast<int32_t>(s.table.size());
  alloc.seqs.push_back({id, s.num_computed, n, cached});
  s.num_computed += n;
  out.sample = s.num_computed == num_tokens;
  // Blocks earlier steps committed whose tokens are known only now: queued like a commit's.
  queue_registration(id, s);
  writes_->push_back({id, s.generation, s.num_computed});
  plan.seqs.push_back(std::move(out));
  trim_tokens(s);
}

void kv_manager::trim_tokens(seq_kv& s) const {
  // Still read: tokens not yet computed (and, as a rollback after rejected proposals returns only
  // to positions past the tokens known when they were proposed, the known ones not computed) and,
  // with prefix caching, the blocks not yet registered. Whole blocks go, at least four at a time.
  const int32_t bs = pool_.block_size();
  int32_t keep = std::min(s.num_computed, num_known(s));
  if (pool_.prefix_caching()) keep = std::min(keep, s.num_hashed * bs);
  keep = keep / bs * bs;
  const int32_t drop = keep - s.tokens_base;
  if (drop < 4 * bs) return;
  s.tokens.erase(s.tokens.begin(), s.tokens.begin() + drop);
  s.tokens_base = keep;
}

void kv_manager::apply(const std::vector<kv_op>& ops) {
  for (const kv_op& op : ops) {
    switch (op.what) {
      case kv_op::kind::release:
        release(op.id);
        break;
      case kv_op::kind::step_succeeded:
        step_outcome(op.id, true);
        break;
      case kv_op::kind::step_failed:
        step_outcome(op.id, false);
        break;
    }
  }
}

std::pair<step_plan, step_allocation> kv_manager::resolve(step_draft draft) {
  apply(draft.ops);
  const size_t queued = to_register_.size() - to_register_head_;
  register_queued(std::max(k_register_per_step, static_cast<int32_t>(queued / 8)));
  step_plan plan;
  step_allocation alloc;
  plan.step_id = alloc.step_id = draft.step_id;
  plan.finished = std::move(drop_next_);
  drop_next_.clear();
  plan.seqs.reserve(draft.entries.size());
  alloc.seqs.reserve(draft.entries.size());
  if (draft.step_id != 0) {  // what the step computes, committed by its outcome
    pending_.push_back({draft.step_id, {}});
    if (!spare_.empty()) {
      pending_.back().writes = std::move(spare_.back());
      spare_.pop_back();
    }
    writes_ = &pending_.back().writes;
  }
  for (draft_fork& f : draft.forks) fork(f);

  const int32_t bs = pool_.block_size();
  bool admissions_closed = false;
  for (draft_entry& e : draft.entries) {
    if (e.admit) {
      if (admissions_closed || seqs_.contains(e.seq_id)) {
        alloc.deferred.push_back(e.seq_id);
        continue;
      }
      seq_kv s;
      const auto tokens = draft.append_of(e);
      s.tokens.assign(tokens.begin(), tokens.end());
      if (e.announce >= 0)
        s.announce = std::make_unique<new_seq>(std::move(draft.announcements[size_t(e.announce)]));
      if (s.announce) s.salt = s.last_hash = prefix_cache_salt(s.announce->params);
      const int32_t hits = lookup_prefix(s);
      const int32_t n = std::min(e.tokens, e.num_tokens - s.num_computed);
      if (n <= 0 || !pool_.can_allocate(blocks_needed(s, n))) {
        free_table(s);  // undo the prefix hits; it waits (and so does every later admission)
        alloc.deferred.push_back(e.seq_id);
        admissions_closed = true;
        continue;
      }
      const int32_t prompt_len = s.announce ? static_cast<int32_t>(s.announce->prompt_ids.size())
                                            : static_cast<int32_t>(s.tokens.size());
      const int32_t cached = std::min(hits * bs, prompt_len);
      if (e.count_query) pool_.count_query(prompt_len, cached);
      s.generation = next_generation_++;
      seq_kv* placed = seqs_.emplace(e.seq_id, std::move(s)).first;
      holders_.push_back(e.seq_id);
      schedule(e.seq_id, *placed, n, e.num_tokens, cached, {}, plan, alloc);
      continue;
    }
    seq_kv* s = seqs_.find(e.seq_id);
    if (s == nullptr) continue;  // preempted earlier in this step
    const auto tokens = draft.append_of(e);
    if (tokens.size() == 1)
      s->tokens.push_back(tokens[0]);
    else
      s->tokens.insert(s->tokens.end(), tokens.begin(), tokens.end());
    if (e.num_computed >= 0 && e.num_computed < s->num_computed) {
      // Proposals a step computed were rejected: their positions are computed again, and K/V
      // past this point is no longer committed.
      s->num_computed = e.num_computed;
      s->num_committed = std::min(s->num_committed, e.num_computed);
    }
    const int32_t n = std::min(e.tokens, e.num_tokens - s->num_computed);
    if (n <= 0) continue;
    bool preempted_self = false;
    while (!pool_.can_allocate(blocks_needed(*s, n))) {
      const seq_id_t victim = holders_.back();
      preempt(victim, plan, alloc);
      if (victim == e.seq_id) {
        preempted_self = true;
        break;
      }
      s = seqs_.find(e.seq_id);  // entries move when another is erased
    }
    if (preempted_self) {
      admissions_closed = true;  // it was the newest holder: no room for anyone newer
      continue;
    }
    schedule(e.seq_id, *s, n, e.num_tokens, 0, draft.proposals_of(e), plan, alloc);
  }
  alloc.num_free_blocks = pool_.num_free();
  alloc.num_holders = num_holders();
  alloc.prefix_queries = pool_.prefix_queries();
  alloc.prefix_hits = pool_.prefix_hits();
  if (draft.step_id != 0 && pending_.back().writes.empty()) {  // nothing ran: no outcome comes
    spare_.push_back(std::move(pending_.back().writes));
    pending_.pop_back();
  }
  writes_ = nullptr;
  return {std::move(plan), std::move(alloc)};
}

}  // namespace coserve::actors
