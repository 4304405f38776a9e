// Loading the executor an engine runs: the CPU executor with its KV cache sized from memory, or the
// CUDA executor from libcoserve_cuda.so (loaded with dlopen on first use, docs/architecture.md "The
// CUDA module, loaded at run time"); a tensor-parallel rank's loop in that module. Declared in
// actors/engine.hpp.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "actors/engine.hpp"
#include "actors/speculation.hpp"
#include "model/config.hpp"
#include "model/cpu_executor.hpp"
#include "model/encoder_executor.hpp"
#include "model/gguf_model.hpp"
#include "model/text/tokenizer/tokenizer.hpp"
#if defined(COSERVE_HAVE_GPU_EXECUTOR)
#include <dlfcn.h>

#include "gpu/gpu_executor.hpp"
#endif

namespace coserve {

namespace {

// Logs weight loading progress: every 10% of the tensors, and at most once a second.
load_progress progress_logger(const std::string& what) {
  struct state {
    std::chrono::steady_clock::time_point last = std::chrono::steady_clock::now();
    int last_decile = -1;
  };
  auto st = std::make_shared<state>();
  return [st, what](size_t done, size_t total, size_t bytes) {
    const auto now = std::chrono::steady_clock::now();
    const int decile = total == 0 ? 10 : static_cast<int>(done * 10 / total);
    if (done != total && (decile == st->last_decile || now - st->last < std::chrono::seconds(1)))
      return;
    if (done == total && st->last_decile == 10) return;
    st->last = now;
    st->last_decile = decile;
    std::fprintf(stderr, "coserve: loading %s: %zu/%zu tensors, %.1f MiB\n", what.c_str(), done,
                 total, static_cast<double>(bytes) / (1024.0 * 1024.0));
  };
}

int64_t available_memory_bytes() {
  std::ifstream in("/proc/meminfo");
  std::string key;
  int64_t kb = 0;
  std::string unit;
  while (in >> key >> kb >> unit)
    if (key == "MemAvailable:") return kb * 1024;
  return int64_t{8} << 30;
}

}  // namespace

int32_t cpu_kv_cache_blocks(const model_config& model, const engine_config& cfg,
                            int32_t max_model_len, int64_t available_bytes,
                            const model_config* draft) {
  if (cfg.num_kv_blocks > 0) return static_cast<int32_t>(cfg.num_kv_blocks);
  const int32_t bs = std::max(1, cfg.block_size);
  dtype kv = dtype::bf16;
  if (!parse_kv_cache_dtype(cfg.kv_cache_dtype, kv))
    kv = dtype::f32;  // rejected later; size conservatively
  auto block_bytes = [&](const model_config& m, int64_t kv_heads) {
    const int64_t head_dim =
        m.head_dim > 0 ? m.head_dim : m.hidden_size / std::max(1, m.num_attention_heads);
    return int64_t{2} * m.num_hidden_layers * kv_heads * head_dim * bs *
           static_cast<int64_t>(dtype_size(kv));
  };
  // Tensor parallel: the KV heads this host stores per block, over the ranks it runs (each rank its
  // share, a replicated head counted on every rank that holds it). Ranks as threads: all of them;
  // MPI ranks: the launcher's count for this host (all N where it does not say).
  int64_t kv_heads = model.num_key_value_heads;
  if (const int32_t n = cfg.tensor_parallel_size; n > 1 && model.num_key_value_heads > 0) {
    const int64_t per_rank = model.num_key_value_heads % n == 0 ? model.num_key_value_heads / n : 1;
    int64_t here = n;
    if (cfg.tp_communicator)
      for (const char* var :
           {"OMPI_COMM_WORLD_LOCAL_SIZE", "MPI_LOCALNRANKS", "SLURM_NTASKS_PER_NODE"})
        if (const char* v = std::getenv(var); v && std::atoi(v) > 0) {
          here = std::min<int64_t>(n, std::atoi(v));
          break;
        }
    kv_heads = per_rank * here;
  }
  // A draft model keeps a cache of the same blocks beside the model's.
  const int64_t per_block =
      block_bytes(model, kv_heads) + (draft ? block_bytes(*draft, draft->num_key_value_heads) : 0);
  const int64_t budget = cfg.kv_cache_bytes > 0
                             ? cfg.kv_cache_bytes
                             : std::min<int64_t>(int64_t{4} << 30, available_bytes / 4);
  const int64_t per_seq = (max_model_len + bs - 1) / bs;
  // More than every running sequence at full length can use is never needed.
  const int64_t cap = per_seq * std::max(1, cfg.max_num_seqs);
  const int64_t fit = per_block > 0 ? budget / per_block : cap;
  return static_cast<int32_t>(
      std::clamp<int64_t>(std::min(fit, cap), std::min(per_seq, cap), int64_t{1} << 30));
}

#if defined(COSERVE_HAVE_GPU_EXECUTOR)
namespace {
// The CUDA executor lives in libcoserve_cuda.so (gpu/cuda_module.cpp), loaded on first use and
// kept for the life of the process: $COSERVE_CUDA_MODULE if set, else the file beside the running
// binary, else the dynamic loader's search path.
// A symbol of libcoserve_cuda.so (next to the binary, or COSERVE_CUDA_MODULE), loaded once.
result<void*> cuda_module_symbol(const char* name) {
  static std::mutex mu;
  static void* module = nullptr;
  std::lock_guard lock(mu);
  std::string why;
  if (!module) {
    std::vector<std::string> tried;
    if (const char* env = std::getenv("COSERVE_CUDA_MODULE"); env && *env) {
      tried.emplace_back(env);
    } else {
      std::error_code ec;
      const auto exe = std::filesystem::read_symlink("/proc/self/exe", ec);
      if (!ec) tried.push_back((exe.parent_path() / "libcoserve_cuda.so").string());
      tried.emplace_back("libcoserve_cuda.so");
    }
    for (const std::string& path : tried) {
      void* h = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
      if (h) {
        module = h;
        break;
      }
      const char* e = dlerror();
      why += (why.empty() ? "" : "; ") + std::string(e ? e : path + ": cannot load");
    }
    if (!module)
      return error{"unavailable",
                   "device 'cuda': the CUDA executor module did not load (" + why + ")"};
  }
  void* fn = dlsym(module, name);
  if (!fn)
    return error{"unavailable",
                 std::string("device 'cuda': the CUDA executor module has no ") + name};
  return fn;
}

result<std::unique_ptr<executor>> make_cuda_executor(const gpu::gpu_executor_options& opts) {
  using make_fn =
      void (*)(const gpu::gpu_executor_options*, std::optional<result<std::unique_ptr<executor>>>*);
  auto layout = cuda_module_symbol("coserve_cuda_module_layout_v1");
  if (!layout) return layout.err();
  if (const uint64_t theirs = reinterpret_cast<uint64_t (*)()>(*layout)();
      theirs != gpu::module_layout())
    return error{"unavailable",
                 "device 'cuda': the CUDA executor module was built from other sources than this "
                 "binary (options of " +
                     std::to_string(theirs >> 32) + " bytes there, " +
                     std::to_string(gpu::module_layout() >> 32) + " here): rebuild both"};
  auto sym = cuda_module_symbol("coserve_make_gpu_executor_v1");
  if (!sym) return sym.err();
  std::optional<result<std::unique_ptr<executor>>> out;
  reinterpret_cast<make_fn> (*sym)(&opts, &out);
  if (!out) return error{"internal", "device 'cuda': the CUDA executor module returned nothing"};
  return std::move(*out);
}
}  // namespace
#endif

int32_t local_rank_device() {
  for (const char* var :
       {"OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID", "SLURM_LOCALID", "PMIX_LOCAL_RANK"})
    if (const char* v = std::getenv(var); v && *v) return std::max(0, std::atoi(v));
  return 0;
}

result<void> run_cuda_tp_rank(const std::filesystem::path& model_dir, communicator& world) {
#if defined(COSERVE_HAVE_GPU_EXECUTOR)
  using run_fn = void (*)(const std::string*, communicator*, int32_t, result<void>*);
  auto sym = cuda_module_symbol("coserve_run_gpu_tp_rank_v1");
  if (!sym) return sym.err();
  const std::string dir = model_dir.string();
  result<void> out;
  reinterpret_cast<run_fn> (*sym)(&dir, &world, local_rank_device(), &out);
  return out;
#else
  (void)model_dir;
  (void)world;
  return error{"invalid_argument",
               "device 'cuda': this build has no CUDA executor (configure with COSERVE_CUDA=ON)"};
#endif
}

namespace {

// Encoder models (embeddings, cross-encoders) run on the CPU encoder executor. Its KV blocks are
// the scheduler's bookkeeping only (nothing stands behind them): as many as max_num_seqs inputs
// of max_model_len tokens take.
result<std::unique_ptr<executor>> make_encoder_executor(const engine_config& config) {
  if (config.device != "cpu")
    return error{"invalid_argument",
                 "device '" + config.device +
                     "': encoder models (embeddings, scores) run on the CPU executor (--device "
                     "cpu); the CUDA executor serves decoders"};
  if (config.tensor_parallel_size > 1)
    return error{"invalid_argument", "--tensor-parallel-size: encoder models run on one rank",
                 "tensor_parallel_size"};
  if (!config.speculative_config.empty())
    return error{"invalid_argument",
                 "--speculative-config: an encoder model generates nothing to speculate on",
                 "speculative_config"};
  if (!config.quantization.empty() || config.load_format != "auto")
    return error{"invalid_argument",
                 "--quantization and --load-format apply to the CUDA executor's decoders"};
  if (!config.lora_modules.empty())
    return error{"invalid_argument", "--lora-modules: LoRA adapters apply to decoders",
                 "lora_modules"};
  encoder_executor_options opts;
  opts.num_threads = config.cpu_threads;
  opts.max_model_len = config.max_model_len;
  opts.block_size = config.block_size;
  auto e = encoder_executor::load(config.model_dir, opts);
  if (!e) return e.err();
  const int64_t per_seq = ((*e)->max_model_len() + config.block_size - 1) / config.block_size;
  (*e)->set_num_kv_blocks(
      int32_t(std::min<int64_t>(int64_t(config.max_num_seqs) * per_seq + 1, int64_t{1} << 24)));
  const pooling_config& p = (*e)->pooling();
  const encoder_config& c = (*e)->config();
  const std::string head =
      c.classifier() ? "a classification head of " + std::to_string(c.num_labels) + " label" +
                           (c.num_labels == 1 ? "" : "s") + " on the first token"
                     : std::string(pooling_type_name(p.type)) + " pooling" +
                           (p.normalize ? ", normalised" : "") + " (" + p.source + ")";
  std::fprintf(stderr, "coserve engine: encoder %s, %s, max_model_len %d\n", c.architecture.c_str(),
               head.c_str(), (*e)->max_model_len());
  return std::unique_ptr<executor>(std::move(*e));
}

// --task embed on a causal model: last-token pooling, normalised, unless the folder's
// sentence-transformers files say otherwise (vLLM's default for causal models).
result<void> set_embedding_options(const engine_config& config, cpu_executor_options& opts) {
  pooling_config fallback;
  fallback.type = pooling_type::last;
  fallback.normalize = true;
  fallback.source = "no sentence-transformers modules.json: the last token, normalised";
  auto p = load_pooling_config(config.model_dir, fallback);
  if (!p) return p.err();
  std::fprintf(stderr, "coserve engine: embeddings by %s pooling%s (%s)\n",
               std::string(pooling_type_name(p->type)).c_str(), p->normalize ? ", normalised" : "",
               p->source.c_str());
  opts.pooling = *p;
  const matryoshka_info m = read_matryoshka(config.model_dir);
  opts.matryoshka = m.enabled;
  opts.matryoshka_dimensions = m.dimensions;
  return {};
}

// A decoder sequence classifier: its head logged; classifier_from_token's tokens looked up in the
// model's tokenizer as vLLM does (convert_tokens_to_ids: vocabulary entries, not encoded text).
result<void> set_classifier_options(const engine_config& config, const model_config& model,
                                    cpu_executor_options& opts) {
  if (!model.classifier()) return {};
  std::string head = "score.weight";
  if (!model.classifier_from_token.empty()) {
    auto tok = tokenizer::load(config.model_dir / "tokenizer.json");
    if (!tok)
      return error{"invalid_argument",
                   "classifier_from_token needs the model's tokenizer.json: " + tok.err().message,
                   "hf_overrides"};
    head.clear();
    for (const std::string& t : model.classifier_from_token) {
      const std::optional<int32_t> id = tok->token_to_id(t);
      if (!id)
        return error{"invalid_argument",
                     "classifier_from_token: '" + t + "' is not a token of the model's vocabulary",
                     "hf_overrides"};
      opts.classifier_token_ids.push_back(*id);
      head += (head.empty() ? "LM-head rows of " : ", ") +
              ("'" + t + "' (" + std::to_string(*id) + ")");
    }
    if (model.two_way_softmax) head += ", second minus first (from_2_way_softmax)";
  }
  std::fprintf(stderr,
               "coserve engine: sequence classifier %s: %d label%s from %s on the last token's "
               "final hidden state\n",
               model.architecture.c_str(), model.num_labels, model.num_labels == 1 ? "" : "s",
               head.c_str());
  return {};
}

// The CPU executor for a decoder (model_cfg read with the overrides), its KV cache sized from
// memory.
// --lora-modules: each adapter read against the model's config (errors name the module).
result<void> load_lora_adapters(const engine_config& config, const model_config& model_cfg,
                                cpu_executor_options& opts) {
  for (const std::string& text : config.lora_modules) {
    auto m = parse_lora_module(text);
    if (!m) return m.err();
    auto a = load_lora_adapter(m->path, model_cfg, config.max_lora_rank);
    if (!a)
      return error{a.err().code, "--lora-modules " + m->name + ": " + a.err().message,
                   "lora_modules"};
    std::fprintf(stderr,
                 "coserve engine: LoRA adapter %s: %s, rank %d, scaling %g, %zu projections\n",
                 m->name.c_str(), m->path.c_str(), a->rank, double(a->scaling), a->factors.size());
    opts.loras.push_back(std::make_shared<const lora_adapter>(std::move(*a)));
  }
  return {};
}

result<std::unique_ptr<executor>> make_cpu_executor(const engine_config& config,
                                                    const model_config& model_cfg,
                                                    int32_t max_len) {
  if (config.load_format != "auto")
    return error{"invalid_argument",
                 "load format '" + config.load_format + "' needs --device cuda"};
  if (config.attention_backend != "auto" && config.attention_backend != "native")
    return error{"invalid_argument",
                 "--attention-backend " + config.attention_backend + " needs --device cuda",
                 "attention_backend"};
  if (!config.quantization.empty())
    return error{"invalid_argument",
                 "--quantization " + config.quantization +
                     " needs --device cuda (the CPU executor reads fp8 checkpoints by "
                     "themselves, docs/fp8.md, and GGUF files with its integer kernels)",
                 "quantization"};
  cpu_executor_options opts;
  if (!parse_kv_cache_dtype(config.kv_cache_dtype, opts.kv_cache_dtype))
    return error{"invalid_argument",
                 "kv cache dtype '" + config.kv_cache_dtype +
                     "' is not auto, bf16, fp16, fp32, fp8, fp8_e4m3 or fp8_e5m2"};
  if (!parse_compute_dtype(config.dtype, opts.bf16_activations))
    return error{"invalid_argument",
                 "dtype '" + config.dtype + "' is not auto, bfloat16 or float32"};
  opts.block_size = config.block_size;
  if (!config.speculative_config.empty()) {
    auto spec = actors::parse_speculative_config(config.speculative_config);
    if (!spec) return spec.err();
    opts.draft_model_dir = spec->draft_model;
  }
  std::optional<model_config> draft_cfg;
  if (!opts.draft_model_dir.empty()) {
    auto d = load_model_config(opts.draft_model_dir);
    if (!d)
      return error{d.err().code,
                   "--speculative-config: 'model' " + opts.draft_model_dir + ": " + d.err().message,
                   "model"};
    draft_cfg = std::move(*d);
  }
  opts.num_kv_blocks = cpu_kv_cache_blocks(model_cfg, config, max_len, available_memory_bytes(),
                                           draft_cfg ? &*draft_cfg : nullptr);
  opts.num_threads = config.cpu_threads;
  opts.tensor_parallel_size = config.tensor_parallel_size;
  opts.world = config.tp_communicator;
  opts.max_model_len = config.max_model_len;
  opts.return_logits = config.return_logits;
  if (config.task == "embed" || config.task == "embedding")
    if (auto r = set_embedding_options(config, opts); !r) return r.err();
  opts.hf_overrides = config.hf_overrides;
  if (auto r = set_classifier_options(config, model_cfg, opts); !r) return r.err();
  if (auto r = load_lora_adapters(config, model_cfg, opts); !r) return r.err();
  auto e = cpu_executor::load(config.model_dir.string(), opts, progress_logger("weights"));
  if (!e) return e.err();
  return std::unique_ptr<executor>(std::move(*e));
}

}  // namespace

result<std::unique_ptr<executor>> make_default_executor(const engine_config& config) {
  if (!is_gguf_file(config.model_dir.string()) &&
      is_encoder_architecture(read_architecture(config.model_dir, config.hf_overrides)))
    return make_encoder_executor(config);
  auto model = load_model_config(config.model_dir.string(), config.hf_overrides);
  if (!model) return model.err();
  const model_config& model_cfg = *model;
  const int32_t max_len =
      config.max_model_len > 0 ? config.max_model_len : model_cfg.max_position_embeddings;
  std::unique_ptr<executor> exec;
  if (config.device == "cpu") {
    auto e = make_cpu_executor(config, model_cfg, max_len);
    if (!e) return e.err();
    exec = std::move(*e);
  } else if (config.device == "cuda") {
    if (!config.lora_modules.empty())
      return error{"invalid_argument",
                   "--lora-modules: LoRA adapters run on the CPU executor (--device cpu)",
                   "lora_modules"};
    if (model_cfg.classifier())
      return error{"invalid_argument",
                   model_cfg.architecture +
                       ": sequence classifiers run on the CPU executor (--device cpu); the CUDA "
                       "executor generates",
                   "task"};
    if (config.task == "embed" || config.task == "embedding")
      return error{"invalid_argument",
                   "--task embed: embeddings run on the CPU executor (--device cpu); the CUDA "
                   "executor generates",
                   "task"};
    dtype gpu_kv = dtype::bf16;
    if (!parse_kv_cache_dtype(config.kv_cache_dtype, gpu_kv) ||
        (gpu_kv != dtype::bf16 && gpu_kv != dtype::f8_e4m3 && gpu_kv != dtype::f8_e5m2))
      return error{
          "invalid_argument",
          "kv cache dtype '" + config.kv_cache_dtype +
              "': the CUDA executor keeps a bf16 (auto), fp8 / fp8_e4m3 or fp8_e5m2 cache"};
    if (config.dtype != "auto" && config.dtype != "bfloat16" && config.dtype != "bf16")
      return error{"invalid_argument",
                   "dtype '" + config.dtype + "': the CUDA executor computes in bfloat16"};
#if defined(COSERVE_HAVE_GPU_EXECUTOR)
    gpu::gpu_executor_options opts;
    opts.model_dir = config.model_dir.string();
    opts.load_format = config.load_format;
    opts.gpu_memory_utilization = config.gpu_memory_utilization;
    opts.block_size = config.block_size;
    opts.max_num_tokens = config.max_num_batched_tokens > 0 ? config.max_num_batched_tokens : 2048;
    opts.max_num_seqs = config.max_num_seqs;
    opts.max_model_len = config.max_model_len;
    opts.num_kv_blocks = static_cast<int32_t>(config.num_kv_blocks);
    opts.return_logits = config.return_logits;
    opts.enforce_eager = config.enforce_eager;
    opts.attention_backend = config.attention_backend;
    opts.quantization = config.quantization;
    opts.kv_cache_dtype = gpu_kv;
    opts.tensor_parallel_size = config.tensor_parallel_size;
    if (config.tp_communicator && config.tensor_parallel_size > 1) {  // one GPU per MPI rank
      opts.world = config.tp_communicator;
      opts.device = local_rank_device();
    }
    if (!config.speculative_config.empty()) {
      auto spec = actors::parse_speculative_config(config.speculative_config);
      if (!spec) return spec.err();
      opts.draft_model_dir = spec->draft_model;
      opts.num_speculative_tokens = spec->num_speculative_tokens;
    }
    opts.progress = progress_logger("weights to the GPU");
    auto e = make_cuda_executor(opts);
    if (!e) return e.err();
    exec = std::move(*e);
#else
    return error{"invalid_argument",
                 "device 'cuda': this build has no CUDA executor (configure with COSERVE_CUDA=ON)"};
#endif
  } else {
    return error{"invalid_argument", "device '" + config.device + "' is not one of cpu, cuda"};
  }
  return exec;
}

}  // namespace coserve
