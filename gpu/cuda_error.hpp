// CUDA and cuBLASLt status codes turned into coserve::error values. Library code never exits on a
// CUDA failure: a server reports it to the request that hit it and keeps serving the others.
#pragma once

#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include <string>

#include "runtime/expected.hpp"

namespace coserve::gpu {

// code "cuda"; the message names the call that failed and CUDA's own description.
inline error cuda_error(cudaError_t status, const char* what) {
  return make_error("cuda", std::string(what) + ": " + cudaGetErrorName(status) + " (" +
                                cudaGetErrorString(status) + ")");
}

inline result<void> cuda_check(cudaError_t status, const char* what) {
  if (status == cudaSuccess) return {};
  return cuda_error(status, what);
}

inline result<void> cublas_check(cublasStatus_t status, const char* what) {
  if (status == CUBLAS_STATUS_SUCCESS) return {};
  return make_error("cublas", std::string(what) + ": " + cublasLtGetStatusName(status) + " (" +
                                  cublasLtGetStatusString(status) + ")");
}

}  // namespace coserve::gpu

// Early return of an error from a function returning result<...>.
#define COSERVE_CUDA_TRY(expr)                                        \
  do {                                                                \
    if (auto coserve_try_r_ = (expr); !coserve_try_r_.ok())           \
      return std::move(coserve_try_r_).err();                         \
  } while (0)
