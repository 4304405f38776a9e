// The single CUDA translation unit of the kernel families (one .cu keeps nvcc time low). Each
// family lives in its own header under gpu/kernels/ with a kernels section and a launchers section;
// the launchers are declared for host code in gpu/kernels.hpp.
#include "gpu/kernels/attention.cuh"
#include "gpu/kernels/dummy_init.cuh"
#include "gpu/kernels/embedding.cuh"
#include "gpu/kernels/gemv.cuh"
#include "gpu/kernels/logit_edits.cuh"
#include "gpu/kernels/quantize_fp8.cuh"
#include "gpu/kernels/rmsnorm.cuh"
#include "gpu/kernels/rope_kv.cuh"
#include "gpu/kernels/sampling.cuh"
#include "gpu/kernels/silu_mul.cuh"
#include "gpu/kernels/token_bitmask.cuh"
