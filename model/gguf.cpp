#include "model/gguf.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <limits>

#include "model/safetensors.hpp"

namespace coserve {
namespace {

constexpr uint64_t k_max_dims = 4;                    // GGML_MAX_DIMS
constexpr uint64_t k_max_string = uint64_t{1} << 30;  // no key or value needs more

error bad(const std::string& path, const std::string& what) {
  return make_error("invalid_model", path + ": " + what);
}

// A bounds-checked little-endian cursor over the file image.
struct reader {
  const std::byte* base;
  size_t size;
  size_t pos = 0;

  size_t left() const noexcept { return size - pos; }
  bool take(void* out, size_t n) noexcept {
    if (n > left()) return false;
    std::memcpy(out, base + pos, n);
    pos += n;
    return true;
  }
  template <typename T>
  bool get(T& v) noexcept {
    return take(&v, sizeof v);
  }
  bool str(std::string_view& s) noexcept {
    uint64_t n = 0;
    if (!get(n) || n > left() || n > k_max_string) return false;
    s = std::string_view(reinterpret_cast<const char*>(base + pos), size_t(n));
    pos += size_t(n);
    return true;
  }
};

size_t scalar_size(gguf_kind k) noexcept {
  switch (k) {
    case gguf_kind::u8:
    case gguf_kind::i8:
    case gguf_kind::boolean:
      return 1;
    case gguf_kind::u16:
    case gguf_kind::i16:
      return 2;
    case gguf_kind::u32:
    case gguf_kind::i32:
    case gguf_kind::f32:
      return 4;
    case gguf_kind::u64:
    case gguf_kind::i64:
    case gguf_kind::f64:
      return 8;
    case gguf_kind::string:
      return 8;  // at least its length
    case gguf_kind::array:
      return 12;  // at least its element type and count
  }
  return 0;
}

bool known_kind(uint32_t k) noexcept { return k <= uint32_t(gguf_kind::f64); }

// Reads one scalar of kind k into the integer / float slots. False when truncated.
bool read_scalar(reader& r, gguf_kind k, int64_t& i, uint64_t& u, double& f) {
  switch (k) {
    case gguf_kind::u8: {
      uint8_t v;
      if (!r.get(v)) return false;
      i = v;
      u = v;
      return true;
    }
    case gguf_kind::i8: {
      int8_t v;
      if (!r.get(v)) return false;
      i = v;
      return true;
    }
    case gguf_kind::u16: {
      uint16_t v;
      if (!r.get(v)) return false;
      i = v;
      u = v;
      return true;
    }
    case gguf_kind::i16: {
      int16_t v;
      if (!r.get(v)) return false;
      i = v;
      return true;
    }
    case gguf_kind::u32: {
      uint32_t v;
      if (!r.get(v)) return false;
      i = v;
      u = v;
      return true;
    }
    case gguf_kind::i32: {
      int32_t v;
      if (!r.get(v)) return false;
      i = v;
      return true;
    }
    case gguf_kind::boolean: {
      uint8_t v;
      if (!r.get(v)) return false;
      i = v != 0;
      return true;
    }
    case gguf_kind::u64: {
      uint64_t v;
      if (!r.get(v)) return false;
      u = v;
      i = v > uint64_t(std::numeric_limits<int64_t>::max()) ? std::numeric_limits<int64_t>::max()
                                                            : int64_t(v);
      return true;
    }
    case gguf_kind::i64: {
      int64_t v;
      if (!r.get(v)) return false;
      i = v;
      return true;
    }
    case gguf_kind::f32: {
      float v;
      if (!r.get(v)) return false;
      f = v;
      return true;
    }
    case gguf_kind::f64: {
      double v;
      if (!r.get(v)) return false;
      f = v;
      return true;
    }
    case gguf_kind::string:
    case gguf_kind::array:
      return false;
  }
  return false;
}

}  // namespace

std::string_view gguf_kind_name(gguf_kind k) noexcept {
  switch (k) {
    case gguf_kind::u8:
      return "UINT8";
    case gguf_kind::i8:
      return "INT8";
    case gguf_kind::u16:
      return "UINT16";
    case gguf_kind::i16:
      return "INT16";
    case gguf_kind::u32:
      return "UINT32";
    case gguf_kind::i32:
      return "INT32";
    case gguf_kind::f32:
      return "FLOAT32";
    case gguf_kind::boolean:
      return "BOOL";
    case gguf_kind::string:
      return "STRING";
    case gguf_kind::array:
      return "ARRAY";
    case gguf_kind::u64:
      return "UINT64";
    case gguf_kind::i64:
      return "INT64";
    case gguf_kind::f64:
      return "FLOAT64";
  }
  return "?";
}

bool gguf_value::is_integer() const noexcept {
  switch (kind) {
    case gguf_kind::u8:
    case gguf_kind::i8:
    case gguf_kind::u16:
    case gguf_kind::i16:
    case gguf_kind::u32:
    case gguf_kind::i32:
    case gguf_kind::u64:
    case gguf_kind::i64:
      return true;
    default:
      return false;
  }
}

std::string ggml_type_name(uint32_t t) {
  static const char* const names[] = {
      "F32",     "F16",   "Q4_0",   "Q4_1",  "type 4",  "type 5",  "Q5_0",    "Q5_1",    "Q8_0",
      "Q8_1",    "Q2_K",  "Q3_K",   "Q4_K",  "Q5_K",    "Q6_K",    "Q8_K",    "IQ2_XXS", "IQ2_XS",
      "IQ3_XXS", "IQ1_S", "IQ4_NL", "IQ3_S", "IQ2_S",   "IQ4_XS",  "I8",      "I16",     "I32",
      "I64",     "F64",   "IQ1_M",  "BF16",  "type 31", "type 32", "type 33", "TQ1_0",   "TQ2_0"};
  if (t < sizeof names / sizeof names[0]) return names[t];
  if (t == 39) return "MXFP4";
  return "type " + std::to_string(t);
}

bool ggml_to_dtype(uint32_t t, dtype& out) noexcept {
  switch (ggml_type(t)) {
    case ggml_type::f32:
      out = dtype::f32;
      return true;
    case ggml_type::f16:
      out = dtype::f16;
      return true;
    case ggml_type::bf16:
      out = dtype::bf16;
      return true;
    case ggml_type::q8_0:
      out = dtype::q8_0;
      return true;
    case ggml_type::q4_0:
      out = dtype::q4_0;
      return true;
    case ggml_type::q4_k:
      out = dtype::q4_k;
      return true;
    case ggml_type::q5_k:
      out = dtype::q5_k;
      return true;
    case ggml_type::q6_k:
      out = dtype::q6_k;
      return true;
    case ggml_type::q4_1:
      out = dtype::q4_1;
      return true;
    case ggml_type::q5_0:
      out = dtype::q5_0;
      return true;
    case ggml_type::q5_1:
      out = dtype::q5_1;
      return true;
    case ggml_type::q2_k:
      out = dtype::q2_k;
      return true;
    case ggml_type::q3_k:
      out = dtype::q3_k;
      return true;
    case ggml_type::iq4_nl:
      out = dtype::iq4_nl;
      return true;
    case ggml_type::iq4_xs:
      out = dtype::iq4_xs;
      return true;
  }
  return false;
}

int64_t gguf_tensor::numel() const noexcept {
  int64_t n = 1;
  for (int64_t d : dims) n *= d;
  return n;
}

gguf_file::~gguf_file() {
  if (map_) munmap(map_, map_size_);
}

const gguf_value* gguf_file::find(std::string_view key) const {
  auto it = kv_.find(key);
  return it == kv_.end() ? nullptr : &it->second;
}

const gguf_tensor* gguf_file::tensor(std::string_view name) const {
  auto it = by_name_.find(name);
  return it == by_name_.end() ? nullptr : &tensors_[it->second];
}

result<std::optional<std::string>> gguf_file::get_string(std::string_view key) const {
  const gguf_value* v = find(key);
  if (!v) return std::optional<std::string>{};
  if (v->kind != gguf_kind::string)
    return bad(path_, "metadata " + std::string(key) + " is " +
                          std::string(gguf_kind_name(v->kind)) + ", not a string");
  return std::optional<std::string>(std::string(v->str));
}

result<std::optional<int64_t>> gguf_file::get_int(std::string_view key) const {
  const gguf_value* v = find(key);
  if (!v) return std::optional<int64_t>{};
  if (!v->is_integer())
    return bad(path_, "metadata " + std::string(key) + " is " +
                          std::string(gguf_kind_name(v->kind)) + ", not an integer");
  return std::optional<int64_t>(v->i);
}

result<std::optional<double>> gguf_file::get_float(std::string_view key) const {
  const gguf_value* v = find(key);
  if (!v) return std::optional<double>{};
  if (v->kind == gguf_kind::f32 || v->kind == gguf_kind::f64) return std::optional<double>(v->f);
  if (v->is_integer()) return std::optional<double>(double(v->i));
  return bad(path_, "metadata " + std::string(key) + " is " + std::string(gguf_kind_name(v->kind)) +
                        ", not a number");
}

result<std::optional<bool>> gguf_file::get_bool(std::string_view key) const {
  const gguf_value* v = find(key);
  if (!v) return std::optional<bool>{};
  if (v->kind != gguf_kind::boolean)
    return bad(path_, "metadata " + std::string(key) + " is " +
                          std::string(gguf_kind_name(v->kind)) + ", not a bool");
  return std::optional<bool>(v->i != 0);
}

namespace {

// An array value's element type, count and elements (after the ARRAY kind) into v.
result<void> read_array(reader& r, gguf_value& v, const std::string& key, const std::string& path) {
  uint32_t elem = 0;
  if (!r.get(elem) || !r.get(v.count)) return bad(path, "metadata " + key + ": truncated array");
  if (!known_kind(elem))
    return bad(path, "metadata " + key + ": unknown array element type " + std::to_string(elem));
  v.elem = gguf_kind(elem);
  if (v.elem == gguf_kind::array)
    return make_error("unsupported",
                      path + ": metadata " + key + ": arrays of arrays are not read");
  if (v.count > r.left() / scalar_size(v.elem))
    return bad(
        path, "metadata " + key + ": array count " + std::to_string(v.count) + " exceeds the file");
  if (v.elem == gguf_kind::string) {
    v.strings.resize(size_t(v.count));
    for (auto& s : v.strings)
      if (!r.str(s)) return bad(path, "metadata " + key + ": truncated string in array");
  } else if (v.elem == gguf_kind::f32 || v.elem == gguf_kind::f64) {
    v.floats.resize(size_t(v.count));
    int64_t i = 0;
    uint64_t u = 0;
    for (auto& x : v.floats)
      if (!read_scalar(r, v.elem, i, u, x))
        return bad(path, "metadata " + key + ": truncated array");
  } else {
    v.ints.resize(size_t(v.count));
    uint64_t u = 0;
    double fl = 0;
    for (auto& x : v.ints) {
      if (!read_scalar(r, v.elem, x, u, fl))
        return bad(path, "metadata " + key + ": truncated array");
      if (v.elem == gguf_kind::u64) x = static_cast<int64_t>(u);  // the bit pattern, not clamped
    }
  }
  return {};
}

// The value of metadata `key` (its kind, then the string, array or scalar).
result<gguf_value> read_metadata_value(reader& r, const std::string& key, const std::string& path) {
  uint32_t kind = 0;
  if (!r.get(kind)) return bad(path, "metadata " + key + ": truncated");
  if (!known_kind(kind))
    return bad(path, "metadata " + key + ": unknown value type " + std::to_string(kind));
  gguf_value v;
  v.kind = gguf_kind(kind);
  if (v.kind == gguf_kind::string) {
    if (!r.str(v.str)) return bad(path, "metadata " + key + ": truncated string");
  } else if (v.kind == gguf_kind::array) {
    if (auto a = read_array(r, v, key, path); !a) return a.err();
  } else if (!read_scalar(r, v.kind, v.i, v.u, v.f)) {
    return bad(path, "metadata " + key + ": truncated value");
  }
  return v;
}

// Tensor info `t`: name, dimensions, ggml type and offset, checked (a type we read, whole blocks
// per row, a size that fits, an aligned offset). Its data is placed later.
result<gguf_tensor> read_tensor_info(reader& r, uint64_t t, uint64_t alignment,
                                     const std::string& path) {
  gguf_tensor info;
  std::string_view name;
  uint32_t n_dims = 0;
  if (!r.str(name)) return bad(path, "tensor info " + std::to_string(t) + ": truncated name");
  info.name = std::string(name);
  const std::string where = "tensor " + info.name;
  if (!r.get(n_dims)) return bad(path, where + ": truncated");
  if (n_dims > k_max_dims)
    return bad(path, where + ": " + std::to_string(n_dims) + " dimensions (at most 4)");
  int64_t numel = 1;
  for (uint32_t d = 0; d < n_dims; ++d) {
    int64_t dim = 0;
    if (!r.get(dim)) return bad(path, where + ": truncated dimensions");
    if (dim <= 0) return bad(path, where + ": dimension " + std::to_string(dim));
    if (numel > std::numeric_limits<int64_t>::max() / dim)
      return bad(path, where + ": element count overflows");
    numel *= dim;
    info.dims.push_back(dim);
  }
  if (!r.get(info.ggml) || !r.get(info.offset)) return bad(path, where + ": truncated");
  if (!ggml_to_dtype(info.ggml, info.type))
    return make_error("unsupported", path + ": " + where + " has type " +
                                         ggml_type_name(info.ggml) +
                                         " (supported: F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, "
                                         "Q5_1, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_NL, IQ4_XS)");
  const int64_t block = dtype_block_elems(info.type);
  if (info.cols() % block != 0)
    return bad(path, where + ": row of " + std::to_string(info.cols()) +
                         " values is not a whole number of " + ggml_type_name(info.ggml) +
                         " blocks of " + std::to_string(block));
  if (uint64_t(numel / block) > std::numeric_limits<uint64_t>::max() / dtype_block_bytes(info.type))
    return bad(path, where + ": size overflows");
  info.nbytes = size_t(uint64_t(numel / block) * dtype_block_bytes(info.type));
  if (info.offset % alignment != 0)
    return bad(path, where + ": offset " + std::to_string(info.offset) + " is not aligned");
  return info;
}

// Points each tensor at its data: the data section starts at the first aligned offset after the
// header (header_end); tensors must lie inside it and not overlap (checked in offset order).
result<void> place_tensor_data(std::vector<gguf_tensor>& tensors, const std::byte* base,
                               size_t size, size_t header_end, uint64_t alignment,
                               const std::string& path) {
  const uint64_t data_start = (header_end + alignment - 1) / alignment * alignment;
  if (!tensors.empty() && data_start > size) return bad(path, "truncated before the data section");
  const uint64_t data_size = size > data_start ? size - data_start : 0;
  std::vector<size_t> order(tensors.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::sort(order.begin(), order.end(),
            [&](size_t a, size_t b) { return tensors[a].offset < tensors[b].offset; });
  uint64_t end = 0;
  for (size_t i : order) {
    gguf_tensor& t = tensors[i];
    if (t.offset > data_size || t.nbytes > data_size - t.offset)
      return bad(path, "tensor " + t.name + ": data [" + std::to_string(t.offset) + ", +" +
                           std::to_string(t.nbytes) +
                           ") runs past the end of the file (data section of " +
                           std::to_string(data_size) + " bytes)");
    if (t.offset < end)
      return bad(path, "tensor " + t.name + ": data overlaps the previous tensor");
    end = t.offset + t.nbytes;
    t.data = base + data_start + t.offset;
  }
  return {};
}

}  // namespace

result<std::shared_ptr<const gguf_file>> gguf_file::parse(const std::byte* base, size_t size,
                                                          const std::string& path) {
  auto f = std::make_shared<gguf_file>();
  f->path_ = path;
  f->size_ = size;
  reader r{base, size};
  char magic[4];
  if (!r.take(magic, 4) || std::memcmp(magic, "GGUF", 4) != 0)
    return bad(path, "not a GGUF file (no GGUF magic)");
  uint64_t n_tensors = 0, n_kv = 0;
  if (!r.get(f->version_)) return bad(path, "truncated header");
  if (f->version_ != 2 && f->version_ != 3)
    return make_error("unsupported", path + ": GGUF version " + std::to_string(f->version_) +
                                         " (2 and 3 are read)");
  if (!r.get(n_tensors) || !r.get(n_kv)) return bad(path, "truncated header");
  // Each key/value takes at least 8 + 4 bytes and each tensor info at least 8 + 4 + 4 + 8 (an
  // empty name, no dimensions).
  if (n_kv > r.left() / 12)
    return bad(path, "metadata count " + std::to_string(n_kv) + " exceeds the file");
  if (n_tensors > r.left() / 24)
    return bad(path, "tensor count " + std::to_string(n_tensors) + " exceeds the file");

  for (uint64_t k = 0; k < n_kv; ++k) {
    std::string_view key;
    if (!r.str(key)) return bad(path, "metadata entry " + std::to_string(k) + ": truncated key");
    const std::string key_s(key);
    auto v = read_metadata_value(r, key_s, path);
    if (!v) return v.err();
    if (!f->kv_.emplace(key_s, std::move(*v)).second)
      return bad(path, "duplicate metadata key " + key_s);
  }

  if (const gguf_value* a = f->find("general.alignment")) {
    if (!a->is_integer() || a->i <= 0 || a->i > (1 << 20) || (a->i & (a->i - 1)) != 0)
      return bad(path, "general.alignment must be a power of two up to 1 MiB");
    f->alignment_ = uint64_t(a->i);
  }

  f->tensors_.reserve(size_t(n_tensors));
  for (uint64_t t = 0; t < n_tensors; ++t) {
    auto info = read_tensor_info(r, t, f->alignment_, path);
    if (!info) return info.err();
    if (!f->by_name_.emplace(info->name, f->tensors_.size()).second)
      return bad(path, "duplicate tensor " + info->name);
    f->tensors_.push_back(std::move(*info));
  }
  if (auto p = place_tensor_data(f->tensors_, base, size, r.pos, f->alignment_, path); !p)
    return p.err();
  return std::shared_ptr<const gguf_file>(std::move(f));
}

result<std::shared_ptr<const gguf_file>> gguf_file::open(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return make_error("io", "cannot open " + path + ": " + std::strerror(errno));
  struct stat st {};
  if (fstat(fd, &st) != 0) {
    ::close(fd);
    return make_error("io", "cannot stat " + path);
  }
  const size_t size = size_t(st.st_size);
  if (size < 24) {
    ::close(fd);
    return bad(path, "truncated header (" + std::to_string(size) + " bytes)");
  }
  void* map = mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
  ::close(fd);
  if (map == MAP_FAILED) return make_error("io", "cannot mmap " + path);
  auto parsed = parse(static_cast<const std::byte*>(map), size, path);
  if (!parsed) {
    munmap(map, size);
    return parsed.err();
  }
  auto* f = const_cast<gguf_file*>(parsed->get());
  f->map_ = map;
  f->map_size_ = size;
  return parsed;
}

void gguf_file::release_pages(const void* p, size_t n) const noexcept {
  release_mapped_pages(map_, map_size_, p, n);
}

bool is_gguf_file(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  struct stat st {};
  char magic[4] = {};
  const bool ok = fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && ::read(fd, magic, 4) == 4 &&
                  std::memcmp(magic, "GGUF", 4) == 0;
  ::close(fd);
  return ok;
}

}  // namespace coserve
