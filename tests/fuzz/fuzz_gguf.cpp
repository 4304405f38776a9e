// GGUF header parsing from memory: any bytes give a file or an error; every tensor's data lies
// inside the input at an aligned offset, its size matches its type and dimensions, tensors do not
// overlap, and every metadata value can be read back through the typed getters.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "model/gguf.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const auto* base = reinterpret_cast<const std::byte*>(data);
  auto parsed = coserve::gguf_file::parse(base, size, "fuzz.gguf");
  if (!parsed) {
    if (parsed.err().message.empty()) std::abort();
    return 0;
  }
  const coserve::gguf_file& f = **parsed;
  volatile size_t sink = 0;
  for (const auto& [key, v] : f.metadata()) {
    if (f.find(key) != &v) std::abort();
    // Each getter gives a value for its kind and an error (not a crash) for the others.
    auto s = f.get_string(key);
    auto i = f.get_int(key);
    auto d = f.get_float(key);
    auto b = f.get_bool(key);
    if (s.ok() != (v.kind == coserve::gguf_kind::string)) std::abort();
    if (i.ok() != v.is_integer()) std::abort();
    if (d.ok() != v.is_number()) std::abort();
    if (b.ok() != (v.kind == coserve::gguf_kind::boolean)) std::abort();
    if (s.ok() && s->has_value()) sink = sink + (*s)->size();
    if (v.kind == coserve::gguf_kind::array) {
      const size_t n = v.strings.size() + v.ints.size() + v.floats.size();
      if (n != v.count) std::abort();
      for (auto str : v.strings)
        if (!str.empty())
          sink = sink + size_t(str.front()) + size_t(str.back());  // ASan checks the views
    }
    if (v.kind == coserve::gguf_kind::string && !v.str.empty()) sink = sink + size_t(v.str.back());
  }
  if (f.alignment() == 0 || (f.alignment() & (f.alignment() - 1)) != 0) std::abort();
  for (const auto& t : f.tensors()) {
    if (f.tensor(t.name) != &t) std::abort();
    if (t.nbytes == 0 || t.data < base || t.nbytes > size || t.data + t.nbytes > base + size)
      std::abort();
    if (t.offset % f.alignment() != 0 || t.dims.size() > 4) std::abort();
    if (coserve::dtype_bytes(t.type, t.numel()) != t.nbytes) std::abort();
    if (t.cols() % coserve::dtype_block_elems(t.type) != 0) std::abort();
    // Touch both ends so ASan checks the range.
    sink = sink + size_t(t.data[0]) + size_t(t.data[t.nbytes - 1]);
  }
  // Tensors do not overlap: check pairwise for small counts (the parser checks in offset order).
  const auto& ts = f.tensors();
  if (ts.size() <= 64)
    for (size_t a = 0; a < ts.size(); ++a)
      for (size_t c = a + 1; c < ts.size(); ++c)
        if (ts[a].data < ts[c].data + ts[c].nbytes && ts[c].data < ts[a].data + ts[a].nbytes)
          std::abort();
  (void)sink;
  return 0;
}
