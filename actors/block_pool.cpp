#include "actors/block_pool.hpp"

#include <algorithm>
#include <cassert>

namespace coserve::actors {

uint64_t default_block_hash(uint64_t parent, std::span<const int32_t> tokens) noexcept {
  // splitmix64-style mixing of the parent and each token: cheap and well spread.
  uint64_t h = parent ^ 0x9e3779b97f4a7c15ull;
  for (int32_t t : tokens) {
    h ^= static_cast<uint32_t>(t) + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
    h ^= h >> 30;
    h *= 0xbf58476d1ce4e5b9ull;
    h ^= h >> 27;
    h *= 0x94d049bb133111ebull;
    h ^= h >> 31;
  }
  return h == 0 ? 1 : h;  // 0 is the "no parent" hash
}

block_pool::block_pool(block_pool_options options)
    : block_size_(options.block_size),
      prefix_caching_(options.enable_prefix_caching),
      hash_(options.hash ? std::move(options.hash) : block_hash_fn(default_block_hash)),
      blocks_(static_cast<size_t>(std::max(options.num_blocks, 0))) {
  plain_free_.reserve(blocks_.size());
  // Stack order: block 0 is handed out first.
  for (int32_t i = num_blocks() - 1; i >= 0; --i) plain_free_.push_back(i);
}

void block_pool::uncache(int32_t id) {
  block& b = blocks_[static_cast<size_t>(id)];
  if (!b.cached) return;
  auto it = index_.find(b.hash);
  if (it != index_.end() && it->second == id) index_.erase(it);
  b.cached = false;
  b.tokens.clear();
}

int32_t block_pool::allocate() {
  int32_t id = -1;
  if (!plain_free_.empty()) {
    id = plain_free_.back();
    plain_free_.pop_back();
  } else if (!evictable_.empty()) {
    id = evictable_.front();  // least recently freed
    evictable_.pop_front();
    uncache(id);
  } else {
    return -1;
  }
  blocks_[static_cast<size_t>(id)].ref = 1;
  return id;
}

void block_pool::free(int32_t id) {
  block& b = blocks_[static_cast<size_t>(id)];
  assert(b.ref > 0);
  if (--b.ref > 0) return;
  if (b.cached) {
    evictable_.push_back(id);
    b.lru = std::prev(evictable_.end());
  } else {
    plain_free_.push_back(id);
  }
}

void block_pool::incref(int32_t id) {
  block& b = blocks_[static_cast<size_t>(id)];
  if (b.ref == 0 && b.cached) evictable_.erase(b.lru);
  ++b.ref;
}

int32_t block_pool::lookup(uint64_t hash, uint64_t parent, std::span<const int32_t> tokens) {
  if (!prefix_caching_) return -1;
  auto it = index_.find(hash);
  if (it == index_.end()) return -1;
  block& b = blocks_[static_cast<size_t>(it->second)];
  // Collision guard: the hash alone is not trusted.
  if (b.parent != parent ||
      !std::equal(b.tokens.begin(), b.tokens.end(), tokens.begin(), tokens.end()))
    return -1;
  incref(it->second);
  return it->second;
}

void block_pool::register_full(int32_t id, uint64_t hash, uint64_t parent,
                               std::span<const int32_t> tokens) {
  if (!prefix_caching_) return;
  block& b = blocks_[static_cast<size_t>(id)];
  if (b.cached || index_.count(hash) != 0) return;
  b.cached = true;
  b.hash = hash;
  b.parent = parent;
  b.tokens.assign(tokens.begin(), tokens.end());
  index_.emplace(hash, id);
}

}  // namespace coserve::actors
