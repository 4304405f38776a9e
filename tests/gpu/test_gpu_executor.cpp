// The CUDA executor against the CPU executor on demo models (same folder, same step plans): greedy
// tokens for 32 steps, the logits of the first step within bf16 tolerance, and vLLM's
// check_logprobs_close criterion teacher-forced on every prompt. Runs on a GPU host;
// skips with a message elsewhere.
// Over 500 lines: every case drives executors through the same helpers (demo folders, step
// drivers, the teacher-forced logprob check) defined at the top; split, each file would need them.
#include <asio/executor_work_guard.hpp>
#include <asio/io_context.hpp>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <regex>
#include <sstream>

#include "gpu/flashinfer_attention.hpp"
#include "gpu/gpu_executor.hpp"
#include "gpu/tp_peer.hpp"
#include "model/cpu_executor.hpp"
#include "model/demo_model.hpp"
#include "model/structured_output.hpp"
#include "model/text/tokenizer/tokenizer.hpp"
#include "tests/gpu/device_helpers.hpp"
#include "tests/model/logprobs_close.hpp"
#include "tests/model/prompt_logprobs_case.hpp"
#include "tests/model/verify_driver.hpp"

using namespace coserve;

namespace {

struct run_out {
  std::vector<std::vector<int32_t>> tokens;  // per prompt, generated ids
  std::vector<std::vector<float>> first_logits;
};

// Prefills every prompt in one step (mixed lengths), then decodes `steps` tokens for all of them
// in one batch per step, feeding back k_token_from_last_step (two-steps-in-flight protocol).
run_out drive(executor& ex, const std::vector<std::vector<int32_t>>& prompts, int32_t steps,
              int32_t block_size, const sampling_params* params = nullptr, bool ahead = false) {
  run_out r;
  r.tokens.resize(prompts.size());
  std::vector<std::vector<int32_t>> tables(prompts.size());
  int32_t next_block = 0;
  size_t longest = 0;
  for (const auto& pr : prompts) longest = std::max(longest, pr.size());
  const int32_t max_len = int32_t(longest) + steps;
  for (auto& t : tables)
    for (int32_t b = 0; b < (max_len + block_size - 1) / block_size; ++b) t.push_back(next_block++);
  step_plan p;
  p.step_id = 0;
  for (size_t i = 0; i < prompts.size(); ++i) {
    new_seq n;
    n.seq_id = i + 1;
    n.prompt_ids = prompts[i];
    n.params.temperature = 0.0f;
    if (params) n.params = *params;
    n.seed = 11 + i;
    p.new_seqs.push_back(n);
    scheduled_seq s;
    s.seq_id = i + 1;
    s.tokens = prompts[i];
    s.start_pos = 0;
    s.block_table = tables[i];
    s.sample = true;
    p.seqs.push_back(s);
  }
  // ahead: step N+1 is launched before step N is collected (its inputs are N's ids on the device),
  // as the executor actor runs it; otherwise one execute() per step.
  asio::io_context io;
  auto work = asio::make_work_guard(io);
  int64_t ready = 0, collected = 0;
  auto next_plan = [&](int32_t step) {
    step_plan d;
    d.step_id = uint64_t(step + 1);
    for (size_t i = 0; i < prompts.size(); ++i) {
      scheduled_seq s;
      s.seq_id = i + 1;
      s.tokens = {k_token_from_last_step};
      s.start_pos = int32_t(prompts[i].size()) + step;
      s.block_table = tables[i];
      s.sample = true;
      d.seqs.push_back(s);
    }
    return d;
  };
  if (ahead) ex.launch(p, io.get_executor(), [&ready] { ++ready; });
  for (int32_t step = 0; step < steps; ++step) {
    result<step_result> res;
    if (ahead) {
      if (step + 1 < steps) ex.launch(next_plan(step), io.get_executor(), [&ready] { ++ready; });
      while (ready <= collected) io.run_one();
      ++collected;
      res = ex.collect();
    } else {
      res = ex.execute(p);
      p = next_plan(step);
    }
    INFO((res.ok() ? std::string() : res.err().message));
    REQUIRE(res.ok());
    REQUIRE(res->outputs.size() == prompts.size());
    for (size_t i = 0; i < prompts.size(); ++i) {
      r.tokens[i].push_back(res->outputs[i].token);
      if (step == 0) r.first_logits.push_back(res->outputs[i].logits);
    }
  }
  return r;
}

// n prompts, prompt i: len0 + step * i consecutive ids from first * i + 1 + offset.
std::vector<std::vector<int32_t>> ramp_prompts(int32_t n, int32_t len0, int32_t step, int32_t first,
                                               int32_t offset) {
  std::vector<std::vector<int32_t>> prompts;
  for (int32_t i = 0; i < n; ++i) {
    std::vector<int32_t> pr(size_t(len0 + step * i));
    std::iota(pr.begin(), pr.end(), first * i + 1 + offset);
    prompts.push_back(pr);
  }
  return prompts;
}

// vLLM's check_logprobs_close, teacher-forced on `ref`'s greedy tokens for 24 steps: `got` must
// pass on the prompt (a divergence only where each side's token is in the other's top 5).
void check_logprobs_close_to(executor& ref, executor& got, seq_id_t id,
                             const std::vector<int32_t>& prompt, const std::string& label) {
  const auto r = test::run_logits(ref, id, prompt, nullptr, 24, 16);
  REQUIRE(r.rows.size() == 25);
  const auto g = test::run_logits(got, id, prompt, &r.tokens, 24, 16);
  REQUIRE(g.rows.size() == 25);
  const auto close = test::logprobs_close(r.rows, g.rows);
  float step_worst = 0.0f;
  for (float d : close.max_abs_logit_diff) step_worst = std::max(step_worst, d);
  INFO(label << ": " << close.steps_compared << " steps compared, diverged at " << close.diverged_at
             << ", per-step max |dlogit| " << step_worst << " " << close.why);
  CHECK(close.ok);
}

// Options for a model folder compared step by step: 256 KV blocks, raw logits returned.
gpu::gpu_executor_options folder_options(const std::string& dir) {
  gpu::gpu_executor_options go;
  go.model_dir = dir;
  go.num_kv_blocks = 256;
  go.return_logits = true;
  go.max_num_tokens = 1024;
  go.max_num_seqs = 16;
  return go;
}

// A demo model of 8 heads over 2 KV heads of 64, hidden 512, a 2000-token vocabulary, no tokenizer.
demo_options gpu_demo_options(uint64_t seed) {
  demo_options o;
  o.seed = seed;
  o.copy_tokenizer = false;
  o.vocab_size = 2000;
  o.num_heads = 8;
  o.num_kv_heads = 2;
  o.head_dim = 64;
  o.hidden_size = 512;
  return o;
}

// --load-format dummy options for a small model: two layers, head_dim 64.
gpu::gpu_executor_options dummy_options(int32_t hidden, int32_t inter, int32_t kv_heads,
                                        int32_t vocab, double memory_fraction) {
  model_config c;
  c.hidden_size = hidden;
  c.intermediate_size = inter;
  c.num_hidden_layers = 2;
  c.num_attention_heads = hidden / 64;
  c.num_key_value_heads = kv_heads;
  c.head_dim = 64;
  c.vocab_size = vocab;
  gpu::gpu_executor_options go;
  go.config = c;
  go.load_format = "dummy";
  go.max_num_tokens = 256;
  go.max_num_seqs = 8;
  go.gpu_memory_utilization = memory_fraction;
  return go;
}

// hf_greedy.txt of a gpu_vs_hf.py folder: per line the prompt ids, " | ", transformers' greedy ids.
void read_hf_greedy(const std::string& dir, std::vector<std::vector<int32_t>>& prompts,
                    std::vector<std::vector<int32_t>>& greedy) {
  std::ifstream in(dir + "/hf_greedy.txt");
  REQUIRE(in.good());
  for (std::string line; std::getline(in, line);) {
    const auto bar = line.find('|');
    if (bar == std::string::npos) continue;
    std::istringstream a(line.substr(0, bar)), b(line.substr(bar + 1));
    std::vector<int32_t> p, g;
    for (int32_t x; a >> x;) p.push_back(x);
    for (int32_t x; b >> x;) g.push_back(x);
    prompts.push_back(p);
    greedy.push_back(g);
  }
}

}  // namespace

TEST_CASE("gpu executor matches the cpu executor on demo models (greedy, 32 tokens)",
          "[gpu][executor]") {
  COSERVE_REQUIRE_DEVICE_OR_SKIP();
  struct variant {
    const char* arch;
    int32_t heads, kv_heads, head_dim;
    bool llama3, tie;
    int32_t window = 0,
            max_window_layers = 0;  // sliding window (qwen2: windowed from that layer on)
  };
  int prompts_total = 0, prompts_equal = 0;
  for (variant v :
       {variant{"llama", 8, 2, 64, false, false}, variant{"llama", 4, 4, 64, true, true},
        variant{"qwen2", 8, 1, 128, false, false}, variant{"mistral", 16, 2, 64, false, false},
        // q/k norm per head; fused qkv / gate_up tensors; every 4th layer without RoPE
        variant{"qwen3", 8, 2, 128, false, true}, variant{"phi3", 8, 8, 64, false, false},
        variant{"smollm3", 8, 2, 64, false, false},
        // sliding windows shorter than the longer prompts: every layer, and layers 2-3
        variant{"mistral", 8, 2, 64, false, false, 12},
        variant{"qwen2", 8, 2, 64, false, false, 9, 2}}) {
    const auto dir = std::filesystem::temp_directory_path() /
                     ("coserve_gpu_demo_" + std::string(v.arch) + std::to_string(v.kv_heads) +
                      std::to_string(v.head_dim) + "w" + std::to_string(v.window));
    demo_options o;
    o.seed = 3;
    o.architecture = v.arch;
    o.copy_tokenizer = false;
    o.vocab_size = 2000;
    o.num_heads = v.heads;
    o.num_kv_heads = v.kv_heads;
    o.head_dim = v.head_dim;
    o.hidden_size = v.heads * v.head_dim;
    o.rope_type = v.llama3 ? "llama3" : "";
    o.tie_embeddings = v.tie;
    o.sliding_window = v.window;
    o.max_window_layers = v.max_window_layers;
    REQUIRE(make_demo_model(dir.string(), o).ok());

    cpu_executor_options co;
    co.num_kv_blocks = 256;
    co.return_logits = true;
    auto cpu = cpu_executor::load(dir.string(), co);
    REQUIRE(cpu.ok());
    gpu::gpu_executor_options go = folder_options(dir.string());
    auto gpu_ex = gpu::make_gpu_executor(go);
    REQUIRE(gpu_ex.ok());

    const auto prompts = ramp_prompts(10, 3, 5, 17, 0);
    auto a = drive(**cpu, prompts, 32, 16);
    auto b = drive(**gpu_ex, prompts, 32, 16);
    for (size_t i = 0; i < prompts.size(); ++i) {
      ++prompts_total;
      prompts_equal += a.tokens[i] == b.tokens[i];
      REQUIRE(a.first_logits[i].size() == b.first_logits[i].size());
      float worst = 0.0f, scale = 0.0f;
      for (size_t k = 0; k < a.first_logits[i].size(); ++k) {
        worst = std::max(worst, std::fabs(a.first_logits[i][k] - b.first_logits[i][k]));
        scale = std::max(scale, std::fabs(a.first_logits[i][k]));
      }
      INFO(v.arch << " prompt " << i << " worst logit diff " << worst << " of " << scale);
      CHECK(worst <= 0.05f * std::max(1.0f, scale));
      // Teacher-forced on the CPU executor's greedy tokens: every prompt must pass.
      check_logprobs_close_to(**cpu, **gpu_ex, 1000 + i, prompts[i],
                              std::string(v.arch) + " prompt " + std::to_string(i));
    }
    std::filesystem::remove_all(dir);
  }
  // Whole 32-token greedy continuations: bf16 activations against the CPU's fp32 flip near-ties of
  // these random-weight models (flat distributions), after which the continuations part; the
  // criterion is vLLM's check_logprobs_close above, on every prompt. Measured: 57 of 90 identical
  // (NVIDIA H200); a broken kernel leaves next to none.
  INFO("identical greedy continuations: " << prompts_equal << " / " << prompts_total);
  CHECK(prompts_equal * 2 >= prompts_total);
}

TEST_CASE("gpu executor refuses a mixture-of-experts model at load, naming it and the CPU executor",
          "[gpu][executor]") {
  COSERVE_REQUIRE_DEVICE_OR_SKIP();
  const auto dir = std::filesystem::temp_directory_path() / "coserve_gpu_demo_mixtral";
  demo_options o;
  o.architecture = "mixtral";
  o.copy_tokenizer = false;
  o.vocab_size = 500;
  o.num_layers = 1;
  REQUIRE(make_demo_model(dir.string(), o).ok());
  auto ex = gpu::make_gpu_executor(folder_options(dir.string()));
  REQUIRE_FALSE(ex.ok());
  CHECK_THAT(ex.err().message,
             Catch::Contains("mixture-of-experts") && Catch::Contains("--device cpu"));
}

TEST_CASE(
    "gpu executor fp8 (W8A8) is logprob-close to bf16 on demo models, with less weight memory",
    "[gpu][executor][fp8]") {
  COSERVE_REQUIRE_DEVICE_OR_SKIP();
  // The tolerance: vLLM's check_logprobs_close (top 5), teacher-forced on the bf16 executor's
  // greedy tokens for 24 steps, on every prompt; and the first step's logits within a quarter of
  // their scale.
  int prompts_total = 0, prompts_equal = 0;
  for (const char* arch : {"llama", "qwen2"}) {
    const auto dir =
        std::filesystem::temp_directory_path() / ("coserve_gpu_fp8_" + std::string(arch));
    demo_options o = gpu_demo_options(4);
    o.architecture = arch;
    o.intermediate_size = 1408;
    REQUIRE(make_demo_model(dir.string(), o).ok());
    gpu::gpu_executor_options go = folder_options(dir.string());
    auto bf = gpu::make_gpu_executor(go);
    REQUIRE(bf.ok());
    go.quantization = "fp8";
    auto f8 = gpu::make_gpu_executor(go);
    REQUIRE(f8.ok());
    CHECK_THAT((*f8)->info().device, Catch::Contains("fp8 W8A8"));
    const auto prompts = ramp_prompts(8, 4, 7, 13, 1);
    auto a = drive(**bf, prompts, 24, 16);
    auto b = drive(**f8, prompts, 24, 16);
    for (size_t i = 0; i < prompts.size(); ++i) {
      ++prompts_total;
      prompts_equal += a.tokens[i] == b.tokens[i];
      {
        float worst = 0.0f, scale = 0.0f;
        for (size_t k = 0; k < a.first_logits[i].size(); ++k) {
          worst = std::max(worst, std::fabs(a.first_logits[i][k] - b.first_logits[i][k]));
          scale = std::max(scale, std::fabs(a.first_logits[i][k]));
        }
        size_t same = 0;
        while (same < a.tokens[i].size() && a.tokens[i][same] == b.tokens[i][same]) ++same;
        INFO(arch << " prompt " << i << ": first-step worst logit diff " << worst << " of " << scale
                  << ", identical for " << same << " of " << a.tokens[i].size() << " tokens");
        // E4M3 keeps 3 mantissa bits for weights and activations alike: on these random models the
        // first step's logits moved by at most 0.19 of their largest magnitude (1.37 of 7.08,
        // NVIDIA H200). A wrong scale orientation or a lost scale moves them by the whole scale or
        // more.
        CHECK(worst <= 0.25f * scale);
      }
      check_logprobs_close_to(**bf, **f8, 2000 + i, prompts[i],
                              std::string(arch) + " prompt " + std::to_string(i));
    }
    std::filesystem::remove_all(dir);
  }
  // Whole greedy continuations are reported, not required: with E4M3's rounding the random models'
  // near-flat distributions part within a few tokens (0 of 16 identical over 24 tokens, the longest
  // shared run 9, on an H200), while every step stays within vLLM's top-5 criterion above.
  WARN("fp8 vs bf16 identical greedy continuations: " << prompts_equal << " / " << prompts_total);

  // --load-format dummy with fp8: the layer matrices take half the bytes, so more KV blocks fit.
  gpu::gpu_executor_options d = dummy_options(1024, 2816, 4, 4096, 0.05);
  auto dbf = gpu::make_gpu_executor(d);
  REQUIRE(dbf.ok());
  const int32_t blocks_bf16 = (*dbf)->info().num_kv_blocks;
  dbf->reset();
  d.quantization = "fp8";
  auto df8 = gpu::make_gpu_executor(d);
  REQUIRE(df8.ok());
  CHECK((*df8)->info().num_kv_blocks > blocks_bf16);
  d.quantization = "int4";
  CHECK_FALSE(gpu::make_gpu_executor(d).ok());
}

TEST_CASE("gpu executor with an fp8 KV cache: twice the blocks, logprob-close to the bf16 cache",
          "[gpu][executor][fp8]") {
  COSERVE_REQUIRE_DEVICE_OR_SKIP();
  // The tolerance: vLLM's check_logprobs_close (top 5), teacher-forced on the bf16-cache executor's
  // greedy tokens for 24 steps, every prompt (fixed block counts, so both executors fit at once).
  const auto dir = std::filesystem::temp_directory_path() / "coserve_gpu_fp8_kv";
  demo_options o = gpu_demo_options(6);
  REQUIRE(make_demo_model(dir.string(), o).ok());
  gpu::gpu_executor_options go = folder_options(dir.string());
  auto bf = gpu::make_gpu_executor(go);
  REQUIRE(bf.ok());
  const auto prompts = ramp_prompts(6, 5, 9, 17, 3);
  const auto a = drive(**bf, prompts, 24, 16);
  for (const dtype kv : {dtype::f8_e4m3, dtype::f8_e5m2}) {
    INFO(dtype_name(kv));
    go.kv_cache_dtype = kv;
    auto f8 = gpu::make_gpu_executor(go);
    REQUIRE(f8.ok());
    CHECK_THAT((*f8)->info().device, Catch::Contains("kv " + std::string(dtype_name(kv))));
    const auto b = drive(**f8, prompts, 24, 16);
    CHECK(b.tokens.size() == a.tokens.size());
    for (size_t i = 0; i < prompts.size(); ++i)
      check_logprobs_close_to(**bf, **f8, 3000 + i, prompts[i],
                              std::string(dtype_name(kv)) + " prompt " + std::to_string(i));
  }
  go.kv_cache_dtype = dtype::f16;
  CHECK_FALSE(gpu::make_gpu_executor(go).ok());
  bf->reset();
  std::filesystem::remove_all(dir);

  // Sized from memory, one executor at a time: the same budget holds twice the blocks in fp8
  // (within what the device's free memory moves between the two).
  gpu::gpu_executor_options d = dummy_options(1024, 2816, 4, 4096, 0.05);
  auto dbf = gpu::make_gpu_executor(d);
  REQUIRE(dbf.ok());
  const double blocks_bf16 = (*dbf)->info().num_kv_blocks;
  dbf->reset();
  d.kv_cache_dtype = dtype::f8_e4m3;
  auto df8 = gpu::make_gpu_executor(d);
  REQUIRE(df8.ok());
  const double blocks_fp8 = (*df8)->info().num_kv_blocks;
  INFO("bf16 blocks " << blocks_bf16 << ", fp8 blocks " << blocks_fp8);
  CHECK(blocks_fp8 >= 1.95 * blocks_bf16);
  CHECK(blocks_fp8 <= 2.05 * blocks_bf16);
}

// A demo folder's executor for up to 16 sequences of 1024 tokens; eager: no graphs.
std::unique_ptr<executor> small_executor(const std::filesystem::path& dir, bool eager,
                                         int32_t penalty_rows = -1) {
  gpu::gpu_executor_options go;
  go.model_dir = dir.string();
  go.num_kv_blocks = 256;
  go.max_num_tokens = 1024;
  go.max_num_seqs = 16;
  go.enforce_eager = eager;
  go.penalty_rows = penalty_rows;
  auto e = gpu::make_gpu_executor(go);
  REQUIRE(e.ok());
  return std::move(*e);
}

TEST_CASE(
    "gpu executor: CUDA graphs on and off, one step at a time or two in flight, give the same "
    "greedy tokens",
    "[gpu][executor][graphs]") {
  COSERVE_REQUIRE_DEVICE_OR_SKIP();
  const auto dir = std::filesystem::temp_directory_path() / "coserve_gpu_demo_graphs";
  const demo_options o = gpu_demo_options(9);
  REQUIRE(make_demo_model(dir.string(), o).ok());
  auto eager = small_executor(dir, true);
  auto graphs = small_executor(dir, false);
  std::vector<std::vector<int32_t>>
      prompts;  // 10 sequences: decode batches padded to the 16 bucket
  for (int32_t i = 0; i < 10; ++i) {
    std::vector<int32_t> pr(size_t(4 + 7 * i));
    std::iota(pr.begin(), pr.end(), 13 * i + 2);
    prompts.push_back(pr);
  }
  const auto a = drive(*eager, prompts, 40, 16);
  const auto b = drive(*graphs, prompts, 40, 16);
  const auto c = drive(*graphs, prompts, 40, 16, nullptr, true);
  const auto d = drive(*eager, prompts, 40, 16, nullptr, true);
  for (size_t i = 0; i < prompts.size(); ++i) {
    CAPTURE(i);
    CHECK(b.tokens[i] == a.tokens[i]);
    CHECK(c.tokens[i] == a.tokens[i]);
    CHECK(d.tokens[i] == a.tokens[i]);
  }
  const auto tl = gpu::gpu_step_timeline(*graphs);
  REQUIRE(tl.has_value());
  CHECK(tl->graph_steps >= 2 * 39);  // every decode step of both runs replayed a graph
  CHECK(gpu::gpu_step_timeline(*eager)->graph_steps == 0);
  std::filesystem::remove_all(dir);
}

TEST_CASE(
    "gpu executor: penalties from token counts on the device give the sparse edits' tokens, with "
    "graphs and two "
    "steps in flight",
    "[gpu][executor][graphs][penalties]") {
  COSERVE_REQUIRE_DEVICE_OR_SKIP();
  const auto dir = std::filesystem::temp_directory_path() / "coserve_gpu_demo_penalties";
  REQUIRE(make_demo_model(dir.string(), gpu_demo_options(12)).ok());
  auto edits =
      small_executor(dir, true, 0);  // penalties as sparse edits from the host's history only
  auto counts = small_executor(dir, false, -1);  // counts on the device for every sequence, graphs
  auto few = small_executor(dir, false, 4);  // four count rows for ten sequences: the rest as edits
  const auto prompts = ramp_prompts(10, 4, 5, 9, 3);
  sampling_params greedy;
  greedy.temperature = 0.0f;
  greedy.repetition_penalty = 1.6f;
  sampling_params sampled;
  sampled.temperature = 0.9f;
  sampled.top_p = 0.95f;
  sampled.repetition_penalty = 1.2f;
  sampled.presence_penalty = 0.4f;
  sampled.frequency_penalty = 0.3f;
  sampled.logit_bias = {{5, 1.5f}};
  sampled.min_tokens = 6;
  sampling_params negative = sampled;  // a reward, not a penalty: repeats on purpose
  negative.repetition_penalty = 0.7f;
  negative.presence_penalty = -0.5f;
  negative.frequency_penalty = 0.0f;
  negative.logit_bias.clear();
  negative.min_tokens = 0;
  for (const sampling_params& params : {greedy, sampled, negative}) {
    const auto a = drive(*edits, prompts, 40, 16, &params);
    const auto b = drive(*counts, prompts, 40, 16, &params);
    const auto c = drive(*counts, prompts, 40, 16, &params, true);
    const auto d = drive(*edits, prompts, 40, 16, &params, true);
    const auto e = drive(*few, prompts, 40, 16, &params, true);
    for (size_t i = 0; i < prompts.size(); ++i) {
      CAPTURE(params.temperature, params.repetition_penalty, i);
      CHECK(b.tokens[i] == a.tokens[i]);
      CHECK(c.tokens[i] == a.tokens[i]);
      CHECK(d.tokens[i] == a.tokens[i]);
      CHECK(e.tokens[i] == a.tokens[i]);
    }
  }
  // Penalised decode steps replayed graphs: greedy's and negative's (logit_bias and min_tokens'
  // masks stay sparse edits, so `sampled` ran eagerly).
  CHECK(gpu::gpu_step_timeline(*counts)->graph_steps == 2 * 2 * 39);
  CHECK(gpu::gpu_step_timeline(*edits)->graph_steps == 0);
  std::filesystem::remove_all(dir);
}

TEST_CASE(
    "gpu executor with FlashInfer attention is logprob-close to the native kernels, and graphs one "
    "step at a time "
    "or two in flight give the same tokens",
    "[gpu][executor][flashinfer]") {
  COSERVE_REQUIRE_DEVICE_OR_SKIP();
  if (!gpu::flashinfer_built()) COSERVE_SKIP("built without the FlashInfer headers");
  // head_dim 64 (the demo default) and 128, GQA 4.
  for (const int32_t head_dim : {64, 128}) {
    const auto dir = std::filesystem::temp_directory_path() /
                     ("coserve_gpu_demo_fi_" + std::to_string(head_dim));
    demo_options o = gpu_demo_options(31);
    o.head_dim = head_dim;
    REQUIRE(make_demo_model(dir.string(), o).ok());
    auto make = [&](const std::string& backend, bool eager, bool logits) {
      gpu::gpu_executor_options go = folder_options(dir.string());
      go.return_logits = logits;
      go.enforce_eager = eager;
      go.attention_backend = backend;
      auto e = gpu::make_gpu_executor(go);
      INFO((e.ok() ? std::string() : e.err().message));
      REQUIRE(e.ok());
      return std::move(*e);
    };
    auto native = make("native", true, true);
    auto fi = make("flashinfer", true, true);
    // Prompts of 3..138 tokens: query tiles of 16, 64 and 128 rows, then decodes.
    const auto prompts = ramp_prompts(10, 3, 15, 17, 0);
    for (size_t i = 0; i < prompts.size(); ++i)
      check_logprobs_close_to(
          *native, *fi, 3000 + i, prompts[i],
          "head_dim " + std::to_string(head_dim) + " prompt " + std::to_string(i));
    // Graph steps are planned in FlashInfer's CUDA-graph mode (always split over KV, then merged),
    // so they round differently from eager decodes: the prefill's token is the same, and graphs one
    // step at a time and two in flight give the same tokens.
    auto fi_eager = make("flashinfer", true, false);
    auto fi_graphs = make("flashinfer", false, false);
    const auto a = drive(*fi_eager, prompts, 32, 16);
    const auto b = drive(*fi_graphs, prompts, 32, 16);
    const auto c = drive(*fi_graphs, prompts, 32, 16, nullptr, true);
    for (size_t i = 0; i < prompts.size(); ++i) {
      CAPTURE(head_dim, i);
      CHECK(b.tokens[i].front() == a.tokens[i].front());
      CHECK(c.tokens[i] == b.tokens[i]);
    }
    CHECK(gpu::gpu_step_timeline(*fi_graphs)->graph_steps >= 2 * 31);
    std::filesystem::remove_all(dir);
  }
}

// Host only (runs without a device): what rank 0 sends ranks in other processes.
TEST_CASE(
    "tensor parallel jobs, setup and startup reports survive their encoding, and malformed ones "
    "are refused",
    "[gpu_host][tp]") {
  gpu::peer_job j;
  j.what = gpu::peer_job::kind::capture;
  j.block_copies = {{3, 9}, {4, 10}};
  j.forward = true;
  j.graph = true;
  j.bucket = 16;
  j.meta = {1, 2, 3, 250, 0, 7};
  alignas(16) static char base[256];
  j.base = base;
  j.in.ids = reinterpret_cast<const int32_t*>(base + 16);
  j.in.work = reinterpret_cast<const gpu::attn_work_item*>(base + 64);
  j.in.attn_counts = reinterpret_cast<const int32_t*>(base + 128);
  j.row_slots = reinterpret_cast<const int32_t*>(base + 192);
  j.in.num_tokens = 16;
  j.in.num_work = 5;
  j.in.num_merges = 2;
  j.num_samples = 16;
  j.arena_bytes = 4096;
  j.num_kv_blocks = 77;
  j.pick_base = 1088;
  j.num_picks = 12;
  j.in.fi.on = true;
  j.in.fi.kv_indices = reinterpret_cast<const int32_t*>(base + 208);
  j.in.fi.block_valid_mask = reinterpret_cast<const uint8_t*>(base + 240);
  j.in.fi.padded_batch_size = 66;
  j.in.fi.cta_tile_q = 16;
  j.in.fi.num_rows = 16;
  j.in.fi.split_kv = true;
  j.in.fi.cuda_graph = true;
  const auto bytes = gpu::encode_peer_job(j);
  auto d = gpu::decode_peer_job(bytes);
  REQUIRE(d.ok());
  CHECK(d->what == j.what);
  CHECK(d->block_copies == j.block_copies);
  CHECK(d->forward);
  CHECK(d->graph);
  CHECK(d->bucket == 16);
  CHECK(d->meta == j.meta);
  CHECK(d->base == j.base);
  CHECK(d->in.ids == j.in.ids);
  CHECK(d->in.positions == nullptr);
  CHECK(d->in.work == j.in.work);
  CHECK(d->in.attn_counts == j.in.attn_counts);
  CHECK(d->row_slots == j.row_slots);
  CHECK(d->in.num_work == 5);
  CHECK(d->in.num_merges == 2);
  CHECK(d->num_samples == 16);
  CHECK(d->arena_bytes == 4096);
  CHECK(d->num_kv_blocks == 77);
  CHECK(d->pick_base == 1088);
  CHECK(d->num_picks == 12);
  // Rebased onto a peer's copy of the metadata, offsets are kept.
  alignas(16) static char other[256];
  const gpu::layer_inputs in = gpu::rebase(d->in, d->base, other);
  CHECK(reinterpret_cast<const char*>(in.ids) == other + 16);
  CHECK(reinterpret_cast<const char*>(in.work) == other + 64);
  CHECK(in.positions == nullptr);
  CHECK(reinterpret_cast<const char*>(gpu::rebase_ptr(d->row_slots, d->base, other)) ==
        other + 192);
  // FlashInfer's step view travels and is rebased the same way.
  CHECK(in.fi.on);
  CHECK(reinterpret_cast<const char*>(in.fi.kv_indices) == other + 208);
  CHECK(reinterpret_cast<const char*>(in.fi.block_valid_mask) == other + 240);
  CHECK(in.fi.kv_indptr == nullptr);
  CHECK(in.fi.padded_batch_size == 66);
  CHECK(in.fi.cta_tile_q == 16);
  CHECK(in.fi.num_rows == 16);
  CHECK(in.fi.split_kv);
  CHECK(in.fi.cuda_graph);
  for (size_t cut : {size_t(0), size_t(3), bytes.size() / 2, bytes.size() - 1}) {
    std::vector<unsigned char> bad(bytes.begin(), bytes.begin() + ptrdiff_t(cut));
    CHECK_FALSE(gpu::decode_peer_job(bad).ok());
  }
  std::vector<unsigned char> longer = bytes;
  longer.push_back(0);
  CHECK_FALSE(gpu::decode_peer_job(longer).ok());

  gpu::remote_tp_setup su;
  su.max_num_tokens = 2048;
  su.block_size = 32;
  su.last_token_slots = 1088;
  su.kv_type = gpu::kv_elem::fp8_e4m3;
  su.gpu_memory_utilization = 0.85;
  su.metadata_bytes = 1 << 24;
  su.dummy_seed = 9;
  su.tune_gemms = false;
  su.fp8 = true;
  su.dummy = true;
  su.fi_tmp_rows = 8192;
  auto sd = gpu::decode_remote_tp_setup(gpu::encode_remote_tp_setup(su));
  REQUIRE(sd.ok());
  CHECK(sd->max_num_tokens == 2048);
  CHECK(sd->block_size == 32);
  CHECK(sd->last_token_slots == 1088);
  CHECK(sd->kv_type == gpu::kv_elem::fp8_e4m3);
  CHECK(sd->gpu_memory_utilization == 0.85);
  CHECK(sd->metadata_bytes == (1u << 24));
  CHECK(sd->dummy_seed == 9);
  CHECK_FALSE(sd->tune_gemms);
  CHECK(sd->fp8);
  CHECK(sd->dummy);
  CHECK(sd->fi_tmp_rows == 8192);
  CHECK_FALSE(gpu::decode_remote_tp_setup(bytes).ok());

  // Rank 0 gathers every rank's report: the fewest blocks, or the first rank's error by name.
  std::vector<unsigned char> all;
  for (auto [blocks, why] : {std::pair<int32_t, std::string>{900, ""}, {700, ""}}) {
    const auto r = gpu::encode_remote_report(blocks, why);
    all.insert(all.end(), r.begin(), r.end());
  }
  auto fits = gpu::decode_remote_reports(all, 2);
  REQUIRE(fits.ok());
  CHECK(*fits == std::vector<int32_t>{900, 700});
  const auto failed = gpu::encode_remote_report(0, "cudaSetDevice: no device");
  all.insert(all.end(), failed.begin(), failed.end());
  auto bad = gpu::decode_remote_reports(all, 3);
  REQUIRE_FALSE(bad.ok());
  CHECK(bad.err().message.find("rank 2: cudaSetDevice: no device") != std::string::npos);
}

TEST_CASE("gpu executor through a one-rank NCCL group gives the tokens it gives without one",
          "[gpu][executor][tp]") {
  COSERVE_REQUIRE_DEVICE_OR_SKIP();
  // The tensor-parallel path on one GPU: every all-reduce and the sampled ids' broadcast go
  // through NCCL (a one-rank group: each a copy), eagerly and inside CUDA graphs.
  const auto dir = std::filesystem::temp_directory_path() / "coserve_gpu_demo_nccl1";
  REQUIRE(make_demo_model(dir.string(), gpu_demo_options(23)).ok());
  auto make = [&](bool nccl, bool eager) {
    gpu::gpu_executor_options go = folder_options(dir.string());
    go.return_logits = false;
    go.enforce_eager = eager;
    go.nccl_single_rank = nccl;
    auto e = gpu::make_gpu_executor(go);
    INFO((e.ok() ? std::string() : e.err().message));
    REQUIRE(e.ok());
    return std::move(*e);
  };
  auto plain = make(false, true);
  auto nccl_eager = make(true, true);
  auto nccl_graphs = make(true, false);
  const auto prompts = ramp_prompts(10, 3, 5, 17, 0);
  const auto a = drive(*plain, prompts, 24, 16);
  const auto b = drive(*nccl_eager, prompts, 24, 16);
  const auto c = drive(*nccl_graphs, prompts, 24, 16, nullptr, true);
  for (size_t i = 0; i < prompts.size(); ++i) {
    CAPTURE(i);
    CHECK(b.tokens[i] == a.tokens[i]);
    CHECK(c.tokens[i] == a.tokens[i]);
  }
  CHECK(gpu::gpu_step_timeline(*nccl_graphs)->graph_steps >= 23);
  std::filesystem::remove_all(dir);
}

TEST_CASE(
    "gpu executor with tensor parallel 2 and 4 (NCCL) is logprob-close to one GPU, graphs, two "
    "steps in "
    "flight and a draft model included",
    "[gpu][executor][tp]") {
  COSERVE_REQUIRE_DEVICE_OR_SKIP();
  if (gpu::device_count() < 2) COSERVE_SKIP("tensor parallelism needs at least 2 CUDA devices");
  // 8 query heads over 2 KV heads: at 2 ranks each holds one KV head, at 4 each KV head is held by
  // two ranks. The second model has attention biases (q/k/v split by heads, o_proj's added once,
  // on rank 0, before the all-reduce).
  for (const bool bias : {false, true}) {
    const char* arch = bias ? "llama+attention_bias" : "llama";
    const auto dir =
        std::filesystem::temp_directory_path() / ("coserve_gpu_demo_tp_" + std::to_string(bias));
    demo_options o = gpu_demo_options(21);
    o.qkv_bias = bias;
    REQUIRE(make_demo_model(dir.string(), o).ok());
    auto make = [&](int32_t tp, bool eager) {
      gpu::gpu_executor_options go = folder_options(dir.string());
      go.return_logits = false;
      go.tensor_parallel_size = tp;
      go.enforce_eager = eager;
      auto e = gpu::make_gpu_executor(go);
      INFO((e.ok() ? std::string() : e.err().message));
      REQUIRE(e.ok());
      return std::move(*e);
    };
    auto one = make(1, true);
    const auto prompts = ramp_prompts(10, 3, 5, 17, 0);
    for (int32_t tp : {2, 4}) {
      if (gpu::device_count() < tp) {
        WARN("tensor parallel " << tp << " not run: " << gpu::device_count() << " CUDA devices");
        continue;
      }
      auto eager = make(tp, true);
      auto graphs = make(tp, false);
      for (size_t i = 0; i < prompts.size(); ++i)
        check_logprobs_close_to(
            *one, *eager, 2000 + i, prompts[i],
            std::string(arch) + " tp " + std::to_string(tp) + " prompt " + std::to_string(i));
      // The same ranks with graphs and two steps in flight compute the same sums: identical tokens.
      const auto a = drive(*eager, prompts, 24, 16);
      const auto b = drive(*graphs, prompts, 24, 16, nullptr, true);
      for (size_t i = 0; i < prompts.size(); ++i) {
        CAPTURE(arch, tp, i);
        CHECK(b.tokens[i] == a.tokens[i]);
      }
      CHECK(gpu::gpu_step_timeline(*graphs)->graph_steps >= 23);
      // The model as its own draft on rank 0, its picks broadcast to the other ranks.
      gpu::gpu_executor_options so = folder_options(dir.string());
      so.return_logits = false;
      so.tensor_parallel_size = tp;
      so.num_speculative_tokens = 3;
      so.draft_model_dir = dir.string();
      auto spec_ex = gpu::make_gpu_executor(so);
      INFO((spec_ex.ok() ? std::string() : spec_ex.err().message));
      REQUIRE(spec_ex.ok());
      sampling_params greedy;
      greedy.temperature = 0.0f;
      const auto plain =
          test::drive_verify(*eager, prompts, 24, 16, {greedy}, {}, 0, 2000, 1, 3000);
      const auto spec =
          test::drive_verify(**spec_ex, prompts, 24, 16, {greedy}, {}, 3, 2000, 2, 3000, true);
      INFO(spec.accepted << " of " << spec.proposed << " proposals accepted");
      CHECK(spec.tokens == plain.tokens);
      CHECK(spec.accepted * 100 >= spec.proposed * 95);
    }
    std::filesystem::remove_all(dir);
  }
}

TEST_CASE(
    "gpu executor with FlashInfer attention under tensor parallel 2: logprob-close to one GPU, "
    "graphs one step "
    "at a time or two in flight give the same tokens",
    "[gpu][executor][tp][flashinfer]") {
  COSERVE_REQUIRE_DEVICE_OR_SKIP();
  if (!gpu::flashinfer_built()) COSERVE_SKIP("built without the FlashInfer headers");
  if (gpu::device_count() < 2) COSERVE_SKIP("tensor parallelism needs at least 2 CUDA devices");
  // Peers read rank 0's FlashInfer plan (made for all KV heads) over their own share of the heads.
  const auto dir = std::filesystem::temp_directory_path() / "coserve_gpu_demo_tp_fi";
  REQUIRE(make_demo_model(dir.string(), gpu_demo_options(23)).ok());
  auto make = [&](int32_t tp, bool eager, bool logits) {
    gpu::gpu_executor_options go = folder_options(dir.string());
    go.return_logits = logits;
    go.tensor_parallel_size = tp;
    go.enforce_eager = eager;
    go.attention_backend = "flashinfer";
    auto e = gpu::make_gpu_executor(go);
    INFO((e.ok() ? std::string() : e.err().message));
    REQUIRE(e.ok());
    return std::move(*e);
  };
  const auto prompts = ramp_prompts(10, 3, 15, 17, 0);
  {
    auto one = make(1, true, true);
    auto two = make(2, true, true);
    for (size_t i = 0; i < prompts.size(); ++i)
      check_logprobs_close_to(*one, *two, 4000 + i, prompts[i],
                              "flashinfer tp 2 prompt " + std::to_string(i));
  }
  auto graphs = make(2, false, false);
  const auto a = drive(*graphs, prompts, 24, 16);
  const auto b = drive(*graphs, prompts, 24, 16, nullptr, true);
  for (size_t i = 0; i < prompts.size(); ++i) {
    CAPTURE(i);
    CHECK(b.tokens[i] == a.tokens[i]);
  }
  CHECK(gpu::gpu_step_timeline(*graphs)->graph_steps >= 2 * 23);
  std::filesystem::remove_all(dir);
}

TEST_CASE("gpu executor under a grammar: every sampled output follows it (token bitmask kernel)",
          "[gpu][executor][structured]") {
  COSERVE_REQUIRE_DEVICE_OR_SKIP();
  COSERVE_SKIP_UNLESS_EXISTS(test::testdata() / "tokenizers/gpt2/tokenizer.json");
  const auto dir = std::filesystem::temp_directory_path() / "coserve_gpu_demo_grammar";
  demo_options o;
  o.seed = 5;
  REQUIRE(make_demo_model(dir.string(), o).ok());
  auto tok = tokenizer::load(dir.string());
  REQUIRE(tok.ok());
  const int32_t eos = *tok->token_to_id("<|endoftext|>");
  auto gc = grammar_compiler::create(*tok, tok->vocab_size(), {eos});
  REQUIRE(gc.ok());
  grammar_spec spec;
  spec.type = grammar_spec::kind::regex;
  spec.text = "[a-z]{2,6}-[0-9]{2,3}";
  auto g = (*gc)->compile(spec);
  REQUIRE(g.ok());
  sampling_params sp;
  sp.temperature = 1.0f;
  sp.grammar = *g;
  gpu::gpu_executor_options go;
  go.model_dir = dir.string();
  go.num_kv_blocks = 256;
  go.max_num_tokens = 1024;
  go.max_num_seqs = 16;
  auto gpu_ex = gpu::make_gpu_executor(go);
  REQUIRE(gpu_ex.ok());
  std::vector<std::vector<int32_t>> prompts;
  for (int32_t i = 0; i < 8; ++i) prompts.push_back({int32_t(100 + i), 200, 300});
  auto out = drive(**gpu_ex, prompts, 12, 16, &sp);
  for (const auto& ids : out.tokens) {
    std::string text;
    bool ended = false;
    for (int32_t t : ids) {
      if (t == eos) {
        ended = true;
        break;
      }
      text += tok->token_bytes(t);
    }
    INFO(text);
    CHECK(ended);
    CHECK(std::regex_match(text, std::regex(spec.text)));
  }
  std::filesystem::remove_all(dir);
}

TEST_CASE("gpu executor: dummy weights, unknown sequences, penalties and top logprobs",
          "[gpu][executor]") {
  COSERVE_REQUIRE_DEVICE_OR_SKIP();
  gpu::gpu_executor_options go = dummy_options(256, 512, 2, 1000, 0.5);
  auto ex = gpu::make_gpu_executor(go);
  REQUIRE(ex.ok());
  CHECK((*ex)->info().num_kv_blocks > 0);
  step_plan p;
  scheduled_seq s{1, {1, 2, 3}, 0, {0}, true};
  p.seqs.push_back(s);
  CHECK_FALSE((*ex)->execute(p).ok());  // never registered
  new_seq n;
  n.seq_id = 1;
  n.params.temperature = 0.8f;
  n.params.top_p = 0.9f;
  n.seed = 5;
  p.new_seqs.push_back(n);
  auto r = (*ex)->execute(p);
  REQUIRE(r.ok());
  REQUIRE(r->outputs.size() == 1);
  CHECK(r->outputs[0].token >= 0);
  CHECK(r->outputs[0].token < 1000);
  CHECK(r->outputs[0].logprob <= 0.0f);
  // penalties, bias and top-N logprobs
  step_plan q;
  new_seq pen;
  pen.seq_id = 2;
  pen.params.temperature = 0.0f;
  pen.params.repetition_penalty = 1.3f;
  pen.params.logit_bias = {{42, 100.0f}};
  pen.params.logprobs = 3;
  q.new_seqs.push_back(pen);
  q.seqs.push_back(scheduled_seq{2, {4, 5, 6}, 0, {1}, true});
  auto rq = (*ex)->execute(q);
  REQUIRE(rq.ok());
  REQUIRE(rq->outputs.size() == 1);
  CHECK(rq->outputs[0].token == 42);  // a +100 bias wins greedy
  REQUIRE(rq->outputs[0].top_logprobs.size() == 3);
  CHECK(rq->outputs[0].top_logprobs[0].token == 42);
  CHECK(rq->outputs[0].top_logprobs[0].logprob >= rq->outputs[0].top_logprobs[1].logprob);
  CHECK(rq->outputs[0].top_logprobs[1].logprob >= rq->outputs[0].top_logprobs[2].logprob);
}

// Hugging Face transformers comparison: the folder and greedy ids come from
// tests/reference/gpu_vs_hf.py, run on the GPU machine; skipped unless COSERVE_GPU_HF_DIR names it.
TEST_CASE("gpu executor matches Hugging Face transformers greedy decoding", "[gpu][hf]") {
  COSERVE_REQUIRE_DEVICE_OR_SKIP();
  const char* dir = std::getenv("COSERVE_GPU_HF_DIR");
  if (dir == nullptr)
    COSERVE_SKIP("set COSERVE_GPU_HF_DIR to a folder made by tests/reference/gpu_vs_hf.py");
  std::vector<std::vector<int32_t>> prompts, expect;
  read_hf_greedy(dir, prompts, expect);
  REQUIRE(!prompts.empty());
  gpu::gpu_executor_options go;
  go.model_dir = dir;
  go.num_kv_blocks = 2048;
  go.max_num_tokens = 8192;
  go.max_num_seqs = 64;
  auto ex = gpu::make_gpu_executor(go);
  REQUIRE(ex.ok());
  const int32_t steps = int32_t(expect[0].size());
  auto got = drive(**ex, prompts, steps, 16);
  // The CPU executor (fp32 compute from the same bf16 weights) on the same folder: a third opinion
  // that tells a GPU error from bf16 rounding on a random model's flat distributions.
  cpu_executor_options co;
  co.num_kv_blocks = 2048;
  auto cpu = cpu_executor::load(dir, co);
  REQUIRE(cpu.ok());
  auto ref = drive(**cpu, prompts, steps, 16);
  auto common = [](const std::vector<int32_t>& a, const std::vector<int32_t>& b) {
    size_t k = 0;
    while (k < a.size() && k < b.size() && a[k] == b[k]) ++k;
    return k;
  };
  int equal = 0, first_equal = 0, cpu_equal = 0;
  std::ostringstream prefixes;
  for (size_t i = 0; i < prompts.size(); ++i) {
    equal += got.tokens[i] == expect[i];
    cpu_equal += ref.tokens[i] == expect[i];
    first_equal += !got.tokens[i].empty() && !expect[i].empty() && got.tokens[i][0] == expect[i][0];
    prefixes << " " << common(got.tokens[i], expect[i]) << "/" << common(ref.tokens[i], expect[i])
             << "/" << common(got.tokens[i], ref.tokens[i]);
  }
  WARN("common prefix lengths gpu-vs-hf/cpu-vs-hf/gpu-vs-cpu of " << steps << ":"
                                                                  << prefixes.str());
  INFO("identical greedy continuations vs transformers: "
       << equal << " / " << prompts.size() << " (cpu executor: " << cpu_equal << ")");
  // The fp32 CPU executor is the reference the GPU is held to; it must reproduce transformers.
  CHECK(cpu_equal * 10 >= int(prompts.size()) * 9);
  CHECK(first_equal * 10 >= int(prompts.size()) * 9);
  CHECK(equal * 10 >= int(prompts.size()) * 9);
}

// vLLM's check_logprobs_close against transformers: the CUDA executor teacher-forced on
// transformers' greedy ids (hf_greedy.txt), its logits per step against transformers' own
// (hf_logits.bin, from the same script). With --compute-dtype bfloat16 it is the criterion "vs
// transformers in bf16"; with float32 the reference carries no rounding at all.
TEST_CASE("gpu executor is logprob-close to transformers, teacher-forced on its greedy ids",
          "[gpu][hf]") {
  COSERVE_REQUIRE_DEVICE_OR_SKIP();
  const char* dir = std::getenv("COSERVE_GPU_HF_DIR");
  if (dir == nullptr)
    COSERVE_SKIP("set COSERVE_GPU_HF_DIR to a folder made by tests/reference/gpu_vs_hf.py");
  std::ifstream bin(std::string(dir) + "/hf_logits.bin", std::ios::binary);
  if (!bin.good())
    COSERVE_SKIP("no hf_logits.bin in COSERVE_GPU_HF_DIR (made by the current gpu_vs_hf.py)");
  char magic[4] = {};
  uint32_t n_prompts = 0, steps = 0, vocab = 0;
  bin.read(magic, 4);
  bin.read(reinterpret_cast<char*>(&n_prompts), 4);
  bin.read(reinterpret_cast<char*>(&steps), 4);
  bin.read(reinterpret_cast<char*>(&vocab), 4);
  REQUIRE(std::string(magic, 4) == "CSHL");
  REQUIRE((n_prompts > 0 && steps > 0 && vocab > 0));
  std::vector<std::vector<int32_t>> prompts, greedy;
  read_hf_greedy(dir, prompts, greedy);
  REQUIRE(prompts.size() == n_prompts);
  gpu::gpu_executor_options go;
  go.model_dir = dir;
  go.num_kv_blocks = 2048;
  go.max_num_tokens = 8192;
  go.max_num_seqs = 64;
  go.return_logits = true;
  auto ex = gpu::make_gpu_executor(go);
  REQUIRE(ex.ok());
  int passed = 0;
  for (size_t i = 0; i < prompts.size(); ++i) {
    REQUIRE(greedy[i].size() == steps);
    std::vector<std::vector<float>> hf(steps, std::vector<float>(vocab));
    for (auto& row : hf) bin.read(reinterpret_cast<char*>(row.data()), std::streamsize(vocab) * 4);
    REQUIRE(bin.good());
    // steps rows: after the prompt, then after each of the first steps - 1 greedy ids
    const auto g =
        test::run_logits(**ex, seq_id_t(5000 + i), prompts[i], &greedy[i], int32_t(steps) - 1, 16);
    REQUIRE(g.rows.size() == steps);
    const auto close = test::logprobs_close(hf, g.rows);
    float worst = 0.0f;
    for (float d : close.max_abs_logit_diff) worst = std::max(worst, d);
    INFO("prompt " << i << " (" << prompts[i].size() << " tokens): " << close.steps_compared
                   << " steps compared, diverged at " << close.diverged_at
                   << ", per-step max |dlogit| " << worst << " " << close.why);
    CHECK(close.ok);
    passed += close.ok;
  }
  WARN(passed << " of " << prompts.size() << " prompts logprob-close to transformers");
}

TEST_CASE(
    "gpu executor verifies proposals: greedy and seeded sampled outputs equal plain decoding's",
    "[gpu][executor][speculation]") {
  COSERVE_REQUIRE_DEVICE_OR_SKIP();
  const auto dir = std::filesystem::temp_directory_path() / "coserve_gpu_verify_demo";
  REQUIRE(make_demo_model(dir.string(), gpu_demo_options(5)).ok());
  gpu::gpu_executor_options go = folder_options(dir.string());
  go.num_speculative_tokens = 4;
  auto ex = gpu::make_gpu_executor(go);
  REQUIRE(ex.ok());
  CHECK((*ex)->info().verifies_proposals);
  const auto prompts = ramp_prompts(8, 3, 4, 17, 0);
  sampling_params greedy;
  greedy.temperature = 0.0f;
  sampling_params greedy_top = greedy;
  greedy_top.logprobs = 3;
  sampling_params sampled;
  sampled.temperature = 0.8f;
  sampled.top_p = 0.9f;
  sampling_params penalised = sampled;
  penalised.repetition_penalty = 1.1f;
  penalised.frequency_penalty = 0.3f;
  for (const auto& params : {std::vector<sampling_params>{greedy, greedy_top},
                             std::vector<sampling_params>{sampled, penalised}}) {
    const auto plain = test::drive_verify(**ex, prompts, 32, 16, params, {}, 0, 2000, 1);
    const auto spec =
        test::drive_verify(**ex, prompts, 32, 16, params, plain.tokens, 4, 2000, 2, 100);
    INFO("temperature " << params[0].temperature << ": " << spec.accepted << " of " << spec.proposed
                        << " proposals accepted");
    // A row draws what plain decoding draws at that output index, so even seeded sampling matches.
    CHECK(spec.tokens == plain.tokens);
    CHECK(spec.accepted > 0);
    CHECK(spec.accepted < spec.proposed);
    if (params[1].logprobs > 0)
      for (size_t i = 1; i < prompts.size(); i += 2)
        for (size_t c : spec.top_counts[i]) CHECK(c == 3);
  }
  // Without num_speculative_tokens the executor refuses proposals (and reports it cannot verify).
  gpu::gpu_executor_options none = folder_options(dir.string());
  auto plain_ex = gpu::make_gpu_executor(none);
  REQUIRE(plain_ex.ok());
  CHECK_FALSE((*plain_ex)->info().verifies_proposals);
  step_plan p;
  p.step_id = 1;
  new_seq ns;
  ns.seq_id = 1;
  ns.prompt_ids = {5, 6, 7};
  p.new_seqs.push_back(ns);
  scheduled_seq q;
  q.seq_id = 1;
  q.tokens = {5, 6, 7};
  q.block_table = {0};
  q.sample = true;
  q.num_draft = 1;
  p.seqs.push_back(q);
  auto refused = (*plain_ex)->execute(p);
  INFO((refused.ok() ? "outputs " + std::to_string(refused->outputs.size())
                     : refused.err().message));
  CHECK_FALSE(refused.ok());
  std::filesystem::remove_all(dir);
}

TEST_CASE(
    "gpu executor with a draft model: outputs equal plain decoding's, the model as its own draft "
    "accepts its "
    "proposals",
    "[gpu][executor][speculation][draft]") {
  COSERVE_REQUIRE_DEVICE_OR_SKIP();
  // The same driver runs on the CPU executor in CI (coserve_model_compute_tests "executor:
  // proposals from a draft model*"). The draft's picks stay on the device; the host learns them
  // with the outputs.
  const auto dir = std::filesystem::temp_directory_path() / "coserve_gpu_draft_demo";
  const auto other = std::filesystem::temp_directory_path() / "coserve_gpu_draft_other";
  REQUIRE(make_demo_model(dir.string(), gpu_demo_options(5)).ok());
  demo_options small = gpu_demo_options(77);
  small.num_layers = 1;
  REQUIRE(make_demo_model(other.string(), small).ok());
  const auto prompts = ramp_prompts(8, 3, 4, 17, 0);
  sampling_params greedy;
  greedy.temperature = 0.0f;
  sampling_params sampled;
  sampled.temperature = 0.8f;
  sampled.top_p = 0.9f;
  sampling_params penalised = sampled;
  penalised.repetition_penalty = 1.1f;
  auto plain_ex = gpu::make_gpu_executor(folder_options(dir.string()));
  REQUIRE(plain_ex.ok());
  for (const auto& params :
       {std::vector<sampling_params>{greedy}, std::vector<sampling_params>{sampled, penalised}}) {
    const auto plain = test::drive_verify(**plain_ex, prompts, 32, 16, params, {}, 0, 2000, 1);
    for (const auto& draft : {dir, other}) {
      gpu::gpu_executor_options go = folder_options(dir.string());
      go.num_speculative_tokens = 3;
      go.draft_model_dir = draft.string();
      auto ex = gpu::make_gpu_executor(go);
      INFO((ex.ok() ? std::string() : ex.err().message));
      REQUIRE(ex.ok());
      const auto spec =
          test::drive_verify(**ex, prompts, 32, 16, params, {}, 3, 2000, 2, 100, true);
      INFO("draft " << draft.filename() << ", temperature " << params[0].temperature << ": "
                    << spec.accepted << " of " << spec.proposed << " accepted");
      // Sample-and-compare with greedy picks is exact: seeded rows draw what plain decoding draws.
      CHECK(spec.tokens == plain.tokens);
      CHECK(spec.proposed > 0);
      // Itself as the draft: a greedy proposal is the model's own argmax (bf16 sums of another
      // batch shape may flip a near tie, hence 95%, not all).
      if (draft == dir && params[0].temperature == 0.0f)
        CHECK(spec.accepted * 100 >= spec.proposed * 95);
      if (draft == other) CHECK(spec.accepted < spec.proposed);
    }
  }
  // A draft whose vocabulary differs is refused naming 'model'.
  demo_options wrong = gpu_demo_options(78);
  wrong.vocab_size = 1000;
  const auto wrong_dir = std::filesystem::temp_directory_path() / "coserve_gpu_draft_wrong";
  REQUIRE(make_demo_model(wrong_dir.string(), wrong).ok());
  gpu::gpu_executor_options bad = folder_options(dir.string());
  bad.num_speculative_tokens = 2;
  bad.draft_model_dir = wrong_dir.string();
  auto refused = gpu::make_gpu_executor(bad);
  REQUIRE_FALSE(refused.ok());
  CHECK(refused.err().param == "model");
  for (const auto& d : {dir, other, wrong_dir}) std::filesystem::remove_all(d);
}

TEST_CASE(
    "gpu executor: prompt logprobs across chunks and beside other sequences equal the next-token "
    "logits",
    "[gpu][executor][prompt_logprobs]") {
  COSERVE_REQUIRE_DEVICE_OR_SKIP();
  const auto dir = std::filesystem::temp_directory_path() / "coserve_gpu_plp_demo";
  REQUIRE(make_demo_model(dir.string(), gpu_demo_options(6)).ok());
  auto ex = gpu::make_gpu_executor(folder_options(dir.string()));
  REQUIRE(ex.ok());
  CHECK((*ex)->info().computes_prompt_logprobs);
  // The entries come from the prompt rows' own LM-head pass (other GEMM shapes, other attention
  // tiles than the prefixes' prefills): bf16 tolerance.
  test::prompt_logprobs_case(**ex, 2000, 0.05);
  std::filesystem::remove_all(dir);
}
