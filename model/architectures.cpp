#include "model/architectures.hpp"

#include <algorithm>
#include <array>
#include <vector>

namespace coserve {
namespace {

// One entry per architecture; the order is that of every list and of the docs table.
constexpr std::array k_architectures = {
    architecture{
        .name = "llama",
        .hf_name = "LlamaForCausalLM",
        .title = "Llama",
        .summary = "RMSNorm, RoPE, grouped-query attention, SwiGLU MLP",
        .differences = "— (`attention_bias` puts biases on q/k/v and o_proj)",
        .config = {},
        .gguf = {.name = "llama", .with_experts = "mixtral", .rope_interleaved = true},
        .demo = {.attention_bias = true, .mlp_bias = true},
    },
    architecture{
        .name = "mistral",
        .hf_name = "MistralForCausalLM",
        .title = "Mistral",
        .summary = "a sliding window on every layer",
        .differences = "`sliding_window`: each query attends to the last `sliding_window` "
                       "positions (llama.cpp's converter writes these models as `llama` files, "
                       "read as Llama)",
        .config = {.sliding_window = sliding_window_rule::every_layer},
        .gguf = {.name = "mistral", .rope_interleaved = true},
    },
    architecture{
        .name = "qwen2",
        .hf_name = "Qwen2ForCausalLM",
        .title = "Qwen2",
        .summary = "q/k/v biases; windows on the upper layers (opt-in)",
        .differences = "q/k/v biases, none on o_proj; `use_sliding_window: true` windows the "
                       "layers `layer_types` marks `sliding_attention`, or those from "
                       "`max_window_layers` on",
        .config = {.bias = attention_bias_rule::always_qkv,
                   .sliding_window = sliding_window_rule::opted_in_upper_layers},
        .gguf = {.name = "qwen2"},
    },
    architecture{
        .name = "qwen3",
        .hf_name = "Qwen3ForCausalLM",
        .title = "Qwen3",
        .summary = "an RMSNorm over each q and k head before RoPE",
        .differences = "an RMSNorm over each q and k head before RoPE (`q_norm`, `k_norm`); "
                       "`head_dim` 128 when absent",
        .config = {.sliding_window = sliding_window_rule::opted_in_upper_layers,
                   .head_dim = 128,
                   .qk_norm = true},
        .gguf = {.name = "qwen3"},
        .demo = {.attention_bias = true},
    },
    architecture{
        .name = "phi3",
        .hf_name = "Phi3ForCausalLM",
        .title = "Phi-3",
        .summary = "fused qkv and gate_up tensors; partial rotary, LongRoPE",
        .differences = "fused `qkv_proj` and `gate_up_proj` (read as row ranges, no copy); "
                       "`sliding_window` as Mistral's; `partial_rotary_factor` (Phi-4-mini's "
                       "0.75: RoPE over the first `head_dim × factor` dimensions) and LongRoPE "
                       "(below)",
        .config = {.sliding_window = sliding_window_rule::every_layer,
                   .fused_projections = true,
                   .partial_rotary = true},
        .gguf = {.name = "phi3", .window_and_longrope = true},
        .demo = {.original_max_position_embeddings = true, .pad_token_id = true},
    },
    architecture{
        .name = "smollm3",
        .hf_name = "SmolLM3ForCausalLM",
        .title = "SmolLM3",
        .summary = "no RoPE on every 4th layer (no_rope_layers)",
        .differences = "no RoPE on the layers `no_rope_layers` marks 0 (or every "
                       "`no_rope_layer_interval`-th); tied embeddings by default",
        .config = {.sliding_window = sliding_window_rule::caps_context,
                   .tie_word_embeddings = true,
                   .no_rope_layers = true},
        .gguf = {},
        .demo = {.attention_bias = true, .mlp_bias = true, .pad_token_id = true},
    },
    architecture{
        .name = "mixtral",
        .hf_name = "MixtralForCausalLM",
        .title = "Mixtral",
        .summary = "mixture of experts on every layer",
        .differences = "each layer's MLP is `num_local_experts` SwiGLU experts "
                       "(`block_sparse_moe.experts.N.w1/w3/w2`, width `intermediate_size`) behind "
                       "a router (`block_sparse_moe.gate`); `sliding_window` as Mistral's",
        .cuda = false,
        .config = {.sliding_window = sliding_window_rule::every_layer,
                   .experts = {.layout = expert_layout::mixtral,
                               .num_experts = 8,
                               .num_experts_per_tok = 2,
                               .norm_topk_prob = true}},
        .gguf = {.rope_interleaved = true},
    },
    architecture{
        .name = "qwen2_moe",
        .hf_name = "Qwen2MoeForCausalLM",
        .title = "Qwen2-MoE",
        .summary = "Qwen2's biases; experts and a gated shared expert",
        .differences =
            "Qwen2's q/k/v biases (`qkv_bias`); `num_experts` experts of "
            "`moe_intermediate_size` as Qwen3-MoE's, plus a shared expert (`mlp.shared_expert.*`, "
            "width `shared_expert_intermediate_size`) whose output, times "
            "`sigmoid(mlp.shared_expert_gate · x)`, is added on every sparse layer; with "
            "`use_sliding_window`, the layers `layer_types` marks or the even layers below "
            "`max_window_layers` are windowed",
        .cuda = false,
        .config = {.bias = attention_bias_rule::qkv_bias_field,
                   .sliding_window = sliding_window_rule::opted_in_even_lower_layers,
                   .experts = {.layout = expert_layout::qwen,
                               .num_experts = 60,
                               .num_experts_per_tok = 4,
                               .moe_intermediate_size = 1408,
                               .shared_expert_intermediate_size = 5632}},
        .gguf = {.name = "qwen2moe", .experts = true, .norm_topk_prob = false},
    },
    architecture{
        .name = "qwen3_moe",
        .hf_name = "Qwen3MoeForCausalLM",
        .title = "Qwen3-MoE",
        .summary = "Qwen3's q/k norms; experts on the sparse layers",
        .differences =
            "Qwen3's q/k norms; `num_experts` experts (`mlp.experts.N.gate_proj/up_proj/"
            "down_proj`, width `moe_intermediate_size`) behind `mlp.gate` on the sparse layers, a "
            "dense MLP of `intermediate_size` on `mlp_only_layers` and the layers `l` with "
            "`(l + 1) % decoder_sparse_step != 0`; `norm_topk_prob`",
        .cuda = false,
        .config = {.sliding_window = sliding_window_rule::opted_in_every_layer,
                   .experts = {.layout = expert_layout::qwen,
                               .num_experts = 128,
                               .num_experts_per_tok = 8,
                               .moe_intermediate_size = 768},
                   .qk_norm = true},
        .gguf = {.name = "qwen3moe", .experts = true},
        .demo = {.attention_bias = true},
    },
};

// The entry whose name `name_of` gives is `value`; nullptr for none (or an empty value).
template <class NameOf>
const architecture* find_by(NameOf name_of, std::string_view value) noexcept {
  if (value.empty()) return nullptr;
  for (const architecture& a : k_architectures)
    if (name_of(a) == value) return &a;
  return nullptr;
}

// The names `name_of` gives, the empty ones left out, comma-separated in table order.
template <class NameOf>
std::string join(NameOf name_of) {
  std::string out;
  for (const architecture& a : k_architectures) {
    const std::string_view name = name_of(a);
    if (name.empty()) continue;
    if (!out.empty()) out += ", ";
    out += name;
  }
  return out;
}

constexpr auto hf_name_of = [](const architecture& a) { return a.hf_name; };
constexpr auto model_type_of = [](const architecture& a) { return a.name; };
constexpr auto gguf_name_of = [](const architecture& a) { return a.gguf.name; };

// "a, b and c".
std::string join_and(const std::vector<std::string_view>& names) {
  std::string out;
  for (size_t i = 0; i < names.size(); ++i) {
    if (i > 0) out += i + 1 == names.size() ? " and " : ", ";
    out += names[i];
  }
  return out;
}

// The config.json names, those only the CPU executor serves last.
std::string serve_architecture_list() {
  std::vector<std::string_view> cpu_only;
  for (const architecture& a : k_architectures)
    if (!a.cuda) cpu_only.push_back(a.hf_name);
  std::string out = join([](const architecture& a) { return a.cuda ? a.hf_name : ""; });
  if (!cpu_only.empty()) {
    if (!out.empty()) out += "; ";
    out += join_and(cpu_only);
    out += " on --device cpu";
  }
  return out;
}

// One line per architecture: its model type and its summary, in two columns.
std::string demo_architecture_lines() {
  size_t width = 0;
  for (const architecture& a : k_architectures) width = std::max(width, a.name.size());
  std::string out;
  for (const architecture& a : k_architectures) {
    out += a.name;
    out.append(width + 2 - a.name.size(), ' ');
    out += a.summary;
    out += '\n';
  }
  return out;
}

// `words` (separated by spaces) wrapped to `width` columns, every line after `indent` spaces.
std::string wrap(std::string_view words, size_t indent, size_t width) {
  std::string out(indent, ' ');
  size_t col = indent;
  bool line_empty = true;
  size_t i = 0;
  while (i < words.size()) {
    const size_t end = std::min(words.find(' ', i), words.size());
    const std::string_view word = words.substr(i, end - i);
    i = end + 1;
    if (word.empty()) continue;
    if (!line_empty && col + 1 + word.size() > width) {
      out += '\n';
      out.append(indent, ' ');
      col = indent;
      line_empty = true;
    }
    if (!line_empty) {
      out += ' ';
      ++col;
    }
    out += word;
    col += word.size();
    line_empty = false;
  }
  return out;
}

// `line` with `placeholder` replaced by `value`: rewrapped to 100 columns at the line's
// indentation, or, when `value` holds lines, each of them at that indentation.
std::string expand_line(std::string_view line, std::string_view placeholder,
                        const std::string& value) {
  const size_t at = line.find(placeholder);
  const size_t indent = std::min(line.find_first_not_of(' '), line.size());
  std::string text(line.substr(indent, at - indent));
  text += value;
  text += line.substr(at + placeholder.size());
  if (value.find('\n') == std::string::npos) return wrap(text, indent, 100);
  std::string out;
  size_t i = 0;
  while (i < text.size()) {
    const size_t end = std::min(text.find('\n', i), text.size());
    if (end > i) {
      if (!out.empty()) out += '\n';
      out.append(indent, ' ');
      out.append(text, i, end - i);
    }
    i = end + 1;
  }
  return out;
}

}  // namespace

std::span<const architecture> architectures() noexcept { return k_architectures; }

const architecture* find_architecture(std::string_view hf_name) noexcept {
  return find_by(hf_name_of, hf_name);
}

const architecture* find_architecture_by_model_type(std::string_view model_type) noexcept {
  return find_by(model_type_of, model_type);
}

const architecture* find_gguf_architecture(std::string_view gguf_name) noexcept {
  return find_by(gguf_name_of, gguf_name);
}

std::string hf_architecture_list() { return join(hf_name_of); }
std::string gguf_architecture_list() { return join(gguf_name_of); }
std::string model_type_list() { return join(model_type_of); }

std::string with_architecture_lists(std::string_view text) {
  const std::pair<std::string_view, std::string> lists[] = {
      {"{architectures}", serve_architecture_list()},
      {"{gguf_architectures}", gguf_architecture_list()},
      {"{demo_architectures}", demo_architecture_lines()},
  };
  std::string out;
  size_t i = 0;
  while (i < text.size()) {
    const size_t end = std::min(text.find('\n', i), text.size());
    std::string line(text.substr(i, end - i));
    for (const auto& [placeholder, value] : lists)
      if (line.find(placeholder) != std::string::npos) line = expand_line(line, placeholder, value);
    out += line;
    if (end < text.size()) out += '\n';
    i = end + 1;
  }
  return out;
}

std::string architecture_table_markdown() {
  std::string out =
      "| `architectures` | GGUF | what differs from Llama | executors |\n|---|---|---|---|\n";
  for (const architecture& a : k_architectures) {
    // The GGUF names read as this architecture: its own, and those whose experts make it one.
    std::string gguf;
    for (const architecture& b : k_architectures) {
      const bool own = &b == &a && !b.gguf.name.empty();
      const bool with_experts = b.gguf.with_experts == a.name && !b.gguf.name.empty();
      if (!own && !with_experts) continue;
      gguf += gguf.empty() ? "`" : ", `";
      gguf += b.gguf.name;
      gguf += with_experts ? "` with `expert_count`" : "`";
    }
    for (std::string_view cell :
         {std::string_view("| `"), a.hf_name, std::string_view("` | "),
          gguf.empty() ? std::string_view("—") : std::string_view(gguf), std::string_view(" | "),
          a.differences, std::string_view(" | "), std::string_view(a.cuda ? "CPU, CUDA" : "CPU"),
          std::string_view(" |\n")})
      out += cell;
  }
  return out;
}

}  // namespace coserve
