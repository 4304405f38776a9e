// Host cost of planning one step's batch metadata (gpu/batch_plan.hpp), the part of the CUDA
// executor's per-step CPU work that runs without a device. Prints one JSON object per batch size;
// in a build with the CUDA executor also the cost of FlashInfer's plan made from it
// (plan_flashinfer, eager and CUDA-graph mode; --attention-backend flashinfer adds it per step).
// FlashInfer's planner asks the device's compute capability for small query tiles: on a host
// without one that query fails at once, on a GPU it is a cached attribute read.
//
//   bench_batch_plan [--context 4096] [--iters 2000]
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "gpu/batch_plan.hpp"
#if defined(COSERVE_BENCH_FLASHINFER)
#include "gpu/flashinfer_attention.hpp"
#endif

using namespace coserve;

int main(int argc, char** argv) {
  int32_t context = 4096, iters = 2000;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    if (a == "--context") context = std::atoi(argv[i + 1]);
    if (a == "--iters") iters = std::atoi(argv[i + 1]);
  }
  for (int32_t batch : {1, 16, 64, 256}) {
    std::vector<scheduled_seq> seqs;
    const int32_t blocks = (context + 16) / 16;
    for (int32_t i = 0; i < batch; ++i) {
      scheduled_seq s;
      s.seq_id = seq_id_t(i);
      s.tokens = {k_token_from_last_step};
      s.start_pos = context - 1;
      for (int32_t b = 0; b < blocks; ++b) s.block_table.push_back(i * blocks + b);
      s.sample = true;
      seqs.push_back(std::move(s));
    }
    gpu::batch_plan_options opt{16, 8, 4, 132, 32};  // Llama-3-8B on an H100
    size_t sink = 0;
    const auto t0 = std::chrono::steady_clock::now();
    for (int32_t it = 0; it < iters; ++it) {
      auto p = gpu::plan_batch(seqs, opt);
      sink += p.ok() ? p->work.size() + p->block_tables.size() : 0;
    }
    const double us =
        std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count() /
        iters;
    std::printf(
        "{\"bench\":\"plan_batch\",\"batch\":%d,\"context\":%d,\"us_per_step\":%.2f,\"sink\":%zu}"
        "\n",
        batch, context, us, sink);
#if defined(COSERVE_BENCH_FLASHINFER)
    if (gpu::flashinfer_built()) {
      auto p = gpu::plan_batch(seqs, opt);
      if (!p) return 1;
      for (const bool graph : {false, true}) {
        gpu::fi_options fo;
        fo.num_qo_heads = 32;
        fo.num_kv_heads = 8;
        fo.head_dim = 128;
        fo.num_sms = 132;
        fo.cuda_graph = graph;
        size_t fsink = 0;
        gpu::fi_schedule sch;  // reused across steps, as the executor does
        const auto f0 = std::chrono::steady_clock::now();
        for (int32_t it = 0; it < iters; ++it) {
          const bool ok = gpu::plan_flashinfer(*p, fo, sch).ok();
          fsink += ok ? size_t(sch.padded_batch_size) + sch.kv_indices.size() : 0;
        }
        const double fus =
            std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - f0)
                .count() /
            iters;
        // The same plans into a fresh schedule each step (new arrays every time), for comparison.
        const auto n0 = std::chrono::steady_clock::now();
        for (int32_t it = 0; it < iters; ++it) {
          auto fresh = gpu::plan_flashinfer(*p, fo);
          fsink += fresh.ok() ? size_t(fresh->padded_batch_size) + fresh->kv_indices.size() : 0;
        }
        const double nus =
            std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - n0)
                .count() /
            iters;
        std::printf(
            "{\"bench\":\"plan_flashinfer\",\"cuda_graph\":%s,\"batch\":%d,\"context\":%d,"
            "\"us_per_step\":%.2f,\"us_per_step_fresh_arrays\":%.2f,\"sink\":%zu}\n",
            graph ? "true" : "false", batch, context, fus, nus, fsink);
      }
    }
#endif
  }
  return 0;
}
