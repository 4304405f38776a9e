// device_buffer: an owning handle to one cudaMalloc allocation (move-only). Freed in the
// destructor; a failed free is ignored there because destructors cannot report (the context is
// being torn down).
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <utility>

#include "gpu/cuda_error.hpp"

namespace coserve::gpu {

class device_buffer {
 public:
  device_buffer() = default;
  ~device_buffer() { reset(); }
  device_buffer(device_buffer&& o) noexcept
      : ptr_(std::exchange(o.ptr_, nullptr)), bytes_(std::exchange(o.bytes_, 0)) {}
  device_buffer& operator=(device_buffer&& o) noexcept {
    if (this != &o) {
      reset();
      ptr_ = std::exchange(o.ptr_, nullptr);
      bytes_ = std::exchange(o.bytes_, 0);
    }
    return *this;
  }
  device_buffer(const device_buffer&) = delete;
  device_buffer& operator=(const device_buffer&) = delete;

  // Allocates `bytes` on the current device (contents undefined). Zero bytes gives an empty handle.
  static result<device_buffer> allocate(size_t bytes) {
    device_buffer b;
    if (bytes == 0) return b;
    void* p = nullptr;
    COSERVE_CUDA_TRY(cuda_check(cudaMalloc(&p, bytes), "cudaMalloc"));
    b.ptr_ = p;
    b.bytes_ = bytes;
    return b;
  }

  void reset() noexcept {
    if (ptr_ != nullptr) (void)cudaFree(ptr_);
    ptr_ = nullptr;
    bytes_ = 0;
  }

  void* get() const noexcept { return ptr_; }
  template <class T>
  T* as() const noexcept {
    return static_cast<T*>(ptr_);
  }
  size_t bytes() const noexcept { return bytes_; }
  bool empty() const noexcept { return ptr_ == nullptr; }

 private:
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
};

// pinned_buffer: page-locked host memory (cudaMallocHost) so cudaMemcpyAsync is truly asynchronous.
class pinned_buffer {
 public:
  pinned_buffer() = default;
  ~pinned_buffer() { reset(); }
  pinned_buffer(pinned_buffer&& o) noexcept
      : ptr_(std::exchange(o.ptr_, nullptr)), bytes_(std::exchange(o.bytes_, 0)) {}
  pinned_buffer& operator=(pinned_buffer&& o) noexcept {
    if (this != &o) {
      reset();
      ptr_ = std::exchange(o.ptr_, nullptr);
      bytes_ = std::exchange(o.bytes_, 0);
    }
    return *this;
  }
  pinned_buffer(const pinned_buffer&) = delete;
  pinned_buffer& operator=(const pinned_buffer&) = delete;

  static result<pinned_buffer> allocate(size_t bytes) {
    pinned_buffer b;
    if (bytes == 0) return b;
    void* p = nullptr;
    COSERVE_CUDA_TRY(cuda_check(cudaMallocHost(&p, bytes), "cudaMallocHost"));
    b.ptr_ = p;
    b.bytes_ = bytes;
    return b;
  }
  void reset() noexcept {
    if (ptr_ != nullptr) (void)cudaFreeHost(ptr_);
    ptr_ = nullptr;
    bytes_ = 0;
  }
  void* get() const noexcept { return ptr_; }
  template <class T>
  T* as() const noexcept {
    return static_cast<T*>(ptr_);
  }
  size_t bytes() const noexcept { return bytes_; }

 private:
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
};

}  // namespace coserve::gpu
