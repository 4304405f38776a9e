// A simulated executor for planner tests: keeps a token-id "KV cache" per physical block, applies
// block copies, substitutes k_token_from_last_step, and before sampling checks that the cache seen
// through the block table holds exactly the sequence's history (so prefix hits, copy-on-write and
// preemption are verified end to end). The sampled token is a hash of the history and seed, so a
// sequence's outputs do not depend on how it was batched.
#pragma once

#include <catch2/catch.hpp>
#include <cstdint>
#include <unordered_map>
#include <vector>

#include "model/step.hpp"

namespace coserve::test {

inline int32_t sim_next_token(const std::vector<int32_t>& history, uint64_t seed, int32_t vocab) {
  uint64_t h = seed * 0x9e3779b97f4a7c15ull + 7;
  for (int32_t t : history) h = (h ^ static_cast<uint64_t>(t + 3)) * 0x100000001b3ull;
  return static_cast<int32_t>((h >> 17) % static_cast<uint64_t>(vocab));
}

class sim_executor {
 public:
  sim_executor(int32_t num_blocks, int32_t block_size, int32_t vocab)
      : bs_(block_size),
        vocab_(vocab),
        kv_(static_cast<size_t>(num_blocks),
            std::vector<int32_t>(static_cast<size_t>(block_size), -7)) {}

  step_result execute(const step_plan& plan) {
    for (const auto& ns : plan.new_seqs) {
      REQUIRE(state_.count(ns.seq_id) == 0);
      auto& st = state_[ns.seq_id];
      st.history = ns.prompt_ids;
      st.history.insert(st.history.end(), ns.output_ids.begin(), ns.output_ids.end());
      st.seed = ns.seed;
    }
    for (auto [src, dst] : plan.block_copies)
      kv_[static_cast<size_t>(dst)] = kv_[static_cast<size_t>(src)];
    step_result res;
    res.step_id = plan.step_id;
    for (const auto& s : plan.seqs) {
      REQUIRE(state_.count(s.seq_id) == 1);
      auto& st = state_[s.seq_id];
      for (size_t k = 0; k < s.tokens.size(); ++k) {
        const int32_t pos = s.start_pos + static_cast<int32_t>(k);
        int32_t tok = s.tokens[k];
        if (tok == k_token_from_last_step) {
          REQUIRE(st.has_last);
          tok = st.last;
        }
        REQUIRE(pos < static_cast<int32_t>(st.history.size()));
        REQUIRE(st.history[static_cast<size_t>(pos)] == tok);
        REQUIRE(pos / bs_ < static_cast<int32_t>(s.block_table.size()));
        kv_[static_cast<size_t>(s.block_table[static_cast<size_t>(pos / bs_)])]
           [static_cast<size_t>(pos % bs_)] = tok;
      }
      const int32_t end = s.start_pos + static_cast<int32_t>(s.tokens.size());
      if (!s.sample) continue;
      REQUIRE(end == static_cast<int32_t>(st.history.size()));
      for (int32_t p = 0; p < end; ++p) {
        const int32_t cached = kv_[static_cast<size_t>(s.block_table[static_cast<size_t>(p / bs_)])]
                                  [static_cast<size_t>(p % bs_)];
        if (cached != st.history[static_cast<size_t>(p)]) {
          FAIL("KV mismatch seq " << s.seq_id << " pos " << p);
        }
      }
      const int32_t t = sim_next_token(st.history, st.seed, vocab_);
      st.history.push_back(t);
      st.last = t;
      st.has_last = true;
      seq_output o;
      o.seq_id = s.seq_id;
      o.token = t;
      res.outputs.push_back(o);
    }
    for (seq_id_t id : plan.finished) state_.erase(id);
    return res;
  }
  size_t live() const { return state_.size(); }

 private:
  struct seq_state {
    std::vector<int32_t> history;
    uint64_t seed = 0;
    int32_t last = 0;
    bool has_last = false;
  };
  int32_t bs_, vocab_;
  std::vector<std::vector<int32_t>> kv_;
  std::unordered_map<seq_id_t, seq_state> state_;
};

}  // namespace coserve::test
