// GGUF files (llama.cpp's model format), read in place from a private read-only mapping.
//
// Layout (little-endian): magic "GGUF", u32 version (2 or 3), u64 tensor count, u64 metadata
// count; the metadata key/value pairs (key: u64 length + bytes; value: u32 type + payload, arrays
// as u32 element type + u64 count + elements); the tensor infos (name, u32 dimension count, u64
// dimensions with the contiguous one first, u32 ggml type, u64 offset into the data section);
// padding to `general.alignment` (default 32); the data section.
//
// Every malformation (truncated file, a count or length past the end, bad offsets, overlapping or
// misaligned tensors, a dimension product that overflows, an unknown value or tensor type, nested
// arrays, duplicate keys or names) is an error value naming the file and what is wrong, never a
// crash: the parser bounds every read by the bytes that remain before it allocates.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/result.hpp"
#include "model/dtype.hpp"

namespace coserve {

// Metadata value types (gguf_type in ggml).
enum class gguf_kind : uint32_t {
  u8 = 0,
  i8 = 1,
  u16 = 2,
  i16 = 3,
  u32 = 4,
  i32 = 5,
  f32 = 6,
  boolean = 7,
  string = 8,
  array = 9,
  u64 = 10,
  i64 = 11,
  f64 = 12,
};
std::string_view gguf_kind_name(gguf_kind k) noexcept;

// One metadata value. Scalars: the integer kinds and bool in `i` (u64 values above INT64_MAX
// are kept in `u`), floats in `f`; strings view the mapped file. Arrays (of scalars or strings,
// one level deep) keep their elements in `ints` (UINT64 elements as their bit pattern: cast them
// back to uint64_t), `floats` or `strings` by element kind.
struct gguf_value {
  gguf_kind kind = gguf_kind::u8;
  gguf_kind elem = gguf_kind::u8;  // arrays: element kind
  int64_t i = 0;
  uint64_t u = 0;
  double f = 0;
  std::string_view str;
  std::vector<int64_t> ints;
  std::vector<double> floats;
  std::vector<std::string_view> strings;
  uint64_t count = 0;  // arrays: element count

  bool is_integer() const noexcept;
  bool is_number() const noexcept {
    return is_integer() || kind == gguf_kind::f32 || kind == gguf_kind::f64;
  }
};

// ggml tensor types this reader accepts.
enum class ggml_type : uint32_t {
  f32 = 0,
  f16 = 1,
  q4_0 = 2,
  q4_1 = 3,
  q5_0 = 6,
  q5_1 = 7,
  q8_0 = 8,
  q2_k = 10,
  q3_k = 11,
  q4_k = 12,
  q5_k = 13,
  q6_k = 14,
  iq4_nl = 20,
  iq4_xs = 23,
  bf16 = 30,
};
// The ggml type's name ("F32", "Q4_K", ...); "type N" for numbers this reader does not know.
std::string ggml_type_name(uint32_t t);
// The weight dtype a ggml type maps to; false for a type this reader does not support.
bool ggml_to_dtype(uint32_t t, dtype& out) noexcept;

struct gguf_tensor {
  std::string name;
  std::vector<int64_t> dims;  // GGUF order: dims[0] is the contiguous dimension
  uint32_t ggml = 0;          // ggml type number
  dtype type = dtype::f32;
  uint64_t offset = 0;  // into the data section
  size_t nbytes = 0;
  const std::byte* data = nullptr;

  int64_t numel() const noexcept;
  // Rows and columns of the row-major matrix the tensor is (columns = dims[0], rows = the rest).
  int64_t cols() const noexcept { return dims.empty() ? 1 : dims[0]; }
  int64_t rows() const noexcept { return dims.empty() ? 1 : numel() / dims[0]; }
};

class gguf_file {
 public:
  // Maps and parses `path`. Errors: "io" (cannot open/map), "invalid_model" (malformed),
  // "unsupported" (a tensor type or value type this reader does not handle), naming the file.
  static result<std::shared_ptr<const gguf_file>> open(const std::string& path);
  // Parses an image held in memory; views point into it (the caller keeps it alive).
  static result<std::shared_ptr<const gguf_file>> parse(const std::byte* base, size_t size,
                                                        const std::string& path);

  gguf_file() = default;
  gguf_file(const gguf_file&) = delete;
  gguf_file& operator=(const gguf_file&) = delete;
  ~gguf_file();

  const std::string& path() const noexcept { return path_; }
  uint32_t version() const noexcept { return version_; }
  uint64_t alignment() const noexcept { return alignment_; }
  size_t file_size() const noexcept { return size_; }
  const std::map<std::string, gguf_value, std::less<>>& metadata() const noexcept { return kv_; }
  const std::vector<gguf_tensor>& tensors() const noexcept { return tensors_; }

  const gguf_value* find(std::string_view key) const;
  const gguf_tensor* tensor(std::string_view name) const;

  // Typed lookups: nullopt when the key is absent; an error naming the key when it has another
  // type.
  result<std::optional<std::string>> get_string(std::string_view key) const;
  result<std::optional<int64_t>> get_int(std::string_view key) const;
  result<std::optional<double>> get_float(std::string_view key) const;  // any numeric kind
  result<std::optional<bool>> get_bool(std::string_view key) const;

  // Drops the mapped file's resident pages inside [p, p + n) from this process (madvise
  // MADV_DONTNEED on the whole pages there); a later read maps them from the file again. Nothing
  // happens for a range outside the mapping or a file parsed from memory.
  void release_pages(const void* p, size_t n) const noexcept;

 private:
  std::string path_;
  void* map_ = nullptr;
  size_t map_size_ = 0;
  size_t size_ = 0;
  uint32_t version_ = 0;
  uint64_t alignment_ = 32;
  std::map<std::string, gguf_value, std::less<>> kv_;
  std::vector<gguf_tensor> tensors_;
  std::map<std::string, size_t, std::less<>> by_name_;
};

// Whether `path` is a regular file starting with the GGUF magic.
bool is_gguf_file(const std::string& path);

}  // namespace coserve
