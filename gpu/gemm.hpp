// gemm_runner: y = x * w^T (+ bias) with cuBLASLt, bf16 inputs, fp32 accumulation, bf16 or fp32
// output. Shapes are those of a Hugging Face linear layer: x [m, k] row-major activations,
// w [n, k] row-major weights (out_features x in_features), y [m, n] row-major.
//
// Column-major view used for cuBLASLt: y^T (n x m, ld n) = op_T(W: k x n, ld k) * X (k x m, ld k).
// Descriptors and the heuristic's algorithm are cached per (m, n, k, out type, bias) so the per-step
// cost is one cublasLtMatmul call. Not thread-safe: owned by one executor thread.
#pragma once

#include <cublasLt.h>
#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cstdint>
#include <map>
#include <memory>
#include <tuple>

#include "gpu/cublaslt_handle.hpp"
#include "gpu/device_buffer.hpp"

namespace coserve::gpu {

enum class gemm_out { bf16, f32 };

class gemm_runner {
 public:
  static constexpr size_t k_workspace_bytes = size_t(32) << 20;  // cuBLASLt recommends 32 MiB on Hopper

  static result<gemm_runner> create();
  gemm_runner();  // empty: run() fails until assigned from create()

  gemm_runner(gemm_runner&&) noexcept;
  gemm_runner& operator=(gemm_runner&&) noexcept;
  ~gemm_runner();

  // bias: [n] bf16 or nullptr (only with gemm_out::bf16). Never synchronizes.
  result<void> run(void* y, gemm_out out, const __nv_bfloat16* x, const __nv_bfloat16* w, const __nv_bfloat16* bias,
                   int32_t m, int32_t n, int32_t k, cudaStream_t stream);

 private:
  struct plan;  // descriptors + algorithm, see gemm.cpp
  result<plan*> get_plan(int32_t m, int32_t n, int32_t k, gemm_out out, bool bias);

  cublaslt_handle handle_;
  device_buffer workspace_;
  std::map<std::tuple<int32_t, int32_t, int32_t, int, bool>, std::unique_ptr<plan>> plans_;
};

}  // namespace coserve::gpu
