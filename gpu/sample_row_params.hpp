// Per-row parameters of device sampling (gpu/kernels/sampling.cuh). Plain C++ so the CPU reference
// and host planning use the same struct. Device layout (40 bytes, no padding):
//   temperature f32 | top_p f32 | min_p f32 | top_k i32 | seed u64 | counter u64 | top_n i32 | 0
//   i32
// counter: the number of tokens the sequence has generated so far, so each step draws fresh,
// reproducible uniforms for a seeded request. top_n: top logprobs wanted for the row (0-20).
// penalty_row: the sequence's row of token counts on the device (gpu/logit_edit.hpp,
// launch_penalty_counts), or -1 when its penalties, if any, come as sparse edits; repetition,
// presence and frequency are then its penalties (1, 0, 0: none).
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
  int32_t penalty_row = -1;
  float repetition = 1.0f;
  float presence = 0.0f;
  float frequency = 0.0f;
  int32_t reserved = 0;
};
static_assert(sizeof(sample_row_params) == 56);

}  // namespace coserve::gpu
