// The BPE merge table: (left id, right id) -> (rank, merged id), an open-addressing hash table
// with linear probing. Built once at load, then read-only (safe to read from several threads).
// It replaces std::unordered_map because merge lookups dominate encoding time.
#pragma once

#include <algorithm>
#include <bit>
#include <cstdint>
#include <vector>

namespace coserve {

class merge_table {
 public:
  struct merge {
    int32_t rank;
    int32_t new_id;
  };

  void reserve(std::size_t n) {
    const std::size_t cap = std::bit_ceil(std::max<std::size_t>(16, n * 2));
    slots_.assign(cap, slot{k_empty, {}});
    mask_ = cap - 1;
  }

  // Keeps the first merge inserted for a pair (the lowest rank when inserted in rank order).
  void insert(int32_t a, int32_t b, merge m) {
    if ((size_ + 1) * 2 > slots_.size()) grow();
    const uint64_t key = pack(a, b);
    for (std::size_t i = hash(key) & mask_;; i = (i + 1) & mask_) {
      if (slots_[i].key == key) return;
      if (slots_[i].key == k_empty) {
        slots_[i] = {key, m};
        ++size_;
        return;
      }
    }
  }

  const merge* find(int32_t a, int32_t b) const noexcept {
    const uint64_t key = pack(a, b);
    for (std::size_t i = hash(key) & mask_;; i = (i + 1) & mask_) {
      if (slots_[i].key == key) return &slots_[i].m;
      if (slots_[i].key == k_empty) return nullptr;
    }
  }

 private:
  struct slot {
    uint64_t key;
    merge m;
  };
  static constexpr uint64_t k_empty = ~uint64_t{0};  // ids are non-negative, so never a real key
  static uint64_t pack(int32_t a, int32_t b) noexcept {
    return (uint64_t(uint32_t(a)) << 32) | uint32_t(b);
  }
  static std::size_t hash(uint64_t k) noexcept {
    k ^= k >> 33;
    k *= 0xff51afd7ed558ccdULL;
    k ^= k >> 33;
    return static_cast<std::size_t>(k);
  }
  void grow() {
    std::vector<slot> old = std::move(slots_);
    reserve(old.size());
    size_ = 0;
    for (const auto& s : old)
      if (s.key != k_empty)
        insert(static_cast<int32_t>(s.key >> 32), static_cast<int32_t>(s.key & 0xffffffffu), s.m);
  }

  std::vector<slot> slots_ = std::vector<slot>(16, slot{k_empty, {}});
  std::size_t mask_ = 15;
  std::size_t size_ = 0;
};

}  // namespace coserve
