#include "model/fp8.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <thread>

namespace coserve {

const tensor_view* find_fp8_scale(const safetensors_set& files, const std::string& weight_name) {
  if (const tensor_view* s = files.find(weight_name + "_scale_inv")) return s;
  return files.find(weight_name + "_scale");
}

namespace {

// The scale tensor read and checked: element (r, c) of `w` has scale s[(r / br) * scale_cols + c /
// bc].
struct scale_layout {
  std::vector<float> s;
  int64_t br = 1, bc = 1, scale_cols = 1;
};

result<scale_layout> read_scale(const tensor_view& w, const tensor_view& scale, int32_t block_rows,
                                int32_t block_cols) {
  auto fail = [&](const std::string& why) {
    return make_error("invalid_model", w.file + ": fp8 tensor '" + w.name + "' " +
                                           shape_string(w.shape) + " with scale '" + scale.name +
                                           "' " + shape_string(scale.shape) + ": " + why);
  };
  if (!dtype_is_fp8(w.type)) return fail("is not F8_E4M3 or F8_E5M2");
  if (w.shape.size() != 2) return fail("is not a matrix");
  if (scale.type != dtype::f32 && scale.type != dtype::bf16 && scale.type != dtype::f16)
    return fail("the scale is " + std::string(dtype_name(scale.type)) + ", not F32, BF16 or F16");
  const int64_t rows = w.shape[0], cols = w.shape[1];
  scale_layout l;
  l.s.resize(size_t(scale.numel()));
  convert_to_f32(scale.type, scale.data, l.s.data(), l.s.size());
  l.br = rows;
  l.bc = cols;
  const bool two_d = scale.shape.size() == 2;
  if (scale.numel() == 1) {
    // per tensor
  } else if ((scale.shape.size() == 1 || (two_d && scale.shape[1] == 1)) &&
             scale.shape[0] == rows) {
    l.br = 1;  // per output channel
  } else if (two_d) {
    l.br = block_rows > 0 ? block_rows : 128;
    l.bc = block_cols > 0 ? block_cols : 128;
    if (scale.shape[0] != (rows + l.br - 1) / l.br || scale.shape[1] != (cols + l.bc - 1) / l.bc)
      return fail("a block scale must be [ceil(rows / " + std::to_string(l.br) + "), ceil(cols / " +
                  std::to_string(l.bc) + ")]");
    l.scale_cols = scale.shape[1];
  } else {
    return fail("the scale is neither one value, one per row, nor one per block");
  }
  for (float v : l.s)
    if (!std::isfinite(v)) return fail("the scale holds a NaN or an infinity");
  return l;
}

}  // namespace

result<std::vector<float>> fp8_row_scales(const tensor_view& w, const tensor_view& scale,
                                          int32_t block_rows, int32_t block_cols) {
  auto l = read_scale(w, scale, block_rows, block_cols);
  if (!l) return l.err();
  if (l->scale_cols != 1) return std::vector<float>{};  // scales per block of columns
  std::vector<float> out(size_t(w.shape[0]));
  for (int64_t r = 0; r < w.shape[0]; ++r) out[size_t(r)] = l->s[size_t(r / l->br)];
  return out;
}

result<std::vector<uint16_t>> dequantize_fp8(const tensor_view& w, const tensor_view& scale,
                                             int32_t block_rows, int32_t block_cols) {
  auto l = read_scale(w, scale, block_rows, block_cols);
  if (!l) return l.err();
  const int64_t rows = w.shape[0], cols = w.shape[1];
  const std::vector<float>& s = l->s;
  const int64_t br = l->br, bc = l->bc, scale_cols = l->scale_cols;
  std::array<float, 256> lut;
  for (int c = 0; c < 256; ++c)
    lut[size_t(c)] = w.type == dtype::f8_e4m3 ? e4m3_to_f32(uint8_t(c)) : e5m2_to_f32(uint8_t(c));
  std::vector<uint16_t> out(size_t(rows) * size_t(cols));
  const auto* codes = reinterpret_cast<const uint8_t*>(w.data);
  auto run = [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const float* srow = s.data() + size_t((r / br) * scale_cols);
      const uint8_t* in = codes + size_t(r) * size_t(cols);
      uint16_t* o = out.data() + size_t(r) * size_t(cols);
      for (int64_t c0 = 0; c0 < cols; c0 += bc) {
        const float sc = srow[c0 / bc];
        const int64_t c1 = std::min(cols, c0 + bc);
        for (int64_t c = c0; c < c1; ++c) o[c] = f32_to_bf16(lut[in[c]] * sc);
      }
    }
  };
  // Large matrices on all cores: an 8B checkpoint is 8 GB of codes.
  const int64_t threads = std::clamp<int64_t>(int64_t(std::thread::hardware_concurrency()), 1, 64);
  const int64_t per = std::max<int64_t>(1, (rows + threads - 1) / threads);
  if (rows * cols < (int64_t{1} << 20) || threads == 1) {
    run(0, rows);
  } else {
    std::vector<std::thread> pool;
    for (int64_t r = 0; r < rows; r += per) pool.emplace_back(run, r, std::min(rows, r + per));
    for (auto& t : pool) t.join();
  }
  return out;
}

}  // namespace coserve
