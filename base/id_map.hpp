// id_map<V>: a hash map from non-zero 64-bit ids to values, for the per-step lookups of the step
// planner and the KV manager (every running sequence is found a few times a step). Open
// addressing with linear probing over a power-of-two table, a multiplicative hash (no division),
// and deletion by backward shift (no tombstones); the table grows at 1/2 load.
//
// Values move when the table grows or an entry before them is erased: hold ids, not pointers,
// across insertions and erasures. Iteration order is the table's (unspecified).
//
// Threads: none (a value).
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

namespace coserve {

template <class V>
class id_map {
 public:
  struct entry {
    uint64_t key = 0;  // 0: empty
    V value{};
  };

  id_map() { slots_.resize(k_min_capacity); }

  size_t size() const noexcept { return size_; }
  bool empty() const noexcept { return size_ == 0; }

  // The value of `key`, or nullptr.
  V* find(uint64_t key) noexcept {
    for (size_t i = home(key);; i = (i + 1) & mask()) {
      if (slots_[i].key == key) return &slots_[i].value;
      if (slots_[i].key == 0) return nullptr;
    }
  }
  const V* find(uint64_t key) const noexcept { return const_cast<id_map*>(this)->find(key); }
  bool contains(uint64_t key) const noexcept { return find(key) != nullptr; }

  // The value of `key`, inserted default-constructed when absent.
  V& operator[](uint64_t key) { return *emplace(key, V{}).first; }
  // Inserts `value` under `key` unless present; returns the value and whether it was inserted.
  std::pair<V*, bool> emplace(uint64_t key, V value) {
    if (V* v = find(key)) return {v, false};
    if (2 * (size_ + 1) > slots_.size()) grow();
    size_t i = home(key);
    while (slots_[i].key != 0) i = (i + 1) & mask();
    slots_[i].key = key;
    slots_[i].value = std::move(value);
    ++size_;
    return {&slots_[i].value, true};
  }
  // Removes `key`; returns whether it was present.
  bool erase(uint64_t key) {
    size_t i = home(key);
    while (slots_[i].key != key) {
      if (slots_[i].key == 0) return false;
      i = (i + 1) & mask();
    }
    // Backward shift: later entries of the probe run move into the hole when their home allows.
    for (size_t j = (i + 1) & mask();; j = (j + 1) & mask()) {
      if (slots_[j].key == 0) break;
      const size_t h = home(slots_[j].key);
      // Entry j may move to i when its home does not lie in (i, j] (cyclically).
      const bool stays = i <= j ? (i < h && h <= j) : (i < h || h <= j);
      if (stays) continue;
      slots_[i] = std::move(slots_[j]);
      i = j;
    }
    slots_[i].key = 0;
    slots_[i].value = V{};
    --size_;
    return true;
  }
  // Calls f(key, value) for every entry, in the table's order.
  template <class F>
  void for_each(F&& f) {
    for (entry& e : slots_)
      if (e.key != 0) f(e.key, e.value);
  }
  template <class F>
  void for_each(F&& f) const {
    for (const entry& e : slots_)
      if (e.key != 0) f(e.key, e.value);
  }
  void clear() {
    slots_.assign(k_min_capacity, entry{});
    shift_ = 64 - 4;
    size_ = 0;
  }
  // Room for `n` entries without growing (the table doubles until n fits at 1/2 load).
  void reserve(size_t n) {
    size_t cap = slots_.size();
    while (2 * n > cap) cap *= 2;
    if (cap == slots_.size()) return;
    std::vector<entry> old = std::move(slots_);
    slots_.clear();
    slots_.resize(cap);
    shift_ = 64 - std::countr_zero(cap);
    size_ = 0;
    for (entry& e : old)
      if (e.key != 0) emplace(e.key, std::move(e.value));
  }

 private:
  static constexpr size_t k_min_capacity = 16;
  size_t mask() const noexcept { return slots_.size() - 1; }
  size_t home(uint64_t key) const noexcept {
    return static_cast<size_t>((key * 0x9E3779B97F4A7C15ull) >> shift_);
  }
  void grow() {
    std::vector<entry> old = std::move(slots_);
    slots_.clear();
    slots_.resize(old.size() * 2);
    --shift_;
    size_ = 0;
    for (entry& e : old)
      if (e.key != 0) emplace(e.key, std::move(e.value));
  }

  std::vector<entry> slots_;
  size_t size_ = 0;
  int shift_ = 64 - 4;  // log2(capacity) bits of the product: capacity 16
};

}  // namespace coserve
