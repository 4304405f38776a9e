// Tensor parallelism on the CPU: the in-process communicator's collectives (every rank's result
// against a sum in rank order), the sizes a model allows, the step message, and TP = 2 and 4
// executors against TP = 1 on the same steps (logits within 1e-5 in fp32; greedy tokens equal),
// with qkv biases, tied embeddings, replicated KV heads, block copies and a failed step.
#include <catch2/catch.hpp>
#include <chrono>
#include <cmath>
#include <random>
#include <string>
#include <thread>

#include "model/cpu_executor.hpp"
#include "model/tensor_parallel.hpp"
#include "model_test_util.hpp"

namespace coserve {
namespace {

// Runs fn(rank, comm) on one thread per rank of a local group.
template <class Fn>
void on_ranks(int32_t n, Fn fn) {
  auto group = make_local_group(n);
  std::vector<std::thread> threads;
  for (int32_t r = 0; r < n; ++r) threads.emplace_back([&, r] { fn(r, *group[size_t(r)]); });
  for (auto& t : threads) t.join();
}

std::unique_ptr<cpu_executor> tp_executor(const std::string& dir, int32_t tp, int32_t threads = 2) {
  cpu_executor_options o;
  o.num_kv_blocks = 24;
  o.block_size = 8;
  o.num_threads = threads;
  o.return_logits = true;
  o.bf16_activations = false;
  o.kv_cache_dtype = dtype::f32;
  o.tensor_parallel_size = tp;
  auto ex = cpu_executor::load(dir, o);
  REQUIRE(ex.ok());
  return std::move(*ex);
}

struct step_out {
  std::vector<int32_t> tokens;
  std::vector<std::vector<float>> logits;
};

// Two sequences: a prompt prefilled in two chunks then decoded, and a second one forked from the
// first by a block copy (the prompt's blocks shared, the partial block copied), both decoded; then
// a speculative verify step (several logit rows of one sequence gathered from every rank).
std::vector<step_out> run_script(cpu_executor& ex) {
  std::vector<step_out> out;
  auto run = [&](const step_plan& p) {
    auto r = ex.execute(p);
    REQUIRE(r.ok());
    step_out s;
    for (const seq_output& o : r->outputs) {
      s.tokens.push_back(o.token);
      s.logits.push_back(o.logits);
    }
    out.push_back(std::move(s));
  };
  const std::vector<int32_t> prompt{5, 9, 14, 3, 77, 41, 8, 60, 12, 33, 2};
  step_plan p;
  p.new_seqs.push_back(test::greedy_seq(1, prompt));
  p.seqs.push_back({1, {prompt.begin(), prompt.begin() + 6}, 0, {0, 1}, false});
  run(p);
  p = {};
  p.seqs.push_back({1, {prompt.begin() + 6, prompt.end()}, 6, {0, 1}, true});
  run(p);
  // Fork: sequence 2 shares block 0 and gets a copy of block 1 (positions 8..10) in block 5.
  p = {};
  std::vector<int32_t> out_ids{out.back().tokens[0]};
  p.new_seqs.push_back(test::greedy_seq(2, prompt));
  p.new_seqs.back().output_ids = out_ids;
  p.block_copies = {{1, 5}};
  p.seqs.push_back({1, {k_token_from_last_step}, 11, {0, 1}, true});
  p.seqs.push_back({2, {out_ids[0]}, 11, {0, 5}, true});
  run(p);
  for (int i = 0; i < 6; ++i) {
    p = {};
    p.seqs.push_back({1, {k_token_from_last_step}, 12 + i, {0, 1, 2}, true});
    p.seqs.push_back({2, {k_token_from_last_step}, 12 + i, {0, 5, 6}, true});
    run(p);
  }
  // Sequence 2 (the same greedy continuation as 1) runs 3 tokens ahead; sequence 1 then verifies
  // two of them as proposals in one step: 3 logit rows, both accepted, the third token its own.
  std::vector<int32_t> ahead;
  for (int i = 0; i < 3; ++i) {
    p = {};
    p.seqs.push_back({2, {k_token_from_last_step}, 18 + i, {0, 5, 6}, true});
    run(p);
    ahead.push_back(out.back().tokens[0]);
  }
  p = {};
  p.seqs.push_back({1, {k_token_from_last_step, ahead[0], ahead[1]}, 18, {0, 1, 2}, true, 2});
  run(p);
  CHECK(out.back().tokens == ahead);
  p = {};
  p.finished = {1, 2};
  REQUIRE(ex.execute(p).ok());
  return out;
}

void check_same(const std::vector<step_out>& a, const std::vector<step_out>& b) {
  REQUIRE(a.size() == b.size());
  for (size_t s = 0; s < a.size(); ++s) {
    CAPTURE(s);
    CHECK(a[s].tokens == b[s].tokens);
    REQUIRE(a[s].logits.size() == b[s].logits.size());
    for (size_t r = 0; r < a[s].logits.size(); ++r) {
      REQUIRE(a[s].logits[r].size() == b[s].logits[r].size());
      float worst = 0;
      for (size_t i = 0; i < a[s].logits[r].size(); ++i)
        worst = std::max(worst, std::fabs(a[s].logits[r][i] - b[s].logits[r][i]));
      CAPTURE(r);
      CHECK(worst <= 1e-5f);
    }
  }
}

}  // namespace

TEST_CASE(
    "tensor parallel: local all-reduce, gather and broadcast give every rank the rank-order result",
    "[model][tensor_parallel]") {
  for (int32_t n : {1, 2, 3, 4}) {
    CAPTURE(n);
    const size_t len = 1000;
    // Rank r's vector in round i: a fixed pseudo-random function of (r, i, j).
    auto value = [](int32_t r, int i, size_t j) {
      return float(std::sin(double(r * 7919 + i * 104729) + double(j) * 0.37)) * float(1 + r);
    };
    std::vector<int> failures(size_t(n), 0);
    // Catch's assertions are not thread-safe: the rank threads count failures instead.
    on_ranks(n, [&](int32_t r, communicator& c) {
      if (c.rank() != r || c.size() != n) ++failures[size_t(r)];
      std::vector<float> v(len);
      for (int i = 0; i < 50; ++i) {
        const size_t m = len - size_t(i) * 7;  // sizes change between rounds
        v.resize(m);
        for (size_t j = 0; j < m; ++j) v[j] = value(r, i, j);
        if (!c.all_reduce_sum(v.data(), m)) ++failures[size_t(r)];
        for (size_t j = 0; j < m; ++j) {
          float want = value(0, i, j);
          for (int32_t q = 1; q < n; ++q) want += value(q, i, j);
          if (v[j] != want) {
            ++failures[size_t(r)];
            break;
          }
        }
        // Gather: rank q sends q + i bytes of value q.
        std::vector<unsigned char> mine(size_t(r + i), static_cast<unsigned char>(r));
        std::vector<unsigned char> all;
        if (!c.gather(mine.data(), mine.size(), r == 0 ? &all : nullptr, 0)) ++failures[size_t(r)];
        if (r == 0) {
          size_t at = 0;
          for (int32_t q = 0; q < n; ++q)
            for (int k = 0; k < q + i; ++k)
              if (at >= all.size() || all[at++] != q) ++failures[size_t(r)];
          if (at != all.size()) ++failures[size_t(r)];
        }
        std::vector<unsigned char> b;
        if (r == 0) b.assign(size_t(i) * 3, static_cast<unsigned char>(i));
        if (!c.broadcast(b, 0)) ++failures[size_t(r)];
        if (b != std::vector<unsigned char>(size_t(i) * 3, static_cast<unsigned char>(i)))
          ++failures[size_t(r)];
      }
    });
    for (int32_t r = 0; r < n; ++r) CHECK(failures[size_t(r)] == 0);
  }
}

TEST_CASE(
    "tensor parallel: an aborted rank releases the others from their collectives with a fatal "
    "error",
    "[model][tensor_parallel]") {
  for (int32_t n : {2, 4}) {
    CAPTURE(n);
    std::vector<std::string> errors(static_cast<size_t>(n));
    std::vector<int> codes_fatal(static_cast<size_t>(n), 0);
    on_ranks(n, [&](int32_t r, communicator& c) {
      std::vector<float> v(64, 1.0f);
      // A round that works, then rank n - 1 fails while the others wait in an all-reduce.
      if (!c.all_reduce_sum(v.data(), v.size())) errors[size_t(r)] = "first round failed";
      if (r == n - 1) {
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
        c.abort("out of memory");
        return;
      }
      auto res = c.all_reduce_sum(v.data(), v.size());
      if (res.ok()) return;
      errors[size_t(r)] = res.err().message;
      codes_fatal[size_t(r)] = res.err().code == k_executor_fatal;
      // Every later collective fails at once too.
      std::vector<unsigned char> b;
      if (c.broadcast(b, 0).ok()) errors[size_t(r)] += "; a later broadcast succeeded";
    });
    for (int32_t r = 0; r + 1 < n; ++r) {
      CAPTURE(r);
      CHECK(errors[size_t(r)] ==
            "tensor parallel group failed (rank " + std::to_string(n - 1) + ": out of memory)");
      CHECK(codes_fatal[size_t(r)] == 1);
    }
  }
}

TEST_CASE("tensor parallel: sizes a model allows, errors naming them, quantization blocks",
          "[model][tensor_parallel]") {
  model_weights w;
  w.config.num_attention_heads = 8;
  w.config.num_key_value_heads = 2;
  w.config.head_dim = 32;
  w.config.hidden_size = 256;
  w.config.intermediate_size = 96;
  w.layers.resize(2);
  for (auto& L : w.layers) L.o.type = L.down.type = dtype::f32;
  CHECK(tensor_parallel_sizes(w) == std::vector<int32_t>{1, 2, 4, 8});
  auto bad = check_tensor_parallel_size(w, 3);
  REQUIRE_FALSE(bad.ok());
  CHECK(bad.err().param == "tensor_parallel_size");
  CHECK_THAT(bad.err().message, Catch::Contains("does not divide the attention heads") &&
                                    Catch::Contains("sizes that work for this model: 1, 2, 4, 8"));
  CHECK_FALSE(check_tensor_parallel_size(w, 16).ok());
  // 6 KV heads: 4 neither divides them nor is a multiple of them.
  w.config.num_attention_heads = 12;
  w.config.num_key_value_heads = 6;
  CHECK(tensor_parallel_sizes(w) == std::vector<int32_t>{1, 2, 3, 6, 12});
  CHECK_THAT(check_tensor_parallel_size(w, 4).err().message, Catch::Contains("KV heads"));
  // Q8_0 down_proj: 96 / 4 = 24 columns per rank is not whole 32-value blocks; 96 / 3 = 32 is.
  for (auto& L : w.layers) L.down.type = dtype::q8_0;
  CHECK(tensor_parallel_sizes(w) == std::vector<int32_t>{1, 3});
  CHECK_THAT(check_tensor_parallel_size(w, 2).err().message,
             Catch::Contains("quantization blocks"));

  // Experts: their width (moe_intermediate_size) must divide too, and the dense width only where
  // a layer is dense.
  for (auto& L : w.layers) L.down.type = dtype::f32;
  w.config.num_hidden_layers = 2;
  w.config.num_experts = 4;
  w.config.num_experts_per_tok = 2;
  w.config.moe_intermediate_size = 40;
  w.config.intermediate_size = 7;  // no dense layer: not checked
  w.config.moe_layers = {1, 1};
  w.layers[1].experts.resize(4);
  for (auto& e : w.layers[1].experts) e.down.type = dtype::f32;
  CHECK(tensor_parallel_sizes(w) == std::vector<int32_t>{1, 2});
  CHECK_THAT(
      check_tensor_parallel_size(w, 3).err().message,
      Catch::Contains("moe_intermediate_size") && Catch::Contains("moe_intermediate_size 40"));
  w.config.moe_layers = {0, 1};  // layer 0 dense: its width 7 divides by 1 only
  CHECK(tensor_parallel_sizes(w) == std::vector<int32_t>{1});
  w.config.intermediate_size = 96;
  w.config.moe_intermediate_size = 96;
  // Q8_0 experts' down: 96 / 3 = 32 columns per rank are whole blocks, 48, 16 and 8 are not.
  for (auto& e : w.layers[1].experts) e.down.type = dtype::q8_0;
  CHECK(tensor_parallel_sizes(w) == std::vector<int32_t>{1, 3});
  CHECK_THAT(check_tensor_parallel_size(w, 2).err().message, Catch::Contains("experts' down_proj"));
}

TEST_CASE("tensor parallel: the step message round-trips, a damaged one is refused",
          "[model][tensor_parallel]") {
  const std::vector<int32_t> t1{1, 2, 3}, t2{k_token_from_last_step};
  const std::vector<int32_t> b1{4, 5}, b2{7};
  std::vector<forward_seq> batch{{t1.data(), 3, 0, &b1, false, 1}, {t2.data(), 1, 9, &b2, true, 3}};
  const auto msg = encode_tp_step({{1, 2}, {3, 4}}, batch);
  auto s = decode_tp_step(msg);
  REQUIRE(s.ok());
  CHECK_FALSE(s->stop);
  CHECK(s->block_copies == std::vector<std::pair<int32_t, int32_t>>{{1, 2}, {3, 4}});
  REQUIRE(s->seqs.size() == 2);
  CHECK(s->seqs[0].tokens == t1);
  CHECK(s->seqs[1].tokens == t2);
  CHECK(s->seqs[1].start_pos == 9);
  CHECK(s->seqs[1].block_table == b2);
  CHECK(s->seqs[1].want_logits);
  CHECK(s->seqs[1].logit_rows == 3);
  const auto fb = s->batch();
  CHECK(fb[0].num_tokens == 3);
  CHECK(*fb[0].block_table == b1);
  auto stop = decode_tp_step(encode_tp_stop());
  REQUIRE(stop.ok());
  CHECK(stop->stop);
  for (size_t cut : {size_t(0), size_t(5), msg.size() - 1}) {
    const std::vector<unsigned char> shorter(msg.begin(), msg.begin() + std::ptrdiff_t(cut));
    CHECK_FALSE(decode_tp_step(shorter).ok());
  }
  tp_setup setup;
  setup.num_kv_blocks = 77;
  setup.kv_type = dtype::f16;
  setup.bf16_activations = false;
  setup.error = "rank 1: no file";
  auto back = decode_tp_setup(encode_tp_setup(setup));
  REQUIRE(back.ok());
  CHECK(back->num_kv_blocks == 77);
  CHECK(back->kv_type == dtype::f16);
  CHECK_FALSE(back->bf16_activations);
  CHECK(back->error == "rank 1: no file");
}

TEST_CASE(
    "tensor parallel: TP 2 and 4 match TP 1 (logits within 1e-5, same tokens) through prefill "
    "chunks, "
    "a fork and decodes",
    "[model][tensor_parallel]") {
  struct shape {
    const char* name;
    std::string arch;
    int32_t heads, kv_heads, inter;
    bool tie;
  };
  const std::vector<shape> shapes = {
      {"llama, KV heads split", "llama", 4, 2, 48, false},       // TP 4: KV heads replicated
      {"qwen2 with qkv bias, tied", "qwen2", 4, 4, 64, true},    // every rank its own KV heads
      {"mistral, one KV head", "mistral", 4, 1, 40, false},      // KV head on every rank
      {"qwen3, q/k norm, tied", "qwen3", 4, 2, 48, true},        // the norm weights on every rank
      {"phi3, fused qkv and gate_up", "phi3", 4, 2, 48, false},  // rank slices of the row views
      {"smollm3, a layer without RoPE", "smollm3", 4, 2, 48, true},
      {"mixtral, a slice of every expert", "mixtral", 4, 2, 48, false},
      {"qwen3_moe, dense and sparse layers", "qwen3_moe", 4, 2, 48, true},
      {"qwen2_moe, a shared expert", "qwen2_moe", 4, 2, 48, false},
  };
  for (const shape& sh : shapes) {
    CAPTURE(sh.name);
    test::temp_dir dir("tp-model");
    demo_options o = test::tiny_options(43);
    o.architecture = sh.arch;
    o.num_heads = sh.heads;
    o.num_kv_heads = sh.kv_heads;
    o.intermediate_size = sh.inter;
    o.tie_embeddings = sh.tie;
    o.qkv_bias = sh.arch == "qwen2";
    o.num_experts = 6;
    o.num_experts_per_tok = 2;
    o.moe_intermediate_size = 32;  // qwen3_moe: 8 columns of each expert's down per rank at TP 4
    o.decoder_sparse_step = 2;     // qwen2/3_moe: layer 1 sparse, layer 0 dense (width 48)
    o.shared_expert_intermediate_size = 64;  // qwen2_moe
    REQUIRE(make_demo_model(dir.str(), o).ok());
    auto one = tp_executor(dir.str(), 1);
    const auto want = run_script(*one);
    for (int32_t tp : {2, 4}) {
      CAPTURE(tp);
      auto ex = tp_executor(dir.str(), tp, tp);
      CHECK_THAT(ex->info().device,
                 Catch::Contains("tensor parallel " + std::to_string(tp) + " ranks"));
      check_same(run_script(*ex), want);
    }
  }
}

TEST_CASE(
    "tensor parallel: a failed step fails on every rank alike, the next step runs, a bad size is "
    "refused",
    "[model][tensor_parallel]") {
  test::temp_dir dir("tp-model");
  REQUIRE(make_demo_model(dir.str(), test::tiny_options(44)).ok());
  auto one = tp_executor(dir.str(), 1);
  auto two = tp_executor(dir.str(), 2);
  step_plan bad;
  bad.new_seqs.push_back(test::greedy_seq(1, {1, 2}));
  bad.seqs.push_back({1, {1, 500}, 0, {0}, true});  // 500 is outside the 96-token vocabulary
  auto r1 = one->execute(bad);
  auto r2 = two->execute(bad);
  REQUIRE_FALSE(r2.ok());
  CHECK(r2.err().message == r1.err().message);
  step_plan copy;  // a block copy outside the cache
  copy.block_copies = {{0, 99}};
  CHECK_FALSE(two->execute(copy).ok());
  CHECK(run_script(*two).size() == run_script(*one).size());

  cpu_executor_options o;
  o.num_kv_blocks = 8;
  o.tensor_parallel_size = 3;
  auto three = cpu_executor::load(dir.str(), o);
  REQUIRE_FALSE(three.ok());
  CHECK_THAT(three.err().message, Catch::Contains("sizes that work for this model: 1, 2, 4"));
}

}  // namespace coserve
