// Host side of the FlashInfer backend (no device needed): our batch plans in FlashInfer's
// page-table form, the work list its scheduler makes from them, and the metadata layouts the
// executor uploads.
#include <algorithm>
#include <catch2/catch.hpp>
#include <cstddef>
#include <cstring>
#include <map>
#include <numeric>
#include <random>
#include <tuple>
#include <vector>

#include "gpu/batch_plan.hpp"
#include "gpu/flashinfer_attention.hpp"
#include "tests/skip.hpp"

using namespace coserve;
using namespace coserve::gpu;

namespace {

// Sequences (start_pos, new tokens) with shuffled blocks; `extra` unused blocks at the end of each
// table (a table may be longer than the keys it holds).
batch_plan make_plan(const std::vector<std::pair<int32_t, int32_t>>& shape, int32_t block_size,
                     int32_t extra, uint32_t seed) {
  std::vector<int32_t> perm(4096);
  std::iota(perm.begin(), perm.end(), 0);
  std::shuffle(perm.begin(), perm.end(), std::mt19937(seed));
  std::vector<scheduled_seq> seqs;
  size_t next = 0;
  for (size_t i = 0; i < shape.size(); ++i) {
    scheduled_seq s;
    s.seq_id = i;
    s.start_pos = shape[i].first;
    s.tokens.assign(size_t(shape[i].second), 1);
    const int32_t nb = (shape[i].first + shape[i].second + block_size - 1) / block_size + extra;
    for (int32_t b = 0; b < nb; ++b) s.block_table.push_back(perm[next++ % perm.size()]);
    s.sample = true;
    seqs.push_back(std::move(s));
  }
  auto p = plan_batch(seqs, batch_plan_options{block_size, 2, 4, 132, 32});
  REQUIRE(p.ok());
  return std::move(p.value());
}

fi_options opts(int32_t gqa, int32_t head_dim, bool graph = false, int32_t num_sms = 132) {
  fi_options o;
  o.num_kv_heads = 2;
  o.num_qo_heads = 2 * gqa;
  o.head_dim = head_dim;
  o.page_size = 16;
  o.num_sms = num_sms;
  o.cuda_graph = graph;
  return o;
}

}  // namespace

TEST_CASE("flashinfer plan: page table from our block tables", "[flashinfer]") {
  if (!flashinfer_built()) {
    COSERVE_SKIP("built without the FlashInfer headers (scripts/deps fetches them)");
  }
  const std::vector<std::pair<int32_t, int32_t>> shape{{0, 37}, {20, 13}, {100, 1},
                                                       {15, 1}, {0, 16},  {47, 3}};
  const batch_plan p = make_plan(shape, 16, 2, 7);
  auto s = plan_flashinfer(p, opts(4, 128));
  REQUIRE(s.ok());
  REQUIRE(s->batch_size == int32_t(shape.size()));
  CHECK(s->total_num_rows == p.num_tokens);
  REQUIRE(s->kv_indptr.size() == shape.size() + 1);
  for (size_t i = 0; i < shape.size(); ++i) {
    const int32_t kv_len = shape[i].first + shape[i].second;
    const int32_t pages = s->kv_indptr[i + 1] - s->kv_indptr[i];
    CHECK(pages ==
          (kv_len + 15) / 16);  // exactly the pages holding keys, the extra blocks left out
    CHECK((pages - 1) * 16 + s->kv_last_page_len[i] == kv_len);
    CHECK(s->kv_last_page_len[i] >= 1);
    CHECK(s->kv_last_page_len[i] <= 16);
    for (int32_t k = 0; k < pages; ++k)  // the sequence's own blocks, in order
      CHECK(s->kv_indices[size_t(s->kv_indptr[i] + k)] ==
            p.block_tables[size_t(p.block_table_offsets[i] + k)]);
  }
}

TEST_CASE("flashinfer plan: every query tile meets every KV chunk of its sequence once",
          "[flashinfer]") {
  if (!flashinfer_built()) {
    COSERVE_SKIP("built without the FlashInfer headers (scripts/deps fetches them)");
  }
  struct shape_case {
    std::vector<std::pair<int32_t, int32_t>> seqs;
    int32_t gqa, head_dim;
    bool graph;
  };
  const std::vector<shape_case> cases{
      {{{0, 37}, {20, 13}, {100, 1}, {5, 1}, {0, 1}, {47, 3}}, 4, 128, false},  // mixed batch
      {{{3000, 1}, {777, 1}, {1500, 2}}, 8, 64, false},  // few long decodes: split over KV
      {{{0, 2000}}, 1, 128, false},                      // one long prefill
      {std::vector<std::pair<int32_t, int32_t>>(64, {500, 1}), 4, 128, false},
      {std::vector<std::pair<int32_t, int32_t>>(8, {900, 1}), 4, 128,
       true},  // graph-mode decode batch
  };
  for (const shape_case& c : cases) {
    const batch_plan p = make_plan(c.seqs, 16, 0, 11);
    auto s = plan_flashinfer(p, opts(c.gqa, c.head_dim, c.graph));
    REQUIRE(s.ok());
    INFO("sequences " << c.seqs.size() << " gqa " << c.gqa << " graph " << c.graph << " tile "
                      << s->cta_tile_q << " chunk " << s->kv_chunk_size << " split "
                      << s->split_kv);
    CHECK((s->cta_tile_q == 16 || s->cta_tile_q == 64 || s->cta_tile_q == 128));
    REQUIRE(s->padded_batch_size >= s->new_batch_size);
    REQUIRE(s->request_indices.size() == size_t(s->padded_batch_size));
    REQUIRE(s->kv_chunk_size > 0);
    std::map<std::tuple<int32_t, int32_t, int32_t>, int> seen;
    for (int32_t w = 0; w < s->new_batch_size; ++w)
      ++seen[{s->request_indices[size_t(w)], s->qo_tile_indices[size_t(w)],
              s->kv_tile_indices[size_t(w)]}];
    size_t expected = 0;
    for (size_t i = 0; i < c.seqs.size(); ++i) {
      const int32_t qo = c.seqs[i].second, kv = c.seqs[i].first + c.seqs[i].second;
      const int32_t tiles = (qo * c.gqa + s->cta_tile_q - 1) / s->cta_tile_q;
      // FlashInfer chunks whole pages: keys per chunk is a page multiple.
      const int32_t chunks = s->split_kv ? (kv + s->kv_chunk_size - 1) / s->kv_chunk_size : 1;
      for (int32_t t = 0; t < tiles; ++t)
        for (int32_t k = 0; k < chunks; ++k) CHECK(seen[{int32_t(i), t, k}] == 1);
      expected += size_t(tiles) * size_t(chunks);
    }
    CHECK(seen.size() == expected);
    if (s->split_kv) {
      // Merge offsets: each query row gathers one partial per chunk of its sequence.
      REQUIRE(s->merge_indptr.size() == size_t(p.num_tokens) + 1);
      size_t row = 0;
      for (size_t i = 0; i < c.seqs.size(); ++i) {
        const int32_t kv = c.seqs[i].first + c.seqs[i].second;
        const int32_t chunks = (kv + s->kv_chunk_size - 1) / s->kv_chunk_size;
        for (int32_t t = 0; t < c.seqs[i].second; ++t, ++row)
          CHECK(s->merge_indptr[row + 1] - s->merge_indptr[row] == chunks);
      }
      REQUIRE(s->block_valid_mask.size() == size_t(s->padded_batch_size));
      CHECK(std::count(s->block_valid_mask.begin(), s->block_valid_mask.end(), uint8_t(1)) ==
            s->new_batch_size);
      CHECK(s->tmp_rows() == int64_t(s->padded_batch_size) * s->cta_tile_q);
    } else {
      CHECK(s->merge_indptr.empty());
      CHECK(s->tmp_rows() == 0);
    }
  }
}

TEST_CASE("flashinfer plan: unsplit plans keep one KV chunk per sequence", "[flashinfer]") {
  if (!flashinfer_built()) {
    COSERVE_SKIP("built without the FlashInfer headers (scripts/deps fetches them)");
  }
  // Few long decodes split by default; unsplit, every (sequence, tile) meets its keys once and no
  // merge or workspace is planned.
  const std::vector<std::pair<int32_t, int32_t>> seqs{{3000, 1}, {777, 1}, {1500, 2}};
  const batch_plan p = make_plan(seqs, 16, 0, 13);
  auto split = plan_flashinfer(p, opts(8, 64));
  REQUIRE(split.ok());
  CHECK(split->split_kv);
  fi_options o = opts(8, 64);
  o.disable_split_kv = true;
  auto s = plan_flashinfer(p, o);
  REQUIRE(s.ok());
  CHECK_FALSE(s->split_kv);
  CHECK(s->tmp_rows() == 0);
  CHECK(s->merge_indptr.empty());
  CHECK(s->block_valid_mask.empty());
  CHECK(s->kv_chunk_size >= 3001);  // at least the longest sequence's keys
  CHECK(std::all_of(s->kv_tile_indices.begin(), s->kv_tile_indices.end(),
                    [](int32_t k) { return k == 0; }));
  int32_t tiles = 0;
  for (auto [start, n] : seqs) tiles += (n * 8 + s->cta_tile_q - 1) / s->cta_tile_q;
  CHECK(s->new_batch_size == tiles);
}

TEST_CASE("flashinfer plan: a CUDA graph's grid depends on the batch size only", "[flashinfer]") {
  if (!flashinfer_built()) {
    COSERVE_SKIP("built without the FlashInfer headers (scripts/deps fetches them)");
  }
  // A graph replays its captured launch: every decode batch of the bucket must plan the same grid,
  // whatever its contexts (the capture batch has one key per sequence).
  for (int32_t bucket : {1, 8, 64, 256}) {
    const batch_plan capture =
        make_plan(std::vector<std::pair<int32_t, int32_t>>(size_t(bucket), {0, 1}), 16, 0, 3);
    auto base = plan_flashinfer(capture, opts(4, 128, true));
    REQUIRE(base.ok());
    CHECK(base->split_kv);  // graph mode always plans the merge
    std::mt19937 rng{uint32_t(bucket)};
    for (int trial = 0; trial < 5; ++trial) {
      std::vector<std::pair<int32_t, int32_t>> seqs;
      for (int32_t i = 0; i < bucket; ++i) seqs.emplace_back(int32_t(rng() % 4000), 1);
      auto s = plan_flashinfer(make_plan(seqs, 16, 1, rng()), opts(4, 128, true));
      REQUIRE(s.ok());
      CHECK(s->padded_batch_size == base->padded_batch_size);
      CHECK(s->cta_tile_q == base->cta_tile_q);
      CHECK(s->split_kv == base->split_kv);
      CHECK(s->new_batch_size <= s->padded_batch_size);
    }
  }
}

TEST_CASE("flashinfer plan: refusals", "[flashinfer]") {
  if (!flashinfer_built()) {
    COSERVE_SKIP("built without the FlashInfer headers (scripts/deps fetches them)");
  }
  batch_plan p = make_plan({{0, 40}}, 16, 0, 1);
  CHECK_FALSE(plan_flashinfer(p, opts(4, 96)).ok());  // head_dim not instantiated
  fi_options bad = opts(4, 128);
  bad.num_qo_heads = 7;  // not whole GQA groups
  CHECK_FALSE(plan_flashinfer(p, bad).ok());
  p.block_tables.pop_back();  // 40 keys, 2 blocks
  p.block_table_offsets.back() -= 1;
  auto r = plan_flashinfer(p, opts(4, 128));
  REQUIRE_FALSE(r.ok());
  CHECK(r.err().code == "invalid_argument");
}

TEST_CASE("flashinfer plan: metadata layouts and their capacities", "[flashinfer]") {
  if (!flashinfer_built()) {
    COSERVE_SKIP("built without the FlashInfer headers (scripts/deps fetches them)");
  }
  const batch_plan p = make_plan(std::vector<std::pair<int32_t, int32_t>>(8, {300, 1}), 16, 0, 5);
  auto s = plan_flashinfer(p, opts(4, 128, true));
  REQUIRE(s.ok());
  // Exact offsets after 100 bytes of other metadata: aligned, in order, and the bytes land there.
  const fi_offsets ex = fi_exact_offsets(100, *s);
  CHECK(ex.kv_indptr % 16 == 0);
  CHECK(ex.kv_indptr >= 100);
  std::vector<std::byte> buf(ex.end);
  REQUIRE(write_fi_schedule(*s, ex, buf).ok());
  auto at = [&](size_t off, size_t i) {
    int32_t v = 0;
    std::memcpy(&v, buf.data() + off + 4 * i, 4);
    return v;
  };
  for (size_t i = 0; i < s->kv_indices.size(); ++i) CHECK(at(ex.kv_indices, i) == s->kv_indices[i]);
  for (size_t i = 0; i < s->request_indices.size(); ++i)
    CHECK(at(ex.request_indices, i) == s->request_indices[i]);
  CHECK(at(ex.kv_chunk_size, 0) == s->kv_chunk_size);
  CHECK(at(ex.total_num_rows, 0) == s->total_num_rows);
  // The step view points into the device copy at the same offsets.
  alignas(16) static char device_base[1];
  const int32_t* cu = reinterpret_cast<const int32_t*>(device_base);
  const fi_step st = fi_step_at(*s, ex, device_base, cu);
  CHECK(st.qo_indptr == cu);
  CHECK(reinterpret_cast<const char*>(st.kv_indices) == device_base + ex.kv_indices);
  CHECK(reinterpret_cast<const char*>(st.block_valid_mask) == device_base + ex.block_valid_mask);
  CHECK(st.padded_batch_size == s->padded_batch_size);
  CHECK(st.cuda_graph);
  // Graph capacities: a bucket of 8 sequences of at most 32 blocks fits; one of 40 blocks does not.
  const fi_offsets cap = fi_graph_offsets(0, 8, 32, s->padded_batch_size);
  std::vector<std::byte> arena(cap.end);
  CHECK(write_fi_schedule(*s, cap, arena).ok());
  const batch_plan longer =
      make_plan(std::vector<std::pair<int32_t, int32_t>>(8, {639, 1}), 16, 0, 6);
  auto s2 = plan_flashinfer(longer, opts(4, 128, true));
  REQUIRE(s2.ok());
  CHECK_FALSE(write_fi_schedule(*s2, cap, arena).ok());
  std::vector<std::byte> small(cap.end - 1);
  CHECK_FALSE(write_fi_schedule(*s, cap, small).ok());
}
