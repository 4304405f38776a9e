#include "gpu/batch_plan.hpp"

#include <algorithm>
#include <string>

#include "gpu/launch_params.hpp"

namespace coserve::gpu {

result<batch_plan> plan_batch(const std::vector<scheduled_seq>& seqs,
                              const batch_plan_options& opt) {
  if (opt.block_size <= 0 || opt.num_kv_heads <= 0 || opt.gqa <= 0)
    return make_error("invalid_argument",
                      "plan_batch: block_size, num_kv_heads and gqa must be positive");
  batch_plan p;
  p.num_seqs = int32_t(seqs.size());
  p.q_tile = attention_q_tile(opt.gqa);
  // Reserve everything once: at batch 256 x 4k context the block tables alone are 65k entries.
  size_t total_tokens = 0, total_blocks = 0;
  for (const scheduled_seq& s : seqs) {
    total_tokens += s.tokens.size();
    total_blocks +=
        (size_t(std::max(0, s.start_pos)) + s.tokens.size() + size_t(opt.block_size) - 1) /
        size_t(opt.block_size);
  }
  p.positions.reserve(total_tokens);
  p.slot_mapping.reserve(total_tokens);
  p.block_tables.reserve(total_blocks);
  p.kv_lens.reserve(seqs.size());
  p.sample_tokens.reserve(seqs.size());
  p.sample_seqs.reserve(seqs.size());
  p.work.reserve(seqs.size() * 2);
  p.cu_seqlens_q.reserve(seqs.size() + 1);
  p.block_table_offsets.reserve(seqs.size() + 1);
  p.cu_seqlens_q.push_back(0);
  p.block_table_offsets.push_back(0);

  for (size_t i = 0; i < seqs.size(); ++i) {
    const scheduled_seq& s = seqs[i];
    const int32_t n = int32_t(s.tokens.size());
    if (n == 0)
      return make_error("invalid_argument",
                        "plan_batch: sequence " + std::to_string(s.seq_id) + " has no tokens");
    if (s.start_pos < 0) return make_error("invalid_argument", "plan_batch: negative start_pos");
    const int64_t kv_len = int64_t(s.start_pos) + n;
    const int64_t need_blocks = (kv_len + opt.block_size - 1) / opt.block_size;
    if (int64_t(s.block_table.size()) < need_blocks)
      return make_error("invalid_argument", "plan_batch: block table of sequence " +
                                                std::to_string(s.seq_id) + " covers " +
                                                std::to_string(s.block_table.size()) +
                                                " blocks, needs " + std::to_string(need_blocks));
    for (int32_t t = 0; t < n; ++t) {
      const int32_t pos = s.start_pos + t;
      p.positions.push_back(pos);
      p.slot_mapping.push_back(s.block_table[size_t(pos / opt.block_size)] * opt.block_size +
                               pos % opt.block_size);
    }
    p.cu_seqlens_q.push_back(p.cu_seqlens_q.back() + n);
    p.kv_lens.push_back(int32_t(kv_len));
    p.block_tables.insert(p.block_tables.end(), s.block_table.begin(),
                          s.block_table.begin() + need_blocks);
    p.block_table_offsets.push_back(int32_t(p.block_tables.size()));
    if (s.num_draft < 0 || s.num_draft >= n || (s.num_draft > 0 && !s.sample))
      return make_error("invalid_argument", "plan_batch: sequence " + std::to_string(s.seq_id) +
                                                " has " + std::to_string(s.num_draft) +
                                                " proposals in a slice of " + std::to_string(n) +
                                                " tokens");
    if (s.sample)  // its last 1 + num_draft positions (speculative decoding verifies the proposals)
      for (int32_t j = s.num_draft; j >= 0; --j) {
        p.sample_tokens.push_back(p.cu_seqlens_q.back() - 1 - j);
        p.sample_seqs.push_back(int32_t(i));
      }
  }
  p.num_tokens = p.cu_seqlens_q.back();

  // Base block count without splitting: one block per (query tile, kv head).
  int64_t base_blocks = 0;
  for (int32_t i = 0; i < p.num_seqs; ++i) {
    const int32_t q_len = p.cu_seqlens_q[size_t(i) + 1] - p.cu_seqlens_q[size_t(i)];
    base_blocks += int64_t((q_len + p.q_tile - 1) / p.q_tile) * opt.num_kv_heads;
  }
  for (int32_t i = 0; i < p.num_seqs; ++i) {
    const int32_t q0 = p.cu_seqlens_q[size_t(i)];
    const int32_t q_len = p.cu_seqlens_q[size_t(i) + 1] - q0;
    const int32_t kv_len = p.kv_lens[size_t(i)];
    const int32_t splits =
        choose_num_splits(q_len, kv_len, p.q_tile, base_blocks, opt.num_sms, opt.max_splits);
    if (splits == 1) {
      for (int32_t qb = 0; qb < q_len; qb += p.q_tile)
        p.work.push_back({i, qb, std::min(p.q_tile, q_len - qb), 0, kv_len, -1, 0});
      continue;
    }
    // Split keys into `splits` chunks, each a multiple of the KV tile so tiles never straddle.
    const int32_t tiles = (kv_len + k_attn_kv_tile - 1) / k_attn_kv_tile;
    const int32_t tiles_per_split = (tiles + splits - 1) / splits;
    const int32_t chunk = tiles_per_split * k_attn_kv_tile;
    const int32_t used = (kv_len + chunk - 1) / chunk;  // rounding may leave fewer splits
    const int32_t base = p.num_partial_rows;
    for (int32_t s = 0; s < used; ++s)
      p.work.push_back(
          {i, 0, q_len, s * chunk, std::min(kv_len, (s + 1) * chunk), base + s * q_len, s});
    p.merges.push_back({q0, q_len, base, used});
    p.num_partial_rows += used * q_len;
  }
  return p;
}

}  // namespace coserve::gpu
