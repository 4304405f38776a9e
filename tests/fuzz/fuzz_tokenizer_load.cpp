// tokenizer.json loading: any text loads or gives an error. A loaded tokenizer encodes a fixed
// sentence and the input itself into ids inside its vocabulary, and decodes them.
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "model/text/tokenizer/tokenizer.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  auto tok = coserve::tokenizer::from_json(text);
  if (!tok) return 0;
  for (std::string_view s :
       {std::string_view("Hello world! 123 <s> \xe2\x96\x81x \xf0\x9f\x98\x80"),
        text.substr(0, 256)}) {
    auto ids = tok->encode(s, true);
    for (int32_t id : ids)
      if (id < 0 || id >= tok->vocab_size()) std::abort();
    (void)tok->decode(ids, false);
    (void)tok->decode(ids, true);
  }
  return 0;
}
