// The CPU forward pass in one file (over 500 lines): batch layout, the GEMM dispatch, attention,
// the experts of mixture-of-experts layers and the tensor-parallel collectives all work on the
// same scratch buffers and phase timers of cpu_forward; the kernels they call live in
// cpu_kernels.cpp and quant_*.cpp.
#include "model/cpu_forward.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <string>

#include "model/quant.hpp"

namespace coserve {
namespace {

using clock_type = std::chrono::steady_clock;

double seconds_since(clock_type::time_point& t) {
  const auto now = clock_type::now();
  const double s = std::chrono::duration<double>(now - t).count();
  t = now;
  return s;
}

constexpr int32_t k_attn_rows = 96;  // query rows (heads x tokens) a prefill tile shares K/V loads
                                     // and each chunk's K transposition over (16 -> 96: prefill 512
                                     // +15-20% on the 150M model)
constexpr int32_t k_min_split_ctx = 256;  // decode context per split, at least

}  // namespace

std::pair<int32_t, int32_t> vocab_range(int32_t vocab, int32_t size, int32_t rank) {
  const int64_t b = int64_t(vocab) * rank / size, e = int64_t(vocab) * (rank + 1) / size;
  return {int32_t(b), int32_t(e)};
}

cpu_forward::cpu_forward(const model_weights& weights, worker_pool& pool)
    : w_(weights),
      c_(weights.config),
      pool_(pool),
      inv_freq_(rope_inv_freq(weights.config)),
      inv_freq_long_(weights.config.rope_scaling.kind == rope_kind::longrope
                         ? rope_inv_freq(weights.config, true)
                         : std::vector<float>{}) {
  const tensor_shard& sh = weights.shard;
  tp_ = sh.size > 1;
  const bool whole = sh.num_heads == 0;
  nh_ = whole ? c_.num_attention_heads : sh.num_heads;
  nkv_ = whole ? c_.num_key_value_heads : sh.num_kv_heads;
  inter_ = whole ? c_.intermediate_size : sh.intermediate_size;
  moe_inter_ = !c_.is_moe() ? 0 : whole ? c_.moe_intermediate_size : sh.moe_intermediate_size;
  shared_inter_ = whole ? c_.shared_expert_intermediate_size : sh.shared_expert_intermediate_size;
  vocab0_ = whole ? 0 : sh.vocab_begin;
  vocab1_ = whole ? c_.vocab_size : sh.vocab_end;
}

result<void> cpu_forward::residual_matmul(const float* in, int64_t rows, const weight_ref& w,
                                          std::chrono::steady_clock::time_point& tp) {
  const int64_t h = c_.hidden_size;
  if (!tp_) {
    matmul(in, rows, {{&w, 0}}, x_.data(), h, true);
    profile_.gemm_s += seconds_since(tp);
    return {};
  }
  matmul(in, rows, {{&w, 0}}, part_.data(), h, false);
  profile_.gemm_s += seconds_since(tp);
  return add_to_residual(part_.data(), rows, tp);
}

result<void> cpu_forward::add_to_residual(float* y, int64_t rows,
                                          std::chrono::steady_clock::time_point& tp) {
  const int64_t h = c_.hidden_size;
  if (tp_) {
    if (!comm_)
      return make_error("internal", "forward: a tensor-parallel shard without a communicator");
    if (auto r = comm_->all_reduce_sum(y, size_t(rows * h)); !r) return r;
  }
  pool_.parallel_for(rows, [&](int64_t r) {
    float* x = x_.data() + r * h;
    const float* p = y + r * h;
    for (int64_t j = 0; j < h; ++j) x[j] += p[j];
  });
  (tp_ ? profile_.comm_s : profile_.other_s) += seconds_since(tp);
  return {};
}

void cpu_forward::swiglu(const float* gu, int64_t rows, int64_t inter, float* act) {
  pool_.parallel_for(rows, [&](int64_t r) {
    const float* g = gu + r * 2 * inter;
    const float* u = g + inter;
    float* a = act + r * inter;
    for (int64_t j = 0; j < inter; ++j) a[j] = g[j] / (1.0f + std::exp(-g[j])) * u[j];
  });
}

// As transformers' MixtralSparseMoeBlock / Qwen3MoeSparseMoeBlock: router logits in the file's
// precision (the activations rounded to bf16 with bf16 weights, as the matmuls do), softmax in
// fp32, the top-k probabilities (the lower expert first among equal ones), divided by their sum
// when norm_topk_prob; each expert's output rows scaled by their weights and summed (experts in
// index order) before the residual add.
result<void> cpu_forward::moe_mlp(const layer_weights& L, int64_t total,
                                  clock_type::time_point& tp) {
  route_tokens(L, total, tp);
  const int64_t routed = total * c_.num_experts_per_tok;
  group_routes(total);
  profile_.other_s += seconds_since(tp);
  run_experts(L, routed, tp);
  const bool shared = L.shared_gate.rows > 0;
  part_.resize(size_t(total * c_.hidden_size));
  if (shared) shared_expert(L, total, routed, tp);
  combine_experts(total, shared);
  profile_.other_s += seconds_since(tp);
  return add_to_residual(part_.data(), total, tp);
}

// Router logits of xn_'s rows, their softmax, and per token the top-k experts (topk_e_) and
// weights (topk_w_).
void cpu_forward::route_tokens(const layer_weights& L, int64_t total, clock_type::time_point& tp) {
  const int64_t ne = c_.num_experts, k = c_.num_experts_per_tok;
  router_.resize(size_t(total * ne));
  matmul(xn_.data(), total, {{&L.router, 0}}, router_.data(), ne, false);
  profile_.gemm_s += seconds_since(tp);
  topk_e_.resize(size_t(total * k));
  topk_w_.resize(size_t(total * k));
  pool_.parallel_for(total, [&](int64_t t) {
    float* p = router_.data() + t * ne;
    const float mx = *std::max_element(p, p + ne);
    float sum = 0;
    for (int64_t e = 0; e < ne; ++e) sum += (p[e] = std::exp(p[e] - mx));
    for (int64_t e = 0; e < ne; ++e) p[e] /= sum;
    int32_t* ids = topk_e_.data() + t * k;
    float* w = topk_w_.data() + t * k;
    // Selection of the k largest (k is small: 2 for Mixtral, 8 for Qwen3-MoE).
    for (int64_t i = 0; i < k; ++i) {
      int32_t best = -1;
      for (int64_t e = 0; e < ne; ++e) {
        if (std::find(ids, ids + i, int32_t(e)) != ids + i) continue;
        if (best < 0 || p[e] > p[best]) best = int32_t(e);
      }
      ids[i] = best;
      w[i] = p[best];
    }
    if (c_.norm_topk_prob) {
      float s = 0;
      for (int64_t i = 0; i < k; ++i) s += w[i];
      for (int64_t i = 0; i < k; ++i) w[i] /= s;
    }
  });
}

// The routed rows expert by expert, each expert's in token order (route_first_, route_rows_,
// route_w_); then, per token, where its rows went (token_routes_, ascending: expert order); and
// the routed rows' inputs gathered from xn_ into xe_.
void cpu_forward::group_routes(int64_t total) {
  const int64_t h = c_.hidden_size, ne = c_.num_experts, k = c_.num_experts_per_tok;
  const int64_t routed = total * k;
  route_first_.assign(size_t(ne + 1), 0);
  for (int64_t i = 0; i < routed; ++i) ++route_first_[size_t(topk_e_[size_t(i)]) + 1];
  for (int64_t e = 0; e < ne; ++e) route_first_[size_t(e + 1)] += route_first_[size_t(e)];
  route_rows_.resize(size_t(routed));
  route_w_.resize(size_t(routed));
  token_routes_.resize(size_t(routed));
  std::vector<int64_t>& at = route_at_;
  at.assign(route_first_.begin(), route_first_.end() - 1);
  for (int64_t t = 0; t < total; ++t)
    for (int64_t i = 0; i < k; ++i) {
      const auto e = size_t(topk_e_[size_t(t * k + i)]);
      route_rows_[size_t(at[e])] = int32_t(t);
      route_w_[size_t(at[e]++)] = topk_w_[size_t(t * k + i)];
    }
  at.assign(size_t(total), 0);
  for (int64_t r = 0; r < routed; ++r) {
    const int32_t t = route_rows_[size_t(r)];
    token_routes_[size_t(t * k + at[size_t(t)]++)] = int32_t(r);
  }
  xe_.resize(size_t(routed * h));
  pool_.parallel_for(routed, [&](int64_t r) {
    std::copy_n(xn_.data() + route_rows_[size_t(r)] * h, h, xe_.data() + r * h);
  });
}

// Fills expert_parts_ with the grouped product's parts (gate and up, or down) of every expert with
// routed rows; returns their count.
size_t cpu_forward::expert_parts(const layer_weights& L, bool down) {
  expert_parts_.clear();
  for (int64_t e = 0; e < c_.num_experts; ++e) {
    const int64_t first = route_first_[size_t(e)], n = route_first_[size_t(e + 1)] - first;
    if (n == 0) continue;
    const layer_weights::expert& E = L.experts[size_t(e)];
    if (down) {
      expert_parts_.push_back({&E.down, 0, first, n});
    } else {
      profile_.expert_bytes += double(E.gate.bytes() + E.up.bytes() + E.down.bytes());
      expert_parts_.push_back({&E.gate, 0, first, n});
      expert_parts_.push_back({&E.up, moe_inter_, first, n});
    }
  }
  return expert_parts_.size();
}

// Every routed expert's gate/up in one grouped product (its rows of xe_), the SwiGLU over all
// routed rows, and every down product in another (into ye_): the pool splits the experts' weight
// rows between its threads as it does one layer's matrices.
void cpu_forward::run_experts(const layer_weights& L, int64_t routed, clock_type::time_point& tp) {
  const int64_t h = c_.hidden_size, mi = moe_inter_;
  gu_.resize(size_t(routed * 2 * mi));
  act_.resize(size_t(routed * mi));
  ye_.resize(size_t(routed * h));
  size_t n_parts = expert_parts(L, false);
  matmul(xe_.data(), routed, expert_parts_.data(), n_parts, gu_.data(), 2 * mi, false);
  profile_.gemm_s += seconds_since(tp);
  swiglu(gu_.data(), routed, mi, act_.data());
  profile_.other_s += seconds_since(tp);
  n_parts = expert_parts(L, true);
  matmul(act_.data(), routed, expert_parts_.data(), n_parts, ye_.data(), h, false);
  profile_.gemm_s += seconds_since(tp);
}

// Qwen2-MoE's shared expert over xn_'s rows, into xe_ (routed >= total rows, free once the
// experts' inputs are multiplied), and its gate's logits into shared_gate_.
void cpu_forward::shared_expert(const layer_weights& L, int64_t total, int64_t routed,
                                clock_type::time_point& tp) {
  const int64_t h = c_.hidden_size, mi = moe_inter_, si = shared_inter_;
  shared_gate_.resize(size_t(total));
  matmul(xn_.data(), total, {{&L.shared_gate, 0}}, shared_gate_.data(), 1, false);
  gu_.resize(size_t(std::max(routed * 2 * mi, total * 2 * si)));
  act_.resize(size_t(std::max(routed * mi, total * si)));
  matmul(xn_.data(), total, {{&L.shared.gate, 0}, {&L.shared.up, si}}, gu_.data(), 2 * si, false);
  profile_.gemm_s += seconds_since(tp);
  swiglu(gu_.data(), total, si, act_.data());
  profile_.other_s += seconds_since(tp);
  matmul(act_.data(), total, {{&L.shared.down, 0}}, xe_.data(), h, false);
  profile_.gemm_s += seconds_since(tp);
}

// Each token's expert outputs scaled by their weights and summed into part_, experts in index
// order (then, with a shared expert, its output times sigmoid(shared_expert_gate . x) added).
void cpu_forward::combine_experts(int64_t total, bool shared) {
  const int64_t h = c_.hidden_size, k = c_.num_experts_per_tok;
  pool_.parallel_for(total, [&](int64_t t) {
    float* out = part_.data() + t * h;
    std::fill_n(out, h, 0.0f);
    for (int64_t i = 0; i < k; ++i) {
      const int32_t r = token_routes_[size_t(t * k + i)];
      const float w = route_w_[size_t(r)];
      const float* y = ye_.data() + int64_t(r) * h;
      for (int64_t j = 0; j < h; ++j) out[j] += w * y[j];
    }
    if (shared) {
      const float g = 1.0f / (1.0f + std::exp(-shared_gate_[size_t(t)]));
      const float* y = xe_.data() + t * h;
      for (int64_t j = 0; j < h; ++j) out[j] += g * y[j];
    }
  });
}

// Every rank's [rows, its vocabulary rows] block to rank 0, laid out there as [rows, vocab]. Each
// block is followed by the rank's profile (compute, collective seconds, steps) for tp_rank_stats().
result<void> cpu_forward::gather_logits(std::vector<float>& local, int64_t rows,
                                        std::vector<float>& logits) {
  std::vector<unsigned char>& all = gathered_;  // kept: no allocation and zero fill per step
  const bool root = comm_->rank() == 0;
  const size_t payload = local.size() * sizeof(float);
  const double mine[3] = {profile_.gemm_s + profile_.attention_s + profile_.other_s,
                          profile_.comm_s, double(profile_.steps)};
  static_assert(sizeof mine % sizeof(float) == 0);
  local.resize(local.size() + sizeof(mine) / (sizeof(float)));
  std::memcpy(reinterpret_cast<unsigned char*>(local.data()) + payload, mine, sizeof mine);
  if (auto r = comm_->gather(local.data(), payload + sizeof mine, root ? &all : nullptr, 0); !r)
    return r;
  if (!root) {
    logits.clear();
    return {};
  }
  const int64_t vocab = c_.vocab_size;
  logits.resize(size_t(rows * vocab));
  rank_stats_.resize(size_t(comm_->size()));
  size_t at = 0;  // bytes
  for (int32_t r = 0; r < comm_->size(); ++r) {
    const auto [b, e] = vocab_range(int32_t(vocab), comm_->size(), r);
    const int64_t n = e - b;
    const size_t block = size_t(rows * n) * sizeof(float);
    double stats[3];
    if (at + block + sizeof stats > all.size())
      return make_error("internal", "forward: gathered logits are short");
    const float* src = reinterpret_cast<const float*>(all.data() + at);
    for (int64_t i = 0; i < rows; ++i)
      std::copy_n(src + size_t(i * n), n, logits.data() + i * vocab + b);
    std::memcpy(stats, all.data() + at + block, sizeof stats);
    rank_stats_[size_t(r)] = {r, stats[0], stats[1], int64_t(stats[2])};
    at += block + sizeof stats;
  }
  return {};
}

// y[:, part.col + j] for each part: the parts' output features are cut into chunks of whole
// 32-row tiles, enough of them to keep every thread busy (for decode, one range per thread);
// each chunk reads its weights once. A part with x_rows >= 0 multiplies only its rows of x into
// the same rows of y (the experts of a grouped product); activations are prepared once for all
// rows either way.
void cpu_forward::matmul(const float* x, int64_t rows, const gemm_part* parts, size_t num_parts,
                         float* y, int64_t ldy, bool accumulate) {
  if (num_parts == 0) return;
  const gemm_part* parts_end = parts + num_parts;
  int64_t total = 0, part_rows = 0;  // weight rows of all parts; most rows of x one part multiplies
  for (const gemm_part* p = parts; p != parts_end; ++p) {
    total += p->w->rows;
    part_rows = std::max(part_rows, p->x_rows < 0 ? rows : p->x_rows);
  }
  const int64_t threads = pool_.num_threads();
  int64_t chunk = (total + threads * 8 - 1) / (threads * 8);
  // Multiples of 32 rows: the repacked Q4_0 layout (weight_ref.packed) is cut only at its 16-row
  // tile edges, and the prefill kernel's weight panels (16 or 32 features) are whole.
  chunk = std::clamp<int64_t>((chunk + 31) / 32 * 32, 32, 256);
  // Decode (fewer rows than the prefill kernels take): a thread's share of the weights in one
  // range instead of interleaved 32-row chunks, so each thread streams long runs of memory. On the
  // Intel Xeon of docs/benchmarks/cpu.md, batch-1 decode of the 150M Q4_K_M and Q4_0 files +4-8%
  // (their 32-row chunks are 14 KB); bf16 and f32 unchanged.
  if (part_rows < 16) chunk = std::max(chunk, ((total + threads - 1) / threads + 31) / 32 * 32);
  std::vector<gemm_piece>& pieces = pieces_;
  pieces.clear();
  for (const gemm_part* p = parts; p != parts_end; ++p)
    for (int64_t r = 0; r < p->w->rows; r += chunk)
      pieces.push_back({p, r, std::min(chunk, p->w->rows - r)});
  const int64_t k = parts[0].w->cols;
  bool all_bf16 = true;
  for (const gemm_part* p = parts; p != parts_end; ++p)
    all_bf16 = all_bf16 && p->w->type == dtype::bf16;
  // A piece's rows of x (first, count) and its output.
  auto x_range = [&](const gemm_piece& pc) {
    return std::pair{pc.part->x_rows < 0 ? int64_t{0} : pc.part->x_row0,
                     pc.part->x_rows < 0 ? rows : pc.part->x_rows};
  };
  auto out_of = [&](const gemm_piece& pc) {
    return y + x_range(pc).first * ldy + pc.part->col + pc.row0;
  };
  // bf16 activations for bf16 weights: x prepared once here (rows split over the threads), then
  // the pieces share it.
  const int64_t rows_per =
      std::max<int64_t>(1, (rows + pool_.num_threads() - 1) / pool_.num_threads());
  auto shared_x = [&](auto&& prepare, auto&& product) {
    pool_.parallel_for((rows + rows_per - 1) / rows_per, [&](int64_t c) {
      const int64_t r0 = c * rows_per;
      prepare(r0, std::min(rows, r0 + rows_per));
    });
    pool_.parallel_for(int64_t(pieces.size()), [&](int64_t i) {
      const gemm_piece& pc = pieces[size_t(i)];
      weight_ref sub = *pc.part->w;
      sub.data = sub.row(pc.row0);
      sub.rows = pc.n;
      sub.packed = nullptr;
      const auto [r0, m] = x_range(pc);
      product(sub, r0, m, out_of(pc));
    });
  };
  if (bf16_act_ && all_bf16 && bf16_dot_active()) {
    // The AVX512-BF16 kernel: x rounded to bf16.
    xb_.resize(size_t(rows * k));
    shared_x([&](int64_t r0,
                 int64_t r1) { round_to_bf16(x + r0 * k, k, r1 - r0, k, xb_.data() + r0 * k); },
             [&](const weight_ref& sub, int64_t r0, int64_t m, float* out) {
               matmul_nt_bf16(xb_.data() + r0 * k, m, sub, sub.rows, out, ldy, accumulate);
             });
    return;
  }
  if (bf16_act_ && all_bf16 && rows > 4) {
    // The widening kernel: x rounded and laid out as its tiles read it (row by row). From 5 rows:
    // with fewer, each piece lays out its few rows itself, cheaper than one more pass over the
    // pool.
    xp_.resize(size_t(rows * k));
    shared_x(
        [&](int64_t r0, int64_t r1) {
          prepare_bf16_activations(x + r0 * k, k, r1 - r0, k, xp_.data() + r0 * k);
        },
        [&](const weight_ref& sub, int64_t r0, int64_t m, float* out) {
          matmul_nt_bf16_prepared(xp_.data() + r0 * k, m, sub, sub.rows, out, ldy, accumulate);
        });
    return;
  }
  // Quantized weights: x quantized once here, in each activation format the parts need.
  bool need[2] = {false, false};
  size_t row_bytes[2] = {0, 0};
  for (const gemm_part* p = parts; p != parts_end; ++p)
    if (dtype_is_quantized(p->w->type)) need[uses_q8k(p->w->type) ? 1 : 0] = true;
  for (int f = 0; f < 2; ++f) {
    if (!need[f]) continue;
    const dtype t = f ? dtype::q4_k : dtype::q8_0;  // a weight type of that activation format
    row_bytes[f] = quantized_row_bytes(t, k);
    xq_[f].resize(size_t(rows) * row_bytes[f]);
    pool_.parallel_for((rows + rows_per - 1) / rows_per, [&](int64_t c) {
      const int64_t r0 = c * rows_per, r1 = std::min(rows, r0 + rows_per);
      quantize_rows(t, x + r0 * k, k, r1 - r0, k, xq_[f].data() + size_t(r0) * row_bytes[f]);
    });
  }
  pool_.parallel_for(int64_t(pieces.size()), [&](int64_t i) {
    const gemm_piece& pc = pieces[size_t(i)];
    weight_ref sub = *pc.part->w;
    sub.data = sub.row(pc.row0);
    sub.rows = pc.n;
    if (sub.row_scale != nullptr) sub.row_scale += pc.row0;
    sub.packed = sub.packed && pc.row0 % k_q4_0_tile_rows == 0
                     ? static_cast<const unsigned char*>(sub.packed) +
                           size_t(pc.row0 / k_q4_0_tile_rows) * q4_0_tile_bytes(sub.cols)
                     : nullptr;
    const auto [r0, m] = x_range(pc);
    if (dtype_is_quantized(sub.type)) {
      const int f = uses_q8k(sub.type) ? 1 : 0;
      matmul_quantized(xq_[f].data() + size_t(r0) * row_bytes[f], m, sub, pc.n, out_of(pc), ldy,
                       accumulate);
    } else {
      matmul_nt(x + r0 * k, k, m, sub, pc.n, out_of(pc), ldy, accumulate, bf16_act_);
    }
  });
}

void cpu_forward::rms_norm(const float* x, const float* w, float* out, int64_t rows) {
  const int64_t h = c_.hidden_size;
  const float eps = c_.rms_norm_eps;
  pool_.parallel_for(rows, [&](int64_t r) {
    const float* xr = x + r * h;
    float* o = out + r * h;
    float ss = 0.0f;
    for (int64_t i = 0; i < h; ++i) ss += xr[i] * xr[i];
    const float scale = 1.0f / std::sqrt(ss / float(h) + eps);
    for (int64_t i = 0; i < h; ++i) o[i] = w[i] * (xr[i] * scale);
  });
}

std::vector<float> cpu_forward::last_hidden(size_t s, const std::vector<forward_seq>& batch) const {
  const int64_t h = c_.hidden_size;
  const float* x = x_.data() + (seq_offsets_[s] + batch[s].num_tokens - 1) * h;
  float ss = 0.0f;  // as rms_norm
  for (int64_t i = 0; i < h; ++i) ss += x[i] * x[i];
  const float scale = 1.0f / std::sqrt(ss / float(h) + c_.rms_norm_eps);
  std::vector<float> out(static_cast<size_t>(h));
  for (int64_t i = 0; i < h; ++i) out[size_t(i)] = w_.final_norm[size_t(i)] * (x[i] * scale);
  return out;
}

// Qwen3: each q and k head of `rows` tokens RMS-normalised over head_dim in place (float sums, as
// rms_norm), times L.q_norm / L.k_norm.
void cpu_forward::head_norm(float* qkv, int64_t rows, const layer_weights& L) {
  const int32_t d = c_.head_dim;
  const float eps = c_.rms_norm_eps;
  const int64_t row = int64_t(nh_ + 2 * nkv_) * d;
  pool_.parallel_for(rows, [&](int64_t t) {
    for (int32_t hd = 0; hd < nh_ + nkv_; ++hd) {
      float* v = qkv + t * row + int64_t(hd) * d;
      const float* w = hd < nh_ ? L.q_norm.data() : L.k_norm.data();
      float ss = 0.0f;
      for (int32_t i = 0; i < d; ++i) ss += v[i] * v[i];
      const float scale = 1.0f / std::sqrt(ss / float(d) + eps);
      for (int32_t i = 0; i < d; ++i) v[i] = w[i] * (v[i] * scale);
    }
  });
}

// Rotates q and k heads in place: pairs (i, i + D/2) (the "rotate_half" layout), or (2i, 2i + 1)
// where the config says the heads are interleaved (GGUF llama files).
void cpu_forward::rope(float* qkv, const std::vector<int32_t>& positions) {
  // The first rotary_dim dimensions of each head rotate (partial_rotary_factor); the rest pass.
  const int32_t d = c_.head_dim, half = (c_.rotary_dim > 0 ? c_.rotary_dim : d) / 2;
  const int32_t heads = nh_ + nkv_;
  const int64_t row = int64_t(nh_ + 2 * nkv_) * d;
  const bool longrope = c_.rope_scaling.kind == rope_kind::longrope;
  pool_.parallel_for(int64_t(positions.size()), [&](int64_t t) {
    std::vector<float> cs(static_cast<size_t>(2 * half));
    const float pos = float(positions[size_t(t)]);
    const float m = c_.rope_scaling.kind == rope_kind::yarn || longrope
                        ? c_.rope_scaling.attention_factor
                        : 1.0f;
    // LongRoPE: the long factors from original_max_position_embeddings on, per position.
    const std::vector<float>& inv =
        longrope && positions[size_t(t)] >= c_.rope_scaling.original_max_position_embeddings
            ? inv_freq_long_
            : inv_freq_;
    for (int32_t i = 0; i < half; ++i) {
      const float angle = inv[size_t(i)] * pos;
      cs[size_t(i)] = float(std::cos(double(angle))) *
                      m;  // yarn, longrope: cos and sin times their attention factor
      cs[size_t(half + i)] = float(std::sin(double(angle))) * m;
    }
    float* r = qkv + t * row;
    for (int32_t hd = 0; hd < heads; ++hd) {
      float* v = r + int64_t(hd) * d;
      const int32_t stride = c_.rope_interleaved ? 2 : 1, offset = c_.rope_interleaved ? 1 : half;
      for (int32_t i = 0; i < half; ++i) {
        float& x0 = v[i * stride];
        float& x1 = v[i * stride + offset];
        const float a = x0, b = x1;
        const float cos = cs[size_t(i)], sin = cs[size_t(half + i)];
        x0 = a * cos - b * sin;
        x1 = b * cos + a * sin;
      }
    }
  });
}

// Work items: a decode token's query heads per KV head (its context cut into splits when there
// are fewer items than threads and the context is long); a prefill chunk's tokens in tiles of
// k_attn_rows query rows per KV head. The costliest items go first.
void cpu_forward::plan_attention(const std::vector<forward_seq>& batch) {
  const int32_t nkv = nkv_, group = nh_ / nkv;
  const int32_t threads = pool_.num_threads();
  items_.clear();
  split_groups_.clear();
  int32_t decode_items = 0;
  for (const auto& fs : batch)
    if (fs.num_tokens == 1) decode_items += nkv;
  int64_t partials = 0;
  for (size_t s = 0; s < batch.size(); ++s) {
    const forward_seq& fs = batch[s];
    if (fs.num_tokens == 1) {
      const int32_t ctx = fs.start_pos + 1;
      int32_t splits = 1;
      if (decode_items < 2 * threads)
        splits = std::clamp((2 * threads + decode_items - 1) / decode_items, 1,
                            std::max(1, ctx / k_min_split_ctx));
      for (int32_t h = 0; h < nkv; ++h) {
        if (splits > 1) split_groups_.push_back(int64_t(items_.size()));
        for (int32_t sp = 0; sp < splits; ++sp) {
          const int32_t b = int32_t(int64_t(ctx) * sp / splits),
                        e = int32_t(int64_t(ctx) * (sp + 1) / splits);
          items_.push_back({int32_t(s), h, 0, 1, b, e, splits, splits > 1 ? partials++ : -1});
        }
      }
      continue;
    }
    const int32_t qt = std::max(1, k_attn_rows / group);
    for (int32_t q0 = 0; q0 < fs.num_tokens; q0 += qt) {
      const int32_t nq = std::min(qt, fs.num_tokens - q0);
      for (int32_t h = 0; h < nkv; ++h)
        items_.push_back({int32_t(s), h, q0, nq, 0, fs.start_pos + q0 + nq, 1, -1});
    }
  }
  if (split_groups_.empty())
    std::stable_sort(items_.begin(), items_.end(), [](const attn_item& a, const attn_item& b) {
      return int64_t(a.num_q) * a.ctx_end > int64_t(b.num_q) * b.ctx_end;
    });
  const size_t per = size_t(group) * size_t(c_.head_dim);
  part_max_.resize(size_t(partials) * size_t(group));
  part_sum_.resize(size_t(partials) * size_t(group));
  part_acc_.resize(size_t(partials) * per);
}

void cpu_forward::attention(int32_t layer, const std::vector<forward_seq>& batch,
                            const kv_cache& cache) {
  const int32_t d = c_.head_dim, nh = nh_, nkv = nkv_;
  const int32_t group = nh / nkv;
  const int64_t row = int64_t(nh + 2 * nkv) * d;
  const float scale = 1.0f / std::sqrt(float(d));
  const bool windowed =
      c_.sliding_window > 0 && (c_.sliding_layers.empty() || c_.sliding_layers[size_t(layer)] != 0);
  const int32_t window = windowed ? c_.sliding_window : 0;
  pool_.parallel_for(int64_t(items_.size()), [&](int64_t i) {
    const attn_item& it = items_[size_t(i)];
    const forward_seq& fs = batch[size_t(it.seq)];
    const int64_t t0 = seq_offsets_[size_t(it.seq)] + it.q_first;
    attn_tile t;
    t.q = qkv_.data() + t0 * row;
    t.q_stride = row;
    t.out = attn_.data() + t0 * int64_t(nh) * d;
    t.out_stride = int64_t(nh) * d;
    t.k = cache.k(layer, 0);
    t.v = cache.v(layer, 0);
    t.kv_type = cache.type();
    t.slot_stride = int64_t(cache.slot_stride());
    t.block_table = fs.block_table->data();
    t.block_size = cache.block_size();
    t.head_dim = d;
    t.group = group;
    t.kv_head = it.kv_head;
    t.num_q = it.num_q;
    t.q_pos0 = fs.start_pos + it.q_first;
    t.ctx_begin = it.ctx_begin;
    t.ctx_end = it.ctx_end;
    t.window = window;
    t.scale = scale;
    if (it.splits > 1) {
      t.partial_max = part_max_.data() + it.partial * group;
      t.partial_sum = part_sum_.data() + it.partial * group;
      t.partial_acc = part_acc_.data() + it.partial * group * d;
    }
    attend(t);
  });
  for (int64_t first : split_groups_) {
    const attn_item& it = items_[size_t(first)];
    const int64_t t0 = seq_offsets_[size_t(it.seq)];
    attn_merge(it.splits, group, d, part_max_.data() + it.partial * group,
               part_sum_.data() + it.partial * group, part_acc_.data() + it.partial * group * d,
               attn_.data() + t0 * int64_t(nh) * d + int64_t(it.kv_head) * group * d,
               int64_t(nh) * d, group);
  }
}

result<void> cpu_forward::run(const std::vector<forward_seq>& batch, kv_cache& cache, bool all_rows,
                              std::vector<float>& logits) {
  auto total = lay_out_batch(batch, cache);
  if (!total) return total.err();
  if (*total == 0) {
    logits.clear();
    return {};
  }
  auto tp = clock_type::now();
  embed_tokens(batch, *total);
  plan_attention(batch);
  profile_.other_s += seconds_since(tp);
  for (int32_t l = 0; l < c_.num_hidden_layers; ++l) {
    const layer_weights& L = w_.layers[size_t(l)];
    if (auto r = attention_block(l, L, batch, cache, *total, tp); !r) return r;
    rms_norm(x_.data(), L.post_norm.data(), xn_.data(), *total);
    profile_.other_s += seconds_since(tp);
    auto r = L.experts.empty() ? dense_mlp(l, L, *total, tp) : moe_mlp(L, *total, tp);
    if (!r) return r;
  }
  return lm_head(batch, *total, all_rows, logits, tp);
}

// Validates the batch and lays it out: token t of the flattened batch has positions_[t] and
// slots_[t], sequence s starts at seq_offsets_[s]. Returns the number of tokens.
result<int64_t> cpu_forward::lay_out_batch(const std::vector<forward_seq>& batch,
                                           const kv_cache& cache) {
  const int64_t vocab = c_.vocab_size;
  int64_t total = 0;
  seq_offsets_.assign(batch.size(), 0);
  positions_.clear();
  slots_.clear();
  for (size_t s = 0; s < batch.size(); ++s) {
    const forward_seq& fs = batch[s];
    seq_offsets_[s] = total;
    if (fs.num_tokens <= 0 || fs.start_pos < 0 || !fs.block_table)
      return make_error("invalid_argument",
                        "forward: sequence " + std::to_string(s) + " has no tokens or block table");
    if (fs.start_pos + fs.num_tokens > c_.max_position_embeddings)
      return make_error("invalid_argument", "forward: position " +
                                                std::to_string(fs.start_pos + fs.num_tokens - 1) +
                                                " beyond the model's context of " +
                                                std::to_string(c_.max_position_embeddings));
    for (int32_t p = 0; p < fs.start_pos + fs.num_tokens; ++p)
      if (cache.slot(*fs.block_table, p) < 0)
        return make_error("invalid_argument", "forward: block table of sequence " +
                                                  std::to_string(s) + " does not cover position " +
                                                  std::to_string(p));
    for (int32_t i = 0; i < fs.num_tokens; ++i) {
      if (fs.tokens[i] < 0 || fs.tokens[i] >= vocab)
        return make_error("invalid_argument", "forward: token id " + std::to_string(fs.tokens[i]) +
                                                  " outside the vocabulary");
      positions_.push_back(fs.start_pos + i);
      slots_.push_back(cache.slot(*fs.block_table, fs.start_pos + i));
    }
    total += fs.num_tokens;
  }
  row_lora_.clear();
  for (size_t s = 0; s < batch.size(); ++s) {
    if (batch[s].lora == nullptr) continue;
    if (tp_)
      return make_error("invalid_argument",
                        "forward: LoRA adapters are not supported with tensor parallelism");
    if (row_lora_.empty()) row_lora_.assign(size_t(total), nullptr);
    std::fill_n(row_lora_.begin() + seq_offsets_[s], batch[s].num_tokens, batch[s].lora);
  }
  return total;
}

void cpu_forward::add_lora(int32_t layer, lora_target t, const float* x, int64_t ldx, float* y,
                           int64_t ldy, int64_t col, int64_t total) {
  if (row_lora_.empty()) return;
  pool_.parallel_for(total, [&](int64_t r) {
    const lora_adapter* a = row_lora_[size_t(r)];
    const lora_factors* f = a == nullptr ? nullptr : a->find(layer, t);
    if (f == nullptr) return;
    float ax[k_max_lora_rank];  // A x: the shrink
    const float* xr = x + r * ldx;
    for (int32_t k = 0; k < f->rank; ++k) {
      const float* ak = f->a.data() + size_t(k) * size_t(f->in);
      float sum = 0;
      for (int32_t i = 0; i < f->in; ++i) sum += ak[i] * xr[i];
      ax[k] = sum * a->scaling;
    }
    float* yr = y + r * ldy + col;  // B (A x): the expand
    for (int32_t j = 0; j < f->out; ++j) {
      const float* bj = f->b.data() + size_t(j) * size_t(f->rank);
      float sum = 0;
      for (int32_t k = 0; k < f->rank; ++k) sum += bj[k] * ax[k];
      yr[j] += sum;
    }
  });
}

// Sizes the activations for `total` tokens and writes their embeddings into x_.
void cpu_forward::embed_tokens(const std::vector<forward_seq>& batch, int64_t total) {
  const int64_t h = c_.hidden_size, d = c_.head_dim, nh = nh_, nkv = nkv_;
  x_.resize(size_t(total * h));
  xn_.resize(size_t(total * h));
  qkv_.resize(size_t(total * (nh + 2 * nkv) * d));
  attn_.resize(size_t(total * nh * d));
  if (tp_) part_.resize(size_t(total * h));
  int64_t t = 0;
  for (const auto& fs : batch)
    for (int32_t i = 0; i < fs.num_tokens; ++i, ++t)
      convert_to_f32(w_.embed.type, w_.embed.row(fs.tokens[i]), x_.data() + t * h, size_t(h));
}

// Layer l's attention half: input norm, the q/k/v product (bias, q/k norms, RoPE), K/V into the
// cache, attention, and the output projection added to the residual stream x_.
result<void> cpu_forward::attention_block(int32_t l, const layer_weights& L,
                                          const std::vector<forward_seq>& batch, kv_cache& cache,
                                          int64_t total, clock_type::time_point& tp) {
  const int64_t h = c_.hidden_size, d = c_.head_dim, nh = nh_, nkv = nkv_;
  const int64_t qkv_n = (nh + 2 * nkv) * d;
  rms_norm(x_.data(), L.input_norm.data(), xn_.data(), total);
  profile_.other_s += seconds_since(tp);
  matmul(xn_.data(), total, {{&L.q, 0}, {&L.k, nh * d}, {&L.v, (nh + nkv) * d}}, qkv_.data(), qkv_n,
         false);
  add_lora(l, lora_target::q, xn_.data(), h, qkv_.data(), qkv_n, 0, total);
  add_lora(l, lora_target::k, xn_.data(), h, qkv_.data(), qkv_n, nh * d, total);
  add_lora(l, lora_target::v, xn_.data(), h, qkv_.data(), qkv_n, (nh + nkv) * d, total);
  add_lora(l, lora_target::qkv, xn_.data(), h, qkv_.data(), qkv_n, 0, total);
  profile_.gemm_s += seconds_since(tp);
  if (!L.qkv_bias.empty())
    pool_.parallel_for(total, [&](int64_t r) {
      float* q = qkv_.data() + r * qkv_n;
      for (int64_t j = 0; j < qkv_n; ++j) q[j] += L.qkv_bias[size_t(j)];
    });
  if (!L.q_norm.empty()) head_norm(qkv_.data(), total, L);
  if (c_.rope_layers.empty() || c_.rope_layers[size_t(l)] != 0) rope(qkv_.data(), positions_);
  profile_.other_s += seconds_since(tp);
  for (int64_t r = 0; r < total; ++r) {
    const float* q = qkv_.data() + r * qkv_n;
    store_kv(cache.type(), q + nh * d, cache.k(l, slots_[size_t(r)]), size_t(nkv * d));
    store_kv(cache.type(), q + (nh + nkv) * d, cache.v(l, slots_[size_t(r)]), size_t(nkv * d));
  }
  attention(l, batch, cache);
  profile_.attention_s += seconds_since(tp);
  if (auto r = residual_matmul(attn_.data(), total, L.o, tp); !r) return r;
  add_lora(l, lora_target::o, attn_.data(), nh * d, x_.data(), h, 0, total);
  if (!L.o_bias.empty())
    for (int64_t r = 0; r < total; ++r)
      for (int64_t j = 0; j < h; ++j) x_[size_t(r * h + j)] += L.o_bias[size_t(j)];
  return {};
}

// A dense layer's MLP over xn_: gate/up, SwiGLU, down added to the residual stream.
result<void> cpu_forward::dense_mlp(int32_t l, const layer_weights& L, int64_t total,
                                    clock_type::time_point& tp) {
  const int64_t inter = inter_, h = c_.hidden_size;
  gu_.resize(size_t(total * 2 * inter));
  act_.resize(size_t(total * inter));
  matmul(xn_.data(), total, {{&L.gate, 0}, {&L.up, inter}}, gu_.data(), 2 * inter, false);
  add_lora(l, lora_target::gate, xn_.data(), h, gu_.data(), 2 * inter, 0, total);
  add_lora(l, lora_target::up, xn_.data(), h, gu_.data(), 2 * inter, inter, total);
  add_lora(l, lora_target::gate_up, xn_.data(), h, gu_.data(), 2 * inter, 0, total);
  profile_.gemm_s += seconds_since(tp);
  swiglu(gu_.data(), total, inter, act_.data());
  profile_.other_s += seconds_since(tp);
  auto r = residual_matmul(act_.data(), total, L.down, tp);
  if (r) add_lora(l, lora_target::down, act_.data(), inter, x_.data(), h, 0, total);
  return r;
}

// The rows of the flattened batch whose logits are asked for: every row, or each sequence's last
// logit_rows rows where it wants logits.
std::vector<int64_t> cpu_forward::logit_rows(const std::vector<forward_seq>& batch, int64_t total,
                                             bool all_rows) const {
  std::vector<int64_t> rows;
  if (all_rows) {
    for (int64_t t = 0; t < total; ++t) rows.push_back(t);
    return rows;
  }
  for (size_t s = 0; s < batch.size(); ++s)
    if (batch[s].want_logits) {
      const int32_t k = std::clamp(batch[s].logit_rows, 1, batch[s].num_tokens);
      for (int32_t r = batch[s].num_tokens - k; r < batch[s].num_tokens; ++r)
        rows.push_back(seq_offsets_[s] + r);
    }
  return rows;
}

// Final norm and LM head over the rows asked for (tensor parallel: each rank's vocabulary rows,
// gathered on rank 0).
result<void> cpu_forward::lm_head(const std::vector<forward_seq>& batch, int64_t total,
                                  bool all_rows, std::vector<float>& logits,
                                  clock_type::time_point& tp) {
  const int64_t h = c_.hidden_size, vocab = c_.vocab_size;
  const std::vector<int64_t> rows = logit_rows(batch, total, all_rows);
  ++profile_.steps;
  if (rows.empty()) {
    logits.clear();
    return {};
  }
  std::vector<float> picked(rows.size() * size_t(h));
  for (size_t r = 0; r < rows.size(); ++r)
    std::copy_n(x_.data() + rows[r] * h, h, picked.data() + r * size_t(h));
  std::vector<float> normed(picked.size());
  rms_norm(picked.data(), w_.final_norm.data(), normed.data(), int64_t(rows.size()));
  profile_.other_s += seconds_since(tp);
  if (!tp_) {
    logits.resize(size_t(int64_t(rows.size()) * vocab));
    matmul(normed.data(), int64_t(rows.size()), {{&w_.lm_head, 0}}, logits.data(), vocab, false);
    profile_.gemm_s += seconds_since(tp);
    return {};
  }
  const int64_t nv = vocab1_ - vocab0_;
  local_logits_.resize(rows.size() * size_t(nv));
  matmul(normed.data(), int64_t(rows.size()), {{&w_.lm_head, 0}}, local_logits_.data(), nv, false);
  profile_.gemm_s += seconds_since(tp);
  auto g = gather_logits(local_logits_, int64_t(rows.size()), logits);
  profile_.comm_s += seconds_since(tp);
  if (rows.size() > 256)
    std::vector<float>().swap(local_logits_);  // prompt logprobs' rows: not kept
  return g;
}

}  // namespace coserve
