// held_block_tables — the block tables the executor's side holds, one per sequence, brought up to
// date by each plan's changes: the KV allocator sends a running sequence only the blocks that
// changed since its last plan (scheduled_seq::table_kept, block_table), so a decode step that
// fills a block it already has sends none, and expand() turns each change back into the whole
// table the executor reads.
//
// Threads: none (the executor actor's).
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <vector>

#include "model/step.hpp"

namespace coserve {

class held_block_tables {
 public:
  // Applies each scheduled sequence's change to the table held for it and writes the whole table
  // into the plan (table_kept becomes 0), in plan order; then forgets the plan's `finished`.
  // Throws std::logic_error on a change that keeps more blocks than are held (a plan out of order).
  void expand(step_plan& plan) {
    for (scheduled_seq& s : plan.seqs) {
      std::vector<int32_t>& held = tables_[s.seq_id];
      if (s.table_kept > static_cast<int32_t>(held.size()))
        throw std::logic_error("block table change for sequence " + std::to_string(s.seq_id) +
                               " keeps " + std::to_string(s.table_kept) + " blocks of " +
                               std::to_string(held.size()) + " held");
      held.resize(static_cast<size_t>(s.table_kept));
      held.insert(held.end(), s.block_table.begin(), s.block_table.end());
      s.block_table = held;
      s.table_kept = 0;
    }
    for (seq_id_t id : plan.finished) tables_.erase(id);
  }
  size_t size() const noexcept { return tables_.size(); }

 private:
  std::unordered_map<seq_id_t, std::vector<int32_t>> tables_;
};

}  // namespace coserve
