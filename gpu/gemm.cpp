#include "gpu/gemm.hpp"

#include <algorithm>
#include <chrono>
#include <functional>
#include <string>

#include "gpu/cuda_stream.hpp"
#include "gpu/launch_params.hpp"

namespace coserve::gpu {

struct gemm_runner::plan {
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
  cublasLtMatmulAlgo_t algo{};
  ~plan() {
    if (desc) (void)cublasLtMatmulDescDestroy(desc);
    if (a) (void)cublasLtMatrixLayoutDestroy(a);
    if (b) (void)cublasLtMatrixLayoutDestroy(b);
    if (c) (void)cublasLtMatrixLayoutDestroy(c);
  }
};

size_t gemm_runner::plan_key_hash::operator()(const plan_key& p) const noexcept {
  uint64_t h = (uint64_t(uint32_t(p.m)) << 32) | uint32_t(p.n);
  h ^= ((uint64_t(uint32_t(p.k)) << 3) | (uint64_t(p.fp8) << 2) |
        (uint64_t(p.out == gemm_out::f32) << 1) | uint64_t(p.bias)) *
       0x9e3779b97f4a7c15ull;
  return std::hash<uint64_t>{}(h);
}

gemm_runner::gemm_runner() : plans_(k_default_max_plans) {}
gemm_runner::gemm_runner(gemm_runner&&) noexcept = default;
gemm_runner& gemm_runner::operator=(gemm_runner&&) noexcept = default;
gemm_runner::~gemm_runner() = default;

result<gemm_runner> gemm_runner::create(size_t max_plans) {
  if (max_plans == 0) return make_error("invalid_argument", "gemm: max_plans must be positive");
  gemm_runner g;
  g.plans_ = rt::lru_cache<plan_key, std::unique_ptr<plan>, plan_key_hash>(max_plans);
  auto h = cublaslt_handle::create();
  if (!h) return std::move(h).err();
  g.handle_ = std::move(h.value());
  auto ws = device_buffer::allocate(k_workspace_bytes);
  if (!ws) return std::move(ws).err();
  g.workspace_ = std::move(ws.value());
  return g;
}

size_t gemm_runner::tuned_key_hash::operator()(const tuned_key& t) const noexcept {
  return plan_key_hash{}(plan_key{t.bucket, t.n, t.k, t.out, t.bias, t.fp8});
}

result<std::unique_ptr<gemm_runner::plan>> gemm_runner::describe(int32_t m, int32_t n, int32_t k,
                                                                 gemm_out out, bool bias,
                                                                 bool fp8) {
  auto p = std::make_unique<plan>();
  COSERVE_CUDA_TRY(cublas_check(cublasLtMatmulDescCreate(&p->desc, CUBLAS_COMPUTE_32F, CUDA_R_32F),
                                "MatmulDescCreate"));
  const cublasOperation_t op_t = CUBLAS_OP_T, op_n = CUBLAS_OP_N;
  COSERVE_CUDA_TRY(cublas_check(
      cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_TRANSA, &op_t, sizeof(op_t)),
      "TRANSA"));
  COSERVE_CUDA_TRY(cublas_check(
      cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_TRANSB, &op_n, sizeof(op_n)),
      "TRANSB"));
  if (bias) {
    const cublasLtEpilogue_t epi = CUBLASLT_EPILOGUE_BIAS;
    const cudaDataType_t bias_type = CUDA_R_16BF;
    COSERVE_CUDA_TRY(cublas_check(
        cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof(epi)),
        "EPILOGUE"));
    COSERVE_CUDA_TRY(
        cublas_check(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE,
                                                    &bias_type, sizeof(bias_type)),
                     "BIAS_DATA_TYPE"));
  }
  if (fp8) {  // A = the weights (n scales), B = the activations (m scales): cuBLASLt's M and N
    const cublasLtMatmulMatrixScale_t vec = CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F;
    COSERVE_CUDA_TRY(
        cublas_check(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_A_SCALE_MODE,
                                                    &vec, sizeof(vec)),
                     "A_SCALE_MODE"));
    COSERVE_CUDA_TRY(
        cublas_check(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_B_SCALE_MODE,
                                                    &vec, sizeof(vec)),
                     "B_SCALE_MODE"));
  }
  const cudaDataType_t out_type = out == gemm_out::bf16 ? CUDA_R_16BF : CUDA_R_32F;
  const cudaDataType_t in_type = fp8 ? CUDA_R_8F_E4M3 : CUDA_R_16BF;
  COSERVE_CUDA_TRY(cublas_check(
      cublasLtMatrixLayoutCreate(&p->a, in_type, uint64_t(k), uint64_t(n), k), "layout A"));
  COSERVE_CUDA_TRY(cublas_check(
      cublasLtMatrixLayoutCreate(&p->b, in_type, uint64_t(k), uint64_t(m), k), "layout B"));
  COSERVE_CUDA_TRY(cublas_check(
      cublasLtMatrixLayoutCreate(&p->c, out_type, uint64_t(n), uint64_t(m), n), "layout C"));
  return p;
}

result<std::vector<cublasLtMatmulAlgo_t>> gemm_runner::heuristic(plan& p, int count) {
  cublasLtMatmulPreference_t pref = nullptr;
  COSERVE_CUDA_TRY(cublas_check(cublasLtMatmulPreferenceCreate(&pref), "PreferenceCreate"));
  const size_t ws = k_workspace_bytes;
  auto set = cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                  &ws, sizeof(ws));
  std::vector<cublasLtMatmulHeuristicResult_t> heur(size_t(std::max(count, 1)));
  int found = 0;
  auto st = set == CUBLAS_STATUS_SUCCESS
                ? cublasLtMatmulAlgoGetHeuristic(handle_.get(), p.desc, p.a, p.b, p.c, p.c, pref,
                                                 int(heur.size()), heur.data(), &found)
                : set;
  (void)cublasLtMatmulPreferenceDestroy(pref);
  COSERVE_CUDA_TRY(cublas_check(st, "cublasLtMatmulAlgoGetHeuristic"));
  if (found == 0) return make_error("cublas", "cuBLASLt found no algorithm for this GEMM shape");
  std::vector<cublasLtMatmulAlgo_t> algos;
  for (int i = 0; i < found; ++i)
    if (heur[size_t(i)].state == CUBLAS_STATUS_SUCCESS) algos.push_back(heur[size_t(i)].algo);
  if (algos.empty()) return make_error("cublas", "cuBLASLt found no algorithm for this GEMM shape");
  return algos;
}

result<void> gemm_runner::set_scales(plan& p, const float* w_scales, const float* x_scales) {
  COSERVE_CUDA_TRY(
      cublas_check(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER,
                                                  &w_scales, sizeof(w_scales)),
                   "A_SCALE_POINTER"));
  return cublas_check(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER,
                                                     &x_scales, sizeof(x_scales)),
                      "B_SCALE_POINTER");
}

result<gemm_runner::plan*> gemm_runner::get_plan(int32_t m, int32_t n, int32_t k, gemm_out out,
                                                 bool bias, bool fp8, const float* w_scales,
                                                 const float* x_scales) {
  const plan_key key{m, n, k, out, bias, fp8};
  if (std::unique_ptr<plan>* cached = plans_.find(key)) {
    if (fp8)
      COSERVE_CUDA_TRY(set_scales(**cached, w_scales, x_scales));  // it holds an earlier call's
    return cached->get();
  }
  auto made = describe(m, n, k, out, bias, fp8);
  if (!made) return std::move(made).err();
  std::unique_ptr<plan> p = std::move(made.value());
  // cuBLASLt refuses (CUBLAS_STATUS_INVALID_VALUE) to check or find an algorithm for outer-vector
  // scale modes while the scale pointers are null: the call's own are set first.
  if (fp8) COSERVE_CUDA_TRY(set_scales(*p, w_scales, x_scales));
  // The algorithm tune() chose for the shape's smallest tuned bucket >= m, if cuBLASLt accepts it
  // for this exact m.
  bool chosen = false;
  for (auto b = std::lower_bound(buckets_.begin(), buckets_.end(), m);
       b != buckets_.end() && !chosen; ++b) {
    auto it = tuned_.find(tuned_key{*b, n, k, out, bias, fp8});
    if (it == tuned_.end()) continue;
    cublasLtMatmulHeuristicResult_t check{};
    if (cublasLtMatmulAlgoCheck(handle_.get(), p->desc, p->a, p->b, p->c, p->c, &it->second,
                                &check) == CUBLAS_STATUS_SUCCESS &&
        check.workspaceSize <= k_workspace_bytes) {
      p->algo = it->second;
      chosen = true;
    }
    break;  // that bucket decides: a larger one was timed for other row counts
  }
  if (!chosen) {
    auto algos = heuristic(*p, 1);
    if (!algos) return std::move(algos).err();
    p->algo = algos.value().front();
  }
  return plans_.insert(key, std::move(p)).get();
}

result<gemm_runner::tune_report> gemm_runner::tune(const std::vector<shape>& shapes,
                                                   cudaStream_t stream) {
  const auto t0 = std::chrono::steady_clock::now();
  tune_report rep;
  tuned_.clear();
  buckets_.clear();
  for (const shape& sh : shapes)  // the union of every shape's buckets, ascending
    for (int32_t b : gemm_m_buckets(sh.max_m))
      buckets_.insert(std::lower_bound(buckets_.begin(), buckets_.end(), b), b);
  buckets_.erase(std::unique(buckets_.begin(), buckets_.end()), buckets_.end());
  auto ev0 = event::create(true), ev1 = event::create(true);
  if (!ev0) return std::move(ev0).err();
  if (!ev1) return std::move(ev1).err();
  constexpr int k_reps = 5;
  for (const shape& sh : shapes) {
    for (int32_t m : gemm_m_buckets(sh.max_m)) {
      auto made = describe(m, sh.n, sh.k, sh.out, sh.bias != nullptr, sh.fp8);
      if (!made) return std::move(made).err();
      plan& p = *made.value();
      if (sh.fp8) COSERVE_CUDA_TRY(set_scales(p, sh.w_scales, sh.x_scales));
      auto heur = heuristic(p, 8);
      if (!heur) return std::move(heur).err();
      std::vector<cublasLtMatmulAlgo_t> cands = heur.value();
      // Split-K variants of the heuristic's first three, where the algorithm supports split-K: few
      // rows leave most SMs idle unless K is split.
      const size_t firsts = std::min<size_t>(3, cands.size());
      for (size_t i = 0; i < firsts; ++i) {
        int32_t support = 0;
        uint32_t schemes = 0;
        size_t written = 0;
        if (cublasLtMatmulAlgoCapGetAttribute(&cands[i], CUBLASLT_ALGO_CAP_SPLITK_SUPPORT, &support,
                                              sizeof(support), &written) != CUBLAS_STATUS_SUCCESS ||
            support == 0 ||
            cublasLtMatmulAlgoCapGetAttribute(&cands[i], CUBLASLT_ALGO_CAP_REDUCTION_SCHEME_MASK,
                                              &schemes, sizeof(schemes),
                                              &written) != CUBLAS_STATUS_SUCCESS)
          continue;
        uint32_t scheme =
            0;  // the first supported of: fp32 partials, output-type partials, in place
        for (uint32_t sc : {uint32_t(CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE),
                            uint32_t(CUBLASLT_REDUCTION_SCHEME_OUTPUT_TYPE),
                            uint32_t(CUBLASLT_REDUCTION_SCHEME_INPLACE)})
          if (scheme == 0 && (schemes & sc) != 0) scheme = sc;
        if (scheme == 0) continue;
        for (int32_t splits : {2, 4, 8, 16}) {
          if (sh.k / splits < 256) break;
          cublasLtMatmulAlgo_t a = cands[i];
          cublasLtMatmulHeuristicResult_t check{};
          if (cublasLtMatmulAlgoConfigSetAttribute(&a, CUBLASLT_ALGO_CONFIG_SPLITK_NUM, &splits,
                                                   sizeof(splits)) == CUBLAS_STATUS_SUCCESS &&
              cublasLtMatmulAlgoConfigSetAttribute(&a, CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME,
                                                   &scheme,
                                                   sizeof(scheme)) == CUBLAS_STATUS_SUCCESS &&
              cublasLtMatmulAlgoCheck(handle_.get(), p.desc, p.a, p.b, p.c, p.c, &a, &check) ==
                  CUBLAS_STATUS_SUCCESS &&
              check.workspaceSize <= k_workspace_bytes)
            cands.push_back(a);
        }
      }
      // Time each: one run to warm up (a candidate that fails to launch is skipped), then k_reps.
      float best_ms = 0, first_ms = 0;
      int best = -1;
      for (size_t i = 0; i < cands.size(); ++i) {
        p.algo = cands[i];
        auto once = [&] { return matmul(&p, sh.y, sh.x, sh.w, sh.bias, stream); };
        if (!once()) continue;
        COSERVE_CUDA_TRY(ev0.value().record(stream));
        bool ok = true;
        for (int r = 0; r < k_reps && ok; ++r) ok = once().ok();
        COSERVE_CUDA_TRY(ev1.value().record(stream));
        COSERVE_CUDA_TRY(cuda_check(cudaStreamSynchronize(stream), "gemm tuning"));
        if (!ok) continue;
        auto ms = event::elapsed_ms(ev0.value(), ev1.value());
        if (!ms) return std::move(ms).err();
        const float t = float(*ms) / k_reps;
        ++rep.candidates;
        if (i == 0) first_ms = t;
        if (best < 0 || t < best_ms) {
          best_ms = t;
          best = int(i);
        }
      }
      if (best < 0)
        continue;  // nothing ran: the heuristic decides at run time (and reports the error)
      ++rep.shapes;
      if (best != 0) {
        ++rep.not_first;
        rep.saved_ms_per_pass += first_ms - best_ms;
      }
      tuned_[tuned_key{m, sh.n, sh.k, sh.out, sh.bias != nullptr, sh.fp8}] = cands[size_t(best)];
    }
  }
  plans_ = rt::lru_cache<plan_key, std::unique_ptr<plan>, plan_key_hash>(
      plans_.capacity());  // re-planned with the choices
  rep.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return rep;
}

result<void> gemm_runner::run(void* y, gemm_out out, const __nv_bfloat16* x, const __nv_bfloat16* w,
                              const __nv_bfloat16* bias, int32_t m, int32_t n, int32_t k,
                              cudaStream_t stream) {
  if (m <= 0 || n <= 0 || k <= 0)
    return m == 0 ? result<void>{} : make_error("invalid_argument", "gemm: bad shape");
  if (bias != nullptr && out != gemm_out::bf16)
    return make_error("invalid_argument", "gemm: bias needs a bf16 output");
  auto p = get_plan(m, n, k, out, bias != nullptr);
  if (!p) return std::move(p).err();
  return matmul(p.value(), y, x, w, bias, stream);
}

result<void> gemm_runner::matmul(plan* pl, void* y, const void* x, const void* w, const void* bias,
                                 cudaStream_t stream) {
  if (bias != nullptr)
    COSERVE_CUDA_TRY(
        cublas_check(cublasLtMatmulDescSetAttribute(pl->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER,
                                                    &bias, sizeof(bias)),
                     "BIAS_POINTER"));
  const float alpha = 1.0f, beta = 0.0f;
  return cublas_check(
      cublasLtMatmul(handle_.get(), pl->desc, &alpha, w, pl->a, x, pl->b, &beta, y, pl->c, y, pl->c,
                     &pl->algo, workspace_.get(), k_workspace_bytes, stream),
      "cublasLtMatmul");
}

result<void> gemm_runner::run_fp8(__nv_bfloat16* y, const uint8_t* x, const float* x_scales,
                                  const uint8_t* w, const float* w_scales,
                                  const __nv_bfloat16* bias, int32_t m, int32_t n, int32_t k,
                                  cudaStream_t stream) {
  if (m <= 0 || n <= 0 || k <= 0)
    return m == 0 ? result<void>{} : make_error("invalid_argument", "gemm fp8: bad shape");
  if (k % 16 != 0 || n % 16 != 0)
    return make_error("invalid_argument", "gemm fp8: k (" + std::to_string(k) + ") and n (" +
                                              std::to_string(n) + ") must be multiples of 16");
  if (w_scales == nullptr || x_scales == nullptr)
    return make_error("invalid_argument", "gemm fp8: null scales");
  auto p = get_plan(m, n, k, gemm_out::bf16, bias != nullptr, true, w_scales, x_scales);
  if (!p) return std::move(p).err();
  return matmul(p.value(), y, x, w, bias, stream);
}

}  // namespace coserve::gpu
