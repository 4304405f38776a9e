// cublaslt_handle: owning, move-only cublasLtHandle_t. One per executor (a handle is not meant to
// be used from two host threads at once; the executor's thread is its only user).
#pragma once

#include <cublasLt.h>

#include <utility>

#include "gpu/cuda_error.hpp"

namespace coserve::gpu {

class cublaslt_handle {
 public:
  cublaslt_handle() = default;
  ~cublaslt_handle() { reset(); }
  cublaslt_handle(cublaslt_handle&& o) noexcept : h_(std::exchange(o.h_, nullptr)) {}
  cublaslt_handle& operator=(cublaslt_handle&& o) noexcept {
    if (this != &o) {
      reset();
      h_ = std::exchange(o.h_, nullptr);
    }
    return *this;
  }
  cublaslt_handle(const cublaslt_handle&) = delete;
  cublaslt_handle& operator=(const cublaslt_handle&) = delete;

  static result<cublaslt_handle> create() {
    cublaslt_handle h;
    COSERVE_CUDA_TRY(cublas_check(cublasLtCreate(&h.h_), "cublasLtCreate"));
    return h;
  }
  void reset() noexcept {
    if (h_ != nullptr) (void)cublasLtDestroy(h_);
    h_ = nullptr;
  }
  cublasLtHandle_t get() const noexcept { return h_; }

 private:
  cublasLtHandle_t h_ = nullptr;
};

}  // namespace coserve::gpu
