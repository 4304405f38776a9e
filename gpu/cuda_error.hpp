// CUDA and cuBLASLt status codes turned into coserve::error values. Library code never exits on a
// CUDA failure: a server reports it to the request that hit it and keeps serving the others.
#pragma once

#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include <string>

#include "base/result.hpp"
#include "model/executor.hpp"

namespace coserve::gpu {

// Errors that corrupt the CUDA context: every later call fails too, until the process ends.
inline bool is_sticky(cudaError_t status) noexcept {
  switch (status) {
    case cudaErrorIllegalAddress:
    case cudaErrorLaunchFailure:
    case cudaErrorHardwareStackError:
    case cudaErrorIllegalInstruction:
    case cudaErrorMisalignedAddress:
    case cudaErrorInvalidAddressSpace:
    case cudaErrorInvalidPc:
    case cudaErrorAssert:
    case cudaErrorECCUncorrectable:
    case cudaErrorNvlinkUncorrectable:
    case cudaErrorLaunchTimeout:
    case cudaErrorDevicesUnavailable:
    case cudaErrorNoDevice:
    case cudaErrorContextIsDestroyed:
      return true;
    default:
      return false;
  }
}

// code "cuda", or k_executor_fatal for a sticky error; the message names the call that failed and
// CUDA's own description.
inline error cuda_error(cudaError_t status, const char* what) {
  return make_error(is_sticky(status) ? k_executor_fatal : "cuda",
                    std::string(what) + ": " + cudaGetErrorName(status) + " (" +
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
#define COSERVE_CUDA_TRY(expr)                              \
  do {                                                      \
    if (auto coserve_try_r_ = (expr); !coserve_try_r_.ok()) \
      return std::move(coserve_try_r_).err();               \
  } while (0)
