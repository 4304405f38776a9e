// safetensors header parsing from memory: any bytes give tensors or an error; every tensor's data
// lies inside the input and matches its dtype and shape.
#include <cstddef>
#include <cstdint>
#include <cstdlib>

#include "model/safetensors.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const auto* base = reinterpret_cast<const std::byte*>(data);
  auto tensors = coserve::parse_safetensors(base, size, "fuzz.safetensors");
  if (!tensors) return 0;
  for (const auto& [name, t] : *tensors) {
    if (t.data < base || t.nbytes > size || t.data + t.nbytes > base + size) std::abort();
    if (static_cast<size_t>(t.numel()) * coserve::dtype_size(t.type) != t.nbytes) std::abort();
    // Touch both ends so ASan checks the range.
    volatile std::byte sink{};
    if (t.nbytes > 0) sink = t.data[0], sink = t.data[t.nbytes - 1];
    (void)sink;
  }
  return 0;
}
