#include "model/safetensors.hpp"

#include <fcntl.h>
#include <simdjson.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <fstream>
#include <set>

#include "model/config.hpp"

namespace coserve {
namespace {

error st_error(const std::string& file, const std::string& what) {
  return make_error("invalid_model", file + ": " + what);
}

}  // namespace

std::string shape_string(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i) s += ", ";
    s += std::to_string(shape[i]);
  }
  return s + "]";
}

safetensors_file::safetensors_file(safetensors_file&& o) noexcept
    : path_(std::move(o.path_)),
      map_(o.map_),
      map_size_(o.map_size_),
      tensors_(std::move(o.tensors_)) {
  o.map_ = nullptr;
  o.map_size_ = 0;
}

safetensors_file& safetensors_file::operator=(safetensors_file&& o) noexcept {
  if (this != &o) {
    unmap();
    path_ = std::move(o.path_);
    map_ = o.map_;
    map_size_ = o.map_size_;
    tensors_ = std::move(o.tensors_);
    o.map_ = nullptr;
    o.map_size_ = 0;
  }
  return *this;
}

safetensors_file::~safetensors_file() { unmap(); }

void safetensors_file::unmap() noexcept {
  if (map_) munmap(map_, map_size_);
  map_ = nullptr;
  map_size_ = 0;
}

const tensor_view* safetensors_file::find(const std::string& name) const {
  auto it = tensors_.find(name);
  return it == tensors_.end() ? nullptr : &it->second;
}

result<safetensors_file> safetensors_file::open(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return make_error("io", "cannot open " + path + ": " + std::strerror(errno));
  struct stat st {};
  if (fstat(fd, &st) != 0) {
    ::close(fd);
    return make_error("io", "cannot stat " + path);
  }
  const size_t size = size_t(st.st_size);
  if (size < 8) {  // nothing to map; the parser reports the truncation
    ::close(fd);
    return parse_safetensors(nullptr, size, path).err();
  }
  void* map = mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
  ::close(fd);
  if (map == MAP_FAILED) return make_error("io", "cannot mmap " + path);

  safetensors_file f;
  f.path_ = path;
  f.map_ = map;
  f.map_size_ = size;
  auto tensors = parse_safetensors(static_cast<const std::byte*>(map), size, path);
  if (!tensors) return tensors.err();
  f.tensors_ = std::move(*tensors);
  return f;
}

result<std::map<std::string, tensor_view>> parse_safetensors(const std::byte* base, size_t size,
                                                             const std::string& path) {
  if (size < 8)
    return st_error(path, "truncated file (" + std::to_string(size) + " bytes, no header length)");
  uint64_t header_len = 0;
  for (int i = 7; i >= 0; --i) header_len = (header_len << 8) | uint64_t(base[i]);
  if (header_len > size - 8)
    return st_error(path, "truncated file: header length " + std::to_string(header_len) +
                              " exceeds the " + std::to_string(size - 8) + " bytes after it");
  const std::byte* data = base + 8 + header_len;
  const uint64_t data_size = size - 8 - header_len;

  std::map<std::string, tensor_view> tensors;
  simdjson::dom::parser parser;
  simdjson::padded_string header(reinterpret_cast<const char*>(base + 8), header_len);
  simdjson::dom::object root;
  if (auto e = parser.parse(header).get_object().get(root))
    return st_error(path, std::string("bad header JSON: ") + simdjson::error_message(e));

  for (auto [key, value] : root) {
    std::string name(key);
    if (name == "__metadata__") continue;
    simdjson::dom::object t;
    std::string_view dt;
    simdjson::dom::array shape, offsets;
    if (value.get_object().get(t) || t["dtype"].get_string().get(dt) ||
        t["shape"].get_array().get(shape) || t["data_offsets"].get_array().get(offsets))
      return st_error(path,
                      "tensor '" + name + "': header entry needs dtype, shape and data_offsets");
    tensor_view v;
    v.name = name;
    v.file = path;
    if (!parse_dtype(dt, v.type))
      return st_error(path, "tensor '" + name + "': unsupported dtype " + std::string(dt) +
                                " (supported: F32, F16, BF16)");
    for (auto d : shape) {
      int64_t x;
      if (d.get_int64().get(x) || x < 0 || x > (int64_t(1) << 40))
        return st_error(path, "tensor '" + name + "': bad shape entry");
      v.shape.push_back(x);
    }
    uint64_t off[2];
    size_t n = 0;
    for (auto d : offsets) {
      if (n == 2 || d.get_uint64().get(off[n]))
        return st_error(path, "tensor '" + name + "': bad data_offsets");
      ++n;
    }
    if (n != 2 || off[0] > off[1]) return st_error(path, "tensor '" + name + "': bad data_offsets");
    if (off[1] > data_size)
      return st_error(path, "tensor '" + name + "': data_offsets [" + std::to_string(off[0]) +
                                ", " + std::to_string(off[1]) + "] beyond the data section (" +
                                std::to_string(data_size) + " bytes; truncated file?)");
    v.nbytes = size_t(off[1] - off[0]);
    // The byte count of the shape, checked for overflow (numel() of such a shape would overflow).
    uint64_t shape_bytes = dtype_size(v.type);
    bool overflow = false;
    for (int64_t d : v.shape)
      overflow = overflow || __builtin_mul_overflow(shape_bytes, uint64_t(d), &shape_bytes);
    if (overflow || shape_bytes != v.nbytes)
      return st_error(path, "tensor '" + name + "': " + std::to_string(v.nbytes) +
                                " bytes do not match " + std::string(dtype_name(v.type)) +
                                " shape " + shape_string(v.shape));
    v.data = data + off[0];
    tensors.emplace(name, std::move(v));
  }
  return tensors;
}

result<safetensors_set> safetensors_set::open_dir(const std::string& dir) {
  safetensors_set s;
  s.dir_ = dir;
  std::vector<std::string> files;
  const std::string index_path = dir + "/model.safetensors.index.json";
  std::map<std::string, std::string> weight_map;
  if (std::ifstream(index_path)) {
    auto text = read_text_file(index_path);
    if (!text) return text.err();
    simdjson::dom::parser parser;
    simdjson::padded_string padded(*text);
    simdjson::dom::object wm;
    if (parser.parse(padded)["weight_map"].get_object().get(wm))
      return st_error(index_path, "missing or malformed 'weight_map'");
    std::set<std::string> seen;
    for (auto [k, v] : wm) {
      std::string_view file;
      if (v.get_string().get(file))
        return st_error(index_path, "weight_map entry '" + std::string(k) + "' is not a string");
      if (file.find('/') != std::string_view::npos || file.find("..") != std::string_view::npos)
        return st_error(index_path, "weight_map entry '" + std::string(k) +
                                        "' names a file outside the folder");
      weight_map.emplace(std::string(k), std::string(file));
      if (seen.insert(std::string(file)).second) files.push_back(std::string(file));
    }
  } else if (std::ifstream(dir + "/model.safetensors")) {
    files.push_back("model.safetensors");
  } else {
    return make_error("not_found", dir + ": no model.safetensors or model.safetensors.index.json");
  }
  for (const auto& name : files) {
    auto f = safetensors_file::open(dir + "/" + name);
    if (!f) return f.err();
    s.files_.push_back(std::make_unique<safetensors_file>(std::move(*f)));
    for (const auto& [tname, view] : s.files_.back()->tensors()) s.index_.emplace(tname, &view);
  }
  for (const auto& [tname, file] : weight_map)
    if (!s.index_.count(tname))
      return st_error(dir + "/" + file, "tensor '" + tname + "' listed in the index is missing");
  return s;
}

void release_mapped_pages(const void* map, size_t map_size, const void* p, size_t n) noexcept {
  if (map == nullptr) return;
  const auto lo = reinterpret_cast<uintptr_t>(map), hi = lo + map_size;
  const auto page = uintptr_t(sysconf(_SC_PAGESIZE));
  const uintptr_t b = (reinterpret_cast<uintptr_t>(p) + page - 1) / page * page;
  const uintptr_t e = (reinterpret_cast<uintptr_t>(p) + n) / page * page;
  if (b < lo || e > hi || b >= e) return;
  madvise(reinterpret_cast<void*>(b), e - b, MADV_DONTNEED);
}

void safetensors_file::release_pages(const void* p, size_t n) const noexcept {
  release_mapped_pages(map_, map_size_, p, n);
}

void safetensors_set::release_pages(const void* p, size_t n) const noexcept {
  for (const auto& f : files_) f->release_pages(p, n);
}

const tensor_view* safetensors_set::find(const std::string& name) const {
  auto it = index_.find(name);
  return it == index_.end() ? nullptr : it->second;
}

std::vector<std::string> safetensors_set::names() const {
  std::vector<std::string> out;
  for (const auto& [k, v] : index_) out.push_back(k);
  return out;
}

result<const tensor_view*> safetensors_set::get(const std::string& name,
                                                const std::vector<int64_t>& shape) const {
  const tensor_view* v = find(name);
  if (!v) return make_error("invalid_model", dir_ + ": missing tensor '" + name + "'");
  if (!shape.empty() && v->shape != shape)
    return st_error(v->file, "tensor '" + name + "' has shape " + shape_string(v->shape) +
                                 ", expected " + shape_string(shape));
  return v;
}

result<void> write_safetensors(const std::string& path, const std::vector<tensor_data>& tensors) {
  std::string header = "{";
  uint64_t offset = 0;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const auto& t = tensors[i];
    if (i) header += ",";
    header +=
        "\"" + t.name + "\":{\"dtype\":\"" + std::string(dtype_name(t.type)) + "\",\"shape\":[";
    for (size_t d = 0; d < t.shape.size(); ++d) {
      if (d) header += ',';
      header += std::to_string(t.shape[d]);
    }
    header += "],\"data_offsets\":[" + std::to_string(offset) + "," +
              std::to_string(offset + t.bytes.size()) + "]}";
    offset += t.bytes.size();
  }
  header += tensors.empty() ? "" : ",";
  header += "\"__metadata__\":{\"format\":\"pt\"}}";
  while ((header.size() + 8) % 8 != 0) header += ' ';
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) return make_error("io", "cannot create " + path);
  uint64_t n = header.size();
  char len[8];
  for (int i = 0; i < 8; ++i) len[i] = char((n >> (8 * i)) & 0xff);
  out.write(len, 8);
  out.write(header.data(), std::streamsize(header.size()));
  for (const auto& t : tensors)
    out.write(reinterpret_cast<const char*>(t.bytes.data()), std::streamsize(t.bytes.size()));
  out.flush();
  if (!out) return make_error("io", "cannot write " + path);
  return {};
}

}  // namespace coserve
