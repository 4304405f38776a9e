// SIMD kernels of the CPU forward pass, compiled once per instruction set with Google Highway and
// picked at run time (HWY_DYNAMIC_DISPATCH): AVX-512, AVX2+FMA+F16C or SSE4 on x86, NEON on Arm,
// and a portable fallback. Weights stay in their file precision (f32, bf16, f16) and are widened
// to fp32 in registers; every product accumulates in fp32.
//
// Each function here does the work of one thread on the range it is given; cpu_forward splits the
// work over its worker_pool.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "model/dtype.hpp"

namespace coserve {

// A row-major [rows, cols] matrix in one of the weight dtypes (the Hugging Face [out, in] layout);
// rows of a quantized type hold cols / block-size whole blocks. The data may live in a mapped
// safetensors or GGUF file: unaligned pointers are allowed.
struct weight_ref {
  dtype type = dtype::f32;
  const void* data = nullptr;
  int64_t rows = 0;
  int64_t cols = 0;
  // Q4_0 only, or null: the same rows repacked in tiles of 16 for the x86 kernels
  // (quant.hpp, pack_q4_0_tiles), starting at this ref's row 0. Refs cut from others keep it only
  // where their first row starts a tile (cpu_forward::matmul); everything else reads `data`.
  const void* packed = nullptr;
  // fp8 (F8_E4M3 / F8_E5M2) only: row r holds the codes of values code * row_scale[r] (per-tensor
  // and per-channel scales of fp8 checkpoints), starting at this ref's row 0.
  const float* row_scale = nullptr;

  size_t row_bytes() const noexcept { return dtype_bytes(type, cols); }
  size_t bytes() const noexcept { return size_t(rows) * row_bytes(); }
  const void* row(int64_t r) const noexcept {
    return static_cast<const unsigned char*>(data) + size_t(r) * row_bytes();
  }
};

// y[m * ldy + j] = (accumulate ? y[m * ldy + j] : 0) + sum_k x[m * ldx + k] * w[j, k]
// for m in [0, M), j in [0, n): the product with the first n rows of `w` (w.cols = K).
// Register tiles of up to 4 rows x 4 weight rows read each weight once per 4 rows of x; the rows
// of x are walked in blocks that stay in cache while a weight tile is reused.
// fp8 weights: the products with the codes' values, scaled by w.row_scale per output column
// (unscaled without it).
// act_bf16 (bf16 weights only; ignored for others): x is rounded to bf16 (nearest even) first, so
// every product is bf16 x bf16, summed in fp32 — what the AVX512-BF16 kernel (VDPBF16PS, used
// where the CPU has it) computes; without it the same rounding runs through the widening kernel.
void matmul_nt(const float* x, int64_t ldx, int64_t M, const weight_ref& w, int64_t n, float* y,
               int64_t ldy, bool accumulate, bool act_bf16 = false);

// Whether matmul_nt with act_bf16 runs on the AVX512-BF16 kernel (the CPU has it and no other
// instruction set is forced).
bool bf16_dot_active() noexcept;
// x [M, K] (row stride ldx) rounded to bf16, nearest even, kept as fp32 values in out [M, K].
void round_to_bf16_f32(const float* x, int64_t ldx, int64_t M, int64_t K, float* out) noexcept;
// x [M, K] (row stride ldx) rounded to bf16, nearest even, into out [M, K].
void round_to_bf16(const float* x, int64_t ldx, int64_t M, int64_t K, uint16_t* out) noexcept;
// matmul_nt with act_bf16 on activations already rounded (xb [M, w.cols] from round_to_bf16), so
// that threads sharing one x round it once. For bf16 weights, the results of
// matmul_nt(act_bf16 = true).
void matmul_nt_bf16(const uint16_t* xb, int64_t M, const weight_ref& w, int64_t n, float* y,
                    int64_t ldy, bool accumulate);
// Without the AVX512-BF16 kernel (!bf16_dot_active()): bf16 activations for bf16 weights prepared
// once (x [M, K], row stride ldx, rounded to bf16 and laid out as the widening kernel's tiles read
// them, into out [M, K]; the layout belongs to the instruction set in use) and shared by every
// matmul_nt_bf16_prepared over the same x, such as threads computing parts of one product. Its
// results are matmul_nt(act_bf16 = true)'s, bit for bit.
void prepare_bf16_activations(const float* x, int64_t ldx, int64_t M, int64_t K,
                              float* out) noexcept;
void matmul_nt_bf16_prepared(const float* xr, int64_t M, const weight_ref& w, int64_t n, float* y,
                             int64_t ldy, bool accumulate);

// One piece of attention work: query rows (the `group` query heads of one KV head, for num_q
// consecutive tokens of one sequence) against the sequence's cached positions [ctx_begin, ctx_end),
// causal (query i sees positions <= q_pos0 + i). Online softmax over chunks of the paged cache.
struct attn_tile {
  const float* q = nullptr;  // query of token i, head h: q + i * q_stride + h * head_dim
  int64_t q_stride = 0;
  float* out = nullptr;  // same indexing with out_stride (written when partial is null)
  int64_t out_stride = 0;
  const void* k = nullptr;  // this layer's K / V cache: slot s at k + s * slot_stride elements
  const void* v = nullptr;
  dtype kv_type = dtype::f32;
  int64_t slot_stride = 0;  // elements per slot (num_kv_heads * head_dim)
  const int32_t* block_table = nullptr;
  int32_t block_size = 0;
  int32_t head_dim = 0;
  int32_t group = 1;  // query heads per KV head
  int32_t kv_head = 0;
  int32_t num_q = 1;
  int32_t q_pos0 = 0;
  int32_t ctx_begin = 0;
  int32_t ctx_end = 0;
  // Sliding window (0: none): the query at position q sees only keys k > q - window.
  int32_t window = 0;
  float scale = 1.0f;
  // Split-context mode: per row r (r = i * group + g) the running max, the sum of exponentials
  // and the unnormalized output [head_dim]; merged by attn_merge.
  float* partial_max = nullptr;
  float* partial_sum = nullptr;
  float* partial_acc = nullptr;
};

void attend(const attn_tile& t);

// Merges `splits` partial results of `rows` rows (laid out split-major: split s, row r at
// s * rows + r) into out rows (row r at out + (r / group) * out_stride + (r % group) * head_dim).
void attn_merge(int32_t splits, int32_t rows, int32_t head_dim, const float* max, const float* sum,
                const float* acc, float* out, int64_t out_stride, int32_t group);

// log(sum_i exp(x[i])) over n values (-inf entries count as zero mass; -inf when all are -inf),
// vectorized exp with per-lane fp32 partial sums added in double.
float log_sum_exp(const float* x, size_t n) noexcept;

// The largest of n values (-inf when n is 0; with NaN entries, what the vector max instructions
// give).
float max_value(const float* x, size_t n) noexcept;

// GELU of x[0, n) in place: exact (erf, to within 1.5e-7 of it) or, with tanh_form, the tanh
// approximation (transformers' gelu_new / gelu_pytorch_tanh).
void gelu(float* x, size_t n, bool tanh_form) noexcept;

// log_sum_exp(x, n), bit for bit, and in `first_max` the first index of the largest value (what
// std::max_element returns) when the maximum is neither -inf nor NaN; -1 when it is.
float log_sum_exp_argmax(const float* x, size_t n, int64_t& first_max) noexcept;

// x[i] = -inf for every i < n whose bit is clear in `words` (bit i % 32 of words[i / 32]: the
// structured-output token bitmask); other values unchanged.
void mask_logits(float* x, const uint32_t* words, size_t n) noexcept;

// n fp32 values to `t` (bf16 and f16 rounded to nearest even).
void store_kv(dtype t, const float* src, void* dst, size_t n) noexcept;

// The instruction set the dispatcher picked (e.g. "AVX3", "AVX2", "SSE4", "NEON", "EMU128"), or
// "AVX3+BF16" where the AVX512-BF16 kernel serves bf16 x bf16 products (act_bf16 above).
std::string cpu_isa();
// The instruction sets compiled in that this CPU can run, best first ("AVX3+BF16" first where the
// CPU has AVX512-BF16; forcing any other name turns that kernel off).
std::vector<std::string> cpu_isa_available();
// Restricts dispatch to one of cpu_isa_available() (for tests); "" restores the normal choice.
// Returns false for a name not in the list.
bool cpu_isa_force(const std::string& name);

}  // namespace coserve
