// Paged attention (prefill chunks + decodes in one batch, split-KV) against the plain CPU softmax
// reference, over GQA ratios 1/4/8, head_dim 32/64/96/128 (FlashInfer: 64/128), lengths that are
// not block multiples and sliding windows.
#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <numeric>
#include <random>

#include "gpu/flashinfer_attention.hpp"
#include "gpu/kernels.hpp"
#include "gpu/reference/attention_ref.hpp"
#include "model/dtype.hpp"
#include "tests/gpu/device_helpers.hpp"

using namespace coserve;
using namespace coserve::gpu;
using namespace coserve::gpu::test;

namespace {

struct case_shape {
  int32_t num_kv_heads, gqa, head_dim, block_size, num_sms;
  std::vector<std::pair<int32_t, int32_t>> seqs;  // (start_pos, new tokens)
};

constexpr float k_v_spread = 40.0f;

// kv: the cache element type. fp8 caches hold the E4M3 / E5M2 encodings of random values; the
// reference attends over those values widened to bf16 (exact), as the kernel does.
// The case's sequences over shuffled blocks (`extra` unused blocks ending every table, 3 spare
// blocks in the cache), planned; total_blocks sizes the caches.
struct case_batch {
  batch_plan plan;
  int32_t total_blocks = 0;
};
case_batch make_batch(const case_shape& c, uint32_t seed, int32_t extra) {
  std::mt19937 g(seed);
  case_batch out;
  for (auto [start, n] : c.seqs)
    out.total_blocks += (start + n + c.block_size - 1) / c.block_size + extra;
  out.total_blocks += 3;
  std::vector<int32_t> perm(static_cast<size_t>(out.total_blocks));
  std::iota(perm.begin(), perm.end(), 0);
  std::shuffle(perm.begin(), perm.end(), g);
  std::vector<scheduled_seq> seqs;
  size_t next = 0;
  for (size_t i = 0; i < c.seqs.size(); ++i) {
    auto [start, n] = c.seqs[i];
    scheduled_seq s;
    s.seq_id = i;
    s.tokens.assign(size_t(n), 1);
    s.start_pos = start;
    const int32_t nb = (start + n + c.block_size - 1) / c.block_size + extra;
    for (int32_t b = 0; b < nb; ++b) s.block_table.push_back(perm[next++]);
    s.sample = true;
    seqs.push_back(std::move(s));
  }
  auto plan =
      plan_batch(seqs, batch_plan_options{c.block_size, c.num_kv_heads, c.gqa, c.num_sms, 32});
  REQUIRE(plan.ok());
  out.plan = std::move(plan.value());
  return out;
}

void run_case(const case_shape& c, uint32_t seed, kv_elem kv = kv_elem::bf16, int32_t window = 0) {
  const int32_t hq = c.num_kv_heads * c.gqa, D = c.head_dim;
  const case_batch batch = make_batch(c, seed, 0);
  const batch_plan& p = batch.plan;
  const int32_t total_blocks = batch.total_blocks;

  const int64_t q_stride = int64_t(hq + 2 * c.num_kv_heads) * D;  // q inside a fused qkv row
  auto q = random_bf16(size_t(p.num_tokens) * size_t(q_stride), seed + 1, 2.0f);
  const size_t cache_n = size_t(total_blocks) * c.block_size * c.num_kv_heads * D;
  auto kc = random_bf16(cache_n, seed + 2, 2.0f), vc = random_bf16(cache_n, seed + 3);
  const float scale = 1.0f / std::sqrt(float(D));

  std::vector<uint8_t> k8, v8;
  if (kv != kv_elem::bf16) {
    auto encode = [kv](std::vector<uint16_t>& vals, std::vector<uint8_t>& codes, float spread) {
      codes.resize(vals.size());
      for (size_t i = 0; i < vals.size(); ++i) {
        const float f = bf16_to_f32(vals[i]) * spread;  // over more of the formats' exponents
        codes[i] = kv == kv_elem::fp8_e4m3 ? f32_to_e4m3(f) : f32_to_e5m2(f);
        vals[i] =
            f32_to_bf16(kv == kv_elem::fp8_e4m3 ? e4m3_to_f32(codes[i]) : e5m2_to_f32(codes[i]));
      }
    };
    encode(kc, k8, 4.0f);
    encode(vc, v8, k_v_spread);
  }
  auto d_q = upload(q);
  auto d_k = kv == kv_elem::bf16 ? upload(kc) : upload(k8),
       d_v = kv == kv_elem::bf16 ? upload(vc) : upload(v8);
  auto d_cu = upload(p.cu_seqlens_q), d_kvl = upload(p.kv_lens),
       d_bto = upload(p.block_table_offsets);
  auto d_bt = upload(p.block_tables), d_work = upload(p.work), d_merge = upload(p.merges);
  auto d_out = device_buffer::allocate(size_t(p.num_tokens) * hq * D * 2);
  auto d_po = device_buffer::allocate(size_t(std::max(1, p.num_partial_rows)) * hq * D * 4);
  auto d_pl = device_buffer::allocate(size_t(std::max(1, p.num_partial_rows)) * hq * 4);
  REQUIRE((d_out.ok() && d_po.ok() && d_pl.ok()));
  attention_args a{d_q.as<bf16>(),
                   q_stride,
                   d_k.as<bf16>(),
                   d_v.as<bf16>(),
                   d_out->as<bf16>(),
                   d_po->as<float>(),
                   d_pl->as<float>(),
                   d_cu.as<int32_t>(),
                   d_kvl.as<int32_t>(),
                   d_bto.as<int32_t>(),
                   d_bt.as<int32_t>(),
                   d_work.as<attn_work_item>(),
                   d_merge.as<attn_merge_item>(),
                   int32_t(p.work.size()),
                   int32_t(p.merges.size()),
                   hq,
                   c.num_kv_heads,
                   D,
                   c.block_size,
                   scale,
                   nullptr,
                   kv,
                   window};
  REQUIRE(launch_attention(a, nullptr).ok());
  auto got = download<uint16_t>(*d_out, size_t(p.num_tokens) * hq * D);
  auto expect = ref::attention_ref(q, q_stride, kc, vc, p, hq, c.num_kv_heads, D, c.block_size,
                                   scale, window);
  float worst = 0.0f;
  for (size_t i = 0; i < got.size(); ++i)
    worst = std::max(worst, std::fabs(bf16_to_f32(got[i]) - expect[i]));
  INFO("gqa " << c.gqa << " head_dim " << D << " splits " << p.merges.size() << " kv " << int(kv)
              << " window " << window << " worst " << worst);
  // fp8 runs' values are k_v_spread times larger, and so are the outputs and their bf16 rounding.
  CHECK(worst <= (kv == kv_elem::bf16 ? 0.02f : 0.02f * k_v_spread));
}

// The same batch through FlashInfer's paged prefill kernel, planned by plan_flashinfer (eager or
// CUDA-graph mode), its arrays uploaded as the executor lays them out; `extra` unused blocks end
// every block table.
void run_case_fi(const case_shape& c, uint32_t seed, int32_t window = 0, bool graph = false,
                 int32_t extra = 0) {
  const int32_t hq = c.num_kv_heads * c.gqa, D = c.head_dim;
  const case_batch batch = make_batch(c, seed, extra);
  const batch_plan& p = batch.plan;
  const int32_t total_blocks = batch.total_blocks;
  fi_options fo;
  fo.num_qo_heads = hq;
  fo.num_kv_heads = c.num_kv_heads;
  fo.head_dim = D;
  fo.page_size = c.block_size;
  fo.num_sms = c.num_sms;
  fo.cuda_graph = graph;
  fo.window_left = window > 0 ? window - 1 : -1;  // the plan splits only the keys inside the window
  auto sch = plan_flashinfer(p, fo);
  REQUIRE(sch.ok());
  const fi_offsets off = fi_exact_offsets(0, *sch);
  std::vector<std::byte> staging(off.end);
  REQUIRE(write_fi_schedule(*sch, off, staging).ok());
  auto d_meta = upload(staging);

  const int64_t q_stride = int64_t(hq + 2 * c.num_kv_heads) * D;
  auto q = random_bf16(size_t(p.num_tokens) * size_t(q_stride), seed + 1, 2.0f);
  const size_t cache_n = size_t(total_blocks) * c.block_size * c.num_kv_heads * D;
  auto kc = random_bf16(cache_n, seed + 2, 2.0f), vc = random_bf16(cache_n, seed + 3);
  const float scale = 1.0f / std::sqrt(float(D));
  auto d_q = upload(q), d_k = upload(kc), d_v = upload(vc), d_cu = upload(p.cu_seqlens_q);
  const size_t rows = size_t(std::max<int64_t>(1, sch->tmp_rows()));
  auto d_out = device_buffer::allocate(size_t(p.num_tokens) * hq * D * 2);
  auto d_tv = device_buffer::allocate(rows * hq * D * 2),
       d_ts = device_buffer::allocate(rows * hq * 4);
  REQUIRE((d_out.ok() && d_tv.ok() && d_ts.ok()));
  const fi_step st = fi_step_at(*sch, off, d_meta.get(), d_cu.as<int32_t>());
  const fi_attention_args a{
      d_q.get(),      q_stride,    d_k.get(),         d_v.get(),
      d_out->get(),   d_tv->get(), d_ts->as<float>(), hq,
      c.num_kv_heads, D,           c.block_size,      window > 0 ? window - 1 : -1,
      scale};
  REQUIRE(launch_flashinfer_attention(a, st, nullptr).ok());
  auto got = download<uint16_t>(*d_out, size_t(p.num_tokens) * hq * D);
  auto expect = ref::attention_ref(q, q_stride, kc, vc, p, hq, c.num_kv_heads, D, c.block_size,
                                   scale, window);
  float worst = 0.0f;
  for (size_t i = 0; i < got.size(); ++i)
    worst = std::max(worst, std::fabs(bf16_to_f32(got[i]) - expect[i]));
  INFO("flashinfer gqa " << c.gqa << " head_dim " << D << " tile " << sch->cta_tile_q << " split "
                         << sch->split_kv << " graph " << graph << " window " << window << " worst "
                         << worst);
  CHECK(worst <= 0.02f);
}

}  // namespace

TEST_CASE("flashinfer attention: prefill, chunked prefill and decode mixed in one batch",
          "[gpu][attention][flashinfer]") {
  COSERVE_REQUIRE_DEVICE_OR_SKIP();
  if (!flashinfer_built()) {
    COSERVE_SKIP("built without the FlashInfer headers");
  }
  uint32_t seed = 1010;
  for (int32_t gqa : {1, 4, 8})
    for (int32_t D : {64, 128}) {
      run_case_fi(
          case_shape{2, gqa, D, 16, 132, {{0, 37}, {20, 13}, {100, 1}, {5, 1}, {0, 1}, {47, 3}}},
          seed++);
      // long prompts (query tiles of 64 and 128 rows) with tables longer than their keys
      run_case_fi(case_shape{2, gqa, D, 16, 132, {{0, 300}, {64, 129}}}, seed++, 0, false, 2);
    }
}

TEST_CASE("flashinfer attention: long decodes split over KV, CUDA-graph plans, sliding windows",
          "[gpu][attention][flashinfer]") {
  COSERVE_REQUIRE_DEVICE_OR_SKIP();
  if (!flashinfer_built()) {
    COSERVE_SKIP("built without the FlashInfer headers");
  }
  uint32_t seed = 1100;
  for (int32_t gqa : {1, 4, 8})
    for (int32_t D : {64, 128}) {
      run_case_fi(case_shape{2, gqa, D, 16, 132, {{3000, 1}, {777, 1}, {1500, 2}}}, seed++);
      run_case_fi(case_shape{2, gqa, D, 16, 132, {{3000, 1}, {777, 1}, {15, 1}, {0, 1}}}, seed++, 0,
                  true, 1);
    }
  for (int32_t window : {1, 5, 40, 4096})
    for (int32_t gqa : {1, 8}) {
      run_case_fi(case_shape{2, gqa, 64, 16, 132, {{0, 37}, {20, 13}, {100, 1}, {47, 3}}}, seed++,
                  window);
      run_case_fi(case_shape{2, gqa, 128, 16, 132, {{3000, 1}, {777, 1}, {1500, 2}}}, seed++,
                  window, true);
    }
}

TEST_CASE("attention: prefill, chunked prefill and decode mixed in one batch", "[gpu][attention]") {
  COSERVE_REQUIRE_DEVICE_OR_SKIP();
  uint32_t seed = 10;
  for (int32_t gqa : {1, 4, 8})
    for (int32_t D : {32, 64, 96, 128}) {
      case_shape c{2, gqa, D, 16, 132, {{0, 37}, {20, 13}, {100, 1}, {5, 1}, {0, 1}, {47, 3}}};
      run_case(c, seed++);
    }
}

TEST_CASE("attention: long decodes split over KV, merged", "[gpu][attention]") {
  COSERVE_REQUIRE_DEVICE_OR_SKIP();
  uint32_t seed = 50;
  for (int32_t gqa : {1, 4, 8})
    for (int32_t D : {32, 64, 96, 128}) {
      // num_sms large so the planner splits; lengths not multiples of the block or the tile
      case_shape c{2, gqa, D, 16, 1000, {{3000, 1}, {777, 1}, {1500, 2}}};
      run_case(c, seed++);
    }
}

TEST_CASE("attention over fp8 KV caches (E4M3, E5M2): prefill, decode and split-KV",
          "[gpu][attention][fp8]") {
  COSERVE_REQUIRE_DEVICE_OR_SKIP();
  uint32_t seed = 500;
  for (kv_elem kv : {kv_elem::fp8_e4m3, kv_elem::fp8_e5m2})
    for (int32_t D : {64, 128}) {
      run_case(case_shape{2, 4, D, 16, 132, {{0, 37}, {50, 1}, {700, 1}, {16, 9}}}, seed++, kv);
      run_case(case_shape{1, 8, D, 16, 1000, {{0, 1}, {1500, 1}}}, seed++, kv);  // split over KV
    }
}

TEST_CASE("attention: block size 32 and a single long prefill", "[gpu][attention]") {
  COSERVE_REQUIRE_DEVICE_OR_SKIP();
  case_shape c{4, 4, 128, 32, 132, {{0, 300}}};
  run_case(c, 99);
}

TEST_CASE(
    "attention with a sliding window: prefill tiles, decodes and KV splits wholly before a window",
    "[gpu][attention]") {
  COSERVE_REQUIRE_DEVICE_OR_SKIP();
  uint32_t seed = 700;
  for (int32_t window : {1, 5, 40, 4096})  // 4096: wider than every context here (full attention)
    for (int32_t gqa : {1, 8}) {
      run_case(case_shape{2, gqa, 64, 16, 132, {{0, 37}, {20, 13}, {100, 1}, {47, 3}}}, seed++,
               kv_elem::bf16, window);
      // Split over KV (num_sms large): the early splits lie before the window of a long decode.
      run_case(case_shape{2, gqa, 128, 16, 1000, {{3000, 1}, {777, 1}, {1500, 2}}}, seed++,
               kv_elem::bf16, window);
    }
}
