// The entry point of libcoserve_cuda.so, the CUDA executor built as a module: the coserve binary
// loads it with dlopen only when an engine is started on --device cuda, so a CPU-only process
// neither needs the CUDA libraries installed nor maps cuBLASLt (~140 MB resident). The module's
// references to the model layer resolve against the binary's exported symbols.
#include <memory>
#include <optional>

#include "gpu/gpu_executor.hpp"

extern "C" __attribute__((visibility("default"))) void coserve_make_gpu_executor_v1(
    const coserve::gpu::gpu_executor_options* options,
    std::optional<coserve::result<std::unique_ptr<coserve::executor>>>* out) {
  out->emplace(coserve::gpu::make_gpu_executor(*options));
}
