// draft_kv_map: which draft cache positions stay valid as the model's cache is written, rolled
// back, reused by other sequences, copied and shared as a cached prefix.
#include <catch2/catch.hpp>
#include <vector>

#include "model/draft_kv_map.hpp"

using namespace coserve;

namespace {

std::vector<int32_t> range_tokens(int32_t from, int32_t n) {
  std::vector<int32_t> t;
  for (int32_t i = 0; i < n; ++i) t.push_back(from + i);
  return t;
}

}  // namespace

TEST_CASE(
    "draft_kv_map: nothing is valid until the draft computes it, and the model's writes alone add "
    "nothing",
    "[model][speculation]") {
  draft_kv_map m(8, 4);
  const std::vector<int32_t> table{3, 5, 1};
  CHECK(m.valid_prefix(table, 12) == 0);
  const auto t = range_tokens(100, 10);
  m.note_model(7, table, 0, t.data(), 10);
  CHECK(m.valid_prefix(table, 10) == 0);
  for (int32_t p = 0; p < 10; ++p) CHECK(m.token_at(table, p) == 100 + p);
  // The draft catches up over the first 6 positions, then the rest.
  m.note_draft(7, table, 0, t.data(), 6);
  CHECK(m.valid_prefix(table, 10) == 6);
  CHECK(m.valid_prefix(table, 5) == 5);
  m.note_draft(7, table, 6, t.data() + 6, 4);
  CHECK(m.valid_prefix(table, 10) == 10);
}

TEST_CASE(
    "draft_kv_map: accepted proposals stay valid, a rejected one cuts its block and every block "
    "after it",
    "[model][speculation]") {
  draft_kv_map m(8, 4);
  const std::vector<int32_t> table{0, 1, 2, 3};
  const auto t = range_tokens(10, 7);  // positions 0..6, the model computed them
  m.note_model(1, table, 0, t.data(), 7);
  m.note_draft(1, table, 0, t.data(), 7);
  // Step: the last token at 6 was computed; the draft proposes 3 tokens at 7, 8, 9 (into block 2).
  const std::vector<int32_t> proposals{50, 51, 52};
  m.note_draft(1, table, 7, proposals.data(), 3);
  CHECK(m.valid_prefix(table, 10) == 10);
  // The model verifies [6, 10) with the same tokens: nothing changes.
  const std::vector<int32_t> verify{16, 50, 51, 52};
  m.note_model(1, table, 6, verify.data(), 4);
  CHECK(m.valid_prefix(table, 10) == 10);
  // Only 50 was accepted: the next step computes the model's own token at 8 (61, not 51).
  const std::vector<int32_t> next{61};
  m.note_model(1, table, 8, next.data(), 1);
  CHECK(m.valid_prefix(table, 12) == 8);
  CHECK(m.token_at(table, 8) == 61);
  // A cut in block 1 hides block 2, even where block 2's own count says more.
  m.note_model(1, table, 5, next.data(), 1);
  CHECK(m.valid_prefix(table, 12) == 5);
  // Catching up from 5 in order sets the later blocks afresh.
  const std::vector<int32_t> redo{61, 16, 50, 61};
  m.note_draft(1, table, 5, redo.data(), 4);
  CHECK(m.valid_prefix(table, 12) == 9);
  // The same token written again by the model keeps the position.
  m.note_model(1, table, 8, next.data(), 1);
  CHECK(m.valid_prefix(table, 12) == 9);
}

TEST_CASE(
    "draft_kv_map: a block given to another sequence or at another index starts over, even with "
    "equal tokens",
    "[model][speculation]") {
  draft_kv_map m(8, 4);
  const auto t = range_tokens(0, 8);
  const std::vector<int32_t> a{2, 4};
  m.note_model(1, a, 0, t.data(), 8);
  m.note_draft(1, a, 0, t.data(), 8);
  CHECK(m.valid_prefix(a, 8) == 8);
  // Sequence 2 gets block 4 as its first block and writes the same tokens as sequence 1 had at
  // positions 4..7: its prefix differs, so nothing of block 4 is valid for it.
  const std::vector<int32_t> b{4, 6};
  m.note_model(2, b, 0, t.data() + 4, 4);
  CHECK(m.valid_prefix(b, 4) == 0);
  // Sequence 1 itself, given block 2 at index 1 after a preemption: starts over too.
  const std::vector<int32_t> c{5, 2};
  m.note_model(1, c, 0, t.data(), 8);
  CHECK(m.valid_prefix(c, 8) == 0);
}

TEST_CASE(
    "draft_kv_map: a copied block keeps what it held for the sequence that takes it over, and a "
    "shared prefix "
    "stays valid for every sequence reading it",
    "[model][speculation]") {
  draft_kv_map m(8, 4);
  const auto t = range_tokens(0, 6);
  const std::vector<int32_t> parent{0, 1};
  m.note_model(1, parent, 0, t.data(), 6);
  m.note_draft(1, parent, 0, t.data(), 6);
  // Copy-on-write of the partial block 1 into block 3 for a child (n > 1): the child writes on.
  m.note_copy(1, 3);
  const std::vector<int32_t> child{0, 3};
  CHECK(m.valid_prefix(child, 6) == 6);
  const std::vector<int32_t> more{70};
  m.note_model(2, child, 6, more.data(), 1);
  CHECK(m.valid_prefix(child, 7) == 6);
  CHECK(m.token_at(child, 6) == 70);
  // The parent writes its own block 1 on: still its own, still valid.
  const std::vector<int32_t> own{80};
  m.note_model(1, parent, 6, own.data(), 1);
  CHECK(m.valid_prefix(parent, 7) == 6);
  // A third sequence reading block 0 as a cached prefix (full, never written by it) sees it valid.
  const std::vector<int32_t> reader{0, 7};
  CHECK(m.valid_prefix(reader, 4) == 4);
}
