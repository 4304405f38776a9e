// gemm_runner: y = x * w^T (+ bias) with cuBLASLt, bf16 inputs (or E4M3 with per-row scales,
// run_fp8), fp32 accumulation, bf16 or fp32 output. Shapes are those of a Hugging Face linear
// layer: x [m, k] row-major activations, w [n, k] row-major weights (out_features x in_features), y
// [m, n] row-major.
//
// Column-major view used for cuBLASLt: y^T (n x m, ld n) = op_T(W: k x n, ld k) * X (k x m, ld k).
// Descriptors and an algorithm ("plans") are cached per (m, n, k, out type, bias) so a repeated
// shape costs one cublasLtMatmul call (scale and bias pointers are set per call). m is the number
// of tokens in a step, so the set of shapes grows with traffic: the cache keeps at most max_plans
// plans (create()'s argument) and, when a new shape arrives at a full cache, destroys the
// descriptors of the least recently used plan.
// The algorithm: tune() times cuBLASLt's candidates (its heuristic's top results, and split-K
// variants of the first ones where the algorithm supports split-K) for each (bucket of m, n, k)
// once, at startup; a plan whose bucket was tuned takes that choice when cuBLASLt accepts it for
// the exact m (cublasLtMatmulAlgoCheck), else the heuristic's first result.
// Not thread-safe: owned by one executor thread.
#pragma once

#include <cublasLt.h>
#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <unordered_map>
#include <vector>

#include "gpu/cublaslt_handle.hpp"
#include "gpu/device_buffer.hpp"
#include "runtime/lru_cache.hpp"

namespace coserve::gpu {

enum class gemm_out { bf16, f32 };

class gemm_runner {
 public:
  static constexpr size_t k_workspace_bytes = size_t(32)
                                              << 20;  // cuBLASLt recommends 32 MiB on Hopper

  static constexpr size_t k_default_max_plans = 256;

  // max_plans: the most plans cached at once; 0 is an invalid_argument error.
  static result<gemm_runner> create(size_t max_plans = k_default_max_plans);
  gemm_runner();  // empty: run() fails until assigned from create()

  gemm_runner(gemm_runner&&) noexcept;
  gemm_runner& operator=(gemm_runner&&) noexcept;
  ~gemm_runner();

  // bias: [n] bf16 or nullptr (only with gemm_out::bf16). Never synchronizes.
  result<void> run(void* y, gemm_out out, const __nv_bfloat16* x, const __nv_bfloat16* w,
                   const __nv_bfloat16* bias, int32_t m, int32_t n, int32_t k, cudaStream_t stream);

  // fp8 (E4M3) W8A8: y = (x_scales[i] * w_scales[j] * sum_k x[i, k] w[j, k]) (+ bias), x [m, k] and
  // w [n, k] E4M3 codes, per-token x_scales [m] and per-output-channel w_scales [n] (fp32, device),
  // fp32 accumulation, bf16 output (cuBLASLt's outer-vector scale modes, CUDA 12.9+ on Hopper).
  // k and n must be multiples of 16 (cuBLASLt's fp8 alignment). Never synchronizes.
  result<void> run_fp8(__nv_bfloat16* y, const uint8_t* x, const float* x_scales, const uint8_t* w,
                       const float* w_scales, const __nv_bfloat16* bias, int32_t m, int32_t n,
                       int32_t k, cudaStream_t stream);

  // One GEMM of the model for tune(): its n, k, output and epilogue, and operands to time it with
  // (the real weights, activation buffers of at least max_m rows, an output of max_m rows; fp8:
  // the weight scales and activation scales).
  struct shape {
    int32_t n = 0, k = 0;
    gemm_out out = gemm_out::bf16;
    const void* w = nullptr;
    const void* x = nullptr;
    void* y = nullptr;
    const __nv_bfloat16* bias = nullptr;
    bool fp8 = false;
    const float* w_scales = nullptr;
    const float* x_scales = nullptr;
    int32_t max_m = 0;  // buckets of m up to this (gemm_m_buckets)
  };
  struct tune_report {
    int32_t shapes = 0, candidates = 0;  // (bucket, shape) pairs tuned, candidates timed
    int32_t not_first = 0;  // of the pairs, those where a candidate beat the heuristic's first
    double seconds = 0, saved_ms_per_pass = 0;  // what the winners save on one run of every pair
  };
  // Times the candidates of every shape at every bucket of m (synchronizes: startup only) and
  // keeps the fastest per (bucket, shape) for the plans made from then on (existing plans are
  // dropped).
  result<tune_report> tune(const std::vector<shape>& shapes, cudaStream_t stream);

  size_t num_plans() const noexcept { return plans_.size(); }
  size_t max_plans() const noexcept { return plans_.capacity(); }

 private:
  struct plan;  // descriptors + algorithm, see gemm.cpp
  struct plan_key {
    int32_t m = 0, n = 0, k = 0;
    gemm_out out = gemm_out::bf16;
    bool bias = false;
    bool fp8 = false;
    bool operator==(const plan_key&) const = default;
  };
  struct plan_key_hash {
    size_t operator()(const plan_key& p) const noexcept;
  };
  // fp8: the weights' and activations' scale vectors, set on the plan returned (cuBLASLt also needs
  // them set to find an algorithm).
  result<plan*> get_plan(int32_t m, int32_t n, int32_t k, gemm_out out, bool bias, bool fp8 = false,
                         const float* w_scales = nullptr, const float* x_scales = nullptr);
  static result<void> set_scales(plan& p, const float* w_scales, const float* x_scales);
  // The plan's descriptors for (m, n, k, ...), no algorithm chosen yet.
  result<std::unique_ptr<plan>> describe(int32_t m, int32_t n, int32_t k, gemm_out out, bool bias,
                                         bool fp8);
  // cuBLASLt's heuristic, up to `count` results for `p`'s descriptors.
  result<std::vector<cublasLtMatmulAlgo_t>> heuristic(plan& p, int count);
  struct tuned_key {
    int32_t bucket = 0, n = 0, k = 0;
    gemm_out out = gemm_out::bf16;
    bool bias = false, fp8 = false;
    bool operator==(const tuned_key&) const = default;
  };
  struct tuned_key_hash {
    size_t operator()(const tuned_key& t) const noexcept;
  };
  // cublasLtMatmul with `pl`, its bias pointer set first when there is one.
  result<void> matmul(plan* pl, void* y, const void* x, const void* w, const void* bias,
                      cudaStream_t stream);

  cublaslt_handle handle_;
  device_buffer workspace_;
  rt::lru_cache<plan_key, std::unique_ptr<plan>, plan_key_hash>
      plans_;  // k_default_max_plans until create()
  std::vector<int32_t>
      buckets_;  // every bucket of m tune() timed, for any shape (ascending); empty before
  std::unordered_map<tuned_key, cublasLtMatmulAlgo_t, tuned_key_hash> tuned_;
};

}  // namespace coserve::gpu
