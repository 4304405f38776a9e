#include "gpu/draft_plan.hpp"

#include <algorithm>
#include <string>

namespace coserve::gpu {

result<draft_step> plan_draft(const step_plan& plan,
                              const std::vector<std::vector<int32_t>>& inputs,
                              const draft_kv_map& map, int32_t slot_base, int32_t k,
                              int32_t max_tokens) {
  if (inputs.size() != plan.seqs.size())
    return make_error("internal", "draft: inputs do not match the plan");
  if (max_tokens <= 0) return make_error("internal", "draft: no token budget");
  draft_step out;
  // Pass 0's items, in batch order: the catch-up and the tokens before the proposals.
  struct item {
    size_t seq;
    int32_t start;
    std::vector<int32_t> tokens;
    int32_t proposer;  // index into out.proposers, or -1
  };
  std::vector<item> items;
  for (size_t i = 0; i < plan.seqs.size(); ++i) {
    const scheduled_seq& s = plan.seqs[i];
    const std::vector<int32_t>& in = inputs[i];
    if (in.size() != s.tokens.size())
      return make_error("internal", "draft: inputs do not match the plan");
    const int32_t n = int32_t(in.size());
    int32_t before = n;
    const int32_t placeholders = int32_t(std::count(in.begin(), in.end(), k_token_from_draft));
    if (placeholders > 0) {
      if (placeholders != s.num_draft || s.num_draft > k || s.num_draft >= n ||
          !std::all_of(in.end() - s.num_draft, in.end(),
                       [](int32_t t) { return t == k_token_from_draft; }))
        return make_error("invalid_argument", "draft: sequence " + std::to_string(s.seq_id) +
                                                  " asks for " + std::to_string(placeholders) +
                                                  " draft proposals that are not its " +
                                                  "last num_draft (" + std::to_string(s.num_draft) +
                                                  ") tokens, or more than " + std::to_string(k));
      before = n - s.num_draft;
      out.proposers.push_back(
          {i, before, s.num_draft, slot_base + k * int32_t(out.proposers.size())});
    } else if (n == 1) {
      continue;  // a plain decode: the draft catches up when the sequence next proposes
    }
    for (int32_t t = 0; t < before; ++t)
      if (in[size_t(t)] < 0) return make_error("internal", "draft: an unresolved input id");
    item it{i,
            map.valid_prefix(s.block_table, s.start_pos),
            {},
            placeholders > 0 ? int32_t(out.proposers.size() - 1) : -1};
    for (int32_t p = it.start; p < s.start_pos; ++p) {
      const int32_t t = map.token_at(s.block_table, p);
      if (t < 0)  // every position the model computed was noted (draft_kv_map::note_model)
        return make_error("internal", "draft: position " + std::to_string(p) + " of sequence " +
                                          std::to_string(s.seq_id) +
                                          " has no recorded token to catch up from");
      it.tokens.push_back(t);
    }
    it.tokens.insert(it.tokens.end(), in.begin(), in.begin() + before);
    out.first.push_back({i, it.start, it.tokens});
    items.push_back(std::move(it));
  }
  // Pass 0, split where it exceeds the budget: a sequence's earlier chunk goes in an earlier pass.
  // Its sampled row is its last token, in the pass holding its last chunk.
  draft_pass cur;
  int32_t used = 0;
  for (const item& it : items) {
    const scheduled_seq& s = plan.seqs[it.seq];
    int32_t done = 0;
    const int32_t total = int32_t(it.tokens.size());
    while (done < total) {
      if (used == max_tokens) {
        out.passes.push_back(std::move(cur));
        cur = {};
        used = 0;
      }
      const int32_t take = std::min(total - done, max_tokens - used);
      scheduled_seq d;
      d.seq_id = s.seq_id;
      d.tokens.assign(it.tokens.begin() + done, it.tokens.begin() + done + take);
      d.start_pos = it.start + done;
      d.block_table = s.block_table;
      d.sample = it.proposer >= 0 && done + take == total;
      if (d.sample) cur.out_slots.push_back(out.proposers[size_t(it.proposer)].slot0);
      cur.seqs.push_back(std::move(d));
      used += take;
      done += take;
    }
  }
  if (!cur.seqs.empty()) out.passes.push_back(std::move(cur));
  // Passes 1..k: proposal j - 1 into the draft's cache; its logits give proposal j.
  int32_t most = 0;
  for (const auto& p : out.proposers) most = std::max(most, p.count);
  for (int32_t j = 1; j <= most; ++j) {
    draft_pass pass;
    for (const auto& p : out.proposers) {
      if (p.count < j) continue;
      const scheduled_seq& s = plan.seqs[p.seq];
      scheduled_seq d;
      d.seq_id = s.seq_id;
      d.tokens = {-(p.slot0 + j - 1 + 1)};
      d.start_pos = s.start_pos + p.first + j - 1;
      d.block_table = s.block_table;
      d.sample = j < p.count;
      if (d.sample) pass.out_slots.push_back(p.slot0 + j);
      pass.seqs.push_back(std::move(d));
    }
    out.passes.push_back(std::move(pass));
  }
  return out;
}

}  // namespace coserve::gpu
