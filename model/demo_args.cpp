#include "model/demo_args.hpp"

#include <charconv>
#include <cstdlib>
#include <cstring>
#include <string_view>
#include <type_traits>

#include "model/architectures.hpp"

namespace coserve {
namespace {

template <class T>
bool parse_num(const char* s, T& out) {
  std::string_view v(s);
  if constexpr (std::is_floating_point_v<T>) {
    char* end = nullptr;
    const double d = std::strtod(s, &end);
    if (end == s || *end != '\0') return false;
    out = T(d);
    return true;
  } else {
    auto [p, ec] = std::from_chars(v.data(), v.data() + v.size(), out);
    return ec == std::errc() && p == v.data() + v.size();
  }
}

constexpr const char* k_demo_help =
    "usage: coserve make-demo-model DIR [options]\n"
    "\n"
    "Writes a complete Hugging Face model folder with deterministic random weights: config.json,\n"
    "model.safetensors, generation_config.json and the tokenizer files. Same options => same "
    "files.\n"
    "\n"
    "  --seed S                      weight generator seed (default 0)\n"
    "  --tokenizer PATH              folder whose tokenizer files are copied (default\n"
    "                                ../shared/testdata/tokenizers/gpt2, also tried from the "
    "source tree)\n"
    "  --no-tokenizer                copy no tokenizer files (requires --vocab-size)\n"
    "  --architecture A              the architecture (default llama; docs/models.md):\n"
    "                                  {demo_architectures}\n"
    "  --hidden-size N               default 256\n"
    "  --intermediate-size N         default 688\n"
    "  --num-layers N                default 4\n"
    "  --num-heads N                 default 8\n"
    "  --num-kv-heads N              default 2 (grouped-query attention)\n"
    "  --head-dim N                  default hidden-size / num-heads (written to config.json when "
    "given)\n"
    "  --rope-theta F                default 10000\n"
    "  --rope-scaling T              rope scaling: llama3 (factor 8, low 1, high 4 unless given "
    "below),\n"
    "                                linear (factor), yarn (factor, original max positions) or "
    "longrope\n"
    "                                (Phi-3.5's kind: short factors 1 + i/8, long factors 2 + i "
    "per rotated\n"
    "                                pair, original max positions below)\n"
    "  --rope-factor F --rope-low-freq-factor F --rope-high-freq-factor F\n"
    "  --rope-original-max-position-embeddings N   llama3 / yarn / longrope parameter (default "
    "8192)\n"
    "  --partial-rotary-factor F     phi3: RoPE over the first head_dim * F dimensions (default "
    "1)\n"
    "  --sliding-window N            sliding-window attention over N positions: every layer "
    "(mistral,\n"
    "                                phi3) or, with use_sliding_window, the layers from\n"
    "  --max-window-layers N         on (qwen2, qwen3; default 0)\n"
    "  --num-experts N               mixtral, qwen2_moe, qwen3_moe: experts per sparse layer "
    "(default 8)\n"
    "  --num-experts-per-tok K       experts each token is routed to (default 2)\n"
    "  --moe-intermediate-size N     qwen2_moe, qwen3_moe: each expert's MLP width (default:\n"
    "                                intermediate-size; mixtral's experts are always that wide)\n"
    "  --shared-expert-intermediate-size N  qwen2_moe: the shared expert's width (default:\n"
    "                                intermediate-size)\n"
    "  --norm-topk-prob              qwen2_moe, qwen3_moe: the top-k routing weights divided by "
    "their\n"
    "                                sum (mixtral always does)\n"
    "  --decoder-sparse-step S       qwen2_moe, qwen3_moe: layer l is sparse when (l + 1) % S == "
    "0,\n"
    "                                otherwise a dense MLP of intermediate-size (default 1: all "
    "sparse)\n"
    "  --tie-embeddings              the LM head shares the embedding matrix\n"
    "  --qkv-bias                    biases on q/k/v projections (always on for qwen2)\n"
    "  --dtype bf16|f16|f32          weight dtype on disk (default bf16)\n"
    "  --vocab-size N                default: the tokenizer's vocabulary size\n"
    "  --max-position-embeddings N   default 2048\n";

}  // namespace

std::string demo_help() { return with_architecture_lists(k_demo_help); }

result<demo_args> parse_demo_args(const std::vector<std::string>& args) {
  demo_args out;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a == "--help" || a == "-h") {
      out.help = true;
      return out;
    }
    auto next = [&]() -> const char* { return i + 1 < args.size() ? args[++i].c_str() : nullptr; };
    auto num = [&](auto& dst) {
      const char* v = next();
      return v != nullptr && parse_num(v, dst);
    };
    bool ok = true;
    if (a == "--seed")
      ok = num(out.options.seed);
    else if (a == "--tokenizer") {
      const char* v = next();
      if (!v)
        ok = false;
      else
        out.options.tokenizer_dir = v;
    } else if (a == "--no-tokenizer")
      out.options.copy_tokenizer = false;
    else if (a == "--architecture") {
      const char* v = next();
      if (!v)
        ok = false;
      else
        out.options.architecture = v;
    } else if (a == "--hidden-size")
      ok = num(out.options.hidden_size);
    else if (a == "--intermediate-size")
      ok = num(out.options.intermediate_size);
    else if (a == "--num-layers")
      ok = num(out.options.num_layers);
    else if (a == "--num-heads")
      ok = num(out.options.num_heads);
    else if (a == "--num-kv-heads")
      ok = num(out.options.num_kv_heads);
    else if (a == "--head-dim")
      ok = num(out.options.head_dim);
    else if (a == "--rope-theta")
      ok = num(out.options.rope_theta);
    else if (a == "--rope-scaling") {
      const char* v = next();
      if (!v || (std::strcmp(v, "llama3") != 0 && std::strcmp(v, "linear") != 0 &&
                 std::strcmp(v, "yarn") != 0 && std::strcmp(v, "longrope") != 0))
        return make_error("invalid_argument",
                          "--rope-scaling must be llama3, linear, yarn or longrope");
      out.options.rope_type = v;
    } else if (a == "--rope-factor")
      ok = num(out.options.rope_factor);
    else if (a == "--rope-low-freq-factor")
      ok = num(out.options.rope_low_freq_factor);
    else if (a == "--rope-high-freq-factor")
      ok = num(out.options.rope_high_freq_factor);
    else if (a == "--rope-original-max-position-embeddings")
      ok = num(out.options.rope_original_max_position_embeddings);
    else if (a == "--partial-rotary-factor")
      ok = num(out.options.partial_rotary_factor);
    else if (a == "--sliding-window")
      ok = num(out.options.sliding_window);
    else if (a == "--max-window-layers")
      ok = num(out.options.max_window_layers);
    else if (a == "--num-experts")
      ok = num(out.options.num_experts);
    else if (a == "--num-experts-per-tok")
      ok = num(out.options.num_experts_per_tok);
    else if (a == "--moe-intermediate-size")
      ok = num(out.options.moe_intermediate_size);
    else if (a == "--norm-topk-prob")
      out.options.norm_topk_prob = true;
    else if (a == "--decoder-sparse-step")
      ok = num(out.options.decoder_sparse_step);
    else if (a == "--shared-expert-intermediate-size")
      ok = num(out.options.shared_expert_intermediate_size);
    else if (a == "--tie-embeddings")
      out.options.tie_embeddings = true;
    else if (a == "--qkv-bias")
      out.options.qkv_bias = true;
    else if (a == "--dtype") {
      const char* v = next();
      std::string_view t = v ? v : "";
      if (t == "bf16")
        out.options.weight_dtype = dtype::bf16;
      else if (t == "f16")
        out.options.weight_dtype = dtype::f16;
      else if (t == "f32")
        out.options.weight_dtype = dtype::f32;
      else
        return make_error("invalid_argument", "--dtype must be bf16, f16 or f32");
    } else if (a == "--vocab-size")
      ok = num(out.options.vocab_size);
    else if (a == "--max-position-embeddings")
      ok = num(out.options.max_position_embeddings);
    else if (!a.empty() && a[0] == '-')
      return make_error("invalid_argument", "unknown option " + a + " (see --help)");
    else if (out.dir.empty())
      out.dir = a;
    else
      return make_error("invalid_argument", "more than one DIR given");
    if (!ok) return make_error("invalid_argument", a + " needs a valid value");
  }
  return out;
}

}  // namespace coserve
