// lru_cache<Key, Value>: a map holding at most `capacity` entries; inserting a new key into a full
// cache first destroys the least recently used entry. find() and insert() make their entry the most
// recently used; contains() does not change the order.
//
// Storage: a list of (key, value) in recency order (front: most recent) and a hash index from key
// to list node, so find, insert, erase and eviction are O(1) on average. Values never move while
// they are cached: a pointer from find() stays valid until that entry is evicted or erased.
//
// Threads: none; one owner at a time.
#pragma once

#include <algorithm>
#include <cstddef>
#include <functional>
#include <list>
#include <optional>
#include <unordered_map>
#include <utility>

namespace coserve::rt {

template <class Key, class Value, class Hash = std::hash<Key>, class KeyEqual = std::equal_to<Key>>
class lru_cache {
 public:
  // A capacity of 0 is taken as 1.
  explicit lru_cache(size_t capacity) : capacity_(std::max<size_t>(capacity, 1)) {}

  lru_cache(const lru_cache&) = delete;
  lru_cache& operator=(const lru_cache&) = delete;
  // The moved-from cache is left empty, with its capacity.
  lru_cache(lru_cache&& other) noexcept
      : capacity_(other.capacity_),
        order_(std::move(other.order_)),
        index_(std::move(other.index_)) {
    other.order_.clear();
    other.index_.clear();
  }
  lru_cache& operator=(lru_cache&& other) noexcept {
    if (this != &other) {
      capacity_ = other.capacity_;
      order_ = std::move(other.order_);
      index_ = std::move(other.index_);
      other.order_.clear();
      other.index_.clear();
    }
    return *this;
  }
  ~lru_cache() = default;

  // The cached value, now the most recently used; nullptr when absent.
  Value* find(const Key& key) {
    auto it = index_.find(key);
    if (it == index_.end()) return nullptr;
    order_.splice(order_.begin(), order_, it->second);
    return &it->second->second;
  }

  bool contains(const Key& key) const { return index_.find(key) != index_.end(); }

  // Stores `value` under `key` as the most recently used entry (replacing the value of an existing
  // key). A new key in a full cache first evicts, and destroys, the least recently used entry.
  Value& insert(Key key, Value value) {
    if (auto it = index_.find(key); it != index_.end()) {
      it->second->second = std::move(value);
      order_.splice(order_.begin(), order_, it->second);
      return it->second->second;
    }
    if (order_.size() >= capacity_) evict_one();
    order_.emplace_front(std::move(key), std::move(value));
    try {
      index_.emplace(order_.front().first, order_.begin());
    } catch (...) {
      order_.pop_front();
      throw;
    }
    return order_.front().second;
  }

  // Destroys the entry of `key`; false when absent.
  bool erase(const Key& key) {
    auto it = index_.find(key);
    if (it == index_.end()) return false;
    auto node = it->second;
    index_.erase(it);
    order_.erase(node);
    return true;
  }

  // Removes the least recently used entry and returns it (nullopt when empty).
  std::optional<std::pair<Key, Value>> pop_least_recent() {
    if (order_.empty()) return std::nullopt;
    std::optional<std::pair<Key, Value>> out(std::move(order_.back()));
    index_.erase(out->first);
    order_.pop_back();
    return out;
  }

  void clear() noexcept {
    index_.clear();
    order_.clear();
  }

  size_t size() const noexcept { return order_.size(); }
  bool empty() const noexcept { return order_.empty(); }
  size_t capacity() const noexcept { return capacity_; }

 private:
  using entry = std::pair<Key, Value>;

  void evict_one() {
    index_.erase(order_.back().first);
    order_.pop_back();
  }

  size_t capacity_;
  std::list<entry> order_;  // front: most recently used
  std::unordered_map<Key, typename std::list<entry>::iterator, Hash, KeyEqual> index_;
};

}  // namespace coserve::rt
