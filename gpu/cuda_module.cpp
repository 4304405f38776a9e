// The entry point of libcoserve_cuda.so, the CUDA executor built as a module: the coserve binary
// loads it with dlopen only when an engine is started on --device cuda, so a CPU-only process
// neither needs the CUDA libraries installed nor maps cuBLASLt (~140 MB resident). The module's
// references to the model layer resolve against the binary's exported symbols.
#include <memory>
#include <optional>

#include "gpu/gpu_executor.hpp"
#include "gpu/tp_peer.hpp"

// The sizes of what crosses the module boundary, as this module was compiled: the binary compares
// them with its own before calling in (a module built from other sources would read the options
// with another layout).
extern "C" __attribute__((visibility("default"))) uint64_t coserve_cuda_module_layout_v1() {
  return coserve::gpu::module_layout();
}

extern "C" __attribute__((visibility("default"))) void coserve_make_gpu_executor_v1(
    const coserve::gpu::gpu_executor_options* options,
    std::optional<coserve::result<std::unique_ptr<coserve::executor>>>* out) {
  out->emplace(coserve::gpu::make_gpu_executor(*options));
}

// A tensor-parallel rank other than 0 in its own process (mpirun ... --device cuda): runs until
// rank 0 stops it; *out gets the outcome.
extern "C" __attribute__((visibility("default"))) void coserve_run_gpu_tp_rank_v1(
    const std::string* model_dir, coserve::communicator* world, int32_t device,
    coserve::result<void>* out) {
  *out = coserve::gpu::run_remote_tp_rank(*model_dir, *world, device);
}
