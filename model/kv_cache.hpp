// Paged CPU KV cache. Per layer, K and V each have the layout
//   [num_blocks, block_size, num_kv_heads, head_dim]   (row-major, elements of `type()`:
//   bf16 by default on the CPU, fp16 or fp32 with --kv-cache-dtype)
// A sequence's token at position `pos` lives in slot block_table[pos / block_size] * block_size +
// pos % block_size. Blocks are handed out by the scheduler's block pool; this class only stores.
// Not thread-safe by itself: the executor that owns it writes a slot from one thread at a time.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#include "model/dtype.hpp"

namespace coserve {

class kv_cache {
 public:
  kv_cache(int32_t num_layers, int32_t num_blocks, int32_t block_size, int32_t num_kv_heads,
           int32_t head_dim, dtype type = dtype::f32)
      : num_layers_(num_layers),
        num_blocks_(num_blocks),
        block_size_(block_size),
        type_(type),
        elem_(dtype_size(type)),
        slot_stride_(size_t(num_kv_heads) * size_t(head_dim)),
        layer_stride_(size_t(num_blocks) * size_t(block_size) * slot_stride_),
        k_(size_t(num_layers) * layer_stride_ * elem_),
        v_(size_t(num_layers) * layer_stride_ * elem_) {}

  int32_t num_layers() const noexcept { return num_layers_; }
  int32_t num_blocks() const noexcept { return num_blocks_; }
  int32_t block_size() const noexcept { return block_size_; }
  dtype type() const noexcept { return type_; }
  size_t slot_stride() const noexcept { return slot_stride_; }  // elements per slot (KVH * D)
  size_t bytes() const noexcept { return k_.size() + v_.size(); }
  int64_t num_slots() const noexcept { return int64_t(num_blocks_) * block_size_; }

  // The slot of position `pos`; -1 when the block table does not cover it or names a bad block.
  int64_t slot(const std::vector<int32_t>& block_table, int32_t pos) const noexcept {
    if (pos < 0) return -1;
    const size_t b = size_t(pos / block_size_);
    if (b >= block_table.size()) return -1;
    const int32_t block = block_table[b];
    if (block < 0 || block >= num_blocks_) return -1;
    return int64_t(block) * block_size_ + pos % block_size_;
  }

  // The first element of `slot` in `layer` (elements of type()).
  void* k(int32_t layer, int64_t slot) noexcept { return k_.data() + offset(layer, slot); }
  void* v(int32_t layer, int64_t slot) noexcept { return v_.data() + offset(layer, slot); }
  const void* k(int32_t layer, int64_t slot) const noexcept {
    return k_.data() + offset(layer, slot);
  }
  const void* v(int32_t layer, int64_t slot) const noexcept {
    return v_.data() + offset(layer, slot);
  }

  // Copies a whole block (every layer, K and V): copy-on-write when a sequence forks.
  // Returns false (and copies nothing) when either id is out of range.
  bool copy_block(int32_t src, int32_t dst) noexcept {
    if (src < 0 || dst < 0 || src >= num_blocks_ || dst >= num_blocks_) return false;
    if (src == dst) return true;
    const size_t block_bytes = size_t(block_size_) * slot_stride_ * elem_;
    for (int32_t l = 0; l < num_layers_; ++l) {
      std::memcpy(k(l, int64_t(dst) * block_size_), k(l, int64_t(src) * block_size_), block_bytes);
      std::memcpy(v(l, int64_t(dst) * block_size_), v(l, int64_t(src) * block_size_), block_bytes);
    }
    return true;
  }

 private:
  size_t offset(int32_t layer, int64_t slot) const noexcept {
    return (size_t(layer) * layer_stride_ + size_t(slot) * slot_stride_) * elem_;
  }

  int32_t num_layers_;
  int32_t num_blocks_;
  int32_t block_size_;
  dtype type_;
  size_t elem_;
  size_t slot_stride_;
  size_t layer_stride_;
  std::vector<unsigned char> k_;
  std::vector<unsigned char> v_;
};

}  // namespace coserve
