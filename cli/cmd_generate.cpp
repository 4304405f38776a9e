// `coserve generate MODEL_DIR ...`: one request through the serving engine (the same actor graph
// the server runs), printing its tokens (and logits); or, with --bench, prefill/decode throughput
// of the CPU executor alone.
#include <algorithm>
#include <asio/co_spawn.hpp>
#include <asio/detached.hpp>
#include <asio/io_context.hpp>
#include <asio/use_awaitable.hpp>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include "actors/engine.hpp"
#include "cli/commands.hpp"
#include "cli/serve_flags.hpp"
#include "model/cpu_executor.hpp"
#include "model/cpu_kernels.hpp"

namespace coserve::cli {
namespace {

const char* k_help =
    "usage: coserve generate MODEL_DIR (--prompt-ids 1,2,3 | --prompt TEXT) --max-tokens N "
    "[options]\n"
    "       coserve generate MODEL_DIR --bench [--batch B] [--prompt-len P] [--max-tokens N]\n"
    "  MODEL_DIR: a Hugging Face model folder or a GGUF file (docs/gguf.md)\n"
    "\n"
    "  --prompt-ids LIST     comma-separated prompt token ids\n"
    "  --prompt TEXT         prompt text, encoded with the folder's tokenizer (special tokens "
    "added)\n"
    "  --max-tokens N        tokens to generate (default 16)\n"
    "  --temperature T       0 = greedy (default 0)\n"
    "  --top-p P --top-k K --min-p P --repetition-penalty R --seed S\n"
    "  --ignore-eos          keep generating after an eos token\n"
    "  --logits MODE         none (default) | last: the logits of the last prompt position |\n"
    "                        all: that row and one per later generated token (each row the raw\n"
    "                        logits the token after it was sampled from)\n"
    "  --json                print {\"prompt_ids\":[..],\"output_ids\":[..],\"logits\":[[..],..]}\n"
    "  --threads N           CPU executor threads (default: physical cores)\n"
    "  --tensor-parallel-size N  split the layers over N ranks: threads of this process sharing\n"
    "                        --threads, or with --device cuda N GPUs (docs/distributed.md; MPI "
    "ranks\n"
    "                        are `serve`'s) (default 1)\n"
    "  --kv-cache-dtype D    auto (bf16) | bf16 | fp16 | fp32 | fp8 (= fp8_e4m3) | fp8_e5m2 "
    "(default auto)\n"
    "  --dtype D             auto | bfloat16 | float32: activations multiplied with bf16 weights "
    "are\n"
    "                        rounded to bf16 (auto, bfloat16) or kept fp32 (float32) (default "
    "auto)\n"
    "  --cpu-isa NAME        instruction set of the CPU kernels: auto (default: the best this CPU\n"
    "                        runs) or one it runs, e.g. AVX2 to time that path on a newer CPU;\n"
    "                        a name it cannot run is an error that lists those it can\n"
    "  --device D            cpu (default) or cuda (builds with the CUDA executor)\n"
    "  --quantization fp8    --device cuda: fp8 W8A8 layer matrices (serve --help explains)\n"
    "  --attention-backend B --device cuda: auto (default), native or flashinfer (serve --help "
    "explains)\n"
    "  --trace-file PATH     write the actors' Chrome trace (open in Perfetto) when done\n"
    "  --bench               throughput: B sequences of P random prompt tokens, one prefill step,\n"
    "                        then N decode steps, after one warm-up pass; prints JSON: prefill "
    "and\n"
    "                        decode tokens/s, the bytes a decode step reads and the GB/s that\n"
    "                        makes, and the share of decode time per phase\n";

bool parse_ids(std::string_view s, std::vector<int32_t>& out) {
  while (!s.empty()) {
    const size_t comma = s.find(',');
    const std::string part(s.substr(0, comma));
    char* end = nullptr;
    const long v = std::strtol(part.c_str(), &end, 10);
    if (part.empty() || *end != '\0' || v < 0) return false;
    out.push_back(int32_t(v));
    if (comma == std::string_view::npos) break;
    s.remove_prefix(comma + 1);
  }
  return !out.empty();
}

void print_row(const std::vector<float>& row) {
  std::putchar('[');
  for (size_t i = 0; i < row.size(); ++i) std::printf(i ? ",%.9g" : "%.9g", double(row[i]));
  std::putchar(']');
}

std::vector<int32_t> blocks_for(int32_t first, int32_t tokens, int32_t bs) {
  std::vector<int32_t> t;
  for (int32_t i = 0; i < (tokens + bs - 1) / bs; ++i) t.push_back(first + i);
  return t;
}

int run_bench(cpu_executor& ex, int32_t batch, int32_t prompt_len, int32_t max_tokens) {
  const executor_info info = ex.info();
  const int32_t bs = info.block_size;
  const int32_t per_seq = (prompt_len + max_tokens + bs - 1) / bs;
  if (per_seq * batch > info.num_kv_blocks) {
    std::fprintf(stderr, "generate --bench: not enough KV blocks\n");
    return 2;
  }
  using clock = std::chrono::steady_clock;
  double prefill_s = 0, decode_s = 0;
  seq_rng rng(42);
  // Pass 0 warms up (pages of the mapped weights, scratch buffers, threads); pass 1 is measured.
  for (int pass = 0; pass < 2; ++pass) {
    step_plan plan;
    for (int32_t b = 0; b < batch; ++b) {
      new_seq ns;
      ns.seq_id = seq_id_t(pass * batch + b);
      ns.params.temperature = 0.0f;
      for (int32_t i = 0; i < prompt_len; ++i)
        ns.prompt_ids.push_back(int32_t(rng.next() % uint64_t(info.vocab_size)));
      scheduled_seq s{ns.seq_id, ns.prompt_ids, 0,
                      blocks_for(b * per_seq, prompt_len + max_tokens, bs), true};
      plan.new_seqs.push_back(std::move(ns));
      plan.seqs.push_back(std::move(s));
    }
    const int32_t steps = pass == 0 ? std::min(max_tokens, 4) : max_tokens;
    auto t0 = clock::now();
    if (auto r = ex.execute(plan); !r) {
      std::fprintf(stderr, "generate --bench: %s\n", r.err().message.c_str());
      return 1;
    }
    prefill_s = std::chrono::duration<double>(clock::now() - t0).count();
    plan.new_seqs.clear();
    ex.reset_profile();
    auto t1 = clock::now();
    for (int32_t step = 0; step < steps; ++step) {
      for (auto& s : plan.seqs) {
        s.start_pos += int32_t(s.tokens.size());
        s.tokens = {k_token_from_last_step};
      }
      if (auto r = ex.execute(plan); !r) {
        std::fprintf(stderr, "generate --bench: %s\n", r.err().message.c_str());
        return 1;
      }
    }
    decode_s = std::chrono::duration<double>(clock::now() - t1).count();
    for (const auto& s : plan.seqs) plan.finished.push_back(s.seq_id);
    plan.seqs.clear();
    if (auto r = ex.execute(plan); !r) return 1;  // drops the pass's sequences
  }
  // Bytes one decode step reads: every weight matrix once (of a mixture of experts, the experts the
  // steps routed to, as counted by the forward pass), plus K and V of every cached position (at the
  // mean context of the decode steps).
  const model_config& c = ex.config();
  const double kv_elem = double(dtype_size(ex.kv_cache_dtype()));
  const double mean_ctx = prompt_len + (max_tokens + 1) / 2.0;
  const double kv_bytes = double(batch) * mean_ctx * c.num_hidden_layers * 2.0 *
                          c.num_key_value_heads * c.head_dim * kv_elem;
  // Tensor parallel: what all ranks read (rank 0's shard times the ranks: the shards differ by at
  // most one LM-head row; replicated KV heads are read on every rank holding them).
  const double ranks = double(std::max(1, ex.weights().shard.size));
  const forward_profile& p = ex.profile();
  const double expert_bytes = p.steps > 0 ? p.expert_bytes / double(p.steps) : 0.0;
  const double step_bytes =
      (double(ex.weights().matrix_bytes(false)) + expert_bytes) * ranks + kv_bytes;
  const double fwd = p.gemm_s + p.attention_s + p.other_s + p.comm_s;
  std::printf(
      "{\"device\":\"%s\",\"batch\":%d,\"prompt_len\":%d,\"decode_steps\":%d,"
      "\"prefill_s\":%.4f,\"prefill_tokens_per_s\":%.1f,\"decode_s\":%.4f,\"decode_tokens_per_s\":%"
      ".1f,"
      "\"decode_step_bytes\":%.0f,\"decode_gb_per_s\":%.2f,"
      "\"decode_split\":{\"gemm\":%.3f,\"attention\":%.3f,\"other\":%.3f,\"collectives\":%.3f,"
      "\"outside_forward\":%.3f}}\n",
      info.device.c_str(), batch, prompt_len, max_tokens, prefill_s,
      double(batch) * prompt_len / prefill_s, decode_s,
      max_tokens > 0 ? double(batch) * max_tokens / decode_s : 0.0, step_bytes,
      max_tokens > 0 ? step_bytes * max_tokens / decode_s / 1e9 : 0.0,
      decode_s > 0 ? p.gemm_s / decode_s : 0.0, decode_s > 0 ? p.attention_s / decode_s : 0.0,
      decode_s > 0 ? p.other_s / decode_s : 0.0, decode_s > 0 ? p.comm_s / decode_s : 0.0,
      decode_s > 0 ? std::max(0.0, decode_s - fwd) / decode_s : 0.0);
  return 0;
}

// What `generate` runs: its own flags, and those it takes from serve's table.
struct generate_args {
  std::string dir, prompt_text, logits_mode = "none";
  std::vector<int32_t> prompt;
  bool have_ids = false, have_text = false, json = false, bench = false, ignore_eos = false;
  int32_t max_tokens = 16, threads = 0, batch = 1, prompt_len = 128;
  // The flags taken from serve's table: .engine's device, tensor parallel size, KV cache and
  // compute dtypes, quantization, attention backend and trace file.
  serve_args serve;
  sampling_params params;
  uint64_t seed = 0;
};

// The flags `generate` shares with `serve`, parsed by serve's table rows (the same checks and
// messages, starting "generate:").
constexpr std::string_view k_serve_flags_taken[] = {
    "--device",       "--tensor-parallel-size", "--kv-cache-dtype", "--dtype",
    "--quantization", "--attention-backend",    "--cpu-isa",        "--trace-file"};

const serve_flag* serve_flag_taken(std::string_view arg) {
  const serve_flag* row = find_serve_flag(arg);
  if (!row) return nullptr;
  for (std::string_view name : k_serve_flags_taken)
    if (row->name == name) return row;
  return nullptr;
}

// Stores the value of one of generate's own flags. False (printed) when the value or the flag is
// refused.
bool store_option(std::string_view flag, const char* v, generate_args& g) {
  if (flag == "--prompt-ids") {
    g.have_ids = true;
    if (!parse_ids(v, g.prompt)) {
      std::fprintf(stderr, "generate: --prompt-ids wants comma-separated non-negative ids\n");
      return false;
    }
  } else if (flag == "--prompt") {
    g.have_text = true;
    g.prompt_text = v;
  } else if (flag == "--max-tokens")
    g.max_tokens = std::atoi(v);
  else if (flag == "--temperature")
    g.params.temperature = std::strtof(v, nullptr);
  else if (flag == "--top-p")
    g.params.top_p = std::strtof(v, nullptr);
  else if (flag == "--top-k")
    g.params.top_k = std::atoi(v);
  else if (flag == "--min-p")
    g.params.min_p = std::strtof(v, nullptr);
  else if (flag == "--repetition-penalty")
    g.params.repetition_penalty = std::strtof(v, nullptr);
  else if (flag == "--seed")
    g.seed = std::strtoull(v, nullptr, 10);
  else if (flag == "--logits")
    g.logits_mode = v;
  else if (flag == "--threads")
    g.threads = std::atoi(v);
  else if (flag == "--batch")
    g.batch = std::atoi(v);
  else if (flag == "--prompt-len")
    g.prompt_len = std::atoi(v);
  else {
    std::fprintf(stderr, "generate: unknown option %.*s (see --help)\n",
                 static_cast<int>(flag.size()), flag.data());
    return false;
  }
  return true;
}

// Whether the arguments make one run: a model, exactly one prompt (or --bench), sizes in range.
bool complete(const generate_args& g) {
  return !g.dir.empty() && (g.bench || g.have_ids != g.have_text) && g.max_tokens >= 0 &&
         (g.logits_mode == "none" || g.logits_mode == "last" || g.logits_mode == "all") &&
         g.batch > 0 && g.prompt_len > 0;
}

// Returns 0 with `g` filled in, -1 after printing the help (exit 0), else the exit status.
int parse_generate_args(int argc, char** argv, generate_args& g) {
  g.params.temperature = 0.0f;
  const std::vector<std::string_view> args(argv + 1, argv + argc);
  for (std::size_t i = 0; i < args.size(); ++i) {
    const std::string_view a = args[i];
    if (a == "--help" || a == "-h") {
      std::fputs(k_help, stdout);
      return -1;
    } else if (a == "--json")
      g.json = true;
    else if (a == "--bench")
      g.bench = true;
    else if (a == "--ignore-eos")
      g.ignore_eos = true;
    else if (const serve_flag* row = serve_flag_taken(a)) {
      if (!read_serve_flag("generate", *row, args, i, g.serve)) return 2;
    } else if (!a.empty() && a[0] == '-') {
      if (i + 1 >= args.size()) {
        std::fprintf(stderr, "generate: %s needs a value\n", args[i].data());
        return 2;
      }
      if (!store_option(a, args[++i].data(), g)) return 2;
    } else if (g.dir.empty())
      g.dir = std::string(a);
    else {
      std::fprintf(stderr, "generate: more than one MODEL_DIR\n");
      return 2;
    }
  }
  if (!complete(g)) {
    std::fputs(k_help, stderr);
    return 2;
  }
  return 0;
}

// --bench: the CPU executor alone, loaded with KV blocks for the batch.
int bench_cpu_executor(const generate_args& g) {
  const engine_config& e = g.serve.engine;
  if (!e.quantization.empty()) {
    std::fprintf(stderr,
                 "generate: --bench runs the CPU executor; --quantization fp8 needs --device cuda "
                 "(bench_gpu_executor --quantization fp8 times it)\n");
    return 2;
  }
  cpu_executor_options opts;
  opts.num_threads = g.threads;
  opts.tensor_parallel_size = e.tensor_parallel_size;
  parse_kv_cache_dtype(e.kv_cache_dtype, opts.kv_cache_dtype);
  parse_compute_dtype(e.dtype, opts.bf16_activations);
  opts.num_kv_blocks = g.batch * (g.prompt_len + g.max_tokens + 16) / opts.block_size + g.batch + 1;
  size_t last_reported = 0;
  auto ex = cpu_executor::load(g.dir, opts, [&](size_t done, size_t total, size_t bytes) {
    if (done == total || bytes - last_reported >= (size_t(64) << 20)) {
      last_reported = bytes;
      std::fprintf(stderr, "[load] %zu/%zu tensors, %zu MB\n", done, total, bytes >> 20);
    }
  });
  if (!ex) {
    std::fprintf(stderr, "generate: %s\n", ex.err().message.c_str());
    return 1;
  }
  return run_bench(**ex, g.batch, g.prompt_len, g.max_tokens);
}

// The engine for one request: one sequence, KV for exactly this request when its ids are known
// (text prompts: the engine sizes it).
engine_config engine_config_for(const generate_args& g) {
  engine_config cfg;
  cfg.model_dir = g.dir;
  cfg.device = g.serve.engine.device;
  cfg.cpu_threads = g.threads;
  cfg.tensor_parallel_size = g.serve.engine.tensor_parallel_size;
  cfg.kv_cache_dtype = g.serve.engine.kv_cache_dtype;
  cfg.dtype = g.serve.engine.dtype;
  cfg.quantization = g.serve.engine.quantization;
  cfg.attention_backend = g.serve.engine.attention_backend;
  cfg.max_num_seqs = 1;
  cfg.return_logits = g.logits_mode != "none";
  cfg.trace_file = g.serve.engine.trace_file;
  if (g.have_ids) {
    const int32_t bs = cfg.block_size;
    cfg.num_kv_blocks = (int32_t(g.prompt.size()) + g.max_tokens + bs - 1) / bs + 1;
  }
  return cfg;
}

generate_request request_for(const generate_args& g) {
  generate_request req;
  if (g.have_ids)
    req.input = g.prompt;
  else
    req.input = g.prompt_text;
  req.params = g.params;
  req.params.seed = g.seed;
  req.params.ignore_eos = g.ignore_eos;
  req.params.max_tokens = g.max_tokens;
  req.return_logits = g.logits_mode != "none";
  return req;
}

// What one request streamed.
struct generate_result {
  std::vector<int32_t> prompt, output;
  std::vector<std::vector<float>> rows;  // logits rows (--logits last: the first only)
  std::string text, failure;
  finish_reason finish = finish_reason::none;
};

generate_result run_request(engine& eng, generate_request req, const std::string& logits_mode) {
  generate_result r;
  asio::io_context io;
  asio::co_spawn(
      io,
      [&]() -> asio::awaitable<void> {
        auto stream = co_await eng.submit(std::move(req));
        if (!stream) {
          r.failure = stream.err().message;
          co_return;
        }
        r.prompt = (*stream)->prompt_ids();
        while (auto ev = co_await (*stream)->next()) {
          r.output.insert(r.output.end(), ev->token_ids.begin(), ev->token_ids.end());
          r.text += ev->text;
          for (auto& row : ev->logits)
            if (logits_mode == "all" || r.rows.empty()) r.rows.push_back(std::move(row));
          if (ev->finish != finish_reason::none) {
            r.finish = ev->finish;
            if (!ev->error_message.empty()) r.failure = ev->error_message;
          }
        }
      },
      asio::detached);
  io.run();
  return r;
}

// --json: {"prompt_ids":[..],"output_ids":[..]} and, with logits, "logits":[[..],..].
void print_json(const generate_result& r, bool logits) {
  std::printf("{\"prompt_ids\":[");
  for (size_t i = 0; i < r.prompt.size(); ++i) std::printf(i ? ",%d" : "%d", r.prompt[i]);
  std::printf("],\"output_ids\":[");
  for (size_t i = 0; i < r.output.size(); ++i) std::printf(i ? ",%d" : "%d", r.output[i]);
  std::printf("]");
  if (logits) {
    std::printf(",\"logits\":[");
    for (size_t i = 0; i < r.rows.size(); ++i) {
      if (i) std::putchar(',');
      print_row(r.rows[i]);
    }
    std::printf("]");
  }
  std::printf("}\n");
}

// The ids on one line, the text on the next, the finish reason on stderr.
void print_text(const generate_result& r) {
  for (size_t i = 0; i < r.output.size(); ++i) std::printf(i ? " %d" : "%d", r.output[i]);
  std::printf("\n");
  if (!r.text.empty()) std::printf("%s\n", r.text.c_str());
  std::fprintf(stderr, "finish_reason: %s\n", to_string(r.finish));
}

}  // namespace

int cmd_generate(int argc, char** argv) {
  generate_args g;
  if (int rc = parse_generate_args(argc, argv, g); rc != 0) return rc == -1 ? 0 : rc;
  if (g.bench) return bench_cpu_executor(g);

  // One request through the serving engine (intake, tokenizer, scheduler, KV allocator, executor,
  // streamer), as the server runs it.
  auto eng = engine::start(engine_config_for(g));
  if (!eng) {
    std::fprintf(stderr, "generate: %s\n", eng.err().message.c_str());
    return 1;
  }
  const generate_result r = run_request(**eng, request_for(g), g.logits_mode);
  (*eng)->stop();
  if (!r.failure.empty()) {
    std::fprintf(stderr, "generate: %s\n", r.failure.c_str());
    return r.finish == finish_reason::none ? 2 : 1;
  }
  if (g.json)
    print_json(r, g.logits_mode != "none");
  else
    print_text(r);
  return 0;
}

}  // namespace coserve::cli
