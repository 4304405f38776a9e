// Elementwise kernel families against their CPU references (gpu/reference/elementwise_ref.hpp,
// rope_kv_ref.hpp), over odd shapes.
#include <catch2/catch.hpp>

#include "gpu/kernels.hpp"
#include "gpu/reference/elementwise_ref.hpp"
#include "gpu/reference/rope_kv_ref.hpp"
#include "gpu/rope_freqs.hpp"
#include "model/dtype.hpp"
#include "tests/gpu/device_helpers.hpp"

using namespace coserve;
using namespace coserve::gpu;
using namespace coserve::gpu::test;

TEST_CASE("embedding kernel matches reference", "[gpu][kernels]") {
  COSERVE_REQUIRE_DEVICE_OR_SKIP();
  const int32_t vocab = 1003, hidden = 328;
  auto table = random_bf16(size_t(vocab) * hidden, 1);
  std::vector<int32_t> ids{0, 5, 1002, 17, -1, 1003, 500};
  auto d_table = upload(table), d_ids = upload(ids);
  auto d_out = device_buffer::allocate(ids.size() * hidden * 2);
  REQUIRE(d_out.ok());
  REQUIRE(launch_embedding(d_out->as<bf16>(), d_table.as<bf16>(), d_ids.as<int32_t>(), nullptr,
                           int32_t(ids.size()), hidden, vocab, nullptr)
              .ok());
  CHECK(download<uint16_t>(*d_out, ids.size() * hidden) ==
        ref::embedding_ref(table, ids, hidden, vocab));
  CHECK_FALSE(launch_embedding(d_out->as<bf16>(), d_table.as<bf16>(), d_ids.as<int32_t>(), nullptr,
                               1, 13, vocab, nullptr)
                  .ok());
}

TEST_CASE("embedding reads decode inputs from the last-token buffer the sampler scatters into",
          "[gpu][kernels]") {
  COSERVE_REQUIRE_DEVICE_OR_SKIP();
  const int32_t vocab = 1003, hidden = 64;
  auto table = random_bf16(size_t(vocab) * hidden, 2);
  // Slots 0..3; the "sampled" ids of rows 0..2 go to slots 2, 0, 3.
  std::vector<int32_t> last{9, 9, 9, 9}, slots{2, 0, 3}, sampled{41, 1002, 7};
  auto d_table = upload(table), d_last = upload(last), d_slots = upload(slots),
       d_sampled = upload(sampled);
  REQUIRE(launch_scatter_tokens(d_last.as<int32_t>(), d_slots.as<int32_t>(),
                                d_sampled.as<int32_t>(), 3, nullptr)
              .ok());
  CHECK(download<int32_t>(d_last, 4) == std::vector<int32_t>{1002, 9, 41, 7});
  // Inputs: a literal id, then references to slots 2, 1 and 3 (-(slot + 1)).
  std::vector<int32_t> ids{5, -3, -2, -4}, resolved{5, 41, 9, 7};
  auto d_ids = upload(ids);
  auto d_out = device_buffer::allocate(ids.size() * hidden * 2);
  REQUIRE(d_out.ok());
  REQUIRE(launch_embedding(d_out->as<bf16>(), d_table.as<bf16>(), d_ids.as<int32_t>(),
                           d_last.as<int32_t>(), int32_t(ids.size()), hidden, vocab, nullptr)
              .ok());
  CHECK(download<uint16_t>(*d_out, ids.size() * hidden) ==
        ref::embedding_ref(table, resolved, hidden, vocab));
}

TEST_CASE("rmsnorm kernel with fused residual matches reference", "[gpu][kernels]") {
  COSERVE_REQUIRE_DEVICE_OR_SKIP();
  for (int32_t hidden : {64, 1000, 4096}) {
    for (bool add : {false, true}) {
      const int32_t rows = 37;
      auto x = random_bf16(size_t(rows) * hidden, 2), res = random_bf16(size_t(rows) * hidden, 3);
      auto w = random_bf16(size_t(hidden), 4);
      auto d_x = upload(x), d_res = upload(res), d_w = upload(w);
      auto d_out = device_buffer::allocate(size_t(rows) * hidden * 2);
      REQUIRE(d_out.ok());
      REQUIRE(launch_rmsnorm(d_out->as<bf16>(), d_x.as<bf16>(), d_res.as<bf16>(), d_w.as<bf16>(),
                             nullptr, rows, hidden, 1e-5f, add, nullptr)
                  .ok());
      auto expect = ref::rmsnorm_ref(x, &res, w, nullptr, rows, hidden, 1e-5f, add);
      INFO("hidden " << hidden << " add " << add);
      CHECK(max_abs_diff(download<uint16_t>(*d_out, expect.size()), expect) <= 0.02f);
      CHECK(download<uint16_t>(d_res, res.size()) == res);
      // gathered rows (the final norm over sampled tokens)
      std::vector<int32_t> pick{36, 0, 5};
      auto d_pick = upload(pick);
      auto res2 = res;
      REQUIRE(launch_rmsnorm(d_out->as<bf16>(), d_x.as<bf16>(), d_res.as<bf16>(), d_w.as<bf16>(),
                             d_pick.as<int32_t>(), 3, hidden, 1e-5f, false, nullptr)
                  .ok());
      auto g = ref::rmsnorm_ref(x, &res2, w, &pick, 3, hidden, 1e-5f, false);
      CHECK(max_abs_diff(download<uint16_t>(*d_out, g.size()), g) <= 0.02f);
    }
  }
}

TEST_CASE("q/k head rmsnorm (Qwen3) matches reference: q and k heads normalised, v untouched",
          "[gpu][kernels]") {
  COSERVE_REQUIRE_DEVICE_OR_SKIP();
  for (int32_t head_dim : {64, 96, 128, 256}) {
    const int32_t tokens = 23, hq = 8, hkv = 2;
    const size_t n = size_t(tokens) * (hq + 2 * hkv) * head_dim;
    auto qkv = random_bf16(n, 7, 4.0f);
    auto qw = random_bf16(size_t(head_dim), 8), kw = random_bf16(size_t(head_dim), 9);
    auto d_qkv = upload(qkv), d_qw = upload(qw), d_kw = upload(kw);
    REQUIRE(launch_head_rmsnorm(d_qkv.as<bf16>(), d_qw.as<bf16>(), d_kw.as<bf16>(), tokens, hq, hkv,
                                head_dim, 1e-6f, nullptr)
                .ok());
    auto expect = qkv;
    ref::head_rmsnorm_ref(expect, qw, kw, tokens, hq, hkv, head_dim, 1e-6f);
    const auto got = download<uint16_t>(d_qkv, n);
    INFO("head_dim " << head_dim);
    CHECK(max_abs_diff(got, expect) <= 0.02f);
    const size_t row = size_t(hq + 2 * hkv) * head_dim, v0 = size_t(hq + hkv) * head_dim;
    for (int32_t t = 0; t < tokens; ++t)
      for (size_t k = v0; k < row; ++k)
        REQUIRE(got[size_t(t) * row + k] == qkv[size_t(t) * row + k]);
  }
  auto qkv = upload(random_bf16(64, 1));
  CHECK_FALSE(launch_head_rmsnorm(qkv.as<bf16>(), qkv.as<bf16>(), qkv.as<bf16>(), 1, 1, 1, 512,
                                  1e-6f, nullptr)
                  .ok());
}

TEST_CASE("silu_mul kernel matches reference", "[gpu][kernels]") {
  COSERVE_REQUIRE_DEVICE_OR_SKIP();
  const int32_t tokens = 19, inter = 1377;
  auto gu = random_bf16(size_t(tokens) * 2 * inter, 5, 4.0f);
  auto d_gu = upload(gu);
  auto d_out = device_buffer::allocate(size_t(tokens) * inter * 2);
  REQUIRE(d_out.ok());
  REQUIRE(launch_silu_mul(d_out->as<bf16>(), d_gu.as<bf16>(), tokens, inter, nullptr).ok());
  auto expect = ref::silu_mul_ref(gu, tokens, inter);
  CHECK(max_abs_diff(download<uint16_t>(*d_out, expect.size()), expect) <= 0.03f);
}

TEST_CASE("fp8 per-row quantization matches the reference bit for bit", "[gpu][kernels][fp8]") {
  COSERVE_REQUIRE_DEVICE_OR_SKIP();
  const int32_t rows = 37, cols = 1000;
  auto x = random_bf16(size_t(rows) * cols, 9, 30.0f);
  for (int32_t j = 0; j < cols; ++j)
    x[size_t(5) * cols + size_t(j)] = 0;  // an all-zero row: the floor scale
  auto d_x = upload(x);
  auto d_codes = device_buffer::allocate(size_t(rows) * cols);
  auto d_scales = device_buffer::allocate(size_t(rows) * 4);
  REQUIRE(d_codes.ok());
  REQUIRE(d_scales.ok());
  REQUIRE(launch_quantize_rows_e4m3(d_codes->as<uint8_t>(), d_scales->as<float>(), d_x.as<bf16>(),
                                    rows, cols, nullptr)
              .ok());
  std::vector<uint8_t> codes;
  std::vector<float> scales;
  ref::quantize_rows_e4m3_ref(x, rows, cols, k_fp8_min_scale, codes, scales);
  CHECK(download<float>(*d_scales, scales.size()) == scales);
  CHECK(download<uint8_t>(*d_codes, codes.size()) == codes);
  CHECK(scales[5] == k_fp8_min_scale);
  CHECK_FALSE(launch_quantize_rows_e4m3(nullptr, nullptr, nullptr, 1, 0, nullptr).ok());
}

TEST_CASE("dummy fill kernel matches reference bit for bit", "[gpu][kernels]") {
  COSERVE_REQUIRE_DEVICE_OR_SKIP();
  const int64_t n = 100003;
  auto d = device_buffer::allocate(size_t(n) * 2);
  REQUIRE(d.ok());
  REQUIRE(launch_fill_random_bf16(d->as<bf16>(), n, 0.05f, 77, nullptr).ok());
  CHECK(download<uint16_t>(*d, size_t(n)) == ref::fill_random_ref(n, 0.05f, 77));
}

TEST_CASE("rope + paged KV write matches reference", "[gpu][kernels]") {
  COSERVE_REQUIRE_DEVICE_OR_SKIP();
  for (int32_t head_dim : {64, 128}) {
    for (bool llama3 : {false, true}) {
      const int32_t hq = 8, hkv = 2, tokens = 21, block_size = 16, num_blocks = 6;
      rope_params rp;
      rp.theta = llama3 ? 500000.0f : 10000.0f;
      rp.rotary_dim = head_dim;
      rp.llama3 = llama3;
      auto inv = rope_inv_freq(rp);
      auto qkv = random_bf16(size_t(tokens) * (hq + 2 * hkv) * head_dim, 6);
      std::vector<int32_t> pos, slots;
      for (int32_t t = 0; t < tokens; ++t) {
        pos.push_back(t * 397 + 3);  // large positions exercise the angle range
        slots.push_back(t == 4 ? -1 : (t * 7) % (num_blocks * block_size));
      }
      const size_t cache_n = size_t(num_blocks) * block_size * hkv * head_dim;
      std::vector<uint16_t> kc(cache_n, 0), vc(cache_n, 0);
      auto d_qkv = upload(qkv), d_pos = upload(pos), d_slots = upload(slots), d_inv = upload(inv);
      auto d_kc = upload(kc), d_vc = upload(vc);
      rope_kv_args a{d_qkv.as<bf16>(),
                     d_pos.as<int32_t>(),
                     d_slots.as<int32_t>(),
                     d_inv.as<float>(),
                     d_kc.as<bf16>(),
                     d_vc.as<bf16>(),
                     tokens,
                     hq,
                     hkv,
                     head_dim};
      REQUIRE(launch_rope_kv_write(a, nullptr).ok());
      ref::rope_kv_ref(qkv, pos, slots, inv, kc, vc, hq, hkv, head_dim);
      INFO("head_dim " << head_dim << " llama3 " << llama3);
      CHECK(max_abs_diff(download<uint16_t>(d_qkv, qkv.size()), qkv) <= 0.02f);
      CHECK(max_abs_diff(download<uint16_t>(d_kc, cache_n), kc) <= 0.02f);
      CHECK(download<uint16_t>(d_vc, cache_n) == vc);
    }
  }
}

TEST_CASE(
    "rope + paged KV write: partial rotary, LongRoPE's second table from a position on, cos/sin "
    "scale",
    "[gpu][kernels]") {
  COSERVE_REQUIRE_DEVICE_OR_SKIP();
  const int32_t head_dim = 128, rotary = 96, hq = 8, hkv = 2, tokens = 21, block_size = 16,
                num_blocks = 6;
  rope_params rp;
  rp.rotary_dim = rotary;
  auto inv = rope_inv_freq(rp);
  std::vector<float> inv_long(inv);
  for (size_t i = 0; i < inv_long.size(); ++i) inv_long[i] /= float(2 + i);
  auto qkv = random_bf16(size_t(tokens) * (hq + 2 * hkv) * head_dim, 9);
  std::vector<int32_t> pos, slots;
  for (int32_t t = 0; t < tokens; ++t) {
    pos.push_back(t * 211 + 1);  // below and above long_from
    slots.push_back(t == 3 ? -1 : (t * 7) % (num_blocks * block_size));
  }
  const size_t cache_n = size_t(num_blocks) * block_size * hkv * head_dim;
  std::vector<uint16_t> kc(cache_n, 0), vc(cache_n, 0);
  auto d_qkv = upload(qkv), d_pos = upload(pos), d_slots = upload(slots), d_inv = upload(inv),
       d_long = upload(inv_long);
  auto d_kc = upload(kc), d_vc = upload(vc);
  const int32_t long_from = 2000;
  const float scale = 1.19f;
  rope_kv_args a{d_qkv.as<bf16>(),
                 d_pos.as<int32_t>(),
                 d_slots.as<int32_t>(),
                 d_inv.as<float>(),
                 d_kc.as<bf16>(),
                 d_vc.as<bf16>(),
                 tokens,
                 hq,
                 hkv,
                 head_dim,
                 kv_elem::bf16,
                 d_long.as<float>(),
                 long_from,
                 scale,
                 rotary};
  REQUIRE(launch_rope_kv_write(a, nullptr).ok());
  ref::rope_ref_opts o;
  o.inv_freq_long = &inv_long;
  o.long_from = long_from;
  o.scale = scale;
  o.rotary_dim = rotary;
  ref::rope_kv_ref(qkv, pos, slots, inv, kc, vc, hq, hkv, head_dim, o);
  CHECK(max_abs_diff(download<uint16_t>(d_qkv, qkv.size()), qkv) <= 0.02f);
  CHECK(max_abs_diff(download<uint16_t>(d_kc, cache_n), kc) <= 0.02f);
  CHECK(download<uint16_t>(d_vc, cache_n) == vc);
}

TEST_CASE("rope + paged KV write on a layer without RoPE: q and k as they are, k and v cached",
          "[gpu][kernels]") {
  COSERVE_REQUIRE_DEVICE_OR_SKIP();
  const int32_t head_dim = 64, hq = 4, hkv = 2, tokens = 13, block_size = 16, num_blocks = 2;
  rope_params rp;
  rp.rotary_dim = head_dim;
  auto inv = rope_inv_freq(rp);
  auto qkv = random_bf16(size_t(tokens) * (hq + 2 * hkv) * head_dim, 12);
  std::vector<int32_t> pos, slots;
  for (int32_t t = 0; t < tokens; ++t) {
    pos.push_back(t * 31 + 2);
    slots.push_back(t == 5 ? -1 : (t * 3) % (num_blocks * block_size));
  }
  const size_t cache_n = size_t(num_blocks) * block_size * hkv * head_dim;
  std::vector<uint16_t> kc(cache_n, 0), vc(cache_n, 0);
  auto d_qkv = upload(qkv), d_pos = upload(pos), d_slots = upload(slots), d_inv = upload(inv);
  auto d_kc = upload(kc), d_vc = upload(vc);
  rope_kv_args a{d_qkv.as<bf16>(),
                 d_pos.as<int32_t>(),
                 d_slots.as<int32_t>(),
                 d_inv.as<float>(),
                 d_kc.as<bf16>(),
                 d_vc.as<bf16>(),
                 tokens,
                 hq,
                 hkv,
                 head_dim};
  a.rotate = 0;
  REQUIRE(launch_rope_kv_write(a, nullptr).ok());
  const auto before = qkv;
  ref::rope_ref_opts o;
  o.rotate = false;
  ref::rope_kv_ref(qkv, pos, slots, inv, kc, vc, hq, hkv, head_dim, o);
  CHECK(qkv == before);
  CHECK(download<uint16_t>(d_qkv, qkv.size()) == qkv);
  CHECK(download<uint16_t>(d_kc, cache_n) == kc);
  CHECK(download<uint16_t>(d_vc, cache_n) == vc);
}

TEST_CASE("rope + paged KV write into fp8 caches: the bf16 cache's values, encoded",
          "[gpu][kernels][fp8]") {
  COSERVE_REQUIRE_DEVICE_OR_SKIP();
  const int32_t head_dim = 128, hq = 8, hkv = 2, tokens = 19, block_size = 16, num_blocks = 4;
  rope_params rp;
  rp.theta = 10000.0f;
  rp.rotary_dim = head_dim;
  auto inv = rope_inv_freq(rp);
  // Values to +-600 (rotated k to about 850): past E4M3's largest, 448, so saturation is checked.
  auto qkv = random_bf16(size_t(tokens) * (hq + 2 * hkv) * head_dim, 16, 600.0f);
  std::vector<int32_t> pos, slots;
  for (int32_t t = 0; t < tokens; ++t) {
    pos.push_back(t * 131 + 5);
    slots.push_back(t == 7 ? -1 : (t * 5) % (num_blocks * block_size));
  }
  const size_t cache_n = size_t(num_blocks) * block_size * hkv * head_dim;
  // The bf16 run gives the values; the fp8 runs must hold exactly their encodings.
  auto d_pos = upload(pos), d_slots = upload(slots), d_inv = upload(inv);
  std::vector<uint16_t> zeros16(cache_n, 0);
  auto d_qkv = upload(qkv), d_kc = upload(zeros16), d_vc = upload(zeros16);
  REQUIRE(
      launch_rope_kv_write(rope_kv_args{d_qkv.as<bf16>(), d_pos.as<int32_t>(),
                                        d_slots.as<int32_t>(), d_inv.as<float>(), d_kc.as<bf16>(),
                                        d_vc.as<bf16>(), tokens, hq, hkv, head_dim},
                           nullptr)
          .ok());
  const auto kb = download<uint16_t>(d_kc, cache_n), vb = download<uint16_t>(d_vc, cache_n);
  for (kv_elem t : {kv_elem::fp8_e4m3, kv_elem::fp8_e5m2}) {
    INFO((t == kv_elem::fp8_e4m3 ? "e4m3" : "e5m2"));
    std::vector<uint8_t> zeros8(cache_n, 0);
    auto q2 = upload(qkv), k8 = upload(zeros8), v8 = upload(zeros8);
    REQUIRE(
        launch_rope_kv_write(rope_kv_args{q2.as<bf16>(), d_pos.as<int32_t>(), d_slots.as<int32_t>(),
                                          d_inv.as<float>(), k8.as<uint8_t>(), v8.as<uint8_t>(),
                                          tokens, hq, hkv, head_dim, t},
                             nullptr)
            .ok());
    const auto kg = download<uint8_t>(k8, cache_n), vg = download<uint8_t>(v8, cache_n);
    size_t bad = 0;
    for (size_t i = 0; i < cache_n; ++i) {
      const float kf = bf16_to_f32(kb[i]), vf = bf16_to_f32(vb[i]);
      const uint8_t ke = t == kv_elem::fp8_e4m3 ? f32_to_e4m3(kf) : f32_to_e5m2(kf);
      const uint8_t ve = t == kv_elem::fp8_e4m3 ? f32_to_e4m3(vf) : f32_to_e5m2(vf);
      bad += (kg[i] != ke) + (vg[i] != ve);
    }
    CHECK(bad == 0);
  }
}
