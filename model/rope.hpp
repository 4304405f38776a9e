// RoPE inverse frequencies of a model config (model/rope.cpp), shared by the CPU forward pass and
// the CUDA executor, which uploads them.
#pragma once

#include <vector>

#include "model/config.hpp"

namespace coserve {

// One inverse frequency per rotated pair (rotary_dim / 2): default, llama3, linear, yarn and
// longrope scaling as transformers computes them, or GGUF's rope_freqs.weight divisors. longrope:
// the short factors' table unless long_factors.
std::vector<float> rope_inv_freq(const model_config& c, bool long_factors = false);

}  // namespace coserve
