// ggml's block-quantized weight formats (the GGUF tensor types Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q2_K,
// Q3_K, Q4_K, Q5_K, Q6_K, IQ4_NL, IQ4_XS):
// their dequantization to fp32 (the values gguf-py's numpy code produces, bit for bit), the int8
// quantization of activations the integer products use (ggml's Q8_0 blocks of 32 and Q8_K blocks
// of 256), and scalar reference dot products of one weight row with one quantized activation row.
// The SIMD products the forward pass runs live in cpu_kernels.cpp; these scalar ones are their
// oracle in tests.
//
// Block layouts (bytes, little-endian), as ggml defines them:
//   Q8_0  (32 values, 34 B):  f16 d, int8 q[32];                value = d * q
//   Q4_0  (32 values, 18 B):  f16 d, u8 qs[16];                 value i < 16: d * ((qs[i] & 15) -
//   8),
//                                                               i >= 16: d * ((qs[i-16] >> 4) - 8)
//   Q4_1  (32 values, 20 B):  f16 d, f16 m, u8 qs[16];          value = d * q + m (q the nibble as
//   Q4_0's) Q5_0  (32 values, 22 B):  f16 d, u32 qh, u8 qs[16];         value = d * (q - 16), q =
//   nibble | bit i of qh << 4 Q5_1  (32 values, 24 B):  f16 d, f16 m, u32 qh, u8 qs[16];  value = d
//   * q + m, q as Q5_0's Q2_K (256 values, 84 B):  u8 scales[16] (scale | min << 4 per 16 values),
//   u8 qs[64], f16 d, f16 dmin;
//                             value v = d*(sc & 15) * q - dmin*(sc >> 4), q = qs[32(v/128) + v%32]
//                             >> 2((v/32)%4) & 3
//   Q3_K (256 values, 110 B): u8 hmask[32], u8 qs[64] (as Q2_K's), u8 scales[12] (sixteen 6-bit),
//   f16 d;
//                             value = d*(sc - 32) * (q - (bit v/32 of hmask[v%32] ? 0 : 4))
//   Q4_K (256 values, 144 B): f16 d, f16 dmin, u8 scales[12] (eight 6-bit scales and mins),
//                             u8 qs[128];                       value = d*sc[s] * q - dmin*m[s]
//   Q5_K (256 values, 176 B): as Q4_K with u8 qh[32] (the fifth bit) before qs
//   Q6_K (256 values, 210 B): u8 ql[128], u8 qh[64], int8 scales[16], f16 d;
//                                                               value = d*scales[v/16] * (q - 32)
//   IQ4_NL (32 values, 18 B): f16 d, u8 qs[16] (nibbles as Q4_0's); value = d * k_iq4nl_values[q]
//   IQ4_XS (256 values, 136 B): f16 d, u16 scales_h, u8 scales_l[4], u8 qs[128]; per 32 values j a
//                             6-bit scale ls (low nibble j of scales_l, bits 2j of scales_h);
//                             value = d*(ls - 32) * k_iq4nl_values[q], nibbles as Q4_0's per 32
//                             values
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "model/dtype.hpp"

namespace coserve {

// Dequantizes n values (a multiple of the block size) of quantized type t at src to fp32.
void dequantize(dtype t, const void* src, float* dst, size_t n) noexcept;

// The 6-bit scale and min of sub-block j (0..7) of a Q4_K / Q5_K block's 12 scale bytes.
inline void k_scale_min(const uint8_t* s, int j, uint8_t& sc, uint8_t& m) noexcept {
  if (j < 4) {
    sc = s[j] & 63;
    m = s[j + 4] & 63;
  } else {
    sc = uint8_t((s[j + 4] & 0x0F) | ((s[j - 4] >> 6) << 4));
    m = uint8_t((s[j + 4] >> 4) | ((s[j] >> 6) << 4));
  }
}

// Activations quantized for the integer products: ggml's Q8_0 (blocks of 32, scale rounded
// through f16 as ggml stores it) for the block-32 weight types, Q8_K (blocks of 256, fp32 scale,
// the sums of each 16 values) for the K types. q8_block.s (the sum of its q) is not in ggml's
// format: the kernels take weight offsets (Q4_0's -8, Q5_0's -16) and the Q4_1/Q5_1 minimums
// through it (ggml's Q8_1 stores that sum times d instead).
struct q8_block {
  float d;
  int8_t q[32];
  int16_t s;
};
struct q8k_block {
  float d;
  int8_t q[256];
  int16_t bsums[16];
};

// The activation format weight type t multiplies with: false for Q8_0 blocks, true for Q8_K.
inline bool uses_q8k(dtype t) noexcept {
  return t == dtype::q4_k || t == dtype::q5_k || t == dtype::q6_k || t == dtype::q2_k ||
         t == dtype::q3_k || t == dtype::iq4_xs;
}

// The non-linear 4-bit grid of IQ4_NL and IQ4_XS (ggml's kvalues_iq4nl).
inline constexpr int8_t k_iq4nl_values[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                                              1,    13,   25,  38,  53,  69,  89,  113};

// The 6-bit scale (0..63, before the -32) of 32-value sub-block j (0..7) of an IQ4_XS block.
inline int iq4xs_scale(const uint8_t* block, int j) noexcept {
  const int low = (block[4 + j / 2] >> (4 * (j % 2))) & 15;
  const int high = ((block[2] | (block[3] << 8)) >> (2 * j)) & 3;
  return low | (high << 4);
}

// The 6-bit scale (0..63, before Q3_K's -32) of 16-value group g (0..15) of a Q3_K block's 12
// scale bytes.
inline int q3k_scale(const uint8_t* s, int g) noexcept {
  const int low = g < 8 ? (s[g] & 15) : (s[g - 8] >> 4);
  return low | (((s[8 + g % 4] >> (2 * (g / 4))) & 3) << 4);
}

// Quantizes k values of x (k a multiple of 32 / 256) as ggml's quantize_row_q8_0 / q8_K do, with
// values rounded to nearest, ties to even (as ggml's x86 SIMD quantizer rounds).
void quantize_q8_0(const float* x, q8_block* out, int64_t k) noexcept;
void quantize_q8_k(const float* x, q8k_block* out, int64_t k) noexcept;

// Scalar reference products of one weight row (k values of type t) with one quantized
// activation row (Q8_0 blocks for the block-32 types, Q8_K blocks for the K types): integer sums
// per block, scaled and summed in fp32 as ggml's reference does (the Q4_1/Q5_1 minimum times the
// block's activation sum).
float vec_dot_ref(dtype t, const void* w, const void* act, int64_t k) noexcept;

struct weight_ref;
// matmul_nt (cpu_kernels.hpp) for a quantized weight: each row of x [M, w.cols] (row stride ldx)
// is quantized to the activation format of w.type, then y[m * ldy + j] (+)= the integer product
// with weight row j for j < n (quant_kernels.cpp, SIMD per the dispatcher's target). Every
// weight row is read once per call, for all M rows.
void matmul_quant(const float* x, int64_t ldx, int64_t M, const weight_ref& w, int64_t n, float* y,
                  int64_t ldy, bool accumulate);

// The same in two parts, so that threads sharing one x quantize it once: quantize_rows writes
// M rows of x [M, K] (row stride ldx) in the activation format of weight type t,
// quantized_row_bytes(t, K) bytes per row (SIMD; the values quantize_q8_0 / quantize_q8_k give);
// matmul_quantized multiplies such rows with the first n rows of w.
size_t quantized_row_bytes(dtype t, int64_t k) noexcept;
void quantize_rows(dtype t, const float* x, int64_t ldx, int64_t M, int64_t K, void* out) noexcept;
void matmul_quantized(const void* xq, int64_t M, const weight_ref& w, int64_t n, float* y,
                      int64_t ldy, bool accumulate);

// matmul_quantized's batched path (quant_gemm.cpp): weight tiles transposed so that each vector
// lane is one weight row, for M >= lane_gemm_min_rows(w.type) on x86 targets with AVX2 or better
// (Q8_0 needs AVX-512 VNNI). Returns false, computing nothing, where the
// dispatched target has none. The row counts are where it measured faster than the
// one-row-at-a-time kernels for Q8_0/Q4_0 and the K types Q4_K-Q6_K (150M model, decode batches 4
// to 8, AVX-512 VNNI); below them the transposition does not pay. Q4_1, Q5_0, Q5_1, IQ4_NL and
// Q2_K, Q3_K, IQ4_XS take their family's count, not measured apart.
inline int64_t lane_gemm_min_rows(dtype t) noexcept { return uses_q8k(t) ? 8 : 5; }
bool matmul_quantized_lanes(const void* xq, int64_t M, const weight_ref& w, int64_t n, float* y,
                            int64_t ldy, bool accumulate);

// Q4_0 weights repacked for the x86 kernels (quant_gemm.cpp), as llama.cpp repacks them at load:
// tiles of 16 rows; per block of 32 columns a 288-byte record of the 16 rows' f16 scales (32 B),
// then four 64-byte groups t = 0..3 holding, at 4 * i, bytes 4t .. 4t + 3 of row i's block
// (low nibbles: values 4t .. 4t + 3, high nibbles: values 16 + 4t .. 16 + 4t + 3). A vector load
// then holds one dword per row, so one activation dword broadcast makes 4 products per row per
// instruction, and one conversion gives the 16 rows' scales. A last partial tile is padded with
// zero rows. Same size as the original blocks.
constexpr int64_t k_q4_0_tile_rows = 16;
inline size_t q4_0_tile_bytes(int64_t k) noexcept { return size_t(k / 32) * 288; }
std::vector<unsigned char> pack_q4_0_tiles(const weight_ref& w);
// matmul_quantized from w.packed (Q4_0 tiles above); false, computing nothing, where the
// dispatched target has no such kernel (then the caller reads w.data).
bool matmul_quantized_packed(const void* xq, int64_t M, const weight_ref& w, int64_t n, float* y,
                             int64_t ldy, bool accumulate);

}  // namespace coserve
