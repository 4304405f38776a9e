#include "actors/block_pool.hpp"

#include <algorithm>
#include <cassert>

namespace coserve::actors {

namespace {
// The high and low halves of a 64x64-bit product, folded (wyhash's "mum").
inline uint64_t mum(uint64_t a, uint64_t b) noexcept {
  __extension__ using u128 = unsigned __int128;
  const u128 r = static_cast<u128>(a) * b;
  return static_cast<uint64_t>(r) ^ static_cast<uint64_t>(r >> 64);
}
inline uint64_t pair_at(const int32_t* p) noexcept {
  return static_cast<uint64_t>(static_cast<uint32_t>(p[0])) |
         static_cast<uint64_t>(static_cast<uint32_t>(p[1])) << 32;
}
constexpr uint64_t k_secret[4] = {0xa0761d6478bd642full, 0xe7037ed1a0b428dbull,
                                  0x8ebc6af09c88c6e3ull, 0x589965cc75374cc3ull};
}  // namespace

uint64_t default_block_hash(uint64_t parent, std::span<const int32_t> tokens) noexcept {
  // Four tokens per folded multiply, each keyed by the parent and the chunk's position: the
  // products are independent of one another (a block of 16 tokens is 4 of them, not a chain of 16
  // dependent mixing rounds), then one more fold over their sum and the length.
  const uint64_t seed = mum(parent ^ k_secret[0], k_secret[1]);
  const size_t n = tokens.size();
  const int32_t* p = tokens.data();
  uint64_t acc = 0;
  size_t i = 0;
  for (uint64_t chunk = 1; i + 4 <= n; i += 4, ++chunk)
    acc += mum(pair_at(p + i) ^ (seed + chunk * k_secret[2]), pair_at(p + i + 2) ^ k_secret[3]);
  if (i < n) {  // 1-3 tokens left: zero-padded
    int32_t tail[4] = {0, 0, 0, 0};
    std::copy(p + i, p + n, tail);
    acc += mum(pair_at(tail) ^ (seed + k_secret[1]), pair_at(tail + 2) ^ k_secret[3]);
  }
  const uint64_t h = mum(acc ^ seed ^ k_secret[0], static_cast<uint64_t>(n) ^ k_secret[2]);
  return h == 0 ? 1 : h;  // 0 is the "no parent" hash
}

block_pool::block_pool(block_pool_options options)
    : block_size_(options.block_size),
      prefix_caching_(options.enable_prefix_caching),
      hash_(options.hash ? std::move(options.hash) : block_hash_fn(default_block_hash)),
      blocks_(static_cast<size_t>(std::max(options.num_blocks, 0))),
      refs_(blocks_.size(), 0),
      record_events_(options.record_events && options.enable_prefix_caching) {
  if (prefix_caching_ && !blocks_.empty()) {
    tokens_.reset(new int32_t[blocks_.size() * static_cast<size_t>(std::max(block_size_, 0))]());
    index_.reserve(blocks_.size());  // a block is indexed at most once: the index never grows
  }
  plain_free_.reserve(blocks_.size());
  // Stack order: block 0 is handed out first.
  for (int32_t i = num_blocks() - 1; i >= 0; --i) plain_free_.push_back(i);
}

void block_pool::uncache(int32_t id) {
  block& b = blocks_[static_cast<size_t>(id)];
  if (!b.cached) return;
  const int32_t* at = index_.find(index_key(b.hash));
  if (at != nullptr && *at == id) index_.erase(index_key(b.hash));
  b.cached = false;
}

void block_pool::record_stored(uint64_t hash, uint64_t parent, std::span<const int32_t> tokens,
                               bool first) {
  // The next block of the chain the last event stored joins that event.
  auto* last = events_.empty() ? nullptr : std::get_if<kv_block_stored>(&events_.back());
  if (last != nullptr && !first && last->hashes.back() == parent) {
    last->hashes.push_back(hash);
    last->tokens.insert(last->tokens.end(), tokens.begin(), tokens.end());
    return;
  }
  kv_block_stored e;
  e.hashes.push_back(hash);
  if (!first) e.parent = parent;
  e.tokens.assign(tokens.begin(), tokens.end());
  events_.emplace_back(std::move(e));
}

void block_pool::record_removed(uint64_t hash) {
  auto* last = events_.empty() ? nullptr : std::get_if<kv_block_removed>(&events_.back());
  if (last != nullptr) {
    last->hashes.push_back(hash);
    return;
  }
  events_.emplace_back(kv_block_removed{{hash}});
}

int32_t block_pool::allocate() {
  int32_t id = -1;
  if (!plain_free_.empty()) {
    id = plain_free_.back();
    plain_free_.pop_back();
  } else if (!evictable_.empty()) {
    id = evictable_.front();  // least recently freed
    evictable_.pop_front();
    if (record_events_) record_removed(blocks_[static_cast<size_t>(id)].hash);
    uncache(id);
  } else {
    return -1;
  }
  refs_[static_cast<size_t>(id)] = 1;
  return id;
}

void block_pool::free(int32_t id) {
  int32_t& ref = refs_[static_cast<size_t>(id)];
  assert(ref > 0);
  if (--ref > 0) return;
  block& b = blocks_[static_cast<size_t>(id)];
  if (b.cached) {
    evictable_.push_back(id);
    b.lru = std::prev(evictable_.end());
  } else {
    plain_free_.push_back(id);
  }
}

void block_pool::incref(int32_t id) {
  int32_t& ref = refs_[static_cast<size_t>(id)];
  if (ref == 0) {
    block& b = blocks_[static_cast<size_t>(id)];
    if (b.cached) evictable_.erase(b.lru);
  }
  ++ref;
}

int32_t block_pool::lookup(uint64_t hash, uint64_t parent, std::span<const int32_t> tokens) {
  if (!prefix_caching_) return -1;
  const int32_t* at = index_.find(index_key(hash));
  if (at == nullptr) return -1;
  const int32_t id = *at;
  block& b = blocks_[static_cast<size_t>(id)];
  // Collision guard: the hash alone is not trusted.
  const std::span<int32_t> held = tokens_of(id);
  if (b.hash != hash || b.parent != parent ||
      !std::equal(held.begin(), held.end(), tokens.begin(), tokens.end()))
    return -1;
  incref(id);
  return id;
}

void block_pool::register_full(int32_t id, uint64_t hash, uint64_t parent,
                               std::span<const int32_t> tokens, bool first) {
  if (!prefix_caching_) return;
  block& b = blocks_[static_cast<size_t>(id)];
  assert(static_cast<int32_t>(tokens.size()) == block_size_);
  if (b.cached || !index_.emplace(index_key(hash), id).second) return;
  b.cached = true;
  b.hash = hash;
  b.parent = parent;
  std::copy(tokens.begin(), tokens.end(), tokens_of(id).begin());
  if (record_events_) record_stored(hash, parent, tokens, first);
}

int32_t block_pool::reset_prefix_cache() {
  if (!prefix_caching_) return 0;
  int32_t dropped = 0;
  for (int32_t id = 0; id < num_blocks(); ++id) {
    if (!blocks_[static_cast<size_t>(id)].cached) continue;
    uncache(id);
    ++dropped;
  }
  for (int32_t id : evictable_) plain_free_.push_back(id);
  evictable_.clear();
  if (record_events_) events_.emplace_back(kv_all_blocks_cleared{});
  return dropped;
}

std::vector<block_pool::cached_block> block_pool::cached_blocks() const {
  std::vector<cached_block> out;
  for (int32_t id = 0; id < num_blocks(); ++id) {
    const block& b = blocks_[static_cast<size_t>(id)];
    if (b.cached) out.push_back({b.hash, b.parent, id, refs_[static_cast<size_t>(id)]});
  }
  return out;
}

}  // namespace coserve::actors
