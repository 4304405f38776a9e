// coserve::engine — the embedding API: starts the serving actor graph (intake, tokenizer,
// scheduler, KV allocator, executor, streamer) from a config and hands out one output stream per
// request, with no HTTP. The HTTP server and `coserve generate` are its clients.
//
// Threads: every member function is safe to call from any thread. Awaitables resume on the
// executor of the awaiting coroutine (the caller's io_context), never on an engine thread.
#pragma once

#include <asio/awaitable.hpp>
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "actors/engine_metrics.hpp"
#include "actors/kv_allocator_messages.hpp"
#include "actors/request.hpp"
#include "base/result.hpp"
#include "model/config.hpp"
#include "model/executor.hpp"
#include "model/lora.hpp"
#include "model/sampling_params.hpp"
#include "model/step.hpp"
#include "model/structured_output.hpp"
#include "model/text/json/value.hpp"

namespace coserve::rt {
class tracer;
}

namespace coserve::actors {
struct planner_call;
}

namespace coserve {

class executor;
struct engine_config;
class communicator;

// Builds the engine's executor instead of the built-in CPU/CUDA choice (embedders with their own
// device, tests injecting faults). It may wrap the built-in one: make_default_executor.
using executor_factory = std::function<result<std::unique_ptr<executor>>(const engine_config&)>;

struct engine_config {
  std::filesystem::path model_dir;  // a Hugging Face folder
  std::string served_model_name;    // default: the folder's name
  // More names requests may use (vLLM's --served-model-name A B C: a response repeats the name
  // its request used, A when it used none; /v1/models lists all three).
  std::vector<std::string> served_model_aliases;
  std::string device = "cpu";  // "cpu" or "cuda"
  // What the model is served for (vLLM's --task): "auto" (from the architecture: encoders embed,
  // sequence classifiers, encoder or decoder, score; other models generate), "generate", "embed"
  // or "score". Asking an encoder to generate, or a language model to score, is an error at
  // start().
  std::string task = "auto";
  // vLLM's --hf-overrides: a JSON object merged into config.json before the model is read
  // (model/hf_overrides.hpp), e.g. to read a language model's checkpoint as a reranker. Decoders
  // on the CPU executor, one rank.
  std::string hf_overrides;
  int32_t max_num_seqs = 256;  // running sequences at most
  // Tokens per step at most (the chunked-prefill budget); 0: the device's default, 512 on the CPU
  // (measured: shorter TTFT under load and more tokens/s than 2048, docs/benchmarks/cpu.md) and
  // 2048 on a GPU.
  int32_t max_num_batched_tokens = 0;
  int32_t max_model_len = 0;   // 0: the model's max_position_embeddings
  int32_t block_size = 16;     // tokens per KV block
  int64_t num_kv_blocks = 0;   // 0: sized from memory (CPU: kv_cache_bytes; CUDA:
                               // gpu_memory_utilization)
  int64_t kv_cache_bytes = 0;  // CPU KV cache budget; 0: min(4 GiB, 1/4 of available memory)
  double gpu_memory_utilization = 0.9;
  bool enforce_eager = false;  // CUDA: no CUDA graphs, every step eager (vLLM's flag)
  std::string attention_backend =
      "auto";  // CUDA: "auto", "native" or "flashinfer" (gpu/gpu_executor.hpp)
  std::string load_format = "auto";  // CUDA: "auto" (safetensors) or "dummy" (random weights)
  std::string quantization;          // CUDA: "fp8" (W8A8, vLLM's --quantization fp8) or "" (none)
  bool return_logits = false;        // executor copies raw logits (for output_event::logits)
  int32_t max_waiting = 1024;        // admission limit; beyond it submit() fails "queue_full"
  // Admission limit on prompt tokens waiting for their first step: a request whose prompt would
  // take the total past it fails "queue_full" (one is always admitted when none waits).
  int64_t max_waiting_tokens = int64_t{1} << 20;
  int32_t tokenizer_pool_size = 0;  // tokenizer actors, each on its own thread; 0: min(4, cores)
  int32_t cpu_threads = 0;          // CPU executor threads; 0: physical core count
  std::string kv_cache_dtype =
      "auto";  // auto | bf16 | fp16 | fp32 | fp8 | fp8_e4m3 | fp8_e5m2 (CPU; auto is bf16, the CUDA
               // executor's cache is always bf16)
  std::string dtype = "auto";  // auto | bfloat16 | float32: activation precision of the products
                               // with bf16 weights (CPU); CUDA: auto and bfloat16
  bool enable_prefix_caching = true;
  bool skip_tokenizer_init =
      false;  // token ids in and out only (also when tokenizer.json is absent)
  // The chat template instead of the model's: a file (.jinja, or .json with chat_template) or the
  // template text itself ("": the model's).
  std::string chat_template;
  // Sampling defaults for what requests leave out, as vLLM's --generation-config: "auto" reads the
  // model's generation_config.json (temperature, top_p, top_k, min_p, repetition_penalty;
  // max_new_tokens as chat's default max_tokens), "vllm" uses none, anything else is a folder whose
  // generation_config.json is read. override_generation_config: a JSON object of the same keys,
  // winning over the file's (vLLM's --override-generation-config).
  std::string generation_config = "auto";
  std::string override_generation_config;
  std::filesystem::path trace_file;  // when set, Chrome trace JSON is written at stop()
  // Speculative decoding: vLLM's --speculative-config JSON ("": off), e.g.
  // {"method":"ngram","num_speculative_tokens":4,"prompt_lookup_max":3} or
  // {"model":"/models/draft","num_speculative_tokens":4}. Needs an executor that verifies
  // proposals (the CPU executor; a draft model runs inside it); errors at start() name the field.
  std::string speculative_config;
  // LoRA adapters (vLLM's --enable-lora, --lora-modules, --max-lora-rank): each module "name=path"
  // or {"name", "path", "base_model_name"}; requests select one by naming it as their model. The
  // CPU executor, one rank, decoders (model/lora.hpp says which adapters are read).
  bool enable_lora = false;
  std::vector<std::string> lora_modules;
  int32_t max_lora_rank = 16;
  // KV-cache events: vLLM's --kv-events-config JSON ("": none), e.g.
  // {"enable_kv_cache_events": true, "publisher": "zmq", "endpoint": "tcp://*:5557",
  // "replay_endpoint": "tcp://*:5558", "topic": "kv"} (actors/kv_event_publisher.hpp). Needs
  // prefix caching.
  std::string kv_events_config;

  // Faults. A failed step ends the requests scheduled in it; this many failed steps in a row (or
  // one fatal executor error) fail the engine: every open request ends with an error, submit()
  // answers "engine_down", healthy() is false with the reason.
  int32_t max_consecutive_step_failures = 3;
  // A step running longer than this fails the engine the same way (0: never).
  std::chrono::milliseconds step_timeout{std::chrono::minutes(5)};
  // Tensor parallelism (--tensor-parallel-size): the model's layers split over this many ranks
  // (CPU executor; model/tensor_parallel.hpp). Without `communicator` the ranks are threads of
  // this process; with tp_communicator (an MPI launch), the job's ranks, this process being rank 0.
  int32_t tensor_parallel_size = 1;
  std::shared_ptr<communicator> tp_communicator;
  executor_factory make_executor;  // empty: the built-in executor for `device`
  // Fault injection: called as each serving actor starts handling a message (actor and message
  // names); an exception it throws is that handler's failure. Leave empty outside tests.
  std::function<void(std::string_view actor, std::string_view message)> fault_hook;
  // Tests: hears every call the scheduler makes on its step planner, in order, on the scheduler's
  // thread (tests/actors/test_step_loop_plans.cpp replays them through a batch_planner).
  std::function<void(const actors::planner_call&)> planner_journal;
};

// The built-in executor for config.device (CPU, or CUDA when built with it), model loaded.
result<std::unique_ptr<executor>> make_default_executor(const engine_config& config);

// This process's GPU under an MPI launch: its local rank on the host (OMPI_COMM_WORLD_LOCAL_RANK,
// MPI_LOCALRANKID, SLURM_LOCALID or PMIX_LOCAL_RANK; 0 outside a launch).
int32_t local_rank_device();
// A CUDA tensor-parallel rank other than 0 in its own process (gpu/tp_peer.hpp,
// run_remote_tp_rank): returns when rank 0 stops the job, or with the error that ended this rank.
result<void> run_cuda_tp_rank(const std::filesystem::path& model_dir, communicator& world);

struct model_info {
  std::string served_model_name;
  std::vector<std::string> served_model_aliases;  // engine_config's
  sampling_defaults defaults;                     // from the generation config (engine_config)
  std::string architecture;
  int32_t max_model_len = 0;
  int32_t vocab_size = 0;
  int64_t created = 0;           // unix seconds the engine started
  bool prompt_logprobs = false;  // the executor honours sampling_params::prompt_logprobs
  // The served task ("generate", "embed" or "score") and, for the pooling ones, the vector's size
  // (embed) or the number of labels (score), and whether fewer dimensions may be asked for
  // (Matryoshka; when the list is not empty, only those).
  std::string task = "generate";
  int32_t pooled_size = 0;
  // score: how a (query, document) pair becomes one input. "pair": the tokenizer's pair template
  // (an encoder cross-encoder's [CLS] q [SEP] d [SEP]); "concat": the two texts joined, encoded
  // as one (a decoder reranker, as vLLM encodes it); "template": the chat template given with
  // --chat-template rendered over messages [{"role": "query"}, {"role": "document"}] (vLLM's
  // score template, Qwen3-Reranker's prompt), then encoded with the tokenizer's special tokens.
  std::string score_input = "pair";
  // The KV cache as vLLM's vllm:cache_config_info states it: tokens per block, the cache dtype
  // flag as given (engine_config::kv_cache_dtype), whether prefix caching is on, the device's
  // memory fraction (the CUDA executor's; 0 on the CPU).
  int32_t block_size = 0;
  std::string kv_cache_dtype;
  bool prefix_caching = false;
  double gpu_memory_utilization = 0;
  bool matryoshka = false;
  std::vector<int32_t> matryoshka_dimensions;
  // The LoRA adapters served (--lora-modules): a request naming adapters[i].name as its model runs
  // with sampling_params::lora_id i + 1.
  std::vector<lora_module> lora_modules;
};

class engine {
 public:
  // Loads the model and starts the actors. Logs progress to stderr.
  static result<std::unique_ptr<engine>> start(engine_config config);
  virtual ~engine() = default;

  // Hands the request to the tokenizer pool, which renders the chat template, encodes, validates
  // (ids in the vocabulary, the context rule) and enqueues it. Refusals (over the admission limits,
  // engine down) are answered at once, without waiting on any actor. Errors: code "queue_full"
  // (HTTP 429), "engine_down" (503), "invalid_request" (400; message says why, e.g. a template's
  // raise_exception text; param names the field).
  virtual asio::awaitable<result<std::shared_ptr<request_stream>>> submit(generate_request req) = 0;

  // /tokenize and /detokenize: encoded or decoded by an actor of the tokenizer pool (never on the
  // caller's thread). Chat input is rendered by the chat template first. detokenize skips special
  // tokens. Errors: "invalid_request" (no tokenizer, template error, id outside the vocabulary).
  virtual asio::awaitable<result<std::vector<int32_t>>> tokenize(tokenize_request_input in) = 0;
  virtual asio::awaitable<result<std::string>> detokenize(std::vector<int32_t> ids) = 0;

  virtual const model_info& info() const noexcept = 0;
  virtual bool healthy() const noexcept = 0;
  // Why healthy() is false ("" while it is true): draining, stopped, or the failure's reason.
  virtual std::string unhealthy_reason() const {
    return healthy() ? std::string() : "engine unavailable";
  }
  virtual engine_metrics metrics() = 0;
  // The requests the scheduler holds, oldest first, as the scheduler actor answers (at most
  // `limit` of them; the running ones come first). An engine without a scheduler answers none.
  virtual asio::awaitable<result<std::vector<request_status>>> requests(size_t limit) {
    (void)limit;
    co_return std::vector<request_status>{};
  }
  // POST /reset_prefix_cache: every cached block dropped (AllBlocksCleared published); the number
  // dropped. GET /api/prefix_cache: the blocks the prefix cache holds. Both answered by the KV
  // allocator actor, in order with the steps it places.
  virtual asio::awaitable<result<int32_t>> reset_prefix_cache() {
    co_return error{"unsupported", "this engine has no prefix cache"};
  }
  virtual asio::awaitable<result<actors::prefix_cache_listing>> prefix_cache() {
    co_return error{"unsupported", "this engine has no prefix cache"};
  }
  // The actor graph's tracer (spans per actor and per request), or nullptr without one.
  virtual rt::tracer* tracer() noexcept { return nullptr; }

  // Stops accepting (submit answers "engine_down", healthy() turns false), lets open requests run
  // for up to `grace`, then aborts the rest (their streams end with finish_reason::abort) and waits
  // for every stream to end. Returns the number of requests aborted. Blocks the caller; waits on a
  // condition, no polling. Idempotent; stop() still has to be called.
  virtual int64_t drain(std::chrono::milliseconds grace) {
    (void)grace;
    return 0;
  }

  // Stops accepting, drains in-flight requests (or aborts them when `abort_running`), stops the
  // actors in reverse start order, writes the trace file if configured. Blocks the caller.
  virtual void stop(bool abort_running = false) = 0;
};

// KV blocks for the CPU executor: num_kv_blocks when set, else what kv_cache_bytes (or min(4 GiB,
// a quarter of `available_bytes`)) holds in K and V of cfg.kv_cache_dtype for every layer (of the
// model, and of a draft model's cache beside it when `draft` is given), at least one sequence at
// max_model_len and at most max_num_seqs of them. Tensor parallel: the KV heads this host stores
// for its ranks (all ranks as threads; the launcher's per-host count of MPI ranks).
int32_t cpu_kv_cache_blocks(const model_config& model, const engine_config& cfg,
                            int32_t max_model_len, int64_t available_bytes,
                            const model_config* draft = nullptr);

}  // namespace coserve
