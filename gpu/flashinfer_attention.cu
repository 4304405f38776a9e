// FlashInfer's FA2 paged batch-prefill kernel and planner behind gpu/flashinfer_attention.hpp. The
// kernels are instantiated here only for what serving uses (bf16, head_dim 64/128, causal, the
// three query tiles), which keeps this translation unit to about a minute of nvcc on two cores.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstring>
#include <exception>
#include <string>

#include "gpu/flashinfer_attention.hpp"

#ifdef COSERVE_HAVE_FLASHINFER
#include <flashinfer/attention/mask.cuh>
#include <flashinfer/attention/prefill.cuh>
#include <flashinfer/attention/scheduler.cuh>
#include <flashinfer/attention/variant_helper.cuh>
#include <flashinfer/attention/variants.cuh>
#include <flashinfer/fastdiv.cuh>
#include <flashinfer/layout.cuh>
#include <flashinfer/page.cuh>
#include <flashinfer/pos_enc.cuh>
#endif

namespace coserve::gpu {

#ifdef COSERVE_HAVE_FLASHINFER
namespace fi_kern {

using bf16_t = __nv_bfloat16;

// FlashInfer's PagedParams for its default attention variant (the fields its generated
// batch_prefill_config.inc declares for the fa2 backend).
struct paged_params {
  using DTypeQ = bf16_t;
  using DTypeKV = bf16_t;
  using DTypeO = bf16_t;
  using IdType = int32_t;

  DTypeQ* q;
  flashinfer::paged_kv_t<DTypeKV, IdType> paged_kv;
  IdType* q_indptr;
  DTypeO* o;
  float* lse;
  flashinfer::uint_fastdiv group_size;

  uint8_t* maybe_custom_mask;
  int32_t* maybe_mask_indptr;
  float* maybe_alibi_slopes;
  uint32_t* maybe_prefix_len_ptr;
  uint16_t* maybe_token_pos_in_items_ptr;
  uint16_t* maybe_max_item_len_ptr;
  double logits_soft_cap;
  double sm_scale;
  double rope_rcp_scale;
  double rope_rcp_theta;
  int64_t token_pos_in_items_len;

  uint32_t num_qo_heads;
  IdType q_stride_n;
  IdType q_stride_h;
  int32_t window_left;

  IdType* request_indices;
  IdType* qo_tile_indices;
  IdType* kv_tile_indices;
  IdType* merge_indptr;
  IdType* o_indptr;
  bool* block_valid_mask;
  IdType* kv_chunk_size_ptr;
  uint32_t max_total_num_rows;
  uint32_t* total_num_rows;
  uint32_t padded_batch_size;
  bool partition_kv;

  __host__ __device__ __forceinline__ uint32_t get_qo_len(uint32_t batch_idx) const {
    return q_indptr[batch_idx + 1] - q_indptr[batch_idx];
  }
  __host__ __device__ __forceinline__ uint32_t get_kv_len(uint32_t batch_idx) const {
    return paged_kv.get_length(batch_idx);
  }
};

// Causal (the mask mode), sliding window honoured when window_left >= 0, no soft cap, no ALiBi.
using variant =
    flashinfer::DefaultAttention</*custom_mask=*/false, /*sliding_window=*/true, false, false>;

}  // namespace fi_kern
#endif  // COSERVE_HAVE_FLASHINFER

namespace {

size_t align16(size_t x) { return (x + 15) & ~size_t(15); }

}  // namespace

bool flashinfer_built() noexcept {
#ifdef COSERVE_HAVE_FLASHINFER
  return true;
#else
  return false;
#endif
}

bool flashinfer_supports(int32_t num_qo_heads, int32_t num_kv_heads, int32_t head_dim) noexcept {
  return num_kv_heads > 0 && num_qo_heads >= num_kv_heads && num_qo_heads % num_kv_heads == 0 &&
         (head_dim == 64 || head_dim == 128);
}

result<fi_schedule> plan_flashinfer(const batch_plan& p, const fi_options& o) {
  fi_schedule s;
  if (auto r = plan_flashinfer(p, o, s); !r) return r.err();
  return s;
}

result<void> plan_flashinfer(const batch_plan& p, const fi_options& o, fi_schedule& s) {
  if (!flashinfer_supports(o.num_qo_heads, o.num_kv_heads, o.head_dim) || o.page_size <= 0)
    return make_error(
        "invalid_argument",
        "flashinfer: unsupported attention shape (head_dim 64 or 128, whole GQA groups)");
  const size_t n = p.kv_lens.size();
  if (n == 0 || p.cu_seqlens_q.size() != n + 1 || p.block_table_offsets.size() != n + 1)
    return make_error("invalid_argument",
                      "flashinfer: the batch plan has no sequences or inconsistent offsets");
  s.batch_size = int32_t(n);
  s.total_num_rows = p.cu_seqlens_q.back();
  s.cuda_graph = o.cuda_graph;
  s.split_kv = false;
  s.new_batch_size = s.padded_batch_size = s.cta_tile_q = s.kv_chunk_size = 0;
  for (auto* v : {&s.kv_indptr, &s.kv_indices, &s.kv_last_page_len, &s.request_indices,
                  &s.qo_tile_indices, &s.kv_tile_indices, &s.o_indptr, &s.merge_indptr})
    v->clear();
  s.block_valid_mask.clear();
  size_t pages_total = 0;
  for (size_t i = 0; i < n; ++i)
    pages_total += size_t(std::max(p.kv_lens[i], 0) + o.page_size - 1) / size_t(o.page_size);
  s.kv_indices.reserve(pages_total);
  s.kv_indptr.push_back(0);
  for (size_t i = 0; i < n; ++i) {
    const int32_t kv_len = p.kv_lens[i];
    const int32_t pages = (kv_len + o.page_size - 1) / o.page_size;
    const int32_t b0 = p.block_table_offsets[i], b1 = p.block_table_offsets[i + 1];
    if (kv_len < 1 || b1 - b0 < pages || b0 < 0 || size_t(b1) > p.block_tables.size())
      return make_error("invalid_argument", "flashinfer: sequence " + std::to_string(i) + " has " +
                                                std::to_string(kv_len) + " keys and " +
                                                std::to_string(b1 - b0) + " blocks");
    s.kv_indices.insert(s.kv_indices.end(), p.block_tables.begin() + b0,
                        p.block_tables.begin() + b0 + pages);
    s.kv_indptr.push_back(int32_t(s.kv_indices.size()));
    s.kv_last_page_len.push_back(kv_len - (pages - 1) * o.page_size);
  }
#ifdef COSERVE_HAVE_FLASHINFER
  try {
    std::vector<int32_t> qo(p.cu_seqlens_q), kv(s.kv_indptr);
    const uint32_t max_batch_size_if_split =
        uint32_t(std::max(2 * o.num_sms, 1)) / uint32_t(o.num_kv_heads);
    // Unsplit: one chunk as long as the longest sequence (FlashInfer's disable_split_kv would leave
    // an overflowed chunk size behind; a fixed split of that length plans the same work).
    int32_t max_pages = 1;
    for (size_t i = 0; i < n; ++i)
      max_pages = std::max(max_pages, s.kv_indptr[i + 1] - s.kv_indptr[i]);
    const int32_t fixed_split = o.disable_split_kv ? max_pages : -1;
    auto [split_kv, new_batch_size, padded_batch_size, cta_tile_q, kv_chunk_size, request_indices,
          qo_tile_indices, kv_tile_indices, merge_indptr, o_indptr] =
        flashinfer::PrefillSplitQOKVIndptr(
            qo.data(), kv.data(), uint32_t(s.total_num_rows), uint32_t(n), uint32_t(o.num_qo_heads),
            uint32_t(o.num_kv_heads), uint32_t(o.head_dim), uint32_t(o.page_size),
            max_batch_size_if_split, o.cuda_graph, o.window_left, fixed_split,
            /*disable_split_kv=*/false);
    s.split_kv = split_kv;
    s.new_batch_size = int32_t(new_batch_size);
    s.padded_batch_size = int32_t(padded_batch_size);
    s.cta_tile_q = int32_t(cta_tile_q);
    s.kv_chunk_size = int32_t(std::min<int64_t>(kv_chunk_size, INT32_MAX));
    s.request_indices = std::move(request_indices);
    s.qo_tile_indices = std::move(qo_tile_indices);
    s.kv_tile_indices = std::move(kv_tile_indices);
    s.o_indptr = std::move(o_indptr);
    s.merge_indptr = std::move(merge_indptr);
  } catch (const std::exception& e) {
    return make_error("invalid_argument", std::string("flashinfer planner: ") + e.what());
  }
  if (s.cta_tile_q != 16 && s.cta_tile_q != 64 && s.cta_tile_q != 128)
    return make_error("internal",
                      "flashinfer planner chose a query tile of " + std::to_string(s.cta_tile_q));
  // Rows past the work are padding (CUDA-graph mode): defined values, masked off by
  // block_valid_mask.
  for (auto* v : {&s.request_indices, &s.qo_tile_indices, &s.kv_tile_indices})
    v->resize(size_t(s.padded_batch_size), 0);
  if (s.split_kv) {
    s.block_valid_mask.assign(size_t(s.padded_batch_size), 0);
    std::fill_n(s.block_valid_mask.begin(), std::min(s.new_batch_size, s.padded_batch_size),
                uint8_t(1));
  } else {
    s.merge_indptr.clear();
  }
  return {};
#else
  return make_error("unavailable",
                    "flashinfer: built without the FlashInfer headers (scripts/deps fetches them)");
#endif
}

namespace {

// The arrays in their order in a metadata buffer, with the bytes each takes.
struct fi_array {
  size_t fi_offsets::*off;
  size_t bytes;
};

fi_offsets lay_out(size_t at, std::initializer_list<fi_array> arrays) {
  fi_offsets o;
  size_t cur = align16(at);
  for (const fi_array& a : arrays) {
    o.*a.off = cur;
    cur = align16(cur + a.bytes);
  }
  o.end = cur;
  return o;
}

}  // namespace

fi_offsets fi_graph_offsets(size_t at, int32_t rows, int32_t max_blocks_per_seq,
                            int32_t max_padded) {
  const size_t r = size_t(std::max(rows, 0)), pad = size_t(std::max(max_padded, 0));
  return lay_out(at, {{&fi_offsets::kv_indptr, (r + 1) * 4},
                      {&fi_offsets::kv_last_page_len, r * 4},
                      {&fi_offsets::request_indices, pad * 4},
                      {&fi_offsets::qo_tile_indices, pad * 4},
                      {&fi_offsets::kv_tile_indices, pad * 4},
                      {&fi_offsets::o_indptr, (r + 1) * 4},
                      {&fi_offsets::merge_indptr, (r + 1) * 4},
                      {&fi_offsets::kv_chunk_size, 4},
                      {&fi_offsets::total_num_rows, 4},
                      {&fi_offsets::block_valid_mask, pad},
                      {&fi_offsets::kv_indices, r * size_t(std::max(max_blocks_per_seq, 0)) * 4}});
}

fi_offsets fi_exact_offsets(size_t at, const fi_schedule& s) {
  return lay_out(at, {{&fi_offsets::kv_indptr, s.kv_indptr.size() * 4},
                      {&fi_offsets::kv_last_page_len, s.kv_last_page_len.size() * 4},
                      {&fi_offsets::request_indices, s.request_indices.size() * 4},
                      {&fi_offsets::qo_tile_indices, s.qo_tile_indices.size() * 4},
                      {&fi_offsets::kv_tile_indices, s.kv_tile_indices.size() * 4},
                      {&fi_offsets::o_indptr, s.o_indptr.size() * 4},
                      {&fi_offsets::merge_indptr, s.merge_indptr.size() * 4},
                      {&fi_offsets::kv_chunk_size, 4},
                      {&fi_offsets::total_num_rows, 4},
                      {&fi_offsets::block_valid_mask, s.block_valid_mask.size()},
                      {&fi_offsets::kv_indices, s.kv_indices.size() * 4}});
}

result<void> write_fi_schedule(const fi_schedule& s, const fi_offsets& o,
                               std::span<std::byte> staging) {
  const int32_t chunk = s.kv_chunk_size, rows = s.total_num_rows;
  struct item {
    size_t off, next;
    const void* data;
    size_t bytes;
  };
  // Each array's room is up to the next array's offset (kv_indices: up to the end).
  const item items[] = {
      {o.kv_indptr, o.kv_last_page_len, s.kv_indptr.data(), s.kv_indptr.size() * 4},
      {o.kv_last_page_len, o.request_indices, s.kv_last_page_len.data(),
       s.kv_last_page_len.size() * 4},
      {o.request_indices, o.qo_tile_indices, s.request_indices.data(),
       s.request_indices.size() * 4},
      {o.qo_tile_indices, o.kv_tile_indices, s.qo_tile_indices.data(),
       s.qo_tile_indices.size() * 4},
      {o.kv_tile_indices, o.o_indptr, s.kv_tile_indices.data(), s.kv_tile_indices.size() * 4},
      {o.o_indptr, o.merge_indptr, s.o_indptr.data(), s.o_indptr.size() * 4},
      {o.merge_indptr, o.kv_chunk_size, s.merge_indptr.data(), s.merge_indptr.size() * 4},
      {o.kv_chunk_size, o.total_num_rows, &chunk, 4},
      {o.total_num_rows, o.block_valid_mask, &rows, 4},
      {o.block_valid_mask, o.kv_indices, s.block_valid_mask.data(), s.block_valid_mask.size()},
      {o.kv_indices, o.end, s.kv_indices.data(), s.kv_indices.size() * 4},
  };
  if (o.end > staging.size())
    return make_error("resource_exhausted", "flashinfer: step metadata exceeds its buffer");
  for (const item& it : items) {
    if (it.off + it.bytes > it.next)
      return make_error("invalid_argument",
                        "flashinfer: the schedule exceeds the capacity its offsets leave it");
    if (it.bytes) std::memcpy(staging.data() + it.off, it.data, it.bytes);
  }
  return {};
}

fi_step fi_step_at(const fi_schedule& s, const fi_offsets& o, const void* base,
                   const int32_t* qo_indptr) {
  const char* b = static_cast<const char*>(base);
  auto i32 = [b](size_t off) { return reinterpret_cast<const int32_t*>(b + off); };
  fi_step st;
  st.on = true;
  st.qo_indptr = qo_indptr;
  st.kv_indptr = i32(o.kv_indptr);
  st.kv_indices = i32(o.kv_indices);
  st.kv_last_page_len = i32(o.kv_last_page_len);
  st.request_indices = i32(o.request_indices);
  st.qo_tile_indices = i32(o.qo_tile_indices);
  st.kv_tile_indices = i32(o.kv_tile_indices);
  st.o_indptr = i32(o.o_indptr);
  st.merge_indptr = s.split_kv ? i32(o.merge_indptr) : nullptr;
  st.kv_chunk_size = i32(o.kv_chunk_size);
  st.total_num_rows = reinterpret_cast<const uint32_t*>(b + o.total_num_rows);
  st.block_valid_mask =
      s.split_kv ? reinterpret_cast<const uint8_t*>(b + o.block_valid_mask) : nullptr;
  st.batch_size = s.batch_size;
  st.num_rows = s.total_num_rows;
  st.padded_batch_size = s.padded_batch_size;
  st.cta_tile_q = s.cta_tile_q;
  st.split_kv = s.split_kv;
  st.cuda_graph = s.cuda_graph;
  return st;
}

result<void> launch_flashinfer_attention(const fi_attention_args& a, const fi_step& s,
                                         cudaStream_t stream) {
  if (!flashinfer_supports(a.num_qo_heads, a.num_kv_heads, a.head_dim))
    return make_error("invalid_argument", "flashinfer attention: unsupported shape");
  if (s.split_kv && (a.tmp_v == nullptr || a.tmp_s == nullptr))
    return make_error("invalid_argument",
                      "flashinfer attention: split-KV plan without a workspace");
#ifdef COSERVE_HAVE_FLASHINFER
  using fi_kern::bf16_t;
  using fi_kern::paged_params;
  auto mut = [](const int32_t* p) { return const_cast<int32_t*>(p); };
  paged_params p{};
  p.q = static_cast<bf16_t*>(const_cast<void*>(a.q));
  p.paged_kv = flashinfer::paged_kv_t<bf16_t, int32_t>(
      uint32_t(a.num_kv_heads), uint32_t(a.page_size), uint32_t(a.head_dim), uint32_t(s.batch_size),
      flashinfer::QKVLayout::kNHD, static_cast<bf16_t*>(a.k_cache), static_cast<bf16_t*>(a.v_cache),
      mut(s.kv_indices), mut(s.kv_indptr), mut(s.kv_last_page_len));
  p.q_indptr = mut(s.qo_indptr);
  p.o = static_cast<bf16_t*>(a.out);
  p.lse = nullptr;
  p.group_size = flashinfer::uint_fastdiv(uint32_t(a.num_qo_heads / a.num_kv_heads));
  p.sm_scale = a.sm_scale;
  p.rope_rcp_scale = 1.0;
  p.rope_rcp_theta = 1.0 / 1e4;
  p.num_qo_heads = uint32_t(a.num_qo_heads);
  p.q_stride_n = int32_t(a.q_stride);
  p.q_stride_h = a.head_dim;
  p.window_left = a.window_left;
  p.request_indices = mut(s.request_indices);
  p.qo_tile_indices = mut(s.qo_tile_indices);
  p.kv_tile_indices = mut(s.kv_tile_indices);
  p.o_indptr = mut(s.o_indptr);
  p.kv_chunk_size_ptr = mut(s.kv_chunk_size);
  p.merge_indptr = s.split_kv ? mut(s.merge_indptr) : nullptr;
  p.block_valid_mask = s.cuda_graph && s.split_kv
                           ? reinterpret_cast<bool*>(const_cast<uint8_t*>(s.block_valid_mask))
                           : nullptr;
  p.total_num_rows = s.cuda_graph ? const_cast<uint32_t*>(s.total_num_rows) : nullptr;
  p.max_total_num_rows = uint32_t(s.num_rows);
  p.padded_batch_size = uint32_t(s.padded_batch_size);
  p.partition_kv = false;
  bf16_t* tmp_v = s.split_kv ? static_cast<bf16_t*>(a.tmp_v) : nullptr;
  float* tmp_s = s.split_kv ? a.tmp_s : nullptr;
  cudaError_t st = cudaErrorInvalidValue;
  try {
    auto run = [&]<uint32_t TILE, uint32_t D>() {
      st = flashinfer::BatchPrefillWithPagedKVCacheDispatched<
          TILE, D, D, flashinfer::PosEncodingMode::kNone,
          /*use_fp16_qk_reduction=*/false, flashinfer::MaskMode::kCausal, fi_kern::variant>(
          p, tmp_v, tmp_s, /*enable_pdl=*/false, stream);
    };
    auto by_tile = [&]<uint32_t D>() {
      switch (s.cta_tile_q) {
        case 16:
          run.template operator()<16, D>();
          break;
        case 64:
          run.template operator()<64, D>();
          break;
        case 128:
          run.template operator()<128, D>();
          break;
        default:
          break;
      }
    };
    if (a.head_dim == 128)
      by_tile.template operator()<128>();
    else
      by_tile.template operator()<64>();
  } catch (const std::exception& e) {
    return make_error("internal", std::string("flashinfer attention: ") + e.what());
  }
  if (st != cudaSuccess)
    return make_error("internal", std::string("flashinfer attention: ") + cudaGetErrorString(st));
  return {};
#else
  (void)stream;
  return make_error("unavailable", "flashinfer attention: built without the FlashInfer headers");
#endif
}

}  // namespace coserve::gpu
