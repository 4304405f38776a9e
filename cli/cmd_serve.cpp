// `coserve serve [MODEL_DIR | --demo] [flags]`: the OpenAI-compatible HTTP server. Flag names
// follow `vllm serve` where one exists.
//
// Lifecycle: the listener opens first and /health answers 503 while the model loads, 200 once it
// serves. SIGINT/SIGTERM start a drain: /health and new generation requests answer 503, in-flight
// requests may finish for --shutdown-timeout seconds, then are aborted (their streams end with
// finish_reason "abort" and [DONE]); the process exits 0 once the last response is written. A
// second signal exits at once with status 1.
//
// Over 500 lines because of one concept: the serve command's flag table (its --help text is most
// of the file) and the process lifecycle around the engine; the MPI parts live in serve_tp.cpp.
#include <asio/co_spawn.hpp>
#include <asio/detached.hpp>
#include <asio/io_context.hpp>
#include <asio/signal_set.hpp>
#include <asio/steady_timer.hpp>
#include <asio/use_awaitable.hpp>
#include <atomic>
#include <cctype>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "actors/engine.hpp"
#include "cli/commands.hpp"
#include "cli/serve_tp.hpp"
#include "http/openai_api.hpp"
#include "http/reasoning.hpp"
#include "http/server.hpp"
#include "http/tool_calls.hpp"
#include "model/demo_model.hpp"
#include "model/dtype.hpp"

namespace coserve::cli {

namespace {

constexpr const char* k_help = R"(usage: coserve serve [MODEL_DIR | --demo] [flags]

Serves a Hugging Face model folder or a GGUF file over an OpenAI-compatible HTTP API:
  POST /v1/completions, POST /v1/chat/completions, GET /v1/models, GET /health, GET /metrics,
  POST /tokenize, POST /detokenize, GET /version, GET /openapi.json; and, mapped onto chat,
  POST /v1/responses (OpenAI Responses) and POST /v1/messages (Anthropic Messages).
Structured outputs (response_format, structured_outputs, guided_*), tools and reasoning:
docs/agent-api.md.

model:
  MODEL_DIR                     a folder with config.json, *.safetensors, tokenizer.json
                                (LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM,
                                Qwen3ForCausalLM, Phi3ForCausalLM, SmolLM3ForCausalLM;
                                MixtralForCausalLM, Qwen2MoeForCausalLM and
                                Qwen3MoeForCausalLM on --device cpu;
                                rope_scaling llama3, linear, yarn, longrope; partial rotary;
                                sliding windows; docs/models.md),
                                or a GGUF file (llama, mistral, qwen2, qwen3, phi3, qwen2moe,
                                qwen3moe; F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q2_K,
                                Q3_K, Q4_K, Q5_K, Q6_K, IQ4_NL, IQ4_XS;
                                tokenizer and chat template from its metadata;
                                integer kernels on --device cpu, dequantized to bf16 at load on
                                --device cuda; docs/gguf.md)
  --demo                        serve the built-in demo model (created on first use in
                                $COSERVE_CACHE, else $XDG_CACHE_HOME/coserve, else ~/.cache/coserve)
  --served-model-name NAME [NAME ...]
                                the model id clients send (default: the folder's or file's name);
                                with several, requests may name any (responses repeat the name
                                used; the first when none) and /v1/models lists each
  --device cpu|cuda             executor device (default: cpu)
  --enforce-eager               --device cuda: run every step eagerly; without it decode-only steps
                                replay CUDA graphs captured at startup for batch sizes 1, 2, 4, 8,
                                16, ... up to --max-num-seqs (the startup log gives their time and
                                memory)
  --attention-backend auto|native|flashinfer
                                --device cuda: the paged attention kernels. flashinfer: FlashInfer's
                                FA2 paged prefill kernel on tensor cores for prefill and decode rows
                                alike (bf16 KV cache, head_dim 64 or 128, one sliding window on every
                                layer or none; a build with its headers, scripts/deps); native: our
                                CUDA-core kernels (head_dim 32, 64, 96, 128; fp8 KV caches); auto
                                (default): flashinfer where the model allows it, else native
http:
  --host ADDR                   listen address (default: 127.0.0.1)
  --port N                      listen port; 0 picks a free one and logs it (default: 8000)
  --allowed-origins JSON        CORS: the origins whose pages may call the server, a JSON list
                                (default: '["*"]', any); as vLLM's flag
  --allowed-methods JSON        CORS: the methods a preflight may ask for (default: '["*"]')
  --allowed-headers JSON        CORS: the headers a preflight may ask for (default: '["*"]')
  --allowed-credentials         CORS: allow credentials (cookies, Authorization) from those origins
  --api-key KEY                 require "Authorization: Bearer KEY" (or "X-Api-Key: KEY") on /v1/*
                                routes and the web UI's data (/api/status, /api/trace); the web
                                UI's pages and files stay open (they hold no data) and ask for it
  --no-webui                    no web UI: GET / (the chat page), /status (the live view of the
                                scheduler, KV cache and actors), /webui/* and /api/* answer 404
  --http-threads N              threads running the HTTP event loop (default: 2)
  --max-body-bytes N            request body limit, beyond it 413 (default: 8388608)
  --idle-timeout-s S            keep-alive idle limit in seconds (default: 60)
  --sse-keepalive-s S           a streamed response without output for S seconds gets an SSE comment
                                line (": keep-alive") so proxies keep it open (default: 15; 0: never)
  --request-timeout-s S         time to receive a whole request in seconds (default: 30)
  --shutdown-timeout S          on SIGINT/SIGTERM, let in-flight requests run at most S more seconds,
                                then abort them (default: 30; 0 aborts at once; a second signal exits
                                at once with status 1). --drain-timeout-s is the same flag
engine:
  --max-num-seqs N              running sequences at most (default: 256)
  --max-num-batched-tokens N    tokens per scheduler step at most: the chunked-prefill budget shared
                                by prompts and decodes (default: 512 on the CPU, 2048 on a GPU)
  --max-model-len N             context length (default: the model's)
  --block-size N                tokens per KV block (default: 16)
  --num-gpu-blocks-override N   KV blocks in the pool (default: sized from memory: on the CPU from
                                --cpu-kv-cache-gib, on a GPU from --gpu-memory-utilization)
  --cpu-kv-cache-gib G          CPU KV cache size in GiB (default: min(4, a quarter of available memory),
                                never more than max-num-seqs sequences at max-model-len)
  --load-format auto|dummy      weights from safetensors (auto), or random (dummy, CUDA only: benchmarks
                                of model shapes without downloading weights)
  --quantization fp8            --device cuda: layer weights in fp8 (E4M3 per output channel, quantized
                                at load) and activations quantized per token, cuBLASLt fp8 GEMMs
                                (W8A8); fp8 checkpoints (docs/fp8.md) select it by themselves
  --skip-tokenizer-init         no tokenizer: prompts as token ids, outputs as token ids without text
  --gpu-memory-utilization F    fraction of GPU memory for weights + KV (default: 0.9)
  --max-waiting-requests N      admission queue limit; beyond it 429 (default: 1024)
  --max-waiting-tokens N        admission limit on prompt tokens waiting for their first step; a
                                request that would take the total past it gets 429 (one is always
                                admitted when none waits) (default: 1048576; 0: no limit)
  --tokenizer-pool-size N       tokenizer actors, each on its own thread: chat templates, encoding,
                                /tokenize and /detokenize run there, never on the HTTP threads
                                (default: min(4, cores))
  --cpu-threads N               CPU executor threads: GEMMs, attention and sampling share them
                                (default: the physical core count; with tensor parallel ranks in
                                one process, split evenly among them; under mpirun, per rank)
  --cpu-isa NAME                instruction set of the CPU kernels: auto (the best this CPU runs) or
                                one it runs, e.g. AVX2 to time that path on a newer CPU; a name it
                                cannot run is an error that lists those it can (default: auto)
  --tensor-parallel-size N      split each layer over N ranks (Megatron-style: heads and MLP columns
                                per rank, all-reduced; -tp is the same flag). CPU executor: started
                                plainly, the ranks are threads of this process; started by mpirun
                                or srun with N processes (mpirun -np N coserve serve MODEL
                                --tensor-parallel-size N), rank 0 serves HTTP and the others run
                                their shard of every step. CUDA executor: N GPUs of this process
                                (cuda:0 .. cuda:N-1), one thread and stream each, NCCL all-reduces.
                                N must divide the attention heads and the MLP width, and divide or
                                be a multiple of the KV heads; a size that does not fit is an error
                                listing those that do (default: 1)
  --kv-cache-dtype D            KV cache element type: auto (bf16), bf16, fp16, fp32, or fp8 / fp8_e4m3
                                / fp8_e5m2 (one byte per value, twice the bf16 cache's tokens;
                                values stored unscaled, saturated at the format's largest) (default:
                                auto; the CUDA executor supports auto, bf16, fp8 / fp8_e4m3 and fp8_e5m2)
  --dtype D                     activation precision of the matrix products: auto or bfloat16 (bf16
                                weights multiply activations rounded to bf16, as llama.cpp and
                                vLLM's CPU backend do; AVX512-BF16 dot products where the CPU has
                                them) or float32 (fp32 activations: slower, closest to an fp32
                                reference). Weights stay as stored. (default: auto; the CUDA
                                executor supports auto and bfloat16)
  --no-enable-prefix-caching    disable prefix caching (on by default)
  --chat-template T             the chat template to use instead of the model's: a file (.jinja, or
                                a .json with a chat_template field) or the template text itself
  --generation-config auto|vllm|DIR
                                default sampling parameters for what requests leave out, as vLLM:
                                auto (default) takes temperature, top_p, top_k, min_p,
                                repetition_penalty and max_new_tokens (chat's default max_tokens)
                                from the model's generation_config.json (logged at startup); vllm
                                uses the API's defaults; DIR reads DIR/generation_config.json.
                                With --demo the default is vllm (random weights recommend nothing)
  --override-generation-config JSON
                                those keys as a JSON object, over the generation config's, e.g.
                                '{"temperature": 0.5}'
  --trust-request-chat-template let chat requests bring their own template (vLLM's chat_template
                                field, or chat_template_kwargs.chat_template), rendered within
                                bounds on steps, depth and output; without it such requests get 400
  --trace-file FILE             write a Chrome trace (Perfetto) of the actors at exit (each thread
                                then keeps its newest 262144 spans, 14.7 MB once that many were
                                recorded; 32768, 1.8 MB, without it)
  --speculative-config JSON     speculative decoding, as vLLM's flag. N-gram lookup:
                                {"method": "ngram", "num_speculative_tokens": K,
                                "prompt_lookup_min": A, "prompt_lookup_max": B}: each step a decode
                                may propose up to K tokens found after the latest earlier occurrence
                                of its last B..A tokens (prompt and output; both default to 5).
                                Draft model: {"model": DIR, "num_speculative_tokens": K}: a smaller
                                model with the same vocabulary runs beside this one (its own KV
                                cache over the same blocks) and proposes K tokens: its argmax for
                                greedy requests, a draw from it for sampled ones (--device cuda:
                                always its argmax; requests with penalties verify none there).
                                Either way the model verifies the proposals in the same step and
                                outputs keep its distribution (greedy: identical).
                                "disable_by_batch_size": C turns proposals off while more than C
                                sequences run (default: no limit)
tools:
  --enable-auto-tool-choice     serve tool_choice "auto" (the default when a request has tools):
                                the output is read for tool calls by --tool-call-parser. Without it
                                such requests get a 400; "none", "required" and a named function
                                work without it ("required" and named calls are grammar-forced)
  --tool-call-parser NAME       the model's tool-call format: hermes (Qwen2.5, Hermes), llama3_json,
                                mistral or pythonic
  --reasoning-parser NAME       split <think>...</think> reasoning from the answer into
                                reasoning_content (messages and stream deltas): deepseek_r1 (the
                                output starts inside the reasoning) or qwen3 (reasoning only after a
                                leading <think>); tool calls are read from the answer only
  -h, --help                    this text
)";

struct serve_args {
  engine_config engine;
  bool demo = false;
  std::string host = "127.0.0.1";
  int port = 8000;
  std::string api_key;
  bool webui = true;
  int http_threads = 2;
  http::server_limits limits;
  int shutdown_timeout_s = 30;
  int sse_keepalive_s = 15;
  bool enable_auto_tool_choice = false;
  bool trust_request_chat_template = false;
  bool generation_config_given = false;
  http::cors_policy cors;
  std::string tool_call_parser;
  std::string reasoning_parser;
};

std::filesystem::path cache_dir() {
  if (const char* c = std::getenv("COSERVE_CACHE"); c && *c) return c;
  if (const char* x = std::getenv("XDG_CACHE_HOME"); x && *x)
    return std::filesystem::path(x) / "coserve";
  if (const char* h = std::getenv("HOME"); h && *h)
    return std::filesystem::path(h) / ".cache" / "coserve";
  return std::filesystem::temp_directory_path() / "coserve-cache";
}

// The demo model's GPT-2 tokenizer has no chat template; the server gives the demo folder a small
// role-tagged one (chat_template.jinja, read by the tokenizer like any model's) so that
// /v1/chat/completions works out of the box. OpenAI's `developer` role is its system turn; other
// unknown roles raise, as real templates do. With `tools` it lists them and asks for Hermes-style
// <tool_call> blocks (--tool-call-parser hermes), merging a leading system (or developer) message
// into that block, and renders assistant tool_calls the same way.
constexpr const char* k_demo_chat_template =
    R"TPL({%- if tools %}{{ '<|system|>\n' }}{% if messages[0]['role'] in ['system', 'developer'] %}{{ (messages[0]['content'] or '') + '\n\n' }}{% endif %}{{ '# Tools\n\nYou may call one or more functions. Their signatures are inside <tools></tools>:\n<tools>' }}{% for tool in tools %}{{ '\n' + (tool | tojson) }}{% endfor %}{{ '\n</tools>\n\nFor each call, return a JSON object with the function name and arguments inside <tool_call></tool_call> tags:\n<tool_call>\n{"name": <function-name>, "arguments": <args-json-object>}\n</tool_call>\n' }}{% endif %}
{%- for message in messages %}
{%- if message['role'] not in ['system', 'developer', 'user', 'assistant', 'tool'] %}{{ raise_exception('Unknown role: ' + message['role']) }}{% endif %}
{%- if not (tools and loop.first and message['role'] in ['system', 'developer']) %}
{{- '<|' + ('system' if message['role'] == 'developer' else message['role']) + '|>\n' + (message['content'] or '') + '\n' }}
{%- if message['role'] == 'assistant' and message['tool_calls'] is defined and message['tool_calls'] %}
{%- for tc in message['tool_calls'] %}{% set fn = tc['function'] if tc['function'] is defined else tc %}
{{- '<tool_call>\n{"name": "' + fn['name'] + '", "arguments": ' + (fn['arguments'] if fn['arguments'] is string else (fn['arguments'] | tojson)) + '}\n</tool_call>\n' }}
{%- endfor %}
{%- endif %}
{%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}{{ '<|assistant|>\n' }}{% endif %})TPL";

std::string read_text(const std::filesystem::path& p) {
  std::FILE* f = std::fopen(p.string().c_str(), "rb");
  if (!f) return {};
  std::string text;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, f)) > 0) text.append(buf, n);
  std::fclose(f);
  return text;
}

// Returns 0 on success, otherwise the exit status (help: -1 meaning "exit 0").
int parse(int argc, char** argv, serve_args& a) {
  std::vector<std::string_view> args(argv + 1, argv + argc);
  for (size_t i = 0; i < args.size(); ++i) {
    std::string_view f = args[i];
    auto need = [&](const char* what) -> const char* {
      if (i + 1 >= args.size()) {
        std::fprintf(stderr, "coserve serve: %.*s needs %s\n", static_cast<int>(f.size()), f.data(),
                     what);
        return nullptr;
      }
      return args[++i].data();
    };
    auto as_int = [&](const char* v, auto& out) -> bool {
      if (!v) return false;
      char* end = nullptr;
      long long x = std::strtoll(v, &end, 10);
      if (*v == '\0' || *end != '\0' || x < 0) {
        std::fprintf(stderr, "coserve serve: %.*s: '%s' is not a non-negative integer\n",
                     static_cast<int>(f.size()), f.data(), v);
        return false;
      }
      out = static_cast<std::remove_reference_t<decltype(out)>>(x);
      return true;
    };
    if (f == "-h" || f == "--help") return -1;
    if (f == "--demo")
      a.demo = true;
    else if (f == "--host") {
      const char* v = need("an address");
      if (!v) return 2;
      a.host = v;
    } else if (f == "--port") {
      if (!as_int(need("a port"), a.port) || a.port > 65535) return 2;
    } else if (f == "--served-model-name") {  // NAME [NAME ...], as vLLM: the first answers, all
                                              // are accepted
      const char* v = need("a name");
      if (!v) return 2;
      a.engine.served_model_name = v;
      a.engine.served_model_aliases.clear();
      while (i + 1 < args.size() && !args[i + 1].empty() && args[i + 1][0] != '-')
        a.engine.served_model_aliases.emplace_back(args[++i]);
    } else if (f == "--api-key") {
      const char* v = need("a key");
      if (!v) return 2;
      a.api_key = v;
    } else if (f == "--no-webui")
      a.webui = false;
    else if (f == "--device") {
      const char* v = need("cpu or cuda");
      if (!v || (std::string_view(v) != "cpu" && std::string_view(v) != "cuda")) {
        std::fprintf(stderr, "coserve serve: --device must be cpu or cuda\n");
        return 2;
      }
      a.engine.device = v;
    } else if (f == "--enforce-eager")
      a.engine.enforce_eager = true;
    else if (f == "--attention-backend") {
      const char* v = need("auto, native or flashinfer");
      if (!v) return 2;
      std::string b(v);
      for (char& ch : b) ch = char(std::tolower(static_cast<unsigned char>(ch)));
      if (b != "auto" && b != "native" && b != "flashinfer") {
        std::fprintf(stderr,
                     "coserve serve: --attention-backend must be auto, native or flashinfer\n");
        return 2;
      }
      a.engine.attention_backend = b;
    } else if (f == "--trace-file") {
      const char* v = need("a path");
      if (!v) return 2;
      a.engine.trace_file = v;
    } else if (f == "--speculative-config") {
      const char* v = need("a JSON object");
      if (!v) return 2;
      a.engine.speculative_config = v;
    } else if (f == "--max-num-seqs") {
      if (!as_int(need("N"), a.engine.max_num_seqs)) return 2;
    } else if (f == "--max-num-batched-tokens") {
      if (!as_int(need("N"), a.engine.max_num_batched_tokens)) return 2;
    } else if (f == "--max-model-len") {
      if (!as_int(need("N"), a.engine.max_model_len)) return 2;
    } else if (f == "--block-size") {
      if (!as_int(need("N"), a.engine.block_size)) return 2;
    } else if (f == "--num-gpu-blocks-override") {
      if (!as_int(need("N"), a.engine.num_kv_blocks)) return 2;
    } else if (f == "--max-waiting-requests") {
      if (!as_int(need("N"), a.engine.max_waiting)) return 2;
    } else if (f == "--max-waiting-tokens") {
      if (!as_int(need("N"), a.engine.max_waiting_tokens)) return 2;
    } else if (f == "--tokenizer-pool-size") {
      if (!as_int(need("N"), a.engine.tokenizer_pool_size) || a.engine.tokenizer_pool_size < 1) {
        std::fprintf(stderr, "coserve serve: --tokenizer-pool-size must be at least 1\n");
        return 2;
      }
    } else if (f == "--cpu-threads") {
      if (!as_int(need("N"), a.engine.cpu_threads)) return 2;
    } else if (f == "--cpu-isa") {
      const char* v = need("a name");
      if (!v || !apply_cpu_isa("coserve serve", v)) return 2;
    } else if (f == "--tensor-parallel-size" || f == "-tp") {
      if (!as_int(need("N"), a.engine.tensor_parallel_size) || a.engine.tensor_parallel_size < 1) {
        std::fprintf(stderr, "coserve serve: --tensor-parallel-size must be at least 1\n");
        return 2;
      }
    } else if (f == "--kv-cache-dtype") {
      const char* v = need("auto, bf16, fp16, fp32, fp8, fp8_e4m3 or fp8_e5m2");
      dtype t;
      if (!v || !parse_kv_cache_dtype(v, t)) {
        std::fprintf(stderr,
                     "coserve serve: --kv-cache-dtype must be auto, bf16, fp16, fp32, fp8, "
                     "fp8_e4m3 or fp8_e5m2\n");
        return 2;
      }
      a.engine.kv_cache_dtype = v;
    } else if (f == "--dtype") {
      const char* v = need("auto, bfloat16 or float32");
      bool b;
      if (!v || !parse_compute_dtype(v, b)) {
        std::fprintf(stderr, "coserve serve: --dtype must be auto, bfloat16 or float32\n");
        return 2;
      }
      a.engine.dtype = v;
    } else if (f == "--http-threads") {
      if (!as_int(need("N"), a.http_threads)) return 2;
    } else if (f == "--sse-keepalive-s") {
      if (!as_int(need("S"), a.sse_keepalive_s) || a.sse_keepalive_s < 0) return 2;
    } else if (f == "--max-body-bytes") {
      if (!as_int(need("N"), a.limits.max_body_bytes)) return 2;
    } else if (f == "--shutdown-timeout" || f == "--drain-timeout-s") {
      if (!as_int(need("S"), a.shutdown_timeout_s)) return 2;
    } else if (f == "--idle-timeout-s" || f == "--request-timeout-s") {
      int s = 0;
      if (!as_int(need("S"), s)) return 2;
      (f == "--idle-timeout-s" ? a.limits.idle_timeout : a.limits.request_timeout) =
          std::chrono::seconds(s);
    } else if (f == "--gpu-memory-utilization") {
      const char* v = need("a fraction");
      if (!v) return 2;
      a.engine.gpu_memory_utilization = std::strtod(v, nullptr);
    } else if (f == "--cpu-kv-cache-gib") {
      const char* v = need("GiB");
      if (!v) return 2;
      const double gib = std::strtod(v, nullptr);
      if (!(gib > 0)) {
        std::fprintf(stderr, "coserve serve: --cpu-kv-cache-gib must be positive\n");
        return 2;
      }
      a.engine.kv_cache_bytes = static_cast<int64_t>(gib * double(int64_t{1} << 30));
    } else if (f == "--load-format") {
      const char* v = need("auto or dummy");
      if (!v || (std::string_view(v) != "auto" && std::string_view(v) != "dummy")) {
        std::fprintf(stderr, "coserve serve: --load-format must be auto or dummy\n");
        return 2;
      }
      a.engine.load_format = v;
    } else if (f == "--quantization") {
      const char* v = need("fp8");
      if (!v || std::string_view(v) != "fp8") {
        std::fprintf(stderr, "coserve serve: --quantization must be fp8\n");
        return 2;
      }
      a.engine.quantization = v;
    } else if (f == "--skip-tokenizer-init")
      a.engine.skip_tokenizer_init = true;
    else if (f == "--chat-template") {
      const char* v = need("a file or template text");
      if (!v) return 2;
      a.engine.chat_template = v;
    } else if (f == "--enable-auto-tool-choice")
      a.enable_auto_tool_choice = true;
    else if (f == "--trust-request-chat-template")
      a.trust_request_chat_template = true;
    else if (f == "--generation-config") {
      const char* v = need("auto, vllm or a folder");
      if (!v) return 2;
      a.engine.generation_config = v;
      a.generation_config_given = true;
    } else if (f == "--override-generation-config") {
      const char* v = need("a JSON object");
      if (!v) return 2;
      a.engine.override_generation_config = v;
    } else if (f == "--allowed-origins" || f == "--allowed-methods" || f == "--allowed-headers") {
      const char* v = need("a JSON list of strings");
      if (!v) return 2;
      auto& list = f == "--allowed-origins"   ? a.cors.origins
                   : f == "--allowed-methods" ? a.cors.methods
                                              : a.cors.headers;
      std::string why;
      if (!http::parse_cors_list(v, list, why)) {
        std::fprintf(stderr, "coserve serve: %.*s %s\n", static_cast<int>(f.size()), f.data(),
                     why.c_str());
        return 2;
      }
    } else if (f == "--allowed-credentials")
      a.cors.credentials = true;
    else if (f == "--tool-call-parser") {
      const char* v = need("a parser name");
      if (!v || !http::find_tool_parser(v)) {
        std::fprintf(stderr, "coserve serve: --tool-call-parser must be one of: %s\n",
                     http::tool_parser_names().c_str());
        return 2;
      }
      a.tool_call_parser = v;
    } else if (f == "--reasoning-parser") {
      const char* v = need("a parser name");
      if (!v || !http::find_reasoning_parser(v)) {
        std::fprintf(stderr, "coserve serve: --reasoning-parser must be one of: %s\n",
                     http::reasoning_parser_names().c_str());
        return 2;
      }
      a.reasoning_parser = v;
    } else if (f == "--no-enable-prefix-caching")
      a.engine.enable_prefix_caching = false;
    else if (f == "--enable-prefix-caching")
      a.engine.enable_prefix_caching = true;
    else if (!f.empty() && f[0] == '-') {
      std::fprintf(stderr, "coserve serve: unknown flag '%.*s' (see --help)\n",
                   static_cast<int>(f.size()), f.data());
      return 2;
    } else if (a.engine.model_dir.empty()) {
      a.engine.model_dir = std::string(f);
    } else {
      std::fprintf(stderr, "coserve serve: more than one MODEL_DIR\n");
      return 2;
    }
  }
  if (a.demo == !a.engine.model_dir.empty()) {
    std::fprintf(stderr, "coserve serve: give MODEL_DIR or --demo (see --help)%s\n",
                 a.engine.served_model_aliases.empty()
                     ? ""
                     : "; --served-model-name takes every word after it as a "
                       "name, so put MODEL_DIR first");
    return 2;
  }
  if (a.http_threads < 1) a.http_threads = 1;
  if (a.enable_auto_tool_choice && a.tool_call_parser.empty()) {
    std::fprintf(stderr,
                 "coserve serve: --enable-auto-tool-choice needs --tool-call-parser (one of: %s)\n",
                 http::tool_parser_names().c_str());
    return 2;
  }
  return 0;
}

// Waits (on the event loop, without blocking it) until no HTTP response is being written, at most
// `limit`, then stops accepting and stops the loop.
asio::awaitable<void> finish_http(asio::io_context& io, http::http_server& server,
                                  std::chrono::seconds limit) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  asio::steady_timer t(io);
  while (server.active_requests() > 0 && std::chrono::steady_clock::now() < deadline) {
    t.expires_after(std::chrono::milliseconds(5));
    co_await t.async_wait(asio::use_awaitable);
  }
  if (server.active_requests() > 0)
    std::fprintf(stderr, "[serve] %lld responses still open at exit\n",
                 static_cast<long long>(server.active_requests()));
  server.stop();
  io.stop();
}

}  // namespace

int cmd_serve(int argc, char** argv) {
  serve_args a;
  if (int rc = parse(argc, argv, a); rc != 0) {
    if (rc == -1) {
      std::fputs(k_help, stdout);
      return 0;
    }
    return rc;
  }
  // An mpirun/srun launch: the MPI communicator first (the demo model below is made once per
  // host, while the other ranks of the host wait).
  const mpi_job job = join_mpi_job(a.engine.tensor_parallel_size, a.engine.device);
  if (job.exit_code != 0) return job.exit_code;
  const std::shared_ptr<communicator>& world = job.world;
  if (a.demo && writes_demo_model(world.get())) {
    auto dir = cache_dir() / "demo-model";
    if (!std::filesystem::exists(dir / "config.json")) {
      std::fprintf(stderr, "[serve] creating the demo model in %s\n", dir.string().c_str());
      auto made = make_demo_model(dir.string(), demo_options{});
      if (!made) {
        std::fprintf(stderr, "coserve serve: cannot create the demo model: %s\n",
                     made.err().message.c_str());
        return 1;
      }
    }
    // The demo folder is ours: its template is (re)written whenever it is not the current one.
    if (read_text(dir / "chat_template.jinja") != k_demo_chat_template) {
      if (std::FILE* f = std::fopen((dir / "chat_template.jinja").string().c_str(), "wb")) {
        std::fputs(k_demo_chat_template, f);
        std::fclose(f);
      }
    }
  }
  if (a.demo) {
    if (!a.generation_config_given) a.engine.generation_config = "vllm";
    a.engine.model_dir = cache_dir() / "demo-model";
    if (a.engine.served_model_name.empty()) a.engine.served_model_name = "demo";
  }
  if (world) {
    // Every host's demo model is written before any rank reads it.
    if (!mpi_startup_barrier(*world)) {
      std::fprintf(stderr, "coserve serve: rank %d: the startup barrier failed\n", world->rank());
      return 1;
    }
    if (world->rank() > 0)
      return serve_tp_rank(a.engine.model_dir, a.engine.cpu_threads, a.engine.device, *world);
    a.engine.tp_communicator = world;
  }
  // The listener opens before the model loads: /health answers 503 {"status":"loading"} meanwhile.
  asio::io_context io;
  http::api_options api_opts{a.api_key, "0.1.0",
                             a.engine.served_model_name.empty()
                                 ? a.engine.model_dir.filename().string()
                                 : a.engine.served_model_name};
  api_opts.sse_keepalive = std::chrono::seconds(a.sse_keepalive_s);
  api_opts.enable_auto_tool_choice = a.enable_auto_tool_choice;
  api_opts.trust_request_chat_template = a.trust_request_chat_template;
  api_opts.cors = a.cors;
  api_opts.tool_call_parser = a.tool_call_parser;
  api_opts.reasoning_parser = a.reasoning_parser;
  api_opts.webui = a.webui;
  http::openai_api api(api_opts);
  http::http_server server(io, a.limits, [&api](http::http_request& r, http::response_writer& w) {
    return api.handle(r, w);
  });
  auto port = server.listen(a.host, static_cast<uint16_t>(a.port));
  if (!port) {
    std::fprintf(stderr, "coserve serve: %s\n", port.err().message.c_str());
    return 1;
  }
  std::fprintf(
      stderr,
      "[serve] listening on http://%s:%u (loading the model: /health answers 503 until ready)\n",
      a.host.c_str(), static_cast<unsigned>(*port));
  std::fflush(stderr);

  std::atomic<engine*> loaded{nullptr};
  std::atomic<int> signals_seen{0};
  std::thread drainer;
  asio::signal_set signals(io, SIGINT, SIGTERM);
  std::function<void(const asio::error_code&, int)> on_signal = [&](const asio::error_code& ec,
                                                                    int sig) {
    if (ec) return;
    if (signals_seen.fetch_add(1) > 0) {
      std::fprintf(stderr, "[serve] signal %d again: exiting now\n", sig);
      std::fflush(stderr);
      std::_Exit(1);
    }
    signals.async_wait(on_signal);  // the second one forces the exit
    engine* eng = loaded.load();
    if (eng == nullptr) {
      std::fprintf(stderr, "[serve] signal %d while loading: exiting\n", sig);
      std::fflush(stderr);
      std::_Exit(0);
    }
    api.set_draining();
    std::fprintf(
        stderr,
        "[serve] signal %d: draining (%lld responses in flight; at most %d s, then abort)\n", sig,
        static_cast<long long>(server.active_requests()), a.shutdown_timeout_s);
    drainer = std::thread([&io, &server, eng, timeout = a.shutdown_timeout_s] {
      const int64_t aborted = eng->drain(std::chrono::seconds(timeout));
      if (aborted > 0)
        std::fprintf(stderr, "[serve] aborted %lld requests\n", static_cast<long long>(aborted));
      asio::co_spawn(io, finish_http(io, server, std::chrono::seconds(5)), asio::detached);
    });
  };
  signals.async_wait(on_signal);

  std::vector<std::thread> threads;
  for (int i = 0; i < a.http_threads; ++i) threads.emplace_back([&io] { io.run(); });
  auto join_http = [&] {
    for (auto& t : threads) t.join();
    if (drainer.joinable()) drainer.join();
  };

  std::fprintf(stderr, "[serve] loading %s on %s\n", a.engine.model_dir.string().c_str(),
               a.engine.device.c_str());
  auto started = engine::start(a.engine);
  if (!started) {
    std::fprintf(stderr, "coserve serve: cannot start the engine: %s\n",
                 started.err().message.c_str());
    io.stop();
    join_http();
    return 1;
  }
  std::unique_ptr<engine> eng = std::move(started).value();
  // Under mpirun a failed engine ends this rank, and with it the job.
  std::optional<engine_failure_exit> failure_exit;
  if (world) failure_exit.emplace(*eng, signals_seen);
  const auto& info = eng->info();
  api.attach(*eng);
  loaded.store(eng.get());
  std::fprintf(stderr, "[serve] ready: model '%s' (%s), max_model_len %d, vocab %d\n",
               info.served_model_name.c_str(), info.architecture.c_str(), info.max_model_len,
               info.vocab_size);
  if (a.webui)
    std::fprintf(
        stderr, "[serve] web UI: chat at http://%s:%u/ , live status at http://%s:%u/status\n",
        a.host.c_str(), static_cast<unsigned>(*port), a.host.c_str(), static_cast<unsigned>(*port));
  std::fflush(stderr);

  join_http();
  failure_exit.reset();
  api.detach_background();
  std::fprintf(stderr, "[serve] stopping the engine\n");
  eng->stop(true);
  std::fprintf(stderr, "[serve] bye\n");
  return 0;
}

}  // namespace coserve::cli
