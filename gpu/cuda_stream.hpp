// cuda_stream and event: owning, move-only handles to a cudaStream_t / cudaEvent_t. Each CUDA
// executor owns its CUDA stream(s); work on one runs in issue order, and nothing here synchronizes
// implicitly. ("Stream" alone, elsewhere in the project, is a request's output stream.)
#pragma once

#include <cuda_runtime_api.h>

#include <utility>

#include "gpu/cuda_error.hpp"

namespace coserve::gpu {

class cuda_stream {
 public:
  cuda_stream() = default;
  ~cuda_stream() { reset(); }
  cuda_stream(cuda_stream&& o) noexcept : s_(std::exchange(o.s_, nullptr)) {}
  cuda_stream& operator=(cuda_stream&& o) noexcept {
    if (this != &o) {
      reset();
      s_ = std::exchange(o.s_, nullptr);
    }
    return *this;
  }
  cuda_stream(const cuda_stream&) = delete;
  cuda_stream& operator=(const cuda_stream&) = delete;

  // A non-blocking stream: it does not synchronize with the legacy default stream.
  static result<cuda_stream> create() {
    cuda_stream s;
    COSERVE_CUDA_TRY(cuda_check(cudaStreamCreateWithFlags(&s.s_, cudaStreamNonBlocking),
                                "cudaStreamCreateWithFlags"));
    return s;
  }
  void reset() noexcept {
    if (s_ != nullptr) (void)cudaStreamDestroy(s_);
    s_ = nullptr;
  }
  cudaStream_t get() const noexcept { return s_; }

  // Blocks the calling thread until the CUDA stream drains. Only for tests, setup (graph capture)
  // and shutdown; the executor's serving path completes steps through async_wait
  // (gpu/async_wait.hpp).
  result<void> synchronize() const {
    return cuda_check(cudaStreamSynchronize(s_), "cudaStreamSynchronize");
  }

 private:
  cudaStream_t s_ = nullptr;
};

class event {
 public:
  event() = default;
  ~event() { reset(); }
  event(event&& o) noexcept : e_(std::exchange(o.e_, nullptr)) {}
  event& operator=(event&& o) noexcept {
    if (this != &o) {
      reset();
      e_ = std::exchange(o.e_, nullptr);
    }
    return *this;
  }
  event(const event&) = delete;
  event& operator=(const event&) = delete;

  // timing == false gives the cheaper event used only for ordering between streams.
  static result<event> create(bool timing = false) {
    event e;
    COSERVE_CUDA_TRY(cuda_check(
        cudaEventCreateWithFlags(&e.e_, timing ? cudaEventDefault : cudaEventDisableTiming),
        "cudaEventCreateWithFlags"));
    return e;
  }
  void reset() noexcept {
    if (e_ != nullptr) (void)cudaEventDestroy(e_);
    e_ = nullptr;
  }
  cudaEvent_t get() const noexcept { return e_; }

  result<void> record(cudaStream_t s) const {
    return cuda_check(cudaEventRecord(e_, s), "cudaEventRecord");
  }
  // Makes `s` wait for this event without blocking the host.
  result<void> make_wait(cudaStream_t s) const {
    return cuda_check(cudaStreamWaitEvent(s, e_, 0), "cudaStreamWaitEvent");
  }
  // Milliseconds between two recorded timing events (both must have completed).
  static result<float> elapsed_ms(const event& start, const event& stop) {
    float ms = 0.0f;
    COSERVE_CUDA_TRY(
        cuda_check(cudaEventElapsedTime(&ms, start.e_, stop.e_), "cudaEventElapsedTime"));
    return ms;
  }

 private:
  cudaEvent_t e_ = nullptr;
};

// Number of visible CUDA devices; 0 when there is no driver or no device (never an error).
inline int device_count() noexcept {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    (void)cudaGetLastError();  // clear the sticky "no device" status
    return 0;
  }
  return n;
}

}  // namespace coserve::gpu
