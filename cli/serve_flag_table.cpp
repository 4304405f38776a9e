// The table of `coserve serve` flags (cli/serve_flags.hpp explains a row): the one place a serve
// flag is declared. Its rows are in the order --help lists them; each says where its value goes
// (`to<member path>()`, or a named store function for values that are checked or converted).
//
// Over 500 lines because of one concept: the table is the --help text, one row per flag.
#include <cctype>
#include <chrono>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "cli/commands.hpp"
#include "cli/serve_flags.hpp"
#include "http/reasoning.hpp"
#include "http/tool_calls.hpp"
#include "model/dtype.hpp"

namespace coserve::cli {

namespace {

// Prints "<prog>: <message>" to stderr; returns false (the value is refused).
[[gnu::format(printf, 2, 3)]] bool refuse(const flag_value& v, const char* format, ...) {
  std::fprintf(stderr, "%.*s: ", static_cast<int>(v.prog.size()), v.prog.data());
  va_list args;
  va_start(args, format);
  std::vfprintf(stderr, format, args);
  va_end(args);
  std::fputc('\n', stderr);
  return false;
}

// ---- values into fields -------------------------------------------------------------------------

bool assign(std::string& field, const flag_value& v) {
  field = std::string(v.text);
  return true;
}
bool assign(std::filesystem::path& field, const flag_value& v) {
  field = std::string(v.text);
  return true;
}
bool assign(double& field, const flag_value& v) {
  field = v.number;
  return true;
}
bool assign(std::chrono::milliseconds& field, const flag_value& v) {
  field = std::chrono::seconds(v.integer);
  return true;
}
template <class T>  // the integer fields
bool assign(T& field, const flag_value& v) {
  static_assert(std::is_integral_v<T> && !std::is_same_v<T, bool>);
  field = static_cast<T>(v.integer);
  return true;
}

std::string show(const std::string& field) { return field; }
std::string show(const std::filesystem::path& field) { return field.string(); }
std::string show(bool field) { return field ? "on" : "off"; }
std::string show(double field) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", field);
  return buf;
}
std::string show(std::chrono::milliseconds field) {
  return std::to_string(std::chrono::duration_cast<std::chrono::seconds>(field).count());
}
template <class T>  // the integer fields
std::string show(T field) {
  static_assert(std::is_integral_v<T>);
  return std::to_string(field);
}
std::string show(const std::vector<std::string>& list) {  // as the JSON list the flag takes
  std::string s = "[";
  for (const std::string& item : list) s += (s.size() > 1 ? ", \"" : "\"") + item + "\"";
  return s + "]";
}

// The field at a member path of serve_args: field<&serve_args::engine, &engine_config::device>.
template <auto... Path>
auto& field(serve_args& a) {
  return (a.*....*Path);
}
template <auto... Path>
const auto& field(const serve_args& a) {
  return (a.*....*Path);
}
template <auto... Path>
std::string shown(const serve_args& a) {
  return show(field<Path...>(a));
}

// The flag's value goes to the field at Path.
template <auto... Path>
constexpr flag_target to() {
  return {[](serve_args& a, const flag_value& v) { return assign(field<Path...>(a), v); },
          shown<Path...>};
}
// The value goes to the field at Path once Check accepts it (Check prints why it does not).
template <bool (*Check)(const flag_value&), auto... Path>
constexpr flag_target checked() {
  return {
      [](serve_args& a, const flag_value& v) { return Check(v) && assign(field<Path...>(a), v); },
      shown<Path...>};
}
// A switch that sets the boolean at Path to On.
template <bool On, auto... Path>
constexpr flag_target set() {
  return {[](serve_args& a, const flag_value&) {
            field<Path...>(a) = On;
            return true;
          },
          shown<Path...>};
}

// ---- checks -------------------------------------------------------------------------------------

bool device_ok(const flag_value& v) {
  return v.text == "cpu" || v.text == "cuda" || refuse(v, "--device must be cpu or cuda");
}
bool task_ok(const flag_value& v) {
  return v.text == "auto" || v.text == "generate" || v.text == "embed" || v.text == "embedding" ||
         v.text == "score" || refuse(v, "--task must be auto, generate, embed or score");
}
bool kv_cache_dtype_ok(const flag_value& v) {
  dtype t;
  return parse_kv_cache_dtype(v.text, t) ||
         refuse(v, "--kv-cache-dtype must be auto, bf16, fp16, fp32, fp8, fp8_e4m3 or fp8_e5m2");
}
bool compute_dtype_ok(const flag_value& v) {
  bool bf16 = false;
  return parse_compute_dtype(v.text, bf16) ||
         refuse(v, "--dtype must be auto, bfloat16 or float32");
}
bool load_format_ok(const flag_value& v) {
  return v.text == "auto" || v.text == "dummy" || refuse(v, "--load-format must be auto or dummy");
}
bool quantization_ok(const flag_value& v) {
  return v.text == "fp8" || refuse(v, "--quantization must be fp8");
}
bool tool_parser_ok(const flag_value& v) {
  return http::find_tool_parser(v.text) ||
         refuse(v, "--tool-call-parser must be one of: %s", http::tool_parser_names().c_str());
}
bool reasoning_parser_ok(const flag_value& v) {
  return http::find_reasoning_parser(v.text) ||
         refuse(v, "--reasoning-parser must be one of: %s", http::reasoning_parser_names().c_str());
}
bool port_ok(const flag_value& v) {
  return v.integer <= 65535 || refuse(v, "--port must be at most 65535");
}
bool at_least_one(const flag_value& v) {
  return v.integer >= 1 ||
         refuse(v, "%.*s must be at least 1", static_cast<int>(v.flag.size()), v.flag.data());
}

// ---- stores that convert ------------------------------------------------------------------------

// MODEL_DIR: the one argument that is not a flag.
bool store_model_dir(serve_args& a, const flag_value& v) {
  if (!a.engine.model_dir.empty()) return refuse(v, "more than one MODEL_DIR");
  a.engine.model_dir = std::string(v.text);
  return true;
}

// NAME [NAME ...], as vLLM: the first is the name responses use, all are accepted.
bool store_served_model_names(serve_args& a, const flag_value& v) {
  a.engine.served_model_name = std::string(v.text);
  a.engine.served_model_aliases.assign(v.more.begin(), v.more.end());
  return true;
}

// vLLM's --lora-modules: one or more "name=path" or JSON objects (checked when the engine starts).
bool store_lora_modules(serve_args& a, const flag_value& v) {
  a.engine.lora_modules.assign(1, std::string(v.text));
  a.engine.lora_modules.insert(a.engine.lora_modules.end(), v.more.begin(), v.more.end());
  return true;
}
bool lora_rank_ok(const flag_value& v) {
  return (v.integer >= 1 && v.integer <= 512) ||
         refuse(v, "--max-lora-rank must be in [1, 512], got %lld", v.integer);
}

// Any case; stored in lower case.
bool store_attention_backend(serve_args& a, const flag_value& v) {
  std::string b(v.text);
  for (char& ch : b) ch = char(std::tolower(static_cast<unsigned char>(ch)));
  if (b != "auto" && b != "native" && b != "flashinfer")
    return refuse(v, "--attention-backend must be auto, native or flashinfer");
  a.engine.attention_backend = b;
  return true;
}

// Applied at once: the CPU kernels' instruction set is process-wide.
bool store_cpu_isa(serve_args&, const flag_value& v) {
  return apply_cpu_isa(std::string(v.prog).c_str(), std::string(v.text).c_str());
}

bool store_cpu_kv_cache_gib(serve_args& a, const flag_value& v) {
  if (!(v.number > 0)) return refuse(v, "--cpu-kv-cache-gib must be positive");
  a.engine.kv_cache_bytes = static_cast<int64_t>(v.number * double(int64_t{1} << 30));
  return true;
}

// Given explicitly, it also holds for --demo (whose default is vllm).
bool store_generation_config(serve_args& a, const flag_value& v) {
  a.engine.generation_config = std::string(v.text);
  a.generation_config_given = true;
  return true;
}

template <std::vector<std::string> http::cors_policy::*List>
bool store_cors_list(serve_args& a, const flag_value& v) {
  std::string why;
  if (!http::parse_cors_list(v.text, a.cors.*List, why))
    return refuse(v, "%.*s %s", static_cast<int>(v.name.size()), v.name.data(), why.c_str());
  return true;
}
template <std::vector<std::string> http::cors_policy::*List>
constexpr flag_target cors_list() {
  return {store_cors_list<List>, shown<&serve_args::cors, List>};
}

// The MODEL_DIR paragraph: what a model folder or GGUF file may hold (its architectures, rope
// scalings and GGUF types), one block of text.
// {architectures} and {gguf_architectures}: the registry's lists (model/architectures.hpp),
// filled in where the help is written.
constexpr std::string_view k_model_dir_help =
    "a folder with config.json, *.safetensors, tokenizer.json\n"
    "({architectures};\n"
    "rope_scaling llama3, linear, yarn, longrope; partial rotary;\n"
    "sliding windows; docs/models.md;\n"
    "encoders for embeddings and scores: BertModel, XLMRobertaModel,\n"
    "RobertaModel and their ForSequenceClassification cross-encoders\n"
    "on --device cpu; docs/embeddings.md),\n"
    "or a GGUF file\n"
    "({gguf_architectures};\n"
    "F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q2_K, Q3_K, Q4_K,\n"
    "Q5_K, Q6_K, IQ4_NL, IQ4_XS;\n"
    "tokenizer and chat template from its metadata;\n"
    "integer kernels on --device cpu, dequantized to bf16 at load on\n"
    "--device cuda; docs/gguf.md)";

constexpr std::string_view k_intro =
    "usage: coserve serve [MODEL_DIR | --demo] [flags]\n"
    "\n"
    "Serves a Hugging Face model folder or a GGUF file over an OpenAI-compatible HTTP API:\n"
    "  POST /v1/completions, POST /v1/chat/completions, GET /v1/models, GET /health, GET "
    "/metrics,\n"
    "  POST /tokenize, POST /detokenize, GET /version, GET /openapi.json; and, mapped onto chat,\n"
    "  POST /v1/responses (OpenAI Responses) and POST /v1/messages (Anthropic Messages).\n"
    "Embedding models and cross-encoders (--task embed|score): POST /v1/embeddings, /v1/score,\n"
    "  /v1/rerank and /v2/rerank (docs/embeddings.md).\n"
    "Structured outputs (response_format, structured_outputs, guided_*), tools and reasoning:\n"
    "docs/agent-api.md.\n"
    "\n";

using E = engine_config;
using S = serve_args;
using L = http::server_limits;
using C = http::cors_policy;
using G = flag_group;
using K = value_kind;

constexpr serve_flag k_flags[] = {
    // model:
    {.name = "MODEL_DIR",
     .kind = K::positional,
     .group = G::model,
     .target = {store_model_dir, shown<&S::engine, &E::model_dir>},
     .help = k_model_dir_help},
    {.name = "--demo",
     .kind = K::none,
     .group = G::model,
     .target = set<true, &S::demo>(),
     .help = "serve the built-in demo model (created on first use in\n"
             "$COSERVE_CACHE, else $XDG_CACHE_HOME/coserve, else ~/.cache/coserve)"},
    {.name = "--served-model-name",
     .metavar = "NAME [NAME ...]",
     .needs = "a name",
     .kind = K::words,
     .group = G::model,
     .target = {store_served_model_names, shown<&S::engine, &E::served_model_name>},
     .help = "the model id clients send (default: {default});\n"
             "with several, requests may name any (responses repeat the name\n"
             "used; the first when none) and /v1/models lists each",
     .default_text = "the folder's or file's name"},
    {.name = "--device",
     .metavar = "cpu|cuda",
     .needs = "cpu or cuda",
     .kind = K::text,
     .group = G::model,
     .target = checked<device_ok, &S::engine, &E::device>(),
     .help = "executor device (default: {default})"},
    {.name = "--task",
     .metavar = "auto|generate|embed|score",
     .needs = "auto, generate, embed or score",
     .kind = K::text,
     .group = G::model,
     .target = checked<task_ok, &S::engine, &E::task>(),
     .help = "what the model is served for (default: {default}, from the\n"
             "architecture: BERT and XLM-RoBERTa encoders embed, sequence\n"
             "classifiers (cross-encoders, decoder rerankers) score, other models\n"
             "generate); embed on a causal model: its last token's final hidden\n"
             "state (Qwen3-Embedding and the like); a task the model cannot\n"
             "serve is an error at start (docs/embeddings.md)"},
    {.name = "--hf-overrides",
     .metavar = "JSON",
     .needs = "a JSON object",
     .kind = K::text,
     .group = G::model,
     .target = to<&S::engine, &E::hf_overrides>(),
     .help = "a JSON object merged into the model's config.json before it is read\n"
             "(vLLM's flag; nested objects merged key by key), e.g. a language\n"
             "model read as a reranker: '{\"architectures\":\n"
             "[\"Qwen3ForSequenceClassification\"], \"classifier_from_token\":\n"
             "[\"no\", \"yes\"]}' (Qwen3-Reranker); decoders on --device cpu\n"
             "(docs/embeddings.md)"},
    {.name = "--enable-lora",
     .kind = K::none,
     .group = G::model,
     .target = set<true, &S::engine, &E::enable_lora>(),
     .help = "serve LoRA adapters (--lora-modules) beside the base model (vLLM's flag;\n"
             "--device cpu, one rank)"},
    {.name = "--lora-modules",
     .metavar = "NAME=PATH [NAME=PATH ...]",
     .needs = "an adapter",
     .kind = K::words,
     .group = G::model,
     .target = {store_lora_modules, shown<&S::engine, &E::lora_modules>},
     .help = "PEFT LoRA adapter folders (adapter_config.json,\n"
             "adapter_model.safetensors), each \"name=path\" or '{\"name\": ...,\n"
             "\"path\": ..., \"base_model_name\": ...}'; a request whose model is\n"
             "NAME runs with that adapter, /v1/models lists each with its parent;\n"
             "targets q/k/v/o and gate/up/down projections (docs/lora.md)",
     .default_text = "none"},
    {.name = "--max-lora-rank",
     .metavar = "R",
     .needs = "R",
     .kind = K::integer,
     .group = G::model,
     .target = checked<lora_rank_ok, &S::engine, &E::max_lora_rank>(),
     .help = "the largest adapter rank accepted (default: {default}); an adapter of\n"
             "higher rank is an error at start"},
    {.name = "--enforce-eager",
     .kind = K::none,
     .group = G::model,
     .target = set<true, &S::engine, &E::enforce_eager>(),
     .help = "--device cuda: run every step eagerly; without it decode-only steps\n"
             "replay CUDA graphs captured at startup for batch sizes 1, 2, 4, 8,\n"
             "16, ... up to --max-num-seqs (the startup log gives their time and\n"
             "memory)"},
    {.name = "--attention-backend",
     .metavar = "auto|native|flashinfer",
     .needs = "auto, native or flashinfer",
     .kind = K::text,
     .group = G::model,
     .target = {store_attention_backend, shown<&S::engine, &E::attention_backend>},
     .help = "--device cuda: the paged attention kernels. flashinfer: FlashInfer's\n"
             "FA2 paged prefill kernel on tensor cores for prefill and decode rows\n"
             "alike (bf16 KV cache, head_dim 64 or 128, one sliding window on every\n"
             "layer or none; a build with its headers, scripts/deps); native: our\n"
             "CUDA-core kernels (head_dim 32, 64, 96, 128; fp8 KV caches); {default}\n"
             "(default): flashinfer where the model allows it, else native"},

    // http:
    {.name = "--host",
     .metavar = "ADDR",
     .needs = "an address",
     .kind = K::text,
     .group = G::http,
     .target = to<&S::host>(),
     .help = "listen address (default: {default})"},
    {.name = "--port",
     .metavar = "N",
     .needs = "a port",
     .kind = K::integer,
     .group = G::http,
     .target = checked<port_ok, &S::port>(),
     .help = "listen port; 0 picks a free one and logs it (default: {default})"},
    {.name = "--allowed-origins",
     .metavar = "JSON",
     .needs = "a JSON list of strings",
     .kind = K::text,
     .group = G::http,
     .target = cors_list<&C::origins>(),
     .help = "CORS: the origins whose pages may call the server, a JSON list\n"
             "(default: '{default}', any); as vLLM's flag"},
    {.name = "--allowed-methods",
     .metavar = "JSON",
     .needs = "a JSON list of strings",
     .kind = K::text,
     .group = G::http,
     .target = cors_list<&C::methods>(),
     .help = "CORS: the methods a preflight may ask for (default: '{default}')"},
    {.name = "--allowed-headers",
     .metavar = "JSON",
     .needs = "a JSON list of strings",
     .kind = K::text,
     .group = G::http,
     .target = cors_list<&C::headers>(),
     .help = "CORS: the headers a preflight may ask for (default: '{default}')"},
    {.name = "--allowed-credentials",
     .kind = K::none,
     .group = G::http,
     .target = set<true, &S::cors, &C::credentials>(),
     .help = "CORS: allow credentials (cookies, Authorization) from those origins"},
    {.name = "--api-key",
     .metavar = "KEY",
     .needs = "a key",
     .kind = K::text,
     .group = G::http,
     .target = to<&S::api_key>(),
     .help = "require \"Authorization: Bearer KEY\" (or \"X-Api-Key: KEY\") on /v1/*\n"
             "routes, the web UI's data (/api/status, /api/trace,\n"
             "/api/prefix_cache) and POST /reset_prefix_cache; the web UI's pages\n"
             "and files stay open (they hold no data) and ask for it"},
    {.name = "--no-webui",
     .kind = K::none,
     .group = G::http,
     .target = set<false, &S::webui>(),
     .help = "no web UI: GET / (the chat page), /status (the live view of the\n"
             "scheduler, KV cache and actors), /webui/*, /api/* and the operator's\n"
             "POST /reset_prefix_cache answer 404"},
    {.name = "--http-threads",
     .metavar = "N",
     .needs = "N",
     .kind = K::integer,
     .group = G::http,
     .target = to<&S::http_threads>(),
     .help = "threads running the HTTP event loop (default: {default})"},
    {.name = "--max-body-bytes",
     .metavar = "N",
     .needs = "N",
     .kind = K::integer,
     .group = G::http,
     .target = to<&S::limits, &L::max_body_bytes>(),
     .help = "request body limit, beyond it 413 (default: {default})"},
    {.name = "--idle-timeout-s",
     .metavar = "S",
     .needs = "S",
     .kind = K::integer,
     .group = G::http,
     .target = to<&S::limits, &L::idle_timeout>(),
     .help = "keep-alive idle limit in seconds (default: {default})"},
    {.name = "--sse-keepalive-s",
     .metavar = "S",
     .needs = "S",
     .kind = K::integer,
     .group = G::http,
     .target = to<&S::sse_keepalive_s>(),
     .help = "a streamed response without output for S seconds gets an SSE comment\n"
             "line (\": keep-alive\") so proxies keep it open (default: {default}; 0: never)"},
    {.name = "--request-timeout-s",
     .metavar = "S",
     .needs = "S",
     .kind = K::integer,
     .group = G::http,
     .target = to<&S::limits, &L::request_timeout>(),
     .help = "time to receive a whole request in seconds (default: {default})"},
    {.name = "--shutdown-timeout",
     .alias = "--drain-timeout-s",
     .metavar = "S",
     .needs = "S",
     .kind = K::integer,
     .group = G::http,
     .target = to<&S::shutdown_timeout_s>(),
     .help = "on SIGINT/SIGTERM, let in-flight requests run at most S more seconds,\n"
             "then abort them (default: {default}; 0 aborts at once; a second signal exits\n"
             "at once with status 1). --drain-timeout-s is the same flag"},

    // engine:
    {.name = "--max-num-seqs",
     .metavar = "N",
     .needs = "N",
     .kind = K::integer,
     .group = G::engine,
     .target = to<&S::engine, &E::max_num_seqs>(),
     .help = "running sequences at most (default: {default})"},
    {.name = "--max-num-batched-tokens",
     .metavar = "N",
     .needs = "N",
     .kind = K::integer,
     .group = G::engine,
     .target = to<&S::engine, &E::max_num_batched_tokens>(),
     .help = "tokens per scheduler step at most: the chunked-prefill budget shared\n"
             "by prompts and decodes (default: {default})",
     .default_text = "512 on the CPU, 2048 on a GPU"},
    {.name = "--max-model-len",
     .metavar = "N",
     .needs = "N",
     .kind = K::integer,
     .group = G::engine,
     .target = to<&S::engine, &E::max_model_len>(),
     .help = "context length (default: {default})",
     .default_text = "the model's"},
    {.name = "--block-size",
     .metavar = "N",
     .needs = "N",
     .kind = K::integer,
     .group = G::engine,
     .target = to<&S::engine, &E::block_size>(),
     .help = "tokens per KV block (default: {default})"},
    {.name = "--num-gpu-blocks-override",
     .metavar = "N",
     .needs = "N",
     .kind = K::integer,
     .group = G::engine,
     .target = to<&S::engine, &E::num_kv_blocks>(),
     .help = "KV blocks in the pool (default: {default})",
     .default_text = "sized from memory: on the CPU from\n"
                     "--cpu-kv-cache-gib, on a GPU from --gpu-memory-utilization"},
    {.name = "--cpu-kv-cache-gib",
     .metavar = "G",
     .needs = "GiB",
     .kind = K::number,
     .group = G::engine,
     .target = {store_cpu_kv_cache_gib, nullptr},
     .help = "CPU KV cache size in GiB (default: {default})",
     .default_text = "min(4, a quarter of available memory),\n"
                     "never more than max-num-seqs sequences at max-model-len"},
    {.name = "--load-format",
     .metavar = "auto|dummy",
     .needs = "auto or dummy",
     .kind = K::text,
     .group = G::engine,
     .target = checked<load_format_ok, &S::engine, &E::load_format>(),
     .help = "weights from safetensors (auto), or random (dummy, CUDA only: benchmarks\n"
             "of model shapes without downloading weights)"},
    {.name = "--quantization",
     .metavar = "fp8",
     .needs = "fp8",
     .kind = K::text,
     .group = G::engine,
     .target = checked<quantization_ok, &S::engine, &E::quantization>(),
     .help = "--device cuda: layer weights in fp8 (E4M3 per output channel, quantized\n"
             "at load) and activations quantized per token, cuBLASLt fp8 GEMMs\n"
             "(W8A8); fp8 checkpoints (docs/fp8.md) select it by themselves"},
    {.name = "--skip-tokenizer-init",
     .kind = K::none,
     .group = G::engine,
     .target = set<true, &S::engine, &E::skip_tokenizer_init>(),
     .help = "no tokenizer: prompts as token ids, outputs as token ids without text"},
    {.name = "--gpu-memory-utilization",
     .metavar = "F",
     .needs = "a fraction",
     .kind = K::number,
     .group = G::engine,
     .target = to<&S::engine, &E::gpu_memory_utilization>(),
     .help = "fraction of GPU memory for weights + KV (default: {default})"},
    {.name = "--max-waiting-requests",
     .metavar = "N",
     .needs = "N",
     .kind = K::integer,
     .group = G::engine,
     .target = to<&S::engine, &E::max_waiting>(),
     .help = "admission queue limit; beyond it 429 (default: {default})"},
    {.name = "--max-waiting-tokens",
     .metavar = "N",
     .needs = "N",
     .kind = K::integer,
     .group = G::engine,
     .target = to<&S::engine, &E::max_waiting_tokens>(),
     .help = "admission limit on prompt tokens waiting for their first step; a\n"
             "request that would take the total past it gets 429 (one is always\n"
             "admitted when none waits) (default: {default}; 0: no limit)"},
    {.name = "--tokenizer-pool-size",
     .metavar = "N",
     .needs = "N",
     .kind = K::integer,
     .group = G::engine,
     .target = checked<at_least_one, &S::engine, &E::tokenizer_pool_size>(),
     .help = "tokenizer actors, each on its own thread: chat templates, encoding,\n"
             "/tokenize and /detokenize run there, never on the HTTP threads\n"
             "(default: {default})",
     .default_text = "min(4, cores)"},
    {.name = "--cpu-threads",
     .metavar = "N",
     .needs = "N",
     .kind = K::integer,
     .group = G::engine,
     .target = to<&S::engine, &E::cpu_threads>(),
     .help = "CPU executor threads: GEMMs, attention and sampling share them\n"
             "(default: {default}; with tensor parallel ranks in\n"
             "one process, split evenly among them; under mpirun, per rank)",
     .default_text = "the physical core count"},
    {.name = "--cpu-isa",
     .metavar = "NAME",
     .needs = "a name",
     .kind = K::text,
     .group = G::engine,
     .target = {store_cpu_isa, nullptr},
     .help = "instruction set of the CPU kernels: auto (the best this CPU runs) or\n"
             "one it runs, e.g. AVX2 to time that path on a newer CPU; a name it\n"
             "cannot run is an error that lists those it can (default: {default})",
     .default_text = "auto"},
    {.name = "--tensor-parallel-size",
     .alias = "-tp",
     .metavar = "N",
     .needs = "N",
     .kind = K::integer,
     .group = G::engine,
     .target = checked<at_least_one, &S::engine, &E::tensor_parallel_size>(),
     .help = "split each layer over N ranks (Megatron-style: heads and MLP columns\n"
             "per rank, all-reduced; -tp is the same flag). CPU executor: started\n"
             "plainly, the ranks are threads of this process; started by mpirun\n"
             "or srun with N processes (mpirun -np N coserve serve MODEL\n"
             "--tensor-parallel-size N), rank 0 serves HTTP and the others run\n"
             "their shard of every step. CUDA executor: N GPUs of this process\n"
             "(cuda:0 .. cuda:N-1), one thread and stream each, NCCL all-reduces.\n"
             "N must divide the attention heads and the MLP width, and divide or\n"
             "be a multiple of the KV heads; a size that does not fit is an error\n"
             "listing those that do (default: {default})"},
    {.name = "--kv-cache-dtype",
     .metavar = "D",
     .needs = "auto, bf16, fp16, fp32, fp8, fp8_e4m3 or fp8_e5m2",
     .kind = K::text,
     .group = G::engine,
     .target = checked<kv_cache_dtype_ok, &S::engine, &E::kv_cache_dtype>(),
     .help = "KV cache element type: auto (bf16), bf16, fp16, fp32, or fp8 / fp8_e4m3\n"
             "/ fp8_e5m2 (one byte per value, twice the bf16 cache's tokens;\n"
             "values stored unscaled, saturated at the format's largest) (default:\n"
             "{default}; the CUDA executor supports auto, bf16, fp8 / fp8_e4m3 and fp8_e5m2)"},
    {.name = "--dtype",
     .metavar = "D",
     .needs = "auto, bfloat16 or float32",
     .kind = K::text,
     .group = G::engine,
     .target = checked<compute_dtype_ok, &S::engine, &E::dtype>(),
     .help = "activation precision of the matrix products: auto or bfloat16 (bf16\n"
             "weights multiply activations rounded to bf16, as llama.cpp and\n"
             "vLLM's CPU backend do; AVX512-BF16 dot products where the CPU has\n"
             "them) or float32 (fp32 activations: slower, closest to an fp32\n"
             "reference). Weights stay as stored. (default: {default}; the CUDA\n"
             "executor supports auto and bfloat16)"},
    {.name = "--no-enable-prefix-caching",
     .kind = K::none,
     .group = G::engine,
     .target = set<false, &S::engine, &E::enable_prefix_caching>(),
     .help = "disable prefix caching (on by default)"},
    {.name = "--enable-prefix-caching",
     .kind = K::none,
     .group = G::engine,
     .target = set<true, &S::engine, &E::enable_prefix_caching>(),
     .help = "prefix caching on (the default)"},
    {.name = "--kv-events-config",
     .metavar = "JSON",
     .needs = "a JSON object",
     .kind = K::text,
     .group = G::engine,
     .target = to<&S::engine, &E::kv_events_config>(),
     .help = "publish the prefix cache's KV-cache events (BlockStored, BlockRemoved,\n"
             "AllBlocksCleared) as vLLM does, for fleet routers (llm-d, Dynamo):\n"
             "{\"enable_kv_cache_events\": true, \"publisher\": \"zmq\",\n"
             "\"endpoint\": \"tcp://*:5557\", \"replay_endpoint\": \"tcp://*:5558\",\n"
             "\"topic\": \"\", \"buffer_steps\": 10000, \"hwm\": 100000,\n"
             "\"max_queue_size\": 100000}: a ZMQ PUB socket sends each step's\n"
             "events as one msgpack batch [topic, seq, payload]; the ROUTER socket\n"
             "replays the last buffer_steps batches from a sequence number. Needs\n"
             "prefix caching (docs/scaling.md)"},
    {.name = "--chat-template",
     .metavar = "T",
     .needs = "a file or template text",
     .kind = K::text,
     .group = G::engine,
     .target = to<&S::engine, &E::chat_template>(),
     .help = "the chat template to use instead of the model's: a file (.jinja, or\n"
             "a .json with a chat_template field) or the template text itself"},
    {.name = "--generation-config",
     .metavar = "auto|vllm|DIR",
     .needs = "auto, vllm or a folder",
     .kind = K::text,
     .group = G::engine,
     .target = {store_generation_config, shown<&S::engine, &E::generation_config>},
     .help = "default sampling parameters for what requests leave out, as vLLM:\n"
             "{default} (default) takes temperature, top_p, top_k, min_p,\n"
             "repetition_penalty and max_new_tokens (chat's default max_tokens)\n"
             "from the model's generation_config.json (logged at startup); vllm\n"
             "uses the API's defaults; DIR reads DIR/generation_config.json.\n"
             "With --demo the default is vllm (random weights recommend nothing)"},
    {.name = "--override-generation-config",
     .metavar = "JSON",
     .needs = "a JSON object",
     .kind = K::text,
     .group = G::engine,
     .target = to<&S::engine, &E::override_generation_config>(),
     .help = "those keys as a JSON object, over the generation config's, e.g.\n"
             "'{\"temperature\": 0.5}'"},
    {.name = "--trust-request-chat-template",
     .kind = K::none,
     .group = G::engine,
     .target = set<true, &S::trust_request_chat_template>(),
     .help = "let chat requests bring their own template (vLLM's chat_template\n"
             "field, or chat_template_kwargs.chat_template), rendered within\n"
             "bounds on steps, depth and output; without it such requests get 400"},
    {.name = "--trace-file",
     .metavar = "FILE",
     .needs = "a path",
     .kind = K::text,
     .group = G::engine,
     .target = to<&S::engine, &E::trace_file>(),
     .help = "write a Chrome trace (Perfetto) of the actors at exit (each thread\n"
             "then keeps its newest 262144 spans, 14.7 MB once that many were\n"
             "recorded; 32768, 1.8 MB, without it)"},
    {.name = "--speculative-config",
     .metavar = "JSON",
     .needs = "a JSON object",
     .kind = K::text,
     .group = G::engine,
     .target = to<&S::engine, &E::speculative_config>(),
     .help = "speculative decoding, as vLLM's flag. N-gram lookup:\n"
             "{\"method\": \"ngram\", \"num_speculative_tokens\": K,\n"
             "\"prompt_lookup_min\": A, \"prompt_lookup_max\": B}: each step a decode\n"
             "may propose up to K tokens found after the latest earlier occurrence\n"
             "of its last B..A tokens (prompt and output; both default to 5).\n"
             "Draft model: {\"model\": DIR, \"num_speculative_tokens\": K}: a smaller\n"
             "model with the same vocabulary runs beside this one (its own KV\n"
             "cache over the same blocks) and proposes K tokens: its argmax for\n"
             "greedy requests, a draw from it for sampled ones (--device cuda:\n"
             "always its argmax; requests with penalties verify none there).\n"
             "Either way the model verifies the proposals in the same step and\n"
             "outputs keep its distribution (greedy: identical).\n"
             "\"disable_by_batch_size\": C turns proposals off while more than C\n"
             "sequences run (default: no limit)"},

    // tools:
    {.name = "--enable-auto-tool-choice",
     .kind = K::none,
     .group = G::tools,
     .target = set<true, &S::enable_auto_tool_choice>(),
     .help = "serve tool_choice \"auto\" (the default when a request has tools):\n"
             "the output is read for tool calls by --tool-call-parser. Without it\n"
             "such requests get a 400; \"none\", \"required\" and a named function\n"
             "work without it (\"required\" and named calls are grammar-forced)"},
    {.name = "--tool-call-parser",
     .metavar = "NAME",
     .needs = "a parser name",
     .kind = K::text,
     .group = G::tools,
     .target = checked<tool_parser_ok, &S::tool_call_parser>(),
     .help = "the model's tool-call format: hermes (Qwen2.5, Hermes), llama3_json,\n"
             "mistral or pythonic"},
    {.name = "--reasoning-parser",
     .metavar = "NAME",
     .needs = "a parser name",
     .kind = K::text,
     .group = G::tools,
     .target = checked<reasoning_parser_ok, &S::reasoning_parser>(),
     .help = "split <think>...</think> reasoning from the answer into\n"
             "reasoning_content (messages and stream deltas): deepseek_r1 (the\n"
             "output starts inside the reasoning) or qwen3 (reasoning only after a\n"
             "leading <think>); tool calls are read from the answer only"},

    // other (no heading):
    {.name = "--help", .alias = "-h", .usage = "-h, --help", .kind = K::help, .help = "this text"},
    {.name = "--help-markdown",
     .kind = K::markdown,
     .help = "this text as a Markdown page (docs/serve-flags.md is its output)"},
};

}  // namespace

static_assert(k_flags[0].kind == value_kind::positional, "MODEL_DIR is the first row");

std::span<const serve_flag> serve_flags() { return k_flags; }

const serve_flag& serve_positional_flag() { return k_flags[0]; }

std::string_view serve_help_intro() { return k_intro; }

}  // namespace coserve::cli
