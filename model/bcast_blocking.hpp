// Blocking helpers of the broadcast GEMM kernel. It (matmul_bcast, model/cpu_kernels.cpp) walks a
// row-major weight matrix of N rows x K columns in blocks of `cols` rows x `kc` columns, packing
// one block and applying it to every row tile of the activations. While a block computes, the next
// block's weights (this panel's next columns, or the next panel's first) are prefetched into L2, a
// share per row tile, so the next pack finds them there instead of waiting on memory: the weights
// stream from DRAM once per call.
#pragma once

#include <algorithm>
#include <cstddef>
#include <type_traits>

namespace coserve {

// f(std::integral_constant<size_t, min(r, Max)>{}) for r >= 1: a row tile's compile-time height.
template <size_t Max, class F>
inline void with_tile_rows(size_t r, F&& f) {
  if constexpr (Max > 1) {
    if (r >= Max)
      f(std::integral_constant<size_t, Max>{});
    else
      with_tile_rows<Max - 1>(r, f);
  } else {
    f(std::integral_constant<size_t, 1>{});
  }
}

class next_block_prefetch {
 public:
  // The block at rows [j0, j0 + cols), columns [k0, k0 + kc) is the one computing; `tiles` row
  // tiles will each call share() once.
  next_block_prefetch(const void* w, size_t elem_bytes, size_t N, size_t K, size_t cols, size_t kc,
                      size_t j0, size_t k0, size_t tiles)
      : w_(static_cast<const char*>(w)), row_bytes_(K * elem_bytes) {
    size_t nj = j0, nk = k0 + kc;
    if (nk >= K) {
      nj = j0 + cols;
      nk = 0;
    }
    const size_t nrows = nj < N ? std::min(cols, N - nj) : 0;
    row_lines_ = std::min(kc, K - nk) * elem_bytes / 64 + 2;  // whatever the alignment
    lines_ = nrows * row_lines_;
    per_tile_ = (lines_ + tiles - 1) / tiles;
    first_ = w_ + nj * row_bytes_ + nk * elem_bytes;
  }
  // This row tile's share of the next block's cache lines.
  void share() {
    for (const size_t end = std::min(lines_, line_ + per_tile_); line_ < end; ++line_)
      __builtin_prefetch(first_ + (line_ / row_lines_) * row_bytes_ + 64 * (line_ % row_lines_), 0,
                         2);
  }

 private:
  const char* w_;
  const char* first_ = nullptr;
  size_t row_bytes_, row_lines_ = 0, lines_ = 0, per_tile_ = 0, line_ = 0;
};

}  // namespace coserve
