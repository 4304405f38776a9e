// Per-row parameters of device sampling (gpu/kernels/sampling.cuh). Plain C++ so the CPU reference
// and host planning use the same struct. Device layout (40 bytes, no padding):
//   temperature f32 | top_p f32 | min_p f32 | top_k i32 | seed u64 | counter u64 | top_n i32 | 0 i32
// counter: the number of tokens the sequence has generated so far, so each step draws fresh,
// reproducible uniforms for a seeded request. top_n: top logprobs wanted for the row (0-20).
#pragma once

#include <cstdint>

namespace coserve::gpu {

struct sample_row_params {
  float temperature;
  float top_p;
  float min_p;
  int32_t top_k;
  uint64_t seed;
  uint64_t counter;
  int32_t top_n = 0;
  int32_t reserved = 0;
};
static_assert(sizeof(sample_row_params) == 40);

}  // namespace coserve::gpu
