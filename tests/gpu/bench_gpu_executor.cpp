// Decode and prefill throughput of the CUDA executor on an 8B-shaped dummy model (Llama-3-8B dims
// by default, random weights generated on the device). Prints one JSON object per measurement.
//
//   bench_gpu_executor [--batches 1,16,64,256] [--prompt 128[,1024,...]] [--steps 64]
//   [--prefill-tokens 8192]
//                      [--hbm-tbps 3.35] [--layers 32] [--vocab 128256] [--enforce-eager 0|1]
//                      [--quantization fp8] [--kv-cache-dtype auto|fp8|fp8_e5m2] [--tune-gemms 0|1]
//                      [--sampling greedy|sampled|both] [--tensor-parallel-size N]
//                      [--attention-backend native|flashinfer|both] [--fp8-gemv-max-rows 0..8]
//                      [--bf16-gemv-max-rows 0..8]
//
// --attention-backend both runs the whole list with the native kernels, then again with
// FlashInfer's (one executor at a time, the same model shape and seed): the two backends side by
// side in one run; every line names its backend ("attention").
// --prompt takes a list: every (prompt, sampling, batch) is run in turn. "sampled" requests draw
// with temperature 1, top-p 0.9 and repetition penalty 1.1 (seeded), as the sampled rows
// ask.
//
// Roofline: a decode step must read every streamed weight once (the embedding table is gathered,
// not streamed) plus the KV of every sequence, so step_ms >= bytes_read_per_step / HBM bandwidth;
// "roofline_fraction" = that bound / measured step. Decode runs as the server runs it, two steps in
// flight; "gpu_idle_fraction" is the device's idle time between consecutive steps over its busy +
// idle time, from CUDA events (gpu_step_timeline). With --tensor-parallel-size N the bytes are rank
// 0's (its share of every layer, its KV heads, and the whole LM head it alone computes), the
// slowest rank's reads, and the step includes the NCCL all-reduces.
// Exits 0 with a message when no CUDA device is present.
#include <asio/io_context.hpp>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <sstream>
#include <string>
#include <vector>

#include "gpu/cuda_stream.hpp"
#include "gpu/gpu_executor.hpp"
#include "gpu/rank_config.hpp"
#include "model/tensor_parallel.hpp"

using namespace coserve;
using clock_type = std::chrono::steady_clock;

namespace {

std::vector<int32_t> parse_list(const char* s) {
  std::vector<int32_t> v;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ',')) v.push_back(std::atoi(item.c_str()));
  return v;
}

// Bytes of weights a decode step streams: every layer's matrices and norms, the final norm and the
// LM head. The embedding table is gathered (a few rows per step), so it is not counted.
// fp8: the layer matrices at one byte per weight plus a 4-byte scale per row; norms, the LM head
// (streamed) and the embedding (counted once, as before) in bf16.
double weight_bytes(const model_config& c, bool fp8) {
  const double H = c.hidden_size, I = c.intermediate_size, D = c.head_dim, V = c.vocab_size;
  const double qkv_rows = (c.num_attention_heads + 2.0 * c.num_key_value_heads) * D;
  const double matrices = H * qkv_rows + H * c.num_attention_heads * D + 3.0 * H * I;
  const double rows = qkv_rows + H + 2.0 * I + H;
  const double per_layer = fp8 ? matrices + 4.0 * rows + 2.0 * 2.0 * H : 2.0 * (matrices + 2.0 * H);
  return c.num_hidden_layers * per_layer + 2.0 * (V * H + H);
}

// Bytes of K and V (bf16) a decode step reads: every sequence's `context` positions, every layer.
double kv_bytes_per_step(const model_config& c, int32_t batch, int32_t context, double elem_bytes) {
  return 2.0 * elem_bytes * double(c.num_hidden_layers) * c.num_key_value_heads * c.head_dim *
         double(batch) * context;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<int32_t> batches{1, 16, 64, 256}, prompts{128};
  std::vector<std::string> samplings{"greedy"};
  int32_t steps = 64, prefill_tokens = 8192;
  double hbm_tbps = 3.35;
  bool eager = false, tune = true;
  gpu::gemv_rows gemv;  // gpu_executor_options::gemv
  int32_t tp = 1;
  std::string quantization, kv_dtype = "auto";
  std::vector<std::string> backends{"native"};
  model_config c;  // Llama-3-8B
  c.hidden_size = 4096;
  c.intermediate_size = 14336;
  c.num_hidden_layers = 32;
  c.num_attention_heads = 32;
  c.num_key_value_heads = 8;
  c.head_dim = 128;
  c.vocab_size = 128256;
  c.max_position_embeddings = 8192;
  c.rms_norm_eps = 1e-5f;
  c.rope_theta = 500000.0f;
  c.rope_scaling.kind = rope_kind::llama3;
  c.rope_scaling.factor = 8.0f;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    if (a == "--batches")
      batches = parse_list(argv[i + 1]);
    else if (a == "--prompt")
      prompts = parse_list(argv[i + 1]);
    else if (a == "--sampling") {
      const std::string v = argv[i + 1];
      if (v != "greedy" && v != "sampled" && v != "both") {
        std::fprintf(stderr, "error: --sampling %s is not greedy, sampled or both\n", v.c_str());
        return 1;
      }
      samplings =
          v == "both" ? std::vector<std::string>{"greedy", "sampled"} : std::vector<std::string>{v};
    } else if (a == "--steps")
      steps = std::atoi(argv[i + 1]);
    else if (a == "--prefill-tokens")
      prefill_tokens = std::atoi(argv[i + 1]);
    else if (a == "--hbm-tbps")
      hbm_tbps = std::atof(argv[i + 1]);
    else if (a == "--layers")
      c.num_hidden_layers = std::atoi(argv[i + 1]);
    else if (a == "--vocab")
      c.vocab_size = std::atoi(argv[i + 1]);
    else if (a == "--enforce-eager")
      eager = std::atoi(argv[i + 1]) != 0;
    else if (a == "--quantization")
      quantization = argv[i + 1];
    else if (a == "--kv-cache-dtype")
      kv_dtype = argv[i + 1];
    else if (a == "--tune-gemms")
      tune = std::atoi(argv[i + 1]) != 0;
    else if (a == "--fp8-gemv-max-rows")
      gemv.fp8 = std::atoi(argv[i + 1]);
    else if (a == "--bf16-gemv-max-rows")
      gemv.bf16 = std::atoi(argv[i + 1]);
    else if (a == "--tensor-parallel-size")
      tp = std::atoi(argv[i + 1]);
    else if (a == "--attention-backend") {
      const std::string v = argv[i + 1];
      if (v != "native" && v != "flashinfer" && v != "both") {
        std::fprintf(stderr, "error: --attention-backend %s is not native, flashinfer or both\n",
                     v.c_str());
        return 1;
      }
      backends = v == "both" ? std::vector<std::string>{"native", "flashinfer"}
                             : std::vector<std::string>{v};
    }
  }
  if (gpu::device_count() == 0) {
    std::printf("{\"skipped\":\"no CUDA device\"}\n");
    return 0;
  }
  for (const std::string& backend : backends) {
    gpu::gpu_executor_options o;
    o.attention_backend = backend;
    o.config = c;
    o.load_format = "dummy";
    o.max_num_tokens = std::max(prefill_tokens, 8192);
    o.max_num_seqs = 256;
    o.enforce_eager = eager;
    o.tune_gemms = tune;
    o.quantization = quantization;
    o.gemv = gemv;
    o.tensor_parallel_size = tp;
    if (!parse_kv_cache_dtype(kv_dtype, o.kv_cache_dtype)) {
      std::fprintf(stderr,
                   "error: --kv-cache-dtype %s is not auto, bf16, fp8, fp8_e4m3 or fp8_e5m2\n",
                   kv_dtype.c_str());
      return 1;
    }
    auto t0 = clock_type::now();
    auto ex = gpu::make_gpu_executor(o);
    if (!ex) {
      std::fprintf(stderr, "error: %s\n", ex.err().message.c_str());
      return 1;
    }
    const double load_s = std::chrono::duration<double>(clock_type::now() - t0).count();
    const auto info = (*ex)->info();
    const model_config rank0 = tp > 1 ? gpu::rank_config(c, shard_shape(c, 0, tp)) : c;
    const double wbytes = weight_bytes(rank0, quantization == "fp8");
    const double bound_ms = wbytes / (hbm_tbps * 1e12) * 1e3;
    std::printf(
        "{\"attention\":\"%s\",\"device\":\"%s\",\"weight_bytes\":%.0f,\"kv_blocks\":%d,\"load_s\":"
        "%.2f,"
        "\"weights_read_ms\":%.3f}\n",
        backend.c_str(), info.device.c_str(), wbytes, info.num_kv_blocks, load_s, bound_ms);

    const int32_t bs = info.block_size;
    seq_id_t next_id = 1;
    for (int32_t prompt : prompts)
      for (const std::string& sampling : samplings)
        for (int32_t batch : batches) {
          const int32_t blocks_per_seq = (prompt + steps + bs - 1) / bs;
          if (int64_t(batch) * blocks_per_seq > info.num_kv_blocks) {
            std::printf(
                "{\"attention\":\"%s\",\"bench\":\"decode\",\"batch\":%d,\"prompt\":%d,"
                "\"skipped\":\"not enough KV blocks\"}\n",
                backend.c_str(), batch, prompt);
            continue;
          }
          std::vector<scheduled_seq> seqs;
          step_plan p;
          for (int32_t i = 0; i < batch; ++i) {
            new_seq n;
            n.seq_id = next_id;
            n.params.temperature = 0.0f;
            if (sampling == "sampled") {
              n.params.temperature = 1.0f;
              n.params.top_p = 0.9f;
              n.params.repetition_penalty = 1.1f;
              n.seed = uint64_t(next_id);
            }
            p.new_seqs.push_back(n);
            scheduled_seq s;
            s.seq_id = next_id++;
            s.tokens.assign(size_t(prompt), 0);
            for (int32_t t = 0; t < prompt; ++t)
              s.tokens[size_t(t)] = (t * 7919 + i) % c.vocab_size;
            s.block_table.resize(size_t(blocks_per_seq));
            for (int32_t b = 0; b < blocks_per_seq; ++b)
              s.block_table[size_t(b)] = i * blocks_per_seq + b;
            s.sample = true;
            seqs.push_back(s);
          }
          // Prefill in groups that fit max_num_tokens; timed as prefill throughput, after an
          // untimed warm-up prefill of the same shape (its sequence is dropped at once).
          const int32_t group = std::max(1, o.max_num_tokens / prompt);
          {
            step_plan w;
            new_seq n = p.new_seqs[0];
            n.seq_id = next_id++;
            w.new_seqs.push_back(n);
            scheduled_seq s = seqs[0];
            s.seq_id = n.seq_id;
            w.seqs.push_back(s);
            w.finished.push_back(n.seq_id);
            if (auto r = (*ex)->execute(w); !r) {
              std::fprintf(stderr, "error: %s\n", r.err().message.c_str());
              return 1;
            }
          }
          double prefill_s = 0.0;
          for (int32_t g = 0; g < batch; g += group) {
            step_plan q;
            for (int32_t i = g; i < std::min(batch, g + group); ++i) {
              q.new_seqs.push_back(p.new_seqs[size_t(i)]);
              q.seqs.push_back(seqs[size_t(i)]);
            }
            auto ts = clock_type::now();
            auto r = (*ex)->execute(q);
            prefill_s += std::chrono::duration<double>(clock_type::now() - ts).count();
            if (!r) {
              std::fprintf(stderr, "error: %s\n", r.err().message.c_str());
              return 1;
            }
          }
          std::printf(
              "{\"attention\":\"%s\",\"bench\":\"prefill\",\"batch\":%d,\"prompt\":%d,\"tokens_per_"
              "s\":%.1f}\n",
              backend.c_str(), batch, prompt, double(batch) * prompt / prefill_s);
          // Decode as the server runs it: step N+1 launched before step N is collected (its inputs
          // are N's sampled ids, on the device), so two steps are in flight. The first two steps
          // are warm-up.
          asio::io_context io;
          int64_t completed = 0;
          auto launch = [&](int32_t st) {
            step_plan d;
            d.step_id = uint64_t(st + 1);
            for (int32_t i = 0; i < batch; ++i) {
              scheduled_seq s = seqs[size_t(i)];
              s.tokens = {k_token_from_last_step};
              s.start_pos = prompt + st;
              d.seqs.push_back(std::move(s));
            }
            if (st == steps - 1)
              for (int32_t i = 0; i < batch; ++i) d.finished.push_back(seqs[size_t(i)].seq_id);
            (*ex)->launch(std::move(d), io.get_executor(), [&completed] { ++completed; });
          };
          const int32_t warm = std::min(2, steps - 1);
          clock_type::time_point ts = clock_type::now();
          launch(0);
          for (int32_t st = 0; st < steps; ++st) {
            if (st + 1 < steps) launch(st + 1);
            while (completed <= st) io.run_one();
            auto r = (*ex)->collect();
            if (!r) {
              std::fprintf(stderr, "error: %s\n", r.err().message.c_str());
              return 1;
            }
            if (st + 1 == warm) {
              ts = clock_type::now();
              gpu::reset_gpu_step_timeline(**ex);
            }
          }
          const double decode_s = std::chrono::duration<double>(clock_type::now() - ts).count();
          const double step_ms = decode_s / std::max(1, steps - warm) * 1e3;
          const gpu::step_timeline tl = gpu::gpu_step_timeline(**ex).value_or(gpu::step_timeline{});
          const double kv_read = kv_bytes_per_step(rank0, batch, prompt + steps / 2,
                                                   double(dtype_size(o.kv_cache_dtype)));
          const double read_ms = (wbytes + kv_read) / (hbm_tbps * 1e12) * 1e3;
          std::printf(
              "{\"attention\":\"%s\",\"bench\":\"decode\",\"sampling\":\"%s\",\"batch\":%d,"
              "\"context\":%d,\"step_ms\":%.3f,"
              "\"tokens_per_s\":%.1f,\"bytes_read_per_step\":%.0f,\"roofline_fraction\":%.3f,"
              "\"device_busy_ms\":%.3f,"
              "\"gpu_idle_fraction\":%.4f,\"max_idle_ms\":%.3f,\"graph_steps\":%lld,\"steps\":%lld}"
              "\n",
              backend.c_str(), sampling.c_str(), batch, prompt + steps, step_ms,
              batch * 1e3 / step_ms, wbytes + kv_read, read_ms / step_ms,
              tl.steps ? tl.busy_ms / double(tl.steps) : 0.0,
              tl.busy_ms + tl.idle_ms > 0 ? tl.idle_ms / (tl.busy_ms + tl.idle_ms) : 0.0,
              tl.max_idle_ms, static_cast<long long>(tl.graph_steps),
              static_cast<long long>(tl.steps));
        }
  }  // backends: the executor is released before the next one loads
  return 0;
}
