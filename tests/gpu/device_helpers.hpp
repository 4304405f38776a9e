// Helpers for the device tests: skip (reported as skipped) without a device, and move host vectors
// to and from device buffers (these tests synchronize; library code never does).
#pragma once

#include <catch2/catch.hpp>
#include <random>
#include <vector>

#include "gpu/cuda_stream.hpp"
#include "gpu/device_buffer.hpp"
#include "model/dtype.hpp"
#include "tests/skip.hpp"

// Skips the current test case (ctest reports it as skipped) when no CUDA device is present.
#define COSERVE_REQUIRE_DEVICE_OR_SKIP()                                             \
  do {                                                                               \
    if (coserve::gpu::device_count() == 0)                                           \
      COSERVE_SKIP("no CUDA device on this machine (this test runs on a GPU host)"); \
  } while (0)

namespace coserve::gpu::test {

template <class T>
device_buffer upload(const std::vector<T>& v) {
  auto b = device_buffer::allocate(v.size() * sizeof(T) + 16);
  REQUIRE(b.ok());
  if (!v.empty())
    REQUIRE(cudaMemcpy(b->get(), v.data(), v.size() * sizeof(T), cudaMemcpyHostToDevice) ==
            cudaSuccess);
  return std::move(b.value());
}

template <class T>
std::vector<T> download(const device_buffer& b, size_t n) {
  std::vector<T> v(n);
  REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
  if (n != 0)
    REQUIRE(cudaMemcpy(v.data(), b.get(), n * sizeof(T), cudaMemcpyDeviceToHost) == cudaSuccess);
  return v;
}

inline std::vector<uint16_t> random_bf16(size_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 g(seed);
  std::uniform_real_distribution<float> d(-scale, scale);
  std::vector<uint16_t> v(n);
  for (auto& x : v) x = f32_to_bf16(d(g));
  return v;
}

// Largest |a - b| over bf16 vectors, in float.
inline float max_abs_diff(const std::vector<uint16_t>& a, const std::vector<uint16_t>& b) {
  float m = 0.0f;
  for (size_t i = 0; i < a.size(); ++i)
    m = std::max(m, std::fabs(bf16_to_f32(a[i]) - bf16_to_f32(b[i])));
  return m;
}

inline result<cuda_stream> make_stream() { return cuda_stream::create(); }

}  // namespace coserve::gpu::test
