// Helpers shared by the model tests: a temporary folder, tiny demo models, step plans.
#pragma once

#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "model/cpu_executor.hpp"
#include "model/demo_model.hpp"

namespace coserve::test {

// A fresh folder under the system temp dir, removed on destruction.
class temp_dir {
 public:
  explicit temp_dir(const std::string& tag) {
    static std::atomic<int> counter{0};  // test-only: unique names within one process
    path_ = std::filesystem::temp_directory_path() /
            ("coserve-" + tag + "-" + std::to_string(::getpid()) + "-" + std::to_string(counter++) +
             "-" + std::to_string(std::chrono::steady_clock::now().time_since_epoch().count()));
    std::filesystem::create_directories(path_);
  }
  ~temp_dir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  temp_dir(const temp_dir&) = delete;
  temp_dir& operator=(const temp_dir&) = delete;
  std::string str() const { return path_.string(); }
  std::string file(const std::string& name) const { return (path_ / name).string(); }

 private:
  std::filesystem::path path_;
};

inline void write_file(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << bytes;
}

// A tiny fp32 Llama (GQA) without tokenizer files: fast enough for sanitizer runs.
inline demo_options tiny_options(uint64_t seed = 7) {
  demo_options o;
  o.seed = seed;
  o.copy_tokenizer = false;
  o.vocab_size = 96;
  o.hidden_size = 32;
  o.intermediate_size = 48;
  o.num_layers = 2;
  o.num_heads = 4;
  o.num_kv_heads = 2;
  o.weight_dtype = dtype::f32;
  o.max_position_embeddings = 256;
  return o;
}

inline std::vector<int32_t> block_range(int32_t first, int32_t count) {
  std::vector<int32_t> b;
  for (int32_t i = 0; i < count; ++i) b.push_back(first + i);
  return b;
}

inline new_seq greedy_seq(seq_id_t id, std::vector<int32_t> prompt) {
  new_seq n;
  n.seq_id = id;
  n.prompt_ids = std::move(prompt);
  n.params.temperature = 0.0f;
  return n;
}

inline float max_abs_diff(const std::vector<float>& a, const std::vector<float>& b) {
  float m = a.size() == b.size() ? 0.0f : INFINITY;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) m = std::max(m, std::abs(a[i] - b[i]));
  return m;
}

}  // namespace coserve::test
