#include "gpu/draft_model.hpp"

#include <algorithm>
#include <cmath>

#include "gpu/batch_plan.hpp"
#include "gpu/kernels.hpp"
#include "gpu/kv_cache_sizing.hpp"
#include "gpu/launch_params.hpp"
#include "gpu/metadata_packer.hpp"
#include "gpu/nvtx.hpp"
#include "gpu/sample_row_params.hpp"

namespace coserve::gpu {

namespace {
constexpr size_t k_draft_metadata_bytes = size_t(8) << 20;  // all passes of one step
}

result<std::unique_ptr<gpu_draft_model>> gpu_draft_model::load(const options& o,
                                                               const model_config& target,
                                                               int32_t max_model_len,
                                                               cudaStream_t s,
                                                               const load_progress& progress) {
  std::unique_ptr<gpu_draft_model> d(new gpu_draft_model());
  d->o_ = o;
  auto hw = load_weights(o.dir, progress);
  if (!hw)
    return error{hw.err().code, "--speculative-config: 'model' " + o.dir + ": " + hw.err().message,
                 "model"};
  const model_config& dc = hw->config;
  if (dc.vocab_size != target.vocab_size)
    return error{"invalid_argument",
                 "--speculative-config: 'model' " + o.dir + " has a vocabulary of " +
                     std::to_string(dc.vocab_size) + " tokens; the model's has " +
                     std::to_string(target.vocab_size),
                 "model"};
  if (dc.max_position_embeddings < max_model_len)
    return error{"invalid_argument",
                 "--speculative-config: 'model' " + o.dir + " has a context of " +
                     std::to_string(dc.max_position_embeddings) +
                     " tokens, less than max_model_len " + std::to_string(max_model_len),
                 "model"};
  if (dc.num_attention_heads % dc.num_key_value_heads != 0 ||
      !attention_supported(dc.num_attention_heads / dc.num_key_value_heads, dc.head_dim))
    return error{"unsupported",
                 "--speculative-config: 'model' " + o.dir +
                     ": attention supports head_dim 32, 64, 96 and 128 and GQA ratios up to 32",
                 "model"};
  auto w = upload_weights(*hw, s, {}, false);
  if (!w)
    return error{w.err().code, "--speculative-config: 'model' " + o.dir + ": " + w.err().message,
                 "model"};
  d->w_ = std::move(w.value());
  const model_config& c = d->w_.config;
  COSERVE_CUDA_TRY(d->scratch_.allocate(c, o.max_num_tokens, false));
  COSERVE_CUDA_TRY(d->rope_.upload(c));
  const size_t P = size_t(std::max(1, o.max_picks));
  for (auto [buf, bytes] :
       {std::pair{&d->final_, P * size_t(c.hidden_size) * 2}, std::pair{&d->picks_, P * 4},
        std::pair{&d->pick_lp_, P * 4}, std::pair{&d->meta_dev_, k_draft_metadata_bytes}}) {
    auto b = device_buffer::allocate(bytes);
    if (!b) return std::move(b).err();
    *buf = std::move(b.value());
  }
  return d;
}

int64_t gpu_draft_model::kv_block_bytes() const {
  const model_config& c = w_.config;
  return gpu::kv_block_bytes(kv_cache_shape{c.num_hidden_layers, c.num_key_value_heads, c.head_dim,
                                            o_.block_size, kv_elem_bytes(o_.kv_type)});
}

result<void> gpu_draft_model::allocate_kv(int32_t num_blocks) {
  COSERVE_CUDA_TRY(kv_.allocate(w_.config, o_.block_size, num_blocks, o_.kv_type));
  map_ = std::make_unique<draft_kv_map>(num_blocks, o_.block_size);
  return {};
}

result<void> gpu_draft_model::run(const draft_step& st, pinned_buffer& staging, gemm_runner& gemm,
                                  int32_t* last_tokens, float* logits, cudaStream_t s) {
  if (st.passes.empty()) return {};
  nvtx_range range("draft");
  const model_config& c = w_.config;
  const batch_plan_options po{o_.block_size, c.num_key_value_heads,
                              c.num_attention_heads / c.num_key_value_heads, o_.num_sms, 32};
  // Plan and pack every pass first (one upload), then enqueue them in order.
  struct packed {
    layer_inputs in;
    size_t sample_tokens = 0, params = 0, out_slots = 0;
    int32_t picks = 0;
  };
  std::vector<packed> passes;
  metadata_packer pk(staging);
  for (const draft_pass& pass : st.passes) {
    batch_plan_options o = po;
    auto pl = plan_batch(pass.seqs, o);
    if (!pl) return std::move(pl).err();
    if (pl->num_partial_rows > k_max_partial_rows) {
      o.num_sms = 0;
      pl = plan_batch(pass.seqs, o);
      if (!pl) return std::move(pl).err();
    }
    const batch_plan& p = *pl;
    if (p.num_tokens > o_.max_num_tokens || int32_t(p.sample_tokens.size()) > o_.max_picks ||
        p.sample_tokens.size() != pass.out_slots.size())
      return make_error("internal", "draft: a pass exceeds the draft's buffers");
    std::vector<int32_t> ids;
    for (const scheduled_seq& q : pass.seqs)
      ids.insert(ids.end(), q.tokens.begin(), q.tokens.end());
    // Greedy picks: temperature 0 is the argmax in one pass (launch_sample).
    const std::vector<sample_row_params> greedy(p.sample_tokens.size(),
                                                sample_row_params{0.0f, 1.0f, 0.0f, 0, 0, 0});
    size_t off[13];
    int k = 0;
    for (auto r :
         {pk.add(ids), pk.add(p.positions), pk.add(p.slot_mapping), pk.add(p.cu_seqlens_q),
          pk.add(p.kv_lens), pk.add(p.block_table_offsets), pk.add(p.block_tables), pk.add(p.work),
          pk.add(p.merges), pk.add(p.sample_tokens), pk.add(greedy), pk.add(pass.out_slots)}) {
      if (!r) return std::move(r).err();
      off[k++] = *r;
    }
    if (pk.used() > meta_dev_.bytes())
      return make_error("resource_exhausted", "draft: step metadata exceeds its buffer");
    const char* d = meta_dev_.as<char>();
    auto i32 = [d](size_t at) { return reinterpret_cast<const int32_t*>(d + at); };
    packed q;
    q.in.ids = i32(off[0]);
    q.in.positions = i32(off[1]);
    q.in.slots = i32(off[2]);
    q.in.cu_seqlens = i32(off[3]);
    q.in.kv_lens = i32(off[4]);
    q.in.bt_offsets = i32(off[5]);
    q.in.block_tables = i32(off[6]);
    q.in.work = reinterpret_cast<const attn_work_item*>(d + off[7]);
    q.in.merges = reinterpret_cast<const attn_merge_item*>(d + off[8]);
    q.in.num_tokens = p.num_tokens;
    q.in.num_work = int32_t(p.work.size());
    q.in.num_merges = int32_t(p.merges.size());
    q.sample_tokens = off[9];
    q.params = off[10];
    q.out_slots = off[11];
    q.picks = int32_t(p.sample_tokens.size());
    passes.push_back(q);
  }
  COSERVE_CUDA_TRY(cuda_check(
      cudaMemcpyAsync(meta_dev_.get(), staging.get(), pk.used(), cudaMemcpyHostToDevice, s),
      "draft metadata upload"));
  const int32_t H = c.hidden_size;
  const char* d = meta_dev_.as<char>();
  for (const packed& q : passes) {
    // The picks of earlier passes are read by this one's embedding gather (ids -(slot + 1)).
    COSERVE_CUDA_TRY(run_layers(w_, gemm, scratch_, kv_, rope_, q.in, last_tokens, {}, s));
    if (q.picks == 0) continue;
    const auto* rows = reinterpret_cast<const int32_t*>(d + q.sample_tokens);
    COSERVE_CUDA_TRY(launch_rmsnorm(final_.as<bf16>(), scratch_.hidden.as<bf16>(),
                                    scratch_.residual.as<bf16>(), w_.final_norm.as<bf16>(), rows,
                                    q.picks, H, c.rms_norm_eps, true, s));
    COSERVE_CUDA_TRY(gemm.run(logits, gemm_out::f32, final_.as<bf16>(),
                              static_cast<const bf16*>(w_.lm_head_data()), nullptr, q.picks,
                              c.vocab_size, H, s));
    COSERVE_CUDA_TRY(launch_sample(picks_.as<int32_t>(), pick_lp_.as<float>(), logits,
                                   reinterpret_cast<const sample_row_params*>(d + q.params),
                                   q.picks, c.vocab_size, s));
    COSERVE_CUDA_TRY(launch_scatter_tokens(last_tokens,
                                           reinterpret_cast<const int32_t*>(d + q.out_slots),
                                           picks_.as<int32_t>(), q.picks, s));
  }
  return {};
}

}  // namespace coserve::gpu
