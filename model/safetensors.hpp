// safetensors reading (mmap, RAII) and writing. A file is: u64 little-endian header length N,
// N bytes of JSON {"name": {"dtype", "shape", "data_offsets": [begin, end]}, "__metadata__":
// {...}}, then the data section that offsets are relative to. Sharded checkpoints list their files
// in model.safetensors.index.json ({"weight_map": {"tensor": "file"}}).
//
// Every malformation (truncated file, bad header, offsets out of range, size/shape mismatch,
// unsupported dtype, missing tensor) is an error value naming the file and tensor, never a crash.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "base/result.hpp"
#include "model/dtype.hpp"

namespace coserve {

// A tensor inside a mapped file. `data` stays valid while the owning file/set lives.
struct tensor_view {
  std::string name;
  std::string file;  // path of the file holding it (for messages)
  dtype type = dtype::f32;
  std::vector<int64_t> shape;
  const std::byte* data = nullptr;
  size_t nbytes = 0;

  int64_t numel() const noexcept {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    return n;
  }
};

std::string shape_string(const std::vector<int64_t>& shape);

// One mapped .safetensors file. Move-only; unmaps on destruction.
class safetensors_file {
 public:
  static result<safetensors_file> open(const std::string& path);

  safetensors_file() = default;
  safetensors_file(safetensors_file&& o) noexcept;
  safetensors_file& operator=(safetensors_file&& o) noexcept;
  safetensors_file(const safetensors_file&) = delete;
  safetensors_file& operator=(const safetensors_file&) = delete;
  ~safetensors_file();

  const std::string& path() const noexcept { return path_; }
  const std::map<std::string, tensor_view>& tensors() const noexcept { return tensors_; }
  const tensor_view* find(const std::string& name) const;
  void release_pages(const void* p, size_t n) const noexcept;  // as safetensors_set::release_pages

 private:
  void unmap() noexcept;

  std::string path_;
  void* map_ = nullptr;
  size_t map_size_ = 0;
  std::map<std::string, tensor_view> tensors_;
};

// Parses a safetensors image held in memory (`size` bytes at `base`: header length, header, data
// section) with the checks open() applies; the views point into that memory. `path` names the
// image in error messages.
result<std::map<std::string, tensor_view>> parse_safetensors(const std::byte* base, size_t size,
                                                             const std::string& path);

// All the safetensors files of a model folder: model.safetensors, or the shards named by
// model.safetensors.index.json.
class safetensors_set {
 public:
  static result<safetensors_set> open_dir(const std::string& dir);

  // The tensor `name`, checked against `shape` when it is non-empty.
  result<const tensor_view*> get(const std::string& name,
                                 const std::vector<int64_t>& shape = {}) const;
  const tensor_view* find(const std::string& name) const;
  size_t size() const noexcept { return index_.size(); }
  std::vector<std::string> names() const;
  // Drops the resident pages of [p, p + n) (whole pages inside one mapped file) once a copy has
  // been made; reading them again faults them back in from the file.
  void release_pages(const void* p, size_t n) const noexcept;

 private:
  std::vector<std::unique_ptr<safetensors_file>> files_;
  std::map<std::string, const tensor_view*> index_;
  std::string dir_;
};

// madvise(MADV_DONTNEED) on the whole pages of [p, p + n) when they lie inside the file mapping
// [map, map + map_size); nothing otherwise. Used once weights have been copied out of a mapping.
void release_mapped_pages(const void* map, size_t map_size, const void* p, size_t n) noexcept;

// A tensor to write: raw little-endian bytes of `type`, numel(shape) * dtype_size(type) long.
struct tensor_data {
  std::string name;
  dtype type = dtype::f32;
  std::vector<int64_t> shape;
  std::vector<std::byte> bytes;
};

// Writes tensors (data in the given order, 8-byte aligned header) to path.
result<void> write_safetensors(const std::string& path, const std::vector<tensor_data>& tensors);

}  // namespace coserve
