#include "model/tensor_parallel.hpp"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <tuple>

#include "model/executor.hpp"

namespace coserve {
namespace {

// The KV heads rank `rank` of `size` holds: [first, first + count).
bool kv_heads_of(int32_t nkv, int32_t size, int32_t rank, int32_t& first, int32_t& count) {
  if (nkv % size == 0) {
    count = nkv / size;
    first = rank * count;
    return true;
  }
  if (size % nkv == 0) {
    count = 1;
    first = rank / (size / nkv);
    return true;
  }
  return false;
}

const char* why_not(const model_weights& w, int32_t size) {
  const model_config& c = w.config;
  if (size < 1) return "it is not positive";
  if (c.num_attention_heads % size != 0) return "it does not divide the attention heads";
  if (c.num_key_value_heads % size != 0 && size % c.num_key_value_heads != 0)
    return "it neither divides the KV heads nor is a multiple of them";
  bool dense = false;
  for (int32_t l = 0; l < c.num_hidden_layers; ++l) dense = dense || !c.moe_layer(l);
  if (dense && c.intermediate_size % size != 0)
    return "it does not divide the MLP width (intermediate_size)";
  if (c.is_moe() && c.moe_intermediate_size % size != 0)
    return "it does not divide the experts' MLP width (moe_intermediate_size)";
  if (c.shared_expert_intermediate_size % size != 0)
    return "it does not divide the shared expert's MLP width (shared_expert_intermediate_size)";
  const int64_t o_cols = int64_t(c.num_attention_heads / size) * c.head_dim;
  const int64_t down_cols = c.intermediate_size / size,
                expert_cols = c.moe_intermediate_size / size;
  for (const layer_weights& L : w.layers) {
    if (o_cols % dtype_block_elems(L.o.type) != 0)
      return "the o_proj columns per rank are not whole quantization blocks";
    if (L.experts.empty() && down_cols % dtype_block_elems(L.down.type) != 0)
      return "the down_proj columns per rank are not whole quantization blocks";
    for (const layer_weights::expert& e : L.experts)
      if (expert_cols % dtype_block_elems(e.down.type) != 0)
        return "the experts' down_proj columns per rank are not whole quantization blocks";
    if (L.shared_gate.rows > 0 &&
        (c.shared_expert_intermediate_size / size) % dtype_block_elems(L.shared.down.type) != 0)
      return "the shared expert's down_proj columns per rank are not whole quantization blocks";
  }
  return nullptr;
}

// Columns [first, first + n) of every row, copied into a buffer the shard keeps.
weight_ref columns_of(const weight_ref& w, int64_t first, int64_t n, model_weights& shard) {
  const size_t skip = dtype_bytes(w.type, first), row = dtype_bytes(w.type, n);
  auto buf = std::make_shared<std::vector<unsigned char>>(size_t(w.rows) * row);
  for (int64_t r = 0; r < w.rows; ++r)
    std::memcpy(buf->data() + size_t(r) * row, static_cast<const unsigned char*>(w.row(r)) + skip,
                row);
  weight_ref s = w;
  s.data = buf->data();
  s.cols = n;
  s.packed = nullptr;
  shard.owned.push_back(std::move(buf));
  return s;
}

class writer {
 public:
  void i32(int32_t v) { put(&v, sizeof v); }
  void vec(const std::vector<int32_t>& v) {
    i32(int32_t(v.size()));
    put(v.data(), v.size() * sizeof(int32_t));
  }
  void span(const int32_t* p, int32_t n) {
    i32(n);
    put(p, size_t(n) * sizeof(int32_t));
  }
  void str(const std::string& s) {
    i32(int32_t(s.size()));
    put(s.data(), s.size());
  }
  std::vector<unsigned char> out;

 private:
  void put(const void* p, size_t n) {
    const auto* c = static_cast<const unsigned char*>(p);
    out.insert(out.end(), c, c + n);
  }
};

class reader {
 public:
  explicit reader(const std::vector<unsigned char>& b) : b_(b) {}
  bool i32(int32_t& v) { return get(&v, sizeof v); }
  bool vec(std::vector<int32_t>& v) {
    int32_t n = 0;
    if (!i32(n) || n < 0 || size_t(n) > (b_.size() - at_) / sizeof(int32_t)) return false;
    v.resize(size_t(n));
    return get(v.data(), size_t(n) * sizeof(int32_t));
  }
  bool str(std::string& s) {
    int32_t n = 0;
    if (!i32(n) || n < 0 || size_t(n) > b_.size() - at_) return false;
    s.assign(reinterpret_cast<const char*>(b_.data() + at_), size_t(n));
    at_ += size_t(n);
    return true;
  }
  bool done() const { return at_ == b_.size(); }

 private:
  bool get(void* p, size_t n) {
    if (n > b_.size() - at_) return false;
    if (n) std::memcpy(p, b_.data() + at_, n);
    at_ += n;
    return true;
  }
  const std::vector<unsigned char>& b_;
  size_t at_ = 0;
};

constexpr int32_t k_step_magic = 0x54505354;  // "TSPT"
constexpr int32_t k_setup_magic = 0x54505355;

}  // namespace

std::vector<int32_t> tensor_parallel_sizes(const model_weights& w) {
  std::vector<int32_t> out;
  for (int32_t n = 1; n <= std::max(1, w.config.num_attention_heads); ++n)
    if (!why_not(w, n)) out.push_back(n);
  return out;
}

result<void> check_tensor_parallel_size(const model_weights& w, int32_t size) {
  const char* why = why_not(w, size);
  if (!why) return {};
  std::string sizes;
  for (int32_t n : tensor_parallel_sizes(w))
    sizes += (sizes.empty() ? "" : ", ") + std::to_string(n);
  const model_config& c = w.config;
  return error{
      "invalid_argument",
      "--tensor-parallel-size " + std::to_string(size) + ": " + why + " (" +
          std::to_string(c.num_attention_heads) + " attention heads, " +
          std::to_string(c.num_key_value_heads) + " KV heads, intermediate_size " +
          std::to_string(c.intermediate_size) +
          (c.is_moe() ? ", moe_intermediate_size " + std::to_string(c.moe_intermediate_size) : "") +
          (c.shared_expert_intermediate_size > 0
               ? ", shared_expert_intermediate_size " +
                     std::to_string(c.shared_expert_intermediate_size)
               : "") +
          "); sizes that work for this model: " + sizes,
      "tensor_parallel_size"};
}

tensor_shard shard_shape(const model_config& c, int32_t rank, int32_t size) {
  tensor_shard sh;
  sh.rank = rank;
  sh.size = size;
  sh.num_heads = c.num_attention_heads / size;
  int32_t kv_first = 0;
  kv_heads_of(c.num_key_value_heads, size, rank, kv_first, sh.num_kv_heads);
  sh.intermediate_size = c.intermediate_size / size;
  sh.moe_intermediate_size = c.moe_intermediate_size / size;
  sh.shared_expert_intermediate_size = c.shared_expert_intermediate_size / size;
  std::tie(sh.vocab_begin, sh.vocab_end) = vocab_range(c.vocab_size, size, rank);
  return sh;
}

result<model_weights> shard_weights(const model_weights& full, int32_t rank, int32_t size) {
  if (auto r = check_tensor_parallel_size(full, size); !r) return r.err();
  if (rank < 0 || rank >= size)
    return make_error("invalid_argument", "tensor parallel rank outside the group");
  const model_config& c = full.config;
  const int64_t d = c.head_dim;
  model_weights s;
  s.config = c;
  s.files = full.files;
  s.gguf = full.gguf;
  s.owned = full.owned;
  s.shard = shard_shape(c, rank, size);
  const tensor_shard& sh = s.shard;
  int32_t kv_first = 0, kv_count = 0;
  kv_heads_of(c.num_key_value_heads, size, rank, kv_first, kv_count);
  const int64_t q0 = int64_t(rank) * sh.num_heads * d, qn = int64_t(sh.num_heads) * d;
  const int64_t k0 = int64_t(kv_first) * d, kn = int64_t(sh.num_kv_heads) * d;
  const int64_t i0 = int64_t(rank) * sh.intermediate_size, in = sh.intermediate_size;
  s.embed = full.embed;
  s.final_norm = full.final_norm;
  s.lm_head = weight_rows(full.lm_head, sh.vocab_begin, sh.vocab_end - sh.vocab_begin);
  s.layers.resize(full.layers.size());
  for (size_t l = 0; l < full.layers.size(); ++l) {
    const layer_weights& F = full.layers[l];
    layer_weights& L = s.layers[l];
    L.input_norm = F.input_norm;
    L.post_norm = F.post_norm;
    L.q = weight_rows(F.q, q0, qn);
    L.k = weight_rows(F.k, k0, kn);
    L.v = weight_rows(F.v, k0, kn);
    if (!F.qkv_bias.empty()) {
      const int64_t qall = int64_t(c.num_attention_heads) * d,
                    kall = int64_t(c.num_key_value_heads) * d;
      const float* b = F.qkv_bias.data();
      L.qkv_bias.insert(L.qkv_bias.end(), b + q0, b + q0 + qn);
      L.qkv_bias.insert(L.qkv_bias.end(), b + qall + k0, b + qall + k0 + kn);
      L.qkv_bias.insert(L.qkv_bias.end(), b + qall + kall + k0, b + qall + kall + k0 + kn);
    }
    L.o = columns_of(F.o, q0, qn, s);
    L.o_bias = F.o_bias;
    L.q_norm = F.q_norm;  // one weight vector for every head: each rank's heads use all of it
    L.k_norm = F.k_norm;
    if (F.experts.empty()) {
      L.gate = weight_rows(F.gate, i0, in);
      L.up = weight_rows(F.up, i0, in);
      L.down = columns_of(F.down, i0, in, s);
      continue;
    }
    // Each expert split as the dense MLP is; the router whole on every rank (each routes alike).
    const int64_t e0 = int64_t(rank) * sh.moe_intermediate_size, en = sh.moe_intermediate_size;
    L.router = F.router;
    L.experts.resize(F.experts.size());
    for (size_t e = 0; e < F.experts.size(); ++e) {
      L.experts[e].gate = weight_rows(F.experts[e].gate, e0, en);
      L.experts[e].up = weight_rows(F.experts[e].up, e0, en);
      L.experts[e].down = columns_of(F.experts[e].down, e0, en, s);
    }
    if (F.shared_gate.rows > 0) {  // the shared expert split likewise, its gate whole
      const int64_t s0 = int64_t(rank) * sh.shared_expert_intermediate_size,
                    sn = sh.shared_expert_intermediate_size;
      L.shared_gate = F.shared_gate;
      L.shared.gate = weight_rows(F.shared.gate, s0, sn);
      L.shared.up = weight_rows(F.shared.up, s0, sn);
      L.shared.down = columns_of(F.shared.down, s0, sn, s);
    }
  }
  return s;
}

std::vector<unsigned char> encode_tp_setup(const tp_setup& s) {
  writer w;
  w.i32(k_setup_magic);
  w.i32(s.num_kv_blocks);
  w.i32(s.block_size);
  w.i32(int32_t(s.kv_type));
  w.i32(s.bf16_activations ? 1 : 0);
  w.str(s.error);
  return std::move(w.out);
}

result<tp_setup> decode_tp_setup(const std::vector<unsigned char>& b) {
  reader r(b);
  tp_setup s;
  int32_t magic = 0, kv = 0, bf16 = 0;
  if (!r.i32(magic) || magic != k_setup_magic || !r.i32(s.num_kv_blocks) || !r.i32(s.block_size) ||
      !r.i32(kv) || !r.i32(bf16) || !r.str(s.error) || !r.done())
    return make_error("internal", "tensor parallel: a malformed setup message from rank 0");
  s.kv_type = dtype(kv);
  s.bf16_activations = bf16 != 0;
  return s;
}

std::vector<forward_seq> tp_step::batch() const {
  std::vector<forward_seq> b(seqs.size());
  for (size_t i = 0; i < seqs.size(); ++i)
    b[i] = forward_seq{seqs[i].tokens.data(), int32_t(seqs[i].tokens.size()),
                       seqs[i].start_pos,     &seqs[i].block_table,
                       seqs[i].want_logits,   seqs[i].logit_rows};
  return b;
}

std::vector<unsigned char> encode_tp_step(
    const std::vector<std::pair<int32_t, int32_t>>& block_copies,
    const std::vector<forward_seq>& batch) {
  writer w;
  w.i32(k_step_magic);
  w.i32(0);  // not stop
  w.i32(int32_t(block_copies.size()));
  for (auto [a, b] : block_copies) {
    w.i32(a);
    w.i32(b);
  }
  w.i32(int32_t(batch.size()));
  for (const forward_seq& f : batch) {
    w.span(f.tokens, f.num_tokens);
    w.i32(f.start_pos);
    w.vec(*f.block_table);
    w.i32(f.want_logits ? 1 : 0);
    w.i32(f.logit_rows);
  }
  return std::move(w.out);
}

std::vector<unsigned char> encode_tp_stop() {
  writer w;
  w.i32(k_step_magic);
  w.i32(1);
  return std::move(w.out);
}

result<tp_step> decode_tp_step(const std::vector<unsigned char>& b) {
  reader r(b);
  tp_step s;
  const auto bad = [] {
    return make_error("internal", "tensor parallel: a malformed step message from rank 0");
  };
  int32_t magic = 0, stop = 0, n = 0;
  if (!r.i32(magic) || magic != k_step_magic || !r.i32(stop)) return bad();
  if (stop) {
    s.stop = true;
    return r.done() ? result<tp_step>(std::move(s)) : bad();
  }
  if (!r.i32(n) || n < 0 || size_t(n) > b.size()) return bad();
  s.block_copies.resize(size_t(n));
  for (auto& [a, c] : s.block_copies)
    if (!r.i32(a) || !r.i32(c)) return bad();
  if (!r.i32(n) || n < 0 || size_t(n) > b.size()) return bad();
  s.seqs.resize(size_t(n));
  for (tp_step::seq& q : s.seqs) {
    int32_t want = 0;
    if (!r.vec(q.tokens) || !r.i32(q.start_pos) || !r.vec(q.block_table) || !r.i32(want) ||
        !r.i32(q.logit_rows))
      return bad();
    q.want_logits = want != 0;
  }
  if (!r.done()) return bad();
  return s;
}

result<void> run_tp_step(const std::vector<std::pair<int32_t, int32_t>>& block_copies,
                         const std::vector<forward_seq>& batch, kv_cache& cache,
                         cpu_forward& forward, std::vector<float>& logits) {
  for (auto [src, dst] : block_copies)
    if (!cache.copy_block(src, dst))
      return make_error("invalid_argument", "block copy " + std::to_string(src) + " -> " +
                                                std::to_string(dst) + " outside the cache");
  return forward.run(batch, cache, false, logits);
}

tp_worker::tp_worker(model_weights shard, const tp_setup& setup, communicator& comm,
                     int32_t threads)
    : weights_(std::move(shard)),
      comm_(comm),
      pool_(std::max(1, threads) - 1),
      cache_(weights_.config.num_hidden_layers, setup.num_kv_blocks, setup.block_size,
             weights_.shard.num_kv_heads, weights_.config.head_dim, setup.kv_type),
      forward_(weights_, pool_) {
  pack_for_cpu(weights_);
  forward_.set_bf16_activations(setup.bf16_activations);
  forward_.set_communicator(&comm_);
}

result<void> tp_worker::serve() {
  std::vector<unsigned char> msg;
  for (;;) {
    if (auto r = comm_.broadcast(msg, 0); !r) return r;
    auto step = decode_tp_step(msg);
    if (!step) return step.err();
    if (step->stop) return {};
    auto r = run_tp_step(step->block_copies, step->batch(), cache_, forward_, logits_);
    if (!r && r.err().code == k_executor_fatal) return r;
  }
}

std::string describe_shard(const model_weights& s) {
  const tensor_shard& sh = s.shard;
  size_t bytes = 0;
  for (const auto& b : s.owned) bytes += b->size();
  size_t viewed = s.lm_head.bytes();
  for (const layer_weights& L : s.layers) {
    for (const weight_ref* w : {&L.q, &L.k, &L.v, &L.gate, &L.up, &L.router}) viewed += w->bytes();
    for (const layer_weights::expert& e : L.experts) viewed += e.gate.bytes() + e.up.bytes();
    viewed += L.shared_gate.bytes() + L.shared.gate.bytes() + L.shared.up.bytes();
  }
  const layer_weights* L = s.layers.empty() ? nullptr : &s.layers[0];
  std::string out =
      std::to_string(sh.num_heads) + " query heads, " + std::to_string(sh.num_kv_heads) +
      " KV heads, MLP " +
      std::to_string(s.config.is_moe() ? sh.moe_intermediate_size : sh.intermediate_size) +
      (s.config.is_moe() ? " per expert" : "") + ", vocabulary rows [" +
      std::to_string(sh.vocab_begin) + ", " + std::to_string(sh.vocab_end) + ")";
  if (L) {
    const weight_ref& down = L->experts.empty() ? L->down : L->experts[0].down;
    out += "; per layer q [" + std::to_string(L->q.rows) + ", " + std::to_string(L->q.cols) +
           "], o [" + std::to_string(L->o.rows) + ", " + std::to_string(L->o.cols) + "], " +
           (L->experts.empty() ? "down [" : "each expert's down [") + std::to_string(down.rows) +
           ", " + std::to_string(down.cols) + "]";
  }
  char mib[96];
  std::snprintf(mib, sizeof mib,
                "; %.1f MiB mapped from the file, %.1f MiB copied (o, down columns)",
                double(viewed) / (1 << 20), double(bytes) / (1 << 20));
  out += mib;
  return out;
}

}  // namespace coserve
