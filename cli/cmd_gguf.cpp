// `coserve gguf FILE [--tensor NAME] [--dequantize OUT] [--json]`: what a GGUF file holds (like
// gguf-py's gguf_dump: version, alignment, every metadata key with its type and value, the tensor
// table), or one tensor's values dequantized to raw little-endian fp32.
// Exit codes: 0 done; 1 the file cannot be read or parsed, or the tensor is unknown; 2 usage
// errors.
#include <algorithm>
#include <bit>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

#include "cli/commands.hpp"
#include "model/dtype.hpp"
#include "model/gguf.hpp"
#include "model/text/json/value.hpp"
#include "model/text/tokenizer/utf8.hpp"

namespace coserve::cli {

namespace {

constexpr const char* kUsage =
    "usage: coserve gguf FILE [--json] [--tensor NAME [--dequantize OUT]]\n"
    "\n"
    "Shows what a GGUF file (llama.cpp's model format) holds, as gguf-py's gguf_dump does: the\n"
    "GGUF version, the data alignment, every metadata key with its type and value (arrays: "
    "element\n"
    "type, count and the first elements; long strings shortened) and a table of the tensors "
    "(name,\n"
    "ggml type, dimensions in GGUF order with the contiguous one first, offset into the data "
    "section,\n"
    "bytes).\n"
    "  FILE             the .gguf file\n"
    "  --json           print the same as one JSON object instead: {\"file\", \"version\",\n"
    "                   \"alignment\", \"file_size\", \"metadata\": {KEY: {\"type\", \"value\"} "
    "or, for\n"
    "                   arrays, {\"type\": \"ARRAY\", \"element_type\", \"count\", \"head\": "
    "[first 16]}},\n"
    "                   \"tensors\": [{\"name\", \"type\", \"ggml_type\", \"dims\", \"elements\", "
    "\"offset\",\n"
    "                   \"bytes\"}]} (strings unshortened)\n"
    "  --tensor NAME    list only this tensor (exit status 1 when the file has no such tensor)\n"
    "  --dequantize OUT with --tensor: write the tensor's values, dequantized as ggml does, to "
    "OUT\n"
    "                   as raw little-endian fp32 (elements x 4 bytes, GGUF order: the contiguous\n"
    "                   dimension fastest); '-' writes to standard output\n"
    "Errors go to stderr: exit status 1 for a file that cannot be opened or parsed or an unknown\n"
    "tensor, 2 for bad arguments.\n";

constexpr size_t k_text_string_max =
    60;  // longer strings are shortened in the listing (gguf_dump's 60)
constexpr size_t k_text_array_head = 6;   // array elements shown in the listing (gguf_dump's 6)
constexpr size_t k_json_array_head = 16;  // array elements kept in the JSON ("head")

// A JSON string literal of `s`; invalid UTF-8 becomes U+FFFD so the output stays valid JSON.
std::string quoted(std::string_view s) {
  std::string out = "\"";
  if (utf8::is_valid(s))
    json::append_escaped(out, s);
  else
    json::append_escaped(out, utf8::repair(s));
  out.push_back('"');
  return out;
}

// `s` quoted, cut to at most `max` bytes of text (on a character boundary) with "..." appended.
std::string quoted_short(std::string_view s, size_t max) {
  if (s.size() <= max) return quoted(s);
  size_t cut = max - 3;
  while (cut > 0 && (static_cast<unsigned char>(s[cut]) & 0xC0) == 0x80)
    --cut;  // not inside a character
  return quoted(s.substr(0, cut)) + "...";
}

// A float as JSON (Python's json.dumps spelling: NaN, Infinity for non-finite values).
void append_json_float(std::string& out, double d) {
  if (std::isnan(d))
    out += "NaN";
  else if (std::isinf(d))
    out += d < 0 ? "-Infinity" : "Infinity";
  else
    json::append_python_float(out, d);
}

// A float for the listing: the shortest text that reads back as the stored value (f32 or f64).
std::string text_float(gguf_kind k, double d) {
  char buf[64];
  auto r = k == gguf_kind::f32 ? std::to_chars(buf, buf + sizeof buf, float(d))
                               : std::to_chars(buf, buf + sizeof buf, d);
  std::string s(buf, r.ptr);
  if (std::isfinite(d) && s.find_first_of(".e") == std::string::npos)
    s += ".0";  // 10000.0, not 10000
  return s;
}

// A scalar's value: integers exactly (u64 beyond INT64_MAX too), bool as true/false.
std::string scalar_text(const gguf_value& v, bool json) {
  switch (v.kind) {
    case gguf_kind::boolean:
      return v.i ? "true" : "false";
    case gguf_kind::u64:
      return std::to_string(v.u);
    case gguf_kind::f32:
    case gguf_kind::f64: {
      if (!json) return text_float(v.kind, v.f);
      std::string s;
      append_json_float(s, v.f);
      return s;
    }
    case gguf_kind::string:
      return json ? quoted(v.str) : quoted_short(v.str, k_text_string_max);
    default:
      return std::to_string(v.i);
  }
}

// The first `n` elements of an array as a JSON-style list, "..." added when there are more.
std::string array_head(const gguf_value& v, size_t n, bool json) {
  std::string out = "[";
  const size_t shown = size_t(std::min<uint64_t>(v.count, n));
  for (size_t i = 0; i < shown; ++i) {
    if (i) out += ", ";
    if (v.elem == gguf_kind::string) {
      out += json ? quoted(v.strings[i]) : quoted_short(v.strings[i], k_text_string_max);
    } else if (v.elem == gguf_kind::f32 || v.elem == gguf_kind::f64) {
      if (json)
        append_json_float(out, v.floats[i]);
      else
        out += text_float(v.elem, v.floats[i]);
    } else if (v.elem == gguf_kind::boolean) {
      out += v.ints[i] ? "true" : "false";
    } else if (v.elem == gguf_kind::u64) {  // kept as their bit pattern
      out += std::to_string(static_cast<uint64_t>(v.ints[i]));
    } else {
      out += std::to_string(v.ints[i]);
    }
  }
  if (!json && v.count > shown) out += shown ? ", ..." : "...";
  out += "]";
  return out;
}

// A key or tensor name for the listing: as is, invalid UTF-8 replaced, control characters escaped.
std::string printable(std::string_view s) {
  const bool plain = utf8::is_valid(s) && std::none_of(s.begin(), s.end(), [](char c) {
                       return static_cast<unsigned char>(c) < 0x20 || c == 0x7f;
                     });
  if (plain) return std::string(s);
  const std::string q = quoted(s);
  return q.substr(1, q.size() - 2);
}

std::string dims_text(const std::vector<int64_t>& dims) {
  std::string s;
  for (size_t i = 0; i < dims.size(); ++i) s += (i ? ", " : "") + std::to_string(dims[i]);
  return s;
}

void print_text(const gguf_file& f, const std::vector<const gguf_tensor*>& tensors) {
  std::printf("* GGUF version %u, alignment %llu, %zu bytes: %s\n", f.version(),
              static_cast<unsigned long long>(f.alignment()), f.file_size(), f.path().c_str());
  std::printf("* %zu key/value pair(s):\n", f.metadata().size());
  size_t n = 0;
  for (const auto& [key, v] : f.metadata()) {
    std::string type(gguf_kind_name(v.kind));
    uint64_t count = 1;
    std::string value;
    if (v.kind == gguf_kind::array) {
      const std::string_view elem = gguf_kind_name(v.elem);
      char buf[32];
      std::snprintf(buf, sizeof buf, "[%.*s]", int(elem.size()), elem.data());
      type = buf;
      count = v.count;
      value = array_head(v, k_text_array_head, false);
    } else {
      value = scalar_text(v, false);
    }
    std::printf("  %5zu: %-10s | %8llu | %s = %s\n", ++n, type.c_str(),
                static_cast<unsigned long long>(count), printable(key).c_str(), value.c_str());
  }
  std::printf("* %zu tensor(s):\n", tensors.size());
  if (tensors.empty()) return;
  struct row {
    std::string name, type, dims, offset, bytes;
  };
  std::vector<row> rows{{"name", "type", "dims", "offset", "bytes"}};
  for (const gguf_tensor* t : tensors)
    rows.push_back({printable(t->name), ggml_type_name(t->ggml), dims_text(t->dims),
                    std::to_string(t->offset), std::to_string(t->nbytes)});
  size_t w[5] = {0, 0, 0, 0, 0};
  for (const row& r : rows) {
    w[0] = std::max(w[0], r.name.size());
    w[1] = std::max(w[1], r.type.size());
    w[2] = std::max(w[2], r.dims.size());
    w[3] = std::max(w[3], r.offset.size());
    w[4] = std::max(w[4], r.bytes.size());
  }
  for (size_t i = 0; i < rows.size(); ++i) {
    const row& r = rows[i];
    std::printf("  %-*s  %-*s  %-*s  %*s  %*s\n", int(w[0]), r.name.c_str(), int(w[1]),
                r.type.c_str(), int(w[2]), r.dims.c_str(), int(w[3]), r.offset.c_str(), int(w[4]),
                r.bytes.c_str());
  }
}

void print_json(const gguf_file& f, const std::vector<const gguf_tensor*>& tensors) {
  std::string out = "{\"file\": " + quoted(f.path()) +
                    ", \"version\": " + std::to_string(f.version()) +
                    ", \"alignment\": " + std::to_string(f.alignment()) +
                    ", \"file_size\": " + std::to_string(f.file_size()) + ", \"metadata\": {";
  bool first = true;
  for (const auto& [key, v] : f.metadata()) {
    out += first ? "" : ", ";
    first = false;
    out += quoted(key) + ": {\"type\": \"" + std::string(gguf_kind_name(v.kind)) + "\"";
    if (v.kind == gguf_kind::array) {
      out += ", \"element_type\": \"" + std::string(gguf_kind_name(v.elem)) +
             "\", \"count\": " + std::to_string(v.count) +
             ", \"head\": " + array_head(v, k_json_array_head, true);
    } else {
      out += ", \"value\": " + scalar_text(v, true);
    }
    out += "}";
  }
  out += "}, \"tensors\": [";
  first = true;
  for (const gguf_tensor* t : tensors) {
    out += first ? "" : ", ";
    first = false;
    out += "{\"name\": " + quoted(t->name) + ", \"type\": \"" + ggml_type_name(t->ggml) +
           "\", \"ggml_type\": " + std::to_string(t->ggml) + ", \"dims\": [" + dims_text(t->dims) +
           "], \"elements\": " + std::to_string(t->numel()) +
           ", \"offset\": " + std::to_string(t->offset) +
           ", \"bytes\": " + std::to_string(t->nbytes) + "}";
  }
  out += "]}\n";
  std::fwrite(out.data(), 1, out.size(), stdout);
}

// Writes the tensor's values as little-endian fp32, a bounded number of rows at a time.
bool dequantize_to(const gguf_tensor& t, const std::string& out_path) {
  static_assert(std::endian::native == std::endian::little, "fp32 output is written in host order");
  std::FILE* out = out_path == "-" ? stdout : std::fopen(out_path.c_str(), "wb");
  if (!out) {
    std::fprintf(stderr, "coserve gguf: cannot create %s: %s\n", out_path.c_str(),
                 std::strerror(errno));
    return false;
  }
  const int64_t cols = t.cols(), rows = t.rows();
  const size_t row_bytes = dtype_bytes(t.type, cols);
  const int64_t rows_per_chunk = std::max<int64_t>(1, (int64_t(1) << 20) / cols);
  std::vector<float> buf(size_t(std::min(rows, rows_per_chunk) * cols));
  bool ok = true;
  for (int64_t r = 0; r < rows && ok; r += rows_per_chunk) {
    const int64_t n = std::min(rows_per_chunk, rows - r);
    convert_to_f32(t.type, t.data + size_t(r) * row_bytes, buf.data(), size_t(n * cols));
    ok = std::fwrite(buf.data(), sizeof(float), size_t(n * cols), out) == size_t(n * cols);
  }
  if (out != stdout)
    ok = std::fclose(out) == 0 && ok;
  else
    ok = std::fflush(out) == 0 && ok;
  if (!ok) std::fprintf(stderr, "coserve gguf: cannot write %s\n", out_path.c_str());
  return ok;
}

}  // namespace

int cmd_gguf(int argc, char** argv) {
  std::string path, tensor_name, out_path;
  bool json = false, have_tensor = false, have_out = false;
  for (int i = 1; i < argc; ++i) {
    std::string_view a = argv[i];
    auto value = [&](const char* what) -> const char* {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "coserve gguf: %s needs a value\n\n%s", what, kUsage);
        return nullptr;
      }
      return argv[++i];
    };
    if (a == "--help" || a == "-h") {
      std::fputs(kUsage, stdout);
      return 0;
    } else if (a == "--json") {
      json = true;
    } else if (a == "--tensor") {
      const char* v = value("--tensor");
      if (!v) return 2;
      tensor_name = v;
      have_tensor = true;
    } else if (a == "--dequantize") {
      const char* v = value("--dequantize");
      if (!v) return 2;
      out_path = v;
      have_out = true;
    } else if (path.empty() && !a.starts_with("--")) {
      path = a;
    } else {
      std::fprintf(stderr, "coserve gguf: unexpected argument '%s'\n\n%s", argv[i], kUsage);
      return 2;
    }
  }
  if (path.empty()) {
    std::fputs(kUsage, stderr);
    return 2;
  }
  if (have_out && !have_tensor) {
    std::fprintf(stderr, "coserve gguf: --dequantize needs --tensor NAME\n");
    return 2;
  }
  if (have_out && json) {
    std::fprintf(stderr, "coserve gguf: --json lists the file; it does not go with --dequantize\n");
    return 2;
  }
  auto file = gguf_file::open(path);
  if (!file) {
    std::fprintf(stderr, "coserve gguf: %s\n", file.err().message.c_str());
    return 1;
  }
  const gguf_file& f = **file;
  std::vector<const gguf_tensor*> tensors;
  if (have_tensor) {
    const gguf_tensor* t = f.tensor(tensor_name);
    if (!t) {
      std::fprintf(stderr, "coserve gguf: %s has no tensor '%s' (%zu tensors)\n", path.c_str(),
                   tensor_name.c_str(), f.tensors().size());
      return 1;
    }
    if (have_out) return dequantize_to(*t, out_path) ? 0 : 1;
    tensors.push_back(t);
  } else {
    for (const gguf_tensor& t : f.tensors()) tensors.push_back(&t);
  }
  if (json)
    print_json(f, tensors);
  else
    print_text(f, tensors);
  return std::fflush(stdout) == 0 ? 0 : 1;
}

}  // namespace coserve::cli
