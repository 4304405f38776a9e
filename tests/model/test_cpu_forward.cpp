// The forward pass gives the same logits (<= 1e-5) however a prompt is cut into steps and
// whatever else shares the batch: one step, chunks, one token at a time, mixed with other
// sequences' prefills and decodes, scattered block tables.
#include <catch2/catch.hpp>

#include "model/cpu_forward.hpp"
#include "model_test_util.hpp"

namespace coserve {
namespace {

struct fixture {
  test::temp_dir dir{"fwd"};
  model_weights weights;
  worker_pool pool{2};

  explicit fixture(const demo_options& o) {
    REQUIRE(make_demo_model(dir.str(), o).ok());
    auto w = load_weights(dir.str());
    REQUIRE(w.ok());
    weights = std::move(*w);
  }
  kv_cache make_cache() {
    const auto& c = weights.config;
    return kv_cache(c.num_hidden_layers, 32, 16, c.num_key_value_heads, c.head_dim);
  }
  int64_t vocab() const { return weights.config.vocab_size; }
};

std::vector<int32_t> prompt_of(int32_t n, uint64_t seed, int32_t vocab) {
  seq_rng rng(seed);
  std::vector<int32_t> p;
  for (int32_t i = 0; i < n; ++i) p.push_back(int32_t(rng.next() % uint64_t(vocab)));
  return p;
}

// Runs `prompt` in chunks of the given sizes; returns the logits of every position.
std::vector<float> run_chunked(fixture& f, cpu_forward& fwd, const std::vector<int32_t>& prompt,
                               const std::vector<int32_t>& table,
                               const std::vector<int32_t>& chunks) {
  kv_cache cache = f.make_cache();
  std::vector<float> all, part;
  int32_t pos = 0;
  for (size_t i = 0; pos < int32_t(prompt.size()); ++i) {
    const int32_t n = std::min(chunks[i % chunks.size()], int32_t(prompt.size()) - pos);
    std::vector<forward_seq> batch{{prompt.data() + pos, n, pos, &table, true}};
    REQUIRE(fwd.run(batch, cache, true, part).ok());
    all.insert(all.end(), part.begin(), part.end());
    pos += n;
  }
  return all;
}

demo_options variant(int which) {
  demo_options o = test::tiny_options(21 + uint64_t(which));
  if (which == 1) {
    o.architecture = "qwen2";
    o.tie_embeddings = true;
    o.rope_type = "llama3";
    o.rope_original_max_position_embeddings = 16;
    o.head_dim = 12;
  }
  return o;
}

}  // namespace

TEST_CASE("forward: chunking and batching do not change logits", "[model][forward]") {
  for (int which = 0; which < 2; ++which) {
    INFO("variant " << which);
    fixture f(variant(which));
    cpu_forward fwd(f.weights, f.pool);
    const int32_t vocab = int32_t(f.vocab());
    const auto prompt = prompt_of(37, 1 + uint64_t(which), vocab);
    const std::vector<int32_t> table{0, 1, 2};
    const std::vector<int32_t> scattered{9, 4, 17};

    const auto whole = run_chunked(f, fwd, prompt, table, {37});
    REQUIRE(whole.size() == size_t(37 * vocab));
    CHECK(test::max_abs_diff(run_chunked(f, fwd, prompt, scattered, {5, 11, 1, 20}), whole) <=
          1e-5f);
    CHECK(test::max_abs_diff(run_chunked(f, fwd, prompt, table, {1}), whole) <= 1e-5f);
    CHECK(test::max_abs_diff(run_chunked(f, fwd, prompt, scattered, {16}), whole) <= 1e-5f);

    // Batched: the prompt in chunks of 7 beside another sequence's prefill then decodes, and a
    // third sequence that joins later; only rows of the tracked prompt are compared.
    kv_cache cache = f.make_cache();
    const auto other = prompt_of(23, 99, vocab);
    const auto third = prompt_of(12, 98, vocab);
    const std::vector<int32_t> other_table{3, 11, 5}, third_table{20, 21};
    std::vector<float> got, part;
    int32_t pos = 0, other_pos = 0, third_pos = 0, step = 0;
    while (pos < 37) {
      const int32_t n = std::min(7, 37 - pos);
      std::vector<forward_seq> batch;
      if (other_pos < 30) {
        const int32_t m = other_pos < 23 ? std::min(10, 23 - other_pos) : 1;
        // After its prompt the other sequence decodes its own prompt ids again, one at a time.
        const int32_t* tok =
            other_pos < 23 ? other.data() + other_pos : other.data() + (other_pos - 23);
        batch.push_back({tok, m, other_pos, &other_table, false});
        other_pos += m;
      }
      batch.push_back({prompt.data() + pos, n, pos, &scattered, false});
      if (step >= 2 && third_pos < 12) {
        batch.push_back({third.data() + third_pos, 3, third_pos, &third_table, true});
        third_pos += 3;
      }
      REQUIRE(fwd.run(batch, cache, true, part).ok());
      int64_t row0 = 0;
      for (const auto& b : batch) {
        if (b.tokens == prompt.data() + pos) break;
        row0 += b.num_tokens;
      }
      got.insert(got.end(), part.begin() + row0 * vocab, part.begin() + (row0 + n) * vocab);
      pos += n;
      ++step;
    }
    CHECK(test::max_abs_diff(got, whole) <= 1e-5f);
  }
}

TEST_CASE("forward: last-row logits equal the all-rows run, copied blocks continue alike",
          "[model][forward]") {
  fixture f(variant(0));
  cpu_forward fwd(f.weights, f.pool);
  const int32_t vocab = int32_t(f.vocab());
  const auto prompt = prompt_of(20, 5, vocab);
  const std::vector<int32_t> table{0, 1};
  const auto whole = run_chunked(f, fwd, prompt, table, {20});

  kv_cache cache = f.make_cache();
  std::vector<float> last;
  std::vector<forward_seq> batch{{prompt.data(), 20, 0, &table, true}};
  REQUIRE(fwd.run(batch, cache, false, last).ok());
  REQUIRE(last.size() == size_t(vocab));
  CHECK(test::max_abs_diff(last, std::vector<float>(whole.end() - vocab, whole.end())) <= 1e-6f);

  // Fork: block 1 (partly filled) copied to 7; both continue with the same token.
  REQUIRE(cache.copy_block(1, 7));
  CHECK_FALSE(cache.copy_block(1, 99));
  const std::vector<int32_t> fork_table{0, 7};
  const int32_t next = 3;
  std::vector<float> a, b;
  std::vector<forward_seq> step_a{{&next, 1, 20, &table, true}};
  std::vector<forward_seq> step_b{{&next, 1, 20, &fork_table, true}};
  REQUIRE(fwd.run(step_a, cache, false, a).ok());
  REQUIRE(fwd.run(step_b, cache, false, b).ok());
  CHECK(test::max_abs_diff(a, b) <= 1e-6f);
}

TEST_CASE("forward: bad inputs are errors, not crashes", "[model][forward]") {
  fixture f(variant(0));
  cpu_forward fwd(f.weights, f.pool);
  kv_cache cache = f.make_cache();
  std::vector<float> out;
  const std::vector<int32_t> table{0};
  const std::vector<int32_t> bad_block{40};
  const int32_t big = int32_t(f.vocab()), ok = 1;
  const std::vector<int32_t> seventeen(17, 1);
  CHECK_FALSE(fwd.run({{&big, 1, 0, &table, true}}, cache, false, out).ok());
  CHECK_FALSE(fwd.run({{seventeen.data(), 17, 0, &table, true}}, cache, false, out).ok());
  CHECK_FALSE(fwd.run({{&ok, 1, 0, &bad_block, true}}, cache, false, out).ok());
  CHECK_FALSE(fwd.run({{&ok, 1, 300, &table, true}}, cache, false, out).ok());
  REQUIRE(fwd.run({}, cache, false, out).ok());
  CHECK(out.empty());
}

}  // namespace coserve
