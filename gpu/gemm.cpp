#include "gpu/gemm.hpp"

#include <functional>
#include <string>

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
  h ^= ((uint64_t(uint32_t(p.k)) << 3) | (uint64_t(p.fp8) << 2) | (uint64_t(p.out == gemm_out::f32) << 1) |
        uint64_t(p.bias)) *
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

result<gemm_runner::plan*> gemm_runner::get_plan(int32_t m, int32_t n, int32_t k, gemm_out out, bool bias, bool fp8) {
  const plan_key key{m, n, k, out, bias, fp8};
  if (std::unique_ptr<plan>* cached = plans_.find(key)) return cached->get();
  auto p = std::make_unique<plan>();
  COSERVE_CUDA_TRY(cublas_check(cublasLtMatmulDescCreate(&p->desc, CUBLAS_COMPUTE_32F, CUDA_R_32F), "MatmulDescCreate"));
  const cublasOperation_t op_t = CUBLAS_OP_T, op_n = CUBLAS_OP_N;
  COSERVE_CUDA_TRY(cublas_check(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_TRANSA, &op_t, sizeof(op_t)), "TRANSA"));
  COSERVE_CUDA_TRY(cublas_check(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_TRANSB, &op_n, sizeof(op_n)), "TRANSB"));
  if (bias) {
    const cublasLtEpilogue_t epi = CUBLASLT_EPILOGUE_BIAS;
    const cudaDataType_t bias_type = CUDA_R_16BF;
    COSERVE_CUDA_TRY(cublas_check(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof(epi)), "EPILOGUE"));
    COSERVE_CUDA_TRY(cublas_check(
        cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bias_type, sizeof(bias_type)), "BIAS_DATA_TYPE"));
  }
  if (fp8) {  // A = the weights (n scales), B = the activations (m scales): cuBLASLt's M and N
    const cublasLtMatmulMatrixScale_t vec = CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F;
    COSERVE_CUDA_TRY(cublas_check(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_A_SCALE_MODE, &vec, sizeof(vec)), "A_SCALE_MODE"));
    COSERVE_CUDA_TRY(cublas_check(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_B_SCALE_MODE, &vec, sizeof(vec)), "B_SCALE_MODE"));
  }
  const cudaDataType_t out_type = out == gemm_out::bf16 ? CUDA_R_16BF : CUDA_R_32F;
  const cudaDataType_t in_type = fp8 ? CUDA_R_8F_E4M3 : CUDA_R_16BF;
  COSERVE_CUDA_TRY(cublas_check(cublasLtMatrixLayoutCreate(&p->a, in_type, uint64_t(k), uint64_t(n), k), "layout A"));
  COSERVE_CUDA_TRY(cublas_check(cublasLtMatrixLayoutCreate(&p->b, in_type, uint64_t(k), uint64_t(m), k), "layout B"));
  COSERVE_CUDA_TRY(cublas_check(cublasLtMatrixLayoutCreate(&p->c, out_type, uint64_t(n), uint64_t(m), n), "layout C"));

  cublasLtMatmulPreference_t pref = nullptr;
  COSERVE_CUDA_TRY(cublas_check(cublasLtMatmulPreferenceCreate(&pref), "PreferenceCreate"));
  const size_t ws = k_workspace_bytes;
  auto set = cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws));
  cublasLtMatmulHeuristicResult_t heur{};
  int found = 0;
  auto st = set == CUBLAS_STATUS_SUCCESS
                ? cublasLtMatmulAlgoGetHeuristic(handle_.get(), p->desc, p->a, p->b, p->c, p->c, pref, 1, &heur, &found)
                : set;
  (void)cublasLtMatmulPreferenceDestroy(pref);
  COSERVE_CUDA_TRY(cublas_check(st, "cublasLtMatmulAlgoGetHeuristic"));
  if (found == 0) return make_error("cublas", "cuBLASLt found no algorithm for this GEMM shape");
  p->algo = heur.algo;
  return plans_.insert(key, std::move(p)).get();
}

result<void> gemm_runner::run(void* y, gemm_out out, const __nv_bfloat16* x, const __nv_bfloat16* w,
                              const __nv_bfloat16* bias, int32_t m, int32_t n, int32_t k, cudaStream_t stream) {
  if (m <= 0 || n <= 0 || k <= 0) return m == 0 ? result<void>{} : make_error("invalid_argument", "gemm: bad shape");
  if (bias != nullptr && out != gemm_out::bf16) return make_error("invalid_argument", "gemm: bias needs a bf16 output");
  auto p = get_plan(m, n, k, out, bias != nullptr);
  if (!p) return std::move(p).err();
  return matmul(p.value(), y, x, w, bias, stream);
}

result<void> gemm_runner::matmul(plan* pl, void* y, const void* x, const void* w, const void* bias, cudaStream_t stream) {
  if (bias != nullptr)
    COSERVE_CUDA_TRY(cublas_check(
        cublasLtMatmulDescSetAttribute(pl->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof(bias)), "BIAS_POINTER"));
  const float alpha = 1.0f, beta = 0.0f;
  return cublas_check(cublasLtMatmul(handle_.get(), pl->desc, &alpha, w, pl->a, x, pl->b, &beta, y, pl->c, y, pl->c,
                                     &pl->algo, workspace_.get(), k_workspace_bytes, stream),
                      "cublasLtMatmul");
}

result<void> gemm_runner::run_fp8(__nv_bfloat16* y, const uint8_t* x, const float* x_scales, const uint8_t* w,
                                  const float* w_scales, const __nv_bfloat16* bias, int32_t m, int32_t n, int32_t k,
                                  cudaStream_t stream) {
  if (m <= 0 || n <= 0 || k <= 0) return m == 0 ? result<void>{} : make_error("invalid_argument", "gemm fp8: bad shape");
  if (k % 16 != 0 || n % 16 != 0)
    return make_error("invalid_argument", "gemm fp8: k (" + std::to_string(k) + ") and n (" + std::to_string(n) +
                                              ") must be multiples of 16");
  auto p = get_plan(m, n, k, gemm_out::bf16, bias != nullptr, true);
  if (!p) return std::move(p).err();
  plan* pl = p.value();
  COSERVE_CUDA_TRY(cublas_check(
      cublasLtMatmulDescSetAttribute(pl->desc, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &w_scales, sizeof(w_scales)), "A_SCALE_POINTER"));
  COSERVE_CUDA_TRY(cublas_check(
      cublasLtMatmulDescSetAttribute(pl->desc, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &x_scales, sizeof(x_scales)), "B_SCALE_POINTER"));
  return matmul(pl, y, x, w, bias, stream);
}

}  // namespace coserve::gpu
