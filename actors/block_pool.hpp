// block_pool — the KV cache's physical blocks: reference counts, prefix caching and LRU reuse.
//
// A block holds `block_size` token positions. A block is *free* when its reference count is 0.
// Free blocks come in two kinds: plain ones and *cached* ones (a full block registered under the
// hash of its token prefix, kept so a later sequence with the same prefix can reuse it). allocate()
// takes plain blocks first, then evicts cached ones in least-recently-freed order (LRU).
//
// Prefix hashes are chained: hash(block i) = H(hash(block i-1), tokens of block i), so a hit on
// block i implies the whole prefix matches — except for hash collisions, which lookup() guards
// against by comparing the stored tokens and the parent hash.
//
// With record_events, what the prefix cache does is also recorded as KV-cache events
// (actors/kv_events.hpp) for take_events(): blocks registered (consecutive ones of one chain in one
// event), blocks evicted, the cache reset.
//
// Threads: none. One owner (the scheduler / KV allocator actor) calls every member.
#pragma once

#include <cstdint>
#include <functional>
#include <list>
#include <memory>
#include <span>
#include <utility>
#include <vector>

#include "actors/kv_events.hpp"
#include "base/id_map.hpp"

namespace coserve::actors {

// H(parent_hash, block_tokens). Injectable so tests can force collisions.
using block_hash_fn = std::function<uint64_t(uint64_t, std::span<const int32_t>)>;

uint64_t default_block_hash(uint64_t parent, std::span<const int32_t> tokens) noexcept;

struct block_pool_options {
  int32_t num_blocks = 0;
  int32_t block_size = 16;
  bool enable_prefix_caching = true;
  block_hash_fn hash;          // empty: default_block_hash
  bool record_events = false;  // KV-cache events for take_events()
};

class block_pool {
 public:
  explicit block_pool(block_pool_options options);

  int32_t num_blocks() const noexcept { return static_cast<int32_t>(blocks_.size()); }
  int32_t block_size() const noexcept { return block_size_; }
  bool prefix_caching() const noexcept { return prefix_caching_; }
  // Blocks with reference count 0 (plain + cached-evictable).
  int32_t num_free() const noexcept {
    return static_cast<int32_t>(plain_free_.size() + evictable_.size());
  }
  // Free blocks that still hold a cached prefix (evicted last, least recently freed first).
  int32_t num_cached_free() const noexcept { return static_cast<int32_t>(evictable_.size()); }
  double usage() const noexcept {
    return blocks_.empty() ? 0.0 : 1.0 - static_cast<double>(num_free()) / num_blocks();
  }

  // Paired verbs: can_allocate(n) is true iff the next n allocate() calls succeed.
  bool can_allocate(int32_t n) const noexcept { return n <= num_free(); }
  // A fresh block with reference count 1 and no cached content; -1 when none is free.
  int32_t allocate();
  // Drops one reference; at 0 the block becomes free (cached blocks stay findable until evicted).
  void free(int32_t block);
  // One more reference (a fork sharing the block).
  void incref(int32_t block);
  int32_t ref_count(int32_t block) const { return refs_[static_cast<size_t>(block)]; }

  // Prefix caching. hash_block chains a block's hash onto its parent's (0 for the first block).
  uint64_t hash_block(uint64_t parent, std::span<const int32_t> tokens) const {
    return hash_(parent, tokens);
  }
  // The cached block holding exactly `tokens` after `parent`, with one more reference; -1 on miss
  // (including a hash hit whose stored tokens or parent differ). Does not count queries.
  int32_t lookup(uint64_t hash, uint64_t parent, std::span<const int32_t> tokens);
  // Registers a full block's content under `hash`. A block already registered, or a hash already
  // taken by another block, is left as is. `first`: the block starts its sequence (its event
  // names no parent; `parent` is then the sequence's salt, 0 without one).
  void register_full(int32_t block, uint64_t hash, uint64_t parent, std::span<const int32_t> tokens,
                     bool first = false);
  bool is_cached(int32_t block) const { return blocks_[static_cast<size_t>(block)].cached; }

  // Drops every cached block from the index (vLLM's reset_prefix_cache): free ones become plain
  // free blocks, blocks in use stay with their sequences but are no longer shared. Returns how
  // many blocks were dropped.
  int32_t reset_prefix_cache();

  // A cached block, as GET /api/prefix_cache lists it.
  struct cached_block {
    uint64_t hash = 0, parent = 0;
    int32_t block = 0, ref_count = 0;
  };
  std::vector<cached_block> cached_blocks() const;

  // The events recorded since the last call (record_events), oldest first.
  std::vector<kv_cache_event> take_events() { return std::exchange(events_, {}); }

  // Prefix-cache counters in tokens (vLLM's prefix_cache_queries / prefix_cache_hits).
  void count_query(int64_t queried_tokens, int64_t hit_tokens) noexcept {
    queries_ += queried_tokens;
    hits_ += hit_tokens;
  }
  int64_t prefix_queries() const noexcept { return queries_; }
  int64_t prefix_hits() const noexcept { return hits_; }
  double hit_rate() const noexcept {
    return queries_ == 0 ? 0.0 : static_cast<double>(hits_) / static_cast<double>(queries_);
  }

 private:
  struct block {
    bool cached = false;  // registered in index_
    uint64_t hash = 0, parent = 0;
    std::list<int32_t>::iterator lru;  // valid when cached && ref == 0
  };
  void uncache(int32_t id);
  void record_stored(uint64_t hash, uint64_t parent, std::span<const int32_t> tokens, bool first);
  void record_removed(uint64_t hash);
  // The index's key for `hash`: id_map keys are non-zero, so a hash of 0 (possible with an injected
  // hash function) shares key 1 — a key collision, caught like a hash collision by the token check.
  static uint64_t index_key(uint64_t hash) noexcept { return hash == 0 ? 1 : hash; }
  // The tokens a cached block holds: block_size_ entries from id * block_size_.
  std::span<int32_t> tokens_of(int32_t id) noexcept {
    return {tokens_.get() + static_cast<ptrdiff_t>(id) * block_size_,
            static_cast<size_t>(block_size_)};
  }

  int32_t block_size_;
  bool prefix_caching_;
  block_hash_fn hash_;
  std::vector<block> blocks_;
  // Reference counts, apart from blocks_: the per-step copy-on-write check reads one per running
  // sequence, and a dense array keeps those reads in few cache lines.
  std::vector<int32_t> refs_;
  std::vector<int32_t> plain_free_;  // LIFO stack of uncached free blocks
  std::list<int32_t> evictable_;     // cached free blocks, least recently freed first
  // Cached blocks' tokens, one block_size_ run per block (4 bytes a token: a few MB for the
  // largest caches), zero-filled up front so that registering blocks takes no page faults. Empty
  // without prefix caching.
  std::unique_ptr<int32_t[]> tokens_;
  id_map<int32_t> index_;  // index_key(hash) -> cached block
  int64_t queries_ = 0, hits_ = 0;
  bool record_events_;
  std::vector<kv_cache_event> events_;
};

}  // namespace coserve::actors
