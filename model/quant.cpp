// Built with -ffp-contract=off (model/CMakeLists.txt): the dequantized values must be the products
// and differences gguf-py computes, each rounded to fp32 on its own, never fused.
#include "model/quant.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "model/cpu_kernels.hpp"

namespace coserve {
namespace {

float f16_at(const uint8_t* p) noexcept {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return f16_to_f32(h);
}

// The 5-bit (Q5_K) or 4-bit (Q4_K) quant of value v (0..255) of a K block.
inline int q4k_value(const uint8_t* qs, int v) noexcept {
  const int chunk = v / 64, r = v % 64;
  return (qs[32 * chunk + (r % 32)] >> (4 * (r / 32))) & 15;
}
inline int q5k_value(const uint8_t* qh, const uint8_t* qs, int v) noexcept {
  return q4k_value(qs, v) | (((qh[v % 32] >> (v / 32)) & 1) << 4);
}
// The 6-bit quant of value v of a Q6_K block, minus 32.
inline int q6k_value(const uint8_t* ql, const uint8_t* qh, int v) noexcept {
  const int hh = v / 128, r = v % 128;
  const int low = (ql[64 * hh + (r % 64)] >> (4 * (r / 64))) & 15;
  const int high = (qh[32 * hh + (r % 32)] >> (2 * (r / 32))) & 3;
  return (low | (high << 4)) - 32;
}
inline int nibble(const uint8_t* qs, int i) noexcept {
  return i < 16 ? (qs[i] & 15) : (qs[i - 16] >> 4);
}
inline int q4_0_value(const uint8_t* qs, int i) noexcept { return nibble(qs, i) - 8; }
// The 5-bit quant (0..31) of value i of a Q5_0 / Q5_1 block: qh holds the fifth bits.
inline int q5_value(const uint8_t* qh, const uint8_t* qs, int i) noexcept {
  uint32_t h;
  std::memcpy(&h, qh, 4);
  return nibble(qs, i) | int(((h >> i) & 1u) << 4);
}
// The 2-bit quant of value v of a Q2_K / Q3_K block's qs.
inline int q2k_value(const uint8_t* qs, int v) noexcept {
  return (qs[32 * (v / 128) + v % 32] >> (2 * ((v / 32) % 4))) & 3;
}
// Q3_K's signed 3-bit quant (-4..3) of value v.
inline int q3k_value(const uint8_t* hmask, const uint8_t* qs, int v) noexcept {
  return q2k_value(qs, v) - (((hmask[v % 32] >> (v / 32)) & 1) ? 0 : 4);
}

// Value i of a block-32 type's block at p as an integer (Q4_0/Q5_0's offsets taken off; Q4_1 and
// Q5_1 add their minimum apart: has_min).
inline int block32_value(dtype t, const uint8_t* p, int i) noexcept {
  switch (t) {
    case dtype::q8_0:
      return int(int8_t(p[2 + i]));
    case dtype::q4_0:
      return q4_0_value(p + 2, i);
    case dtype::q4_1:
      return nibble(p + 4, i);
    case dtype::q5_0:
      return q5_value(p + 2, p + 6, i) - 16;
    case dtype::q5_1:
      return q5_value(p + 4, p + 8, i);
    case dtype::iq4_nl:
      return k_iq4nl_values[nibble(p + 2, i)];
    default:
      return 0;
  }
}
inline bool has_min(dtype t) noexcept { return t == dtype::q4_1 || t == dtype::q5_1; }

}  // namespace

void dequantize(dtype t, const void* src, float* dst, size_t n) noexcept {
  const auto* p = static_cast<const uint8_t*>(src);
  const size_t nb = n / size_t(dtype_block_elems(t)), bb = dtype_block_bytes(t);
  for (size_t b = 0; b < nb; ++b, p += bb) {
    switch (t) {
      case dtype::q8_0: {
        const float d = f16_at(p);
        for (int i = 0; i < 32; ++i) *dst++ = float(int8_t(p[2 + i])) * d;
        break;
      }
      case dtype::q4_0:
      case dtype::q5_0:
      case dtype::iq4_nl: {
        const float d = f16_at(p);
        for (int i = 0; i < 32; ++i) *dst++ = d * float(block32_value(t, p, i));
        break;
      }
      case dtype::q4_1:
      case dtype::q5_1: {  // gguf-py: (d * q) + m, two roundings
        const float d = f16_at(p), m = f16_at(p + 2);
        for (int i = 0; i < 32; ++i) {
          const float prod = d * float(block32_value(t, p, i));
          *dst++ = prod + m;
        }
        break;
      }
      case dtype::q2_k: {
        const uint8_t* qs = p + 16;
        const float d = f16_at(p + 80), dmin = f16_at(p + 82);
        for (int g = 0; g < 16; ++g) {
          const float dl = d * float(p[g] & 15), ml = dmin * float(p[g] >> 4);
          for (int i = 0; i < 16; ++i) {
            const float prod = dl * float(q2k_value(qs, 16 * g + i));
            *dst++ = prod - ml;
          }
        }
        break;
      }
      case dtype::iq4_xs: {
        const float d = f16_at(p);
        for (int j = 0; j < 8; ++j) {
          const float dl = d * float(iq4xs_scale(p, j) - 32);
          for (int i = 0; i < 32; ++i)
            *dst++ = dl * float(k_iq4nl_values[nibble(p + 8 + 16 * j, i)]);
        }
        break;
      }
      case dtype::q3_k: {
        const uint8_t* qs = p + 32;
        const float d = f16_at(p + 108);
        for (int g = 0; g < 16; ++g) {
          const float dl = d * float(q3k_scale(p + 96, g) - 32);
          for (int i = 0; i < 16; ++i) *dst++ = dl * float(q3k_value(p, qs, 16 * g + i));
        }
        break;
      }
      case dtype::q4_k:
      case dtype::q5_k: {
        const float d = f16_at(p), dmin = f16_at(p + 2);
        const uint8_t* scales = p + 4;
        const uint8_t* qh = p + 16;
        const uint8_t* qs = t == dtype::q5_k ? p + 48 : p + 16;
        for (int s = 0; s < 8; ++s) {
          uint8_t sc, m;
          k_scale_min(scales, s, sc, m);
          const float ds = d * float(sc), dm = dmin * float(m);
          for (int i = 0; i < 32; ++i) {
            const int v = 32 * s + i;
            const int q = t == dtype::q5_k ? q5k_value(qh, qs, v) : q4k_value(qs, v);
            const float prod = ds * float(q);
            *dst++ = prod - dm;
          }
        }
        break;
      }
      case dtype::q6_k: {
        const uint8_t* ql = p;
        const uint8_t* qh = p + 128;
        const auto* sc = reinterpret_cast<const int8_t*>(p + 192);
        const float d = f16_at(p + 208);
        for (int g = 0; g < 16; ++g) {
          const float ds = d * float(sc[g]);
          for (int i = 0; i < 16; ++i) *dst++ = ds * float(q6k_value(ql, qh, 16 * g + i));
        }
        break;
      }
      case dtype::f32:
      case dtype::f16:
      case dtype::bf16:
      case dtype::f8_e4m3:
      case dtype::f8_e5m2:
        convert_to_f32(t, src, dst, n);
        return;
    }
  }
}

void quantize_q8_0(const float* x, q8_block* out, int64_t k) noexcept {
  for (int64_t b = 0; b < k / 32; ++b, x += 32) {
    float amax = 0;
    for (int i = 0; i < 32; ++i) amax = std::max(amax, std::fabs(x[i]));
    const float d = amax / 127.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    out[b].d = f16_to_f32(f32_to_f16(d));
    int sum = 0;
    for (int i = 0; i < 32; ++i) {
      out[b].q[i] = int8_t(std::nearbyint(x[i] * id));
      sum += out[b].q[i];
    }
    out[b].s = int16_t(sum);
  }
}

void quantize_q8_k(const float* x, q8k_block* out, int64_t k) noexcept {
  for (int64_t b = 0; b < k / 256; ++b, x += 256) {
    float amax = 0, max = 0;
    for (int i = 0; i < 256; ++i)
      if (std::fabs(x[i]) > amax) {
        amax = std::fabs(x[i]);
        max = x[i];
      }
    q8k_block& o = out[b];
    if (amax == 0.0f) {
      o.d = 0;
      std::memset(o.q, 0, sizeof o.q);
      std::memset(o.bsums, 0, sizeof o.bsums);
      continue;
    }
    const float iscale = -127.0f / max;
    for (int i = 0; i < 256; ++i)
      o.q[i] = int8_t(std::min(127, int(std::nearbyint(iscale * x[i]))));
    for (int g = 0; g < 16; ++g) {
      int s = 0;
      for (int i = 0; i < 16; ++i) s += o.q[16 * g + i];
      o.bsums[g] = int16_t(s);
    }
    o.d = 1.0f / iscale;
  }
}

float vec_dot_ref(dtype t, const void* w, const void* act, int64_t k) noexcept {
  const auto* p = static_cast<const uint8_t*>(w);
  const size_t bb = dtype_block_bytes(t);
  float sum = 0;
  if (!uses_q8k(t)) {
    const auto* a = static_cast<const q8_block*>(act);
    for (int64_t b = 0; b < k / 32; ++b, p += bb) {
      int isum = 0;
      for (int i = 0; i < 32; ++i) isum += block32_value(t, p, i) * int(a[b].q[i]);
      sum += float(isum) * (f16_at(p) * a[b].d);
      if (has_min(t)) sum += f16_at(p + 2) * (a[b].d * float(a[b].s));
    }
    return sum;
  }
  const auto* a = static_cast<const q8k_block*>(act);
  for (int64_t b = 0; b < k / 256; ++b, p += bb) {
    const int8_t* q8 = a[b].q;
    if (t == dtype::iq4_xs) {
      int isum = 0;
      for (int j = 0; j < 8; ++j) {
        int s = 0;
        for (int i = 0; i < 32; ++i)
          s += k_iq4nl_values[nibble(p + 8 + 16 * j, i)] * q8[32 * j + i];
        isum += (iq4xs_scale(p, j) - 32) * s;
      }
      sum += f16_at(p) * a[b].d * float(isum);
      continue;
    }
    if (t == dtype::q2_k || t == dtype::q3_k) {
      int isum = 0, msum = 0;
      for (int g = 0; g < 16; ++g) {
        int s = 0;
        for (int i = 0; i < 16; ++i) {
          const int v = 16 * g + i;
          s += (t == dtype::q2_k ? q2k_value(p + 16, v) : q3k_value(p, p + 32, v)) * q8[v];
        }
        if (t == dtype::q2_k) {
          isum += (p[g] & 15) * s;
          msum += (p[g] >> 4) * a[b].bsums[g];
        } else {
          isum += (q3k_scale(p + 96, g) - 32) * s;
        }
      }
      if (t == dtype::q2_k)
        sum += f16_at(p + 80) * a[b].d * float(isum) - f16_at(p + 82) * a[b].d * float(msum);
      else
        sum += f16_at(p + 108) * a[b].d * float(isum);
      continue;
    }
    if (t == dtype::q6_k) {
      const auto* sc = reinterpret_cast<const int8_t*>(p + 192);
      int isum = 0;
      for (int g = 0; g < 16; ++g) {
        int s = 0;
        for (int i = 0; i < 16; ++i) s += q6k_value(p, p + 128, 16 * g + i) * q8[16 * g + i];
        isum += int(sc[g]) * s;
      }
      sum += f16_at(p + 208) * a[b].d * float(isum);
      continue;
    }
    const uint8_t* scales = p + 4;
    const uint8_t* qh = p + 16;
    const uint8_t* qs = t == dtype::q5_k ? p + 48 : p + 16;
    int isum = 0, msum = 0;
    for (int s = 0; s < 8; ++s) {
      uint8_t sc, m;
      k_scale_min(scales, s, sc, m);
      int d = 0;
      for (int i = 0; i < 32; ++i) {
        const int v = 32 * s + i;
        d += (t == dtype::q5_k ? q5k_value(qh, qs, v) : q4k_value(qs, v)) * q8[v];
      }
      isum += int(sc) * d;
      msum += int(m) * (a[b].bsums[2 * s] + a[b].bsums[2 * s + 1]);
    }
    sum += f16_at(p) * a[b].d * float(isum) - f16_at(p + 2) * a[b].d * float(msum);
  }
  return sum;
}

std::vector<unsigned char> pack_q4_0_tiles(const weight_ref& w) {
  const int64_t nb = w.cols / 32, tiles = (w.rows + k_q4_0_tile_rows - 1) / k_q4_0_tile_rows;
  const size_t tile = q4_0_tile_bytes(w.cols), row_bytes = w.row_bytes();
  std::vector<unsigned char> out(size_t(tiles) * tile, 0);  // padding rows: zero scales and values
  for (int64_t r = 0; r < w.rows; ++r) {
    const auto* src = static_cast<const unsigned char*>(w.data) + size_t(r) * row_bytes;
    const int64_t i = r % k_q4_0_tile_rows;
    unsigned char* t = out.data() + size_t(r / k_q4_0_tile_rows) * tile;
    for (int64_t b = 0; b < nb; ++b, src += 18) {
      unsigned char* rec = t + size_t(b) * 288;
      std::memcpy(rec + 2 * i, src, 2);
      for (int g = 0; g < 4; ++g) std::memcpy(rec + 32 + 64 * g + 4 * i, src + 2 + 4 * g, 4);
    }
  }
  return out;
}

}  // namespace coserve
