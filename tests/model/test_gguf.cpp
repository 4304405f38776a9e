// The GGUF reader on images built in memory: a valid file's metadata, tensors and alignment, and
// every malformation an error naming the problem (never a crash: each truncation of a valid image
// is parsed from an allocation of exactly its length, so a read past the end trips ASan). Then
// ggml's block formats: one hand-made block of each quantized type dequantized against values
// computed here from the layouts, and the scalar reference dot products against the dot product of
// the dequantized weights with the dequantized int8 activations.
// Over 500 lines: the in-memory GGUF writer and every malformation case share one file, since
// each case edits a valid image that writer builds; the block-format cases use its f16 helpers.
#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "model/dtype.hpp"
#include "model/gguf.hpp"
#include "model/gguf_model.hpp"
#include "model/quant.hpp"
#include "model_test_util.hpp"

namespace coserve {
namespace {

// ---- a tiny GGUF writer ----------------------------------------------------------------------

template <typename T>
void put(std::string& s, T v) {
  s.append(reinterpret_cast<const char*>(&v), sizeof v);
}
void put_str(std::string& s, std::string_view v) {
  put<uint64_t>(s, v.size());
  s.append(v);
}

struct gguf_builder {
  uint32_t version = 3;
  uint64_t alignment = 32;  // where the writer puts the data section and tensors
  std::string kv, infos, data;
  uint64_t n_kv = 0, n_tensors = 0;
  // Set by build(): where the data section starts in the image.
  mutable size_t data_start = 0;

  // A key with a raw value (type + payload as given).
  gguf_builder& raw_kv(std::string_view key, uint32_t type, const std::string& payload) {
    put_str(kv, key);
    put<uint32_t>(kv, type);
    kv += payload;
    ++n_kv;
    return *this;
  }
  template <typename T>
  gguf_builder& scalar(std::string_view key, gguf_kind k, T v) {
    std::string p;
    put<T>(p, v);
    return raw_kv(key, uint32_t(k), p);
  }
  gguf_builder& string(std::string_view key, std::string_view v) {
    std::string p;
    put_str(p, v);
    return raw_kv(key, uint32_t(gguf_kind::string), p);
  }
  template <typename T>
  gguf_builder& array(std::string_view key, gguf_kind elem, const std::vector<T>& v) {
    std::string p;
    put<uint32_t>(p, uint32_t(elem));
    put<uint64_t>(p, v.size());
    for (const T& x : v) put<T>(p, x);
    return raw_kv(key, uint32_t(gguf_kind::array), p);
  }
  gguf_builder& strings(std::string_view key, const std::vector<std::string>& v) {
    std::string p;
    put<uint32_t>(p, uint32_t(gguf_kind::string));
    put<uint64_t>(p, v.size());
    for (const auto& x : v) put_str(p, x);
    return raw_kv(key, uint32_t(gguf_kind::array), p);
  }

  // A tensor info exactly as given (offset included); no data is added.
  gguf_builder& info(std::string_view name, uint32_t ggml, const std::vector<int64_t>& dims,
                     uint64_t offset) {
    put_str(infos, name);
    put<uint32_t>(infos, uint32_t(dims.size()));
    for (int64_t d : dims) put<int64_t>(infos, d);
    put<uint32_t>(infos, ggml);
    put<uint64_t>(infos, offset);
    ++n_tensors;
    return *this;
  }
  // A tensor whose bytes go at the next aligned offset of the data section; returns the offset.
  uint64_t tensor(std::string_view name, uint32_t ggml, const std::vector<int64_t>& dims,
                  const std::string& bytes) {
    const uint64_t offset = (data.size() + alignment - 1) / alignment * alignment;
    data.resize(offset, '\0');
    data += bytes;
    info(name, ggml, dims, offset);
    return offset;
  }

  // Header, metadata, tensor infos, padding to `alignment` (when there are tensors), data (not
  // padded at the end).
  std::string build(uint64_t kv_count_override = UINT64_MAX,
                    uint64_t tensor_count_override = UINT64_MAX) const {
    std::string s = "GGUF";
    put<uint32_t>(s, version);
    put<uint64_t>(s, tensor_count_override != UINT64_MAX ? tensor_count_override : n_tensors);
    put<uint64_t>(s, kv_count_override != UINT64_MAX ? kv_count_override : n_kv);
    s += kv;
    s += infos;
    data_start =
        n_tensors || !data.empty() ? (s.size() + alignment - 1) / alignment * alignment : s.size();
    s.resize(data_start, '\0');
    s += data;
    return s;
  }
};

// Parses `img` from an allocation of exactly its size.
struct parsed {
  std::unique_ptr<std::byte[]> buf;
  result<std::shared_ptr<const gguf_file>> file;
};
parsed parse(const std::string& img, size_t len = std::string::npos) {
  if (len == std::string::npos) len = img.size();
  parsed p;
  p.buf.reset(new std::byte[len == 0 ? 1 : len]);
  std::memcpy(p.buf.get(), img.data(), len);
  p.file = gguf_file::parse(p.buf.get(), len, "mem.gguf");
  return p;
}

// The error message of parsing `img`, "" when it parses (a test then fails on the message).
std::string parse_error(const std::string& img) {
  auto p = parse(img);
  if (p.file.ok()) return "";
  CHECK_THAT(p.file.err().message, Catch::Contains("mem.gguf"));
  return p.file.err().message;
}

std::string bytes_of(size_t n, uint8_t seed) {
  std::string s(n, '\0');
  for (size_t i = 0; i < n; ++i) s[i] = char(uint8_t(seed + 7 * i));
  return s;
}

std::string f16_bytes(float v) {
  std::string s;
  put<uint16_t>(s, f32_to_f16(v));
  return s;
}

// A minimal valid image with one Q8_0 tensor info described by the arguments, for tensor errors.
std::string one_tensor(uint32_t ggml, const std::vector<int64_t>& dims, uint64_t offset = 0,
                       size_t data = 34) {
  gguf_builder b;
  b.string("general.architecture", "llama");
  b.info("w", ggml, dims, offset);
  b.data = std::string(data, '\0');
  return b.build();
}

constexpr uint32_t k_f32 = 0, k_f16 = 1, k_q4_0 = 2, k_q8_0 = 8, k_q2_k = 10, k_q4_k = 12,
                   k_q5_k = 13, k_q6_k = 14, k_bf16 = 30;

// A valid image using every section: scalars of each kind, strings, arrays, tensors of each type.
gguf_builder full_builder(uint64_t alignment = 32) {
  gguf_builder b;
  b.alignment = alignment;
  b.string("general.architecture", "llama");
  if (alignment != 32) b.scalar<uint32_t>("general.alignment", gguf_kind::u32, uint32_t(alignment));
  b.scalar<uint8_t>("t.u8", gguf_kind::u8, 250);
  b.scalar<int8_t>("t.i8", gguf_kind::i8, -120);
  b.scalar<uint16_t>("t.u16", gguf_kind::u16, 65000);
  b.scalar<int16_t>("t.i16", gguf_kind::i16, -32000);
  b.scalar<uint32_t>("t.u32", gguf_kind::u32, 4000000000u);
  b.scalar<int32_t>("t.i32", gguf_kind::i32, -2000000000);
  b.scalar<float>("t.f32", gguf_kind::f32, 0.1f);
  b.scalar<uint8_t>("t.bool", gguf_kind::boolean, 1);
  b.scalar<uint8_t>("t.false", gguf_kind::boolean, 0);
  b.scalar<uint64_t>("t.u64", gguf_kind::u64, 18446744073709551615ull);
  b.scalar<uint64_t>("t.u64small", gguf_kind::u64, 12345);
  b.scalar<int64_t>("t.i64", gguf_kind::i64, -(int64_t(1) << 62));
  b.scalar<double>("t.f64", gguf_kind::f64, 1e-300);
  b.string("t.empty", "");
  b.strings("tokenizer.ggml.tokens", {"<s>", "", "h\xc3\xa9llo", "</s>"});
  b.array<int32_t>("tokenizer.ggml.token_type", gguf_kind::i32, {1, -2, 3});
  b.array<float>("tokenizer.ggml.scores", gguf_kind::f32, {0.5f, -1.25f});
  b.array<uint8_t>("t.bools", gguf_kind::boolean, {1, 0});
  b.array<uint64_t>("t.u64s", gguf_kind::u64, {});
  b.tensor("f32", k_f32, {3, 2}, bytes_of(24, 1));
  b.tensor("f16", k_f16, {5}, bytes_of(10, 2));
  b.tensor("bf16", k_bf16, {1, 1, 1, 2}, bytes_of(4, 3));
  b.tensor("q8_0", k_q8_0, {64, 2}, bytes_of(4 * 34, 4));
  b.tensor("q4_0", k_q4_0, {32}, bytes_of(18, 5));
  b.tensor("q4_k", k_q4_k, {256, 1}, bytes_of(144, 6));
  b.tensor("q5_k", k_q5_k, {512}, bytes_of(2 * 176, 7));
  b.tensor("q6_k", k_q6_k, {256, 3}, bytes_of(3 * 210, 8));
  return b;
}

}  // namespace

TEST_CASE("gguf: a valid file parses with every metadata kind and tensor type", "[model][gguf]") {
  const gguf_builder b = full_builder();
  const std::string img = b.build();
  auto p = parse(img);
  REQUIRE(p.file.ok());
  const gguf_file& f = **p.file;
  CHECK(f.version() == 3);
  CHECK(f.alignment() == 32);
  CHECK(f.file_size() == img.size());
  CHECK(f.path() == "mem.gguf");
  CHECK(f.metadata().size() == b.n_kv);

  auto kind = [&](const char* key) { return f.find(key) ? f.find(key)->kind : gguf_kind::array; };
  CHECK(f.find("t.u8")->i == 250);
  CHECK(kind("t.u8") == gguf_kind::u8);
  CHECK(f.find("t.i8")->i == -120);
  CHECK(kind("t.i8") == gguf_kind::i8);
  CHECK(f.find("t.u16")->i == 65000);
  CHECK(f.find("t.i16")->i == -32000);
  CHECK(f.find("t.u32")->i == 4000000000);
  CHECK(f.find("t.i32")->i == -2000000000);
  CHECK(f.find("t.f32")->f == double(0.1f));
  CHECK(kind("t.f32") == gguf_kind::f32);
  CHECK(f.find("t.bool")->i == 1);
  CHECK(f.find("t.false")->i == 0);
  CHECK(f.find("t.u64")->u == 18446744073709551615ull);
  CHECK(f.find("t.u64")->i == INT64_MAX);  // clamped in the signed slot
  CHECK(f.find("t.u64small")->i == 12345);
  CHECK(f.find("t.i64")->i == -(int64_t(1) << 62));
  CHECK(f.find("t.f64")->f == 1e-300);
  CHECK(kind("t.f64") == gguf_kind::f64);
  CHECK(f.find("t.empty")->str.empty());
  CHECK(f.find("general.architecture")->str == "llama");
  CHECK(f.find("absent") == nullptr);

  const gguf_value* toks = f.find("tokenizer.ggml.tokens");
  REQUIRE(toks);
  CHECK(toks->kind == gguf_kind::array);
  CHECK(toks->elem == gguf_kind::string);
  CHECK(toks->count == 4);
  REQUIRE(toks->strings.size() == 4);
  CHECK(toks->strings[0] == "<s>");
  CHECK(toks->strings[1].empty());
  CHECK(toks->strings[2] == "h\xc3\xa9llo");
  CHECK(toks->strings[3] == "</s>");
  const gguf_value* types = f.find("tokenizer.ggml.token_type");
  REQUIRE(types);
  CHECK(types->elem == gguf_kind::i32);
  CHECK(types->ints == std::vector<int64_t>{1, -2, 3});
  const gguf_value* scores = f.find("tokenizer.ggml.scores");
  REQUIRE(scores);
  CHECK(scores->floats == std::vector<double>{0.5, -1.25});
  CHECK(f.find("t.bools")->ints == std::vector<int64_t>{1, 0});
  CHECK(f.find("t.u64s")->count == 0);
  CHECK(f.find("t.u64s")->ints.empty());

  // Typed getters: values, absent keys, keys of another type.
  CHECK(f.get_string("general.architecture")->value() == "llama");
  CHECK(f.get_int("t.i16")->value() == -32000);
  CHECK(f.get_float("t.f32")->value() == double(0.1f));
  CHECK(f.get_float("t.u32")->value() == 4000000000.0);  // any number
  CHECK(f.get_bool("t.bool")->value());
  CHECK_FALSE(f.get_bool("t.false")->value());
  CHECK_FALSE(f.get_string("absent")->has_value());
  CHECK_FALSE(f.get_int("absent")->has_value());
  CHECK_FALSE(f.get_float("absent")->has_value());
  CHECK_FALSE(f.get_bool("absent")->has_value());
  auto not_int = f.get_int("t.f32");
  REQUIRE_FALSE(not_int.ok());
  CHECK_THAT(not_int.err().message, Catch::Contains("t.f32") && Catch::Contains("FLOAT32"));
  auto not_str = f.get_string("t.u8");
  REQUIRE_FALSE(not_str.ok());
  CHECK_THAT(not_str.err().message, Catch::Contains("t.u8") && Catch::Contains("UINT8"));
  CHECK_FALSE(f.get_float("general.architecture").ok());
  CHECK_FALSE(f.get_bool("t.u8").ok());

  // Tensors: file order, dims in GGUF order, types, sizes and data pointers into the image.
  struct want {
    const char* name;
    dtype type;
    uint32_t ggml;
    std::vector<int64_t> dims;
    size_t nbytes;
    int64_t rows, cols;
  };
  const std::vector<want> wants{
      {"f32", dtype::f32, k_f32, {3, 2}, 24, 2, 3},
      {"f16", dtype::f16, k_f16, {5}, 10, 1, 5},
      {"bf16", dtype::bf16, k_bf16, {1, 1, 1, 2}, 4, 2, 1},
      {"q8_0", dtype::q8_0, k_q8_0, {64, 2}, 136, 2, 64},
      {"q4_0", dtype::q4_0, k_q4_0, {32}, 18, 1, 32},
      {"q4_k", dtype::q4_k, k_q4_k, {256, 1}, 144, 1, 256},
      {"q5_k", dtype::q5_k, k_q5_k, {512}, 352, 1, 512},
      {"q6_k", dtype::q6_k, k_q6_k, {256, 3}, 630, 3, 256},
  };
  REQUIRE(f.tensors().size() == wants.size());
  uint64_t offset = 0;
  for (size_t i = 0; i < wants.size(); ++i) {
    const gguf_tensor& t = f.tensors()[i];
    const want& w = wants[i];
    INFO("tensor " << w.name);
    CHECK(t.name == w.name);
    CHECK(t.type == w.type);
    CHECK(t.ggml == w.ggml);
    CHECK(t.dims == w.dims);
    CHECK(t.nbytes == w.nbytes);
    CHECK(t.rows() == w.rows);
    CHECK(t.cols() == w.cols);
    CHECK(t.numel() == w.rows * w.cols);
    offset = (offset + 31) / 32 * 32;
    CHECK(t.offset == offset);
    CHECK(t.data == p.buf.get() + b.data_start + offset);
    CHECK(std::memcmp(t.data, img.data() + b.data_start + offset, t.nbytes) == 0);
    CHECK(f.tensor(w.name) == &t);
    offset += t.nbytes;
  }
  CHECK(f.tensor("absent") == nullptr);
  CHECK(b.data_start % 32 == 0);
}

TEST_CASE("gguf: a custom general.alignment places the data section and tensor offsets",
          "[model][gguf]") {
  for (uint64_t alignment : {uint64_t(1), uint64_t(8), uint64_t(64), uint64_t(256)}) {
    INFO("alignment " << alignment);
    const gguf_builder b = full_builder(alignment);
    const std::string img = b.build();
    auto p = parse(img);
    REQUIRE(p.file.ok());
    const gguf_file& f = **p.file;
    CHECK(f.alignment() == alignment);
    CHECK(b.data_start % alignment == 0);
    for (const gguf_tensor& t : f.tensors()) {
      CHECK(t.offset % alignment == 0);
      CHECK(t.data == p.buf.get() + b.data_start + t.offset);
    }
  }
  // An offset aligned to 32 but not to 64 is misaligned under general.alignment = 64.
  gguf_builder b;
  b.alignment = 64;
  b.scalar<uint32_t>("general.alignment", gguf_kind::u32, 64);
  b.tensor("a", k_f32, {8}, bytes_of(32, 1));
  b.info("b", k_f32, {8}, 32);
  b.data.resize(96, '\0');
  CHECK_THAT(parse_error(b.build()),
             Catch::Contains("tensor b") && Catch::Contains("offset 32 is not aligned"));

  // general.alignment that is not a power of two (or zero, or not an integer) is refused.
  for (uint32_t bad : {0u, 3u, 48u}) {
    gguf_builder c;
    c.scalar<uint32_t>("general.alignment", gguf_kind::u32, bad);
    CHECK_THAT(parse_error(c.build()), Catch::Contains("general.alignment"));
  }
  gguf_builder s;
  s.string("general.alignment", "32");
  CHECK_THAT(parse_error(s.build()), Catch::Contains("general.alignment"));
}

TEST_CASE("gguf: version 2 files, empty files and files without tensors", "[model][gguf]") {
  gguf_builder b = full_builder();
  b.version = 2;
  auto p = parse(b.build());
  REQUIRE(p.file.ok());
  CHECK((*p.file)->version() == 2);

  gguf_builder empty;
  auto e = parse(empty.build());
  REQUIRE(e.file.ok());
  CHECK((*e.file)->metadata().empty());
  CHECK((*e.file)->tensors().empty());
}

TEST_CASE("gguf: every truncation of a valid file is an error", "[model][gguf]") {
  for (uint64_t alignment : {uint64_t(32), uint64_t(64)}) {
    const std::string img = full_builder(alignment).build();
    for (size_t len = 0; len < img.size(); ++len) {
      auto p = parse(img, len);
      INFO("alignment " << alignment << ", truncated to " << len << " of " << img.size()
                        << " bytes");
      REQUIRE_FALSE(p.file.ok());
      CHECK_THAT(p.file.err().message, Catch::Contains("mem.gguf"));
      CHECK(p.file.err().code == "invalid_model");
    }
  }
}

TEST_CASE("gguf: malformed headers and metadata are errors naming the problem", "[model][gguf]") {
  const std::string good = full_builder().build();

  std::string magic = good;
  magic[3] = 'X';
  CHECK_THAT(parse_error(magic), Catch::Contains("magic"));
  CHECK_THAT(parse_error("GGU"), Catch::Contains("magic"));

  for (uint32_t v : {0u, 1u, 4u, 0xffffffffu}) {
    gguf_builder b;
    b.version = v;
    auto p = parse(b.build());
    REQUIRE_FALSE(p.file.ok());
    CHECK(p.file.err().code == "unsupported");
    CHECK_THAT(p.file.err().message, Catch::Contains("version " + std::to_string(v)));
  }
  CHECK_THAT(parse_error(good.substr(0, 6)), Catch::Contains("truncated header"));
  CHECK_THAT(parse_error(good.substr(0, 23)), Catch::Contains("truncated header"));

  // Counts larger than the file could hold.
  gguf_builder small;
  small.string("k", "v");
  CHECK_THAT(parse_error(small.build(1000000)),
             Catch::Contains("metadata count 1000000 exceeds the file"));
  CHECK_THAT(parse_error(small.build(UINT64_MAX - 1)), Catch::Contains("metadata count"));
  CHECK_THAT(parse_error(small.build(UINT64_MAX - 1, 1000000)), Catch::Contains("count"));
  CHECK_THAT(parse_error(small.build(1, 1000000)),
             Catch::Contains("tensor count 1000000 exceeds the file"));
  CHECK_THAT(parse_error(small.build(2)), Catch::Contains("metadata count 2 exceeds the file"));

  // A key or string whose length runs past the end.
  {
    gguf_builder b;
    b.string("k", "v");
    put<uint64_t>(b.kv, 1000);  // the second key's length
    b.kv += std::string(20, 'a');
    b.n_kv = 2;
    CHECK_THAT(parse_error(b.build()), Catch::Contains("metadata entry 1: truncated key"));
    gguf_builder huge;
    put<uint64_t>(huge.kv, UINT64_MAX);
    huge.kv += std::string(20, 'a');
    huge.n_kv = 1;
    CHECK_THAT(parse_error(huge.build()), Catch::Contains("metadata entry 0: truncated key"));
  }
  {
    std::string payload;
    put<uint64_t>(payload, 1000);
    payload += "short";
    gguf_builder b;
    b.raw_kv("s", uint32_t(gguf_kind::string), payload);
    CHECK_THAT(parse_error(b.build()),
               Catch::Contains("metadata s") && Catch::Contains("truncated string"));
    gguf_builder huge;
    std::string p2;
    put<uint64_t>(p2, UINT64_MAX);
    huge.raw_kv("s", uint32_t(gguf_kind::string), p2);
    CHECK_THAT(parse_error(huge.build()), Catch::Contains("truncated string"));
  }
  // Array counts past the end, for scalars and strings; a string in an array past the end.
  for (gguf_kind elem : {gguf_kind::u8, gguf_kind::u32, gguf_kind::f64, gguf_kind::string}) {
    for (uint64_t count : {uint64_t(1000000000), UINT64_MAX}) {
      std::string payload;
      put<uint32_t>(payload, uint32_t(elem));
      put<uint64_t>(payload, count);
      payload += std::string(16, '\0');
      gguf_builder b;
      b.raw_kv("arr", uint32_t(gguf_kind::array), payload);
      INFO("element " << gguf_kind_name(elem) << ", count " << count);
      CHECK_THAT(parse_error(b.build()),
                 Catch::Contains("metadata arr") &&
                     Catch::Contains("array count " + std::to_string(count) + " exceeds"));
    }
  }
  {
    std::string payload;
    put<uint32_t>(payload, uint32_t(gguf_kind::string));
    put<uint64_t>(payload, 2);
    put_str(payload, "ok");
    put<uint64_t>(payload, 500);
    payload += "abc";
    gguf_builder b;
    b.raw_kv("arr", uint32_t(gguf_kind::array), payload);
    CHECK_THAT(parse_error(b.build()),
               Catch::Contains("metadata arr") && Catch::Contains("truncated string in array"));
  }
  // Nested arrays, unknown value and element types.
  {
    std::string payload;
    put<uint32_t>(payload, uint32_t(gguf_kind::array));
    put<uint64_t>(payload, 1);
    put<uint32_t>(payload, uint32_t(gguf_kind::u8));
    put<uint64_t>(payload, 1);
    payload += 'x';
    gguf_builder b;
    b.raw_kv("nested", uint32_t(gguf_kind::array), payload);
    auto p = parse(b.build());
    REQUIRE_FALSE(p.file.ok());
    CHECK_THAT(p.file.err().message,
               Catch::Contains("metadata nested") && Catch::Contains("arrays of arrays"));
  }
  for (uint32_t t : {13u, 99u, 0xffffffffu}) {
    gguf_builder b;
    b.raw_kv("weird", t, std::string(8, '\0'));
    CHECK_THAT(parse_error(b.build()),
               Catch::Contains("metadata weird") &&
                   Catch::Contains("unknown value type " + std::to_string(t)));
    std::string payload;
    put<uint32_t>(payload, t);
    put<uint64_t>(payload, 0);
    gguf_builder a;
    a.raw_kv("weird_arr", uint32_t(gguf_kind::array), payload);
    CHECK_THAT(parse_error(a.build()),
               Catch::Contains("metadata weird_arr") &&
                   Catch::Contains("unknown array element type " + std::to_string(t)));
  }
  // A scalar cut short by the end of the file.
  {
    gguf_builder b;
    b.raw_kv("cut", uint32_t(gguf_kind::u64), "abc");
    CHECK_THAT(parse_error(b.build()),
               Catch::Contains("metadata cut") && Catch::Contains("truncated"));
  }
  // Duplicate keys.
  {
    gguf_builder b;
    b.scalar<uint32_t>("dup.key", gguf_kind::u32, 1);
    b.string("other", "x");
    b.scalar<uint32_t>("dup.key", gguf_kind::u32, 2);
    CHECK_THAT(parse_error(b.build()), Catch::Contains("duplicate metadata key dup.key"));
  }
}

TEST_CASE("gguf: malformed tensor infos are errors naming the tensor", "[model][gguf]") {
  // Unknown or unsupported ggml types name the tensor and the type.
  for (auto [type, name] : std::vector<std::pair<uint32_t, std::string>>{{9, "Q8_1"},
                                                                         {19, "IQ1_S"},
                                                                         {15, "Q8_K"},
                                                                         {4, "type 4"},
                                                                         {28, "F64"},
                                                                         {1000, "type 1000"}}) {
    auto p = parse(one_tensor(type, {256}));
    REQUIRE_FALSE(p.file.ok());
    CHECK(p.file.err().code == "unsupported");
    CHECK_THAT(p.file.err().message, Catch::Contains("tensor w has type " + name));
  }
  CHECK_THAT(parse_error(one_tensor(k_f32, {1, 1, 1, 1, 1})),
             Catch::Contains("tensor w: 5 dimensions (at most 4)"));
  CHECK_THAT(parse_error(one_tensor(k_f32, std::vector<int64_t>(1000, 1))),
             Catch::Contains("1000 dimensions"));
  CHECK_THAT(parse_error(one_tensor(k_f32, {4, 0})), Catch::Contains("tensor w: dimension 0"));
  CHECK_THAT(parse_error(one_tensor(k_f32, {-3, 2})), Catch::Contains("tensor w: dimension -3"));
  CHECK_THAT(parse_error(one_tensor(k_f32, {INT64_MIN})), Catch::Contains("tensor w: dimension"));
  CHECK_THAT(parse_error(one_tensor(k_f32, {int64_t(1) << 40, int64_t(1) << 40})),
             Catch::Contains("tensor w: element count overflows"));
  CHECK_THAT(parse_error(one_tensor(k_f32, {INT64_MAX, 2})),
             Catch::Contains("element count overflows"));
  CHECK_THAT(parse_error(one_tensor(k_q8_0, {32, 2, int64_t(1) << 30, int64_t(1) << 30})),
             Catch::Contains("element count overflows"));
  // The element count fits in 64 bits but the byte count does not.
  CHECK_THAT(parse_error(one_tensor(k_f32, {int64_t(1) << 62})),
             Catch::Contains("tensor w: size overflows"));
  // Fits in every count but lies far past the end of the file.
  CHECK_THAT(parse_error(one_tensor(k_f32, {int64_t(1) << 40})),
             Catch::Contains("runs past the end"));
  // Rows that are not whole blocks.
  CHECK_THAT(
      parse_error(one_tensor(k_q8_0, {33})),
      Catch::Contains("tensor w: row of 33 values is not a whole number of Q8_0 blocks of 32"));
  CHECK_THAT(parse_error(one_tensor(k_q4_k, {128, 2})),
             Catch::Contains("row of 128 values") && Catch::Contains("Q4_K"));
  CHECK_THAT(parse_error(one_tensor(k_q6_k, {32})), Catch::Contains("Q6_K blocks of 256"));
  CHECK_THAT(parse_error(one_tensor(k_q4_0, {})),
             Catch::Contains("not a whole number of Q4_0 blocks"));
  // Misaligned offsets and data past the end.
  CHECK_THAT(parse_error(one_tensor(k_q8_0, {32}, 16, 64)),
             Catch::Contains("tensor w: offset 16 is not aligned"));
  CHECK_THAT(parse_error(one_tensor(k_q8_0, {32}, 0, 33)),
             Catch::Contains("tensor w: data") && Catch::Contains("runs past the end"));
  CHECK_THAT(parse_error(one_tensor(k_q8_0, {32}, 32, 40)), Catch::Contains("runs past the end"));
  CHECK_THAT(parse_error(one_tensor(k_q8_0, {32}, uint64_t(1) << 63, 40)),
             Catch::Contains("runs past the end"));
  CHECK_THAT(parse_error(one_tensor(k_q8_0, {32}, UINT64_MAX - 31, 40)),
             Catch::Contains("runs past the end"));
  CHECK(parse(one_tensor(k_q8_0, {32}, 0, 34)).file.ok());
  // Tensor infos cut short.
  {
    gguf_builder b;
    put_str(b.infos, "w");
    put<uint32_t>(b.infos, 2);
    put<int64_t>(b.infos, 32);
    b.n_tensors = 1;
    b.data =
        std::string(64, '\0');  // padding and data after the infos make the cut dims read garbage
    auto p = parse(b.build());
    CHECK_FALSE(p.file.ok());
  }
  {
    gguf_builder b;
    put<uint64_t>(b.infos, 5000);
    b.infos += std::string(40, 'n');
    b.n_tensors = 1;
    CHECK_THAT(parse_error(b.build()), Catch::Contains("tensor info 0: truncated name"));
  }
}

TEST_CASE("gguf: overlapping tensors and duplicate names are errors", "[model][gguf]") {
  {
    gguf_builder b;
    b.tensor("a", k_q8_0, {64}, bytes_of(68, 1));  // [0, 68)
    b.info("b", k_f32, {8}, 64);                   // [64, 96): overlaps a
    b.data.resize(128, '\0');
    CHECK_THAT(parse_error(b.build()), Catch::Contains("tensor b") && Catch::Contains("overlaps"));
  }
  {
    gguf_builder b;  // listed in reverse offset order, the same overlap
    b.info("b", k_f32, {8}, 64);
    b.tensor("a", k_q8_0, {64}, bytes_of(68, 1));
    b.data.resize(128, '\0');
    CHECK_THAT(parse_error(b.build()), Catch::Contains("overlaps"));
  }
  {
    gguf_builder b;  // the same offset twice
    b.tensor("a", k_f32, {8}, bytes_of(32, 1));
    b.info("b", k_f32, {1}, 0);
    CHECK_THAT(parse_error(b.build()), Catch::Contains("overlaps"));
  }
  {
    gguf_builder b;  // adjacent is fine
    b.tensor("a", k_f32, {8}, bytes_of(32, 1));
    b.tensor("b", k_f32, {8}, bytes_of(32, 2));
    CHECK(parse(b.build()).file.ok());
  }
  {
    gguf_builder b;
    b.tensor("w", k_f32, {8}, bytes_of(32, 1));
    b.tensor("w", k_f32, {8}, bytes_of(32, 2));
    CHECK_THAT(parse_error(b.build()), Catch::Contains("duplicate tensor w"));
  }
}

TEST_CASE("gguf: open maps a file, is_gguf_file checks the magic", "[model][gguf]") {
  test::temp_dir dir("gguf");
  const std::string img = full_builder().build();
  test::write_file(dir.file("m.gguf"), img);
  auto f = gguf_file::open(dir.file("m.gguf"));
  REQUIRE(f.ok());
  CHECK((*f)->path() == dir.file("m.gguf"));
  const gguf_tensor* t = (*f)->tensor("q6_k");
  REQUIRE(t);
  CHECK(std::memcmp(t->data, img.data() + (img.size() - t->nbytes), t->nbytes) == 0);
  CHECK(is_gguf_file(dir.file("m.gguf")));

  test::write_file(dir.file("short.gguf"), img.substr(0, 10));
  auto s = gguf_file::open(dir.file("short.gguf"));
  REQUIRE_FALSE(s.ok());
  CHECK_THAT(s.err().message, Catch::Contains("short.gguf") && Catch::Contains("truncated"));
  test::write_file(dir.file("cut.gguf"), img.substr(0, img.size() - 1));
  auto c = gguf_file::open(dir.file("cut.gguf"));
  REQUIRE_FALSE(c.ok());
  CHECK_THAT(c.err().message, Catch::Contains("cut.gguf") && Catch::Contains("tensor q6_k"));
  auto missing = gguf_file::open(dir.file("absent.gguf"));
  REQUIRE_FALSE(missing.ok());
  CHECK(missing.err().code == "io");
  CHECK_FALSE(is_gguf_file(dir.file("absent.gguf")));
  CHECK_FALSE(is_gguf_file(dir.str()));
  test::write_file(dir.file("x.safetensors"), "\x10\0\0\0\0\0\0\0{}");
  CHECK_FALSE(is_gguf_file(dir.file("x.safetensors")));
}

// ---- ggml's block formats ----------------------------------------------------------------------

TEST_CASE("gguf quant: one hand-made block of each type dequantizes to the layout's values",
          "[model][quant]") {
  SECTION("Q8_0: d * q") {
    std::string blk = f16_bytes(0.5f);
    auto q = [](int i) { return i < 16 ? -128 + 8 * i : 127 - 8 * (31 - i); };  // -128 .. 127
    for (int i = 0; i < 32; ++i) blk += char(int8_t(q(i)));
    float out[32];
    dequantize(dtype::q8_0, blk.data(), out, 32);
    for (int i = 0; i < 32; ++i) CHECK(out[i] == 0.5f * float(q(i)));
    CHECK(out[0] == -64.0f);
    CHECK(out[31] == 63.5f);
  }
  SECTION("Q4_0: d * (nibble - 8), low nibbles first") {
    std::string blk = f16_bytes(-0.25f);
    for (int j = 0; j < 16; ++j) blk += char(uint8_t(j | ((15 - j) << 4)));
    float out[32];
    dequantize(dtype::q4_0, blk.data(), out, 32);
    for (int i = 0; i < 16; ++i) CHECK(out[i] == -0.25f * float(i - 8));
    for (int i = 16; i < 32; ++i) CHECK(out[i] == -0.25f * float((15 - (i - 16)) - 8));
  }
  // Q5_0 / Q5_1: the fifth bit of value i is bit i of the little-endian 32-bit qh.
  auto q5 = [](int i) { return (i * 13 + 7) % 32; };
  auto q5_bits = [&] {
    std::string qh(4, '\0'), qs(16, '\0');
    for (int i = 0; i < 32; ++i) {
      qh[size_t(i / 8)] = char(uint8_t(qh[size_t(i / 8)]) | ((q5(i) >> 4) << (i % 8)));
      qs[size_t(i % 16)] = char(uint8_t(qs[size_t(i % 16)]) | ((q5(i) & 15) << (i < 16 ? 0 : 4)));
    }
    return qh + qs;
  };
  SECTION("Q4_1: d * nibble + m") {
    std::string blk = f16_bytes(0.25f) + f16_bytes(-1.5f);
    for (int j = 0; j < 16; ++j) blk += char(uint8_t(j | ((15 - j) << 4)));
    REQUIRE(blk.size() == 20);
    float out[32];
    dequantize(dtype::q4_1, blk.data(), out, 32);
    for (int i = 0; i < 16; ++i) CHECK(out[i] == 0.25f * float(i) - 1.5f);
    for (int i = 16; i < 32; ++i) CHECK(out[i] == 0.25f * float(15 - (i - 16)) - 1.5f);
  }
  SECTION("Q5_0: d * (q - 16)") {
    const std::string blk = f16_bytes(-0.5f) + q5_bits();
    REQUIRE(blk.size() == 22);
    float out[32];
    dequantize(dtype::q5_0, blk.data(), out, 32);
    for (int i = 0; i < 32; ++i) CHECK(out[i] == -0.5f * float(q5(i) - 16));
  }
  SECTION("Q5_1: d * q + m") {
    const std::string blk = f16_bytes(0.125f) + f16_bytes(2.0f) + q5_bits();
    REQUIRE(blk.size() == 24);
    float out[32];
    dequantize(dtype::q5_1, blk.data(), out, 32);
    for (int i = 0; i < 32; ++i) CHECK(out[i] == 0.125f * float(q5(i)) + 2.0f);
  }
  // Q2_K / Q3_K: value v's two low bits are bits 2 * ((v % 128) / 32) of qs[32 * (v / 128) + v %
  // 32].
  auto q2 = [](int v) { return (v * 3 + v / 7) % 4; };
  auto q2_bytes = [&] {
    std::string qs(64, '\0');
    for (int v = 0; v < 256; ++v) {
      const size_t at = size_t(32 * (v / 128) + v % 32);
      qs[at] = char(uint8_t(qs[at]) | (q2(v) << (2 * ((v % 128) / 32))));
    }
    return qs;
  };
  SECTION("Q2_K: d * (scales[v / 16] & 15) * q - dmin * (scales[v / 16] >> 4)") {
    std::string scales(16, '\0');
    for (int g = 0; g < 16; ++g)
      scales[size_t(g)] = char(uint8_t((g * 5 + 1) % 16 | (((g * 3) % 16) << 4)));
    const std::string blk = scales + q2_bytes() + f16_bytes(0.5f) + f16_bytes(0.25f);
    REQUIRE(blk.size() == 84);
    float out[256];
    dequantize(dtype::q2_k, blk.data(), out, 256);
    for (int v = 0; v < 256; ++v) {
      INFO("value " << v);
      const uint8_t s = uint8_t(scales[size_t(v / 16)]);
      CHECK(out[v] == 0.5f * float(s & 15) * float(q2(v)) - 0.25f * float(s >> 4));
    }
  }
  SECTION("Q3_K: d * (sc - 32) * (q - 4 unless the hmask bit is set), sixteen 6-bit scales") {
    // Scale g: low 4 bits in byte g (g < 8) or the high nibble of byte g - 8, high 2 bits at bit
    // 2 * (g / 4) of byte 8 + g % 4.
    auto s6 = [](int g) { return (g * 9 + 2) % 64; };
    std::string scales(12, '\0');
    for (int g = 0; g < 16; ++g) {
      const size_t lo = size_t(g % 8), hi = size_t(8 + g % 4);
      scales[lo] = char(uint8_t(scales[lo]) | ((s6(g) & 15) << (g < 8 ? 0 : 4)));
      scales[hi] = char(uint8_t(scales[hi]) | ((s6(g) >> 4) << (2 * (g / 4))));
    }
    auto h = [](int v) { return (v * 5 / 3) % 2; };
    std::string hmask(32, '\0');
    for (int v = 0; v < 256; ++v)
      hmask[size_t(v % 32)] = char(uint8_t(hmask[size_t(v % 32)]) | (h(v) << (v / 32)));
    const std::string blk = hmask + q2_bytes() + scales + f16_bytes(0.75f);
    REQUIRE(blk.size() == 110);
    float out[256];
    dequantize(dtype::q3_k, blk.data(), out, 256);
    for (int v = 0; v < 256; ++v) {
      INFO("value " << v);
      CHECK(out[v] == 0.75f * float(s6(v / 16) - 32) * float(q2(v) - (h(v) ? 0 : 4)));
    }
  }
  SECTION("IQ4_NL: d * grid[nibble]") {
    std::string blk = f16_bytes(0.5f);
    for (int j = 0; j < 16; ++j) blk += char(uint8_t(j | ((15 - j) << 4)));
    REQUIRE(blk.size() == 18);
    const int grid[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};
    float out[32];
    dequantize(dtype::iq4_nl, blk.data(), out, 32);
    for (int i = 0; i < 16; ++i) CHECK(out[i] == 0.5f * float(grid[i]));
    for (int i = 16; i < 32; ++i) CHECK(out[i] == 0.5f * float(grid[15 - (i - 16)]));
  }
  SECTION("IQ4_XS: d * (ls - 32) * grid[nibble] per 32 values, ls from scales_l and scales_h") {
    const int grid[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};
    auto ls = [](int j) { return (j * 19 + 5) % 64; };
    uint16_t sh = 0;
    std::string sl(4, '\0');
    for (int j = 0; j < 8; ++j) {
      sh = uint16_t(sh | ((ls(j) >> 4) << (2 * j)));
      sl[size_t(j / 2)] = char(uint8_t(sl[size_t(j / 2)]) | ((ls(j) & 15) << (4 * (j % 2))));
    }
    auto nib = [](int v) { return (v * 7 + 3) % 16; };
    std::string qs(128, '\0');
    for (int v = 0; v < 256; ++v) {  // per 32 values: 16 bytes, low nibbles first
      const size_t at = size_t(16 * (v / 32) + v % 16);
      qs[at] = char(uint8_t(qs[at]) | (nib(v) << ((v % 32) < 16 ? 0 : 4)));
    }
    const std::string blk =
        f16_bytes(0.25f) + std::string{char(sh & 0xff), char(sh >> 8)} + sl + qs;
    REQUIRE(blk.size() == 136);
    float out[256];
    dequantize(dtype::iq4_xs, blk.data(), out, 256);
    for (int v = 0; v < 256; ++v) {
      INFO("value " << v);
      CHECK(out[v] == 0.25f * float(ls(v / 32) - 32) * float(grid[nib(v)]));
    }
  }
  // K blocks: 6-bit scales sc[8] and mins m[8] packed as ggml packs them (get_scale_min_k4's
  // inverse): bytes 0-3 sc[0..3] | high bits of sc[4..7] << 6, bytes 4-7 m[0..3] | high bits of
  // m[4..7] << 6, bytes 8-11 low nibbles of sc[4..7] | low nibbles of m[4..7] << 4.
  const uint8_t sc[8] = {1, 7, 33, 63, 2, 17, 40, 63};
  const uint8_t mn[8] = {0, 5, 62, 9, 3, 48, 21, 63};
  auto pack_scales = [&] {
    std::string s(12, '\0');
    for (int j = 0; j < 4; ++j) {
      s[size_t(j)] = char(sc[j] | ((sc[j + 4] >> 4) << 6));
      s[size_t(j + 4)] = char(mn[j] | ((mn[j + 4] >> 4) << 6));
      s[size_t(j + 8)] = char((sc[j + 4] & 15) | ((mn[j + 4] & 15) << 4));
    }
    return s;
  };
  // Value v of a K block: chunk j = v / 64 holds 64 values in 32 bytes, the low nibbles of
  // qs[32j + l] first (values 64j + l), then the high nibbles (values 64j + 32 + l).
  auto q4 = [](int v) { return (v * 5 + 3) % 16; };
  auto pack_qs = [&] {
    std::string qs(128, '\0');
    for (int v = 0; v < 256; ++v) {
      const int j = v / 64, l = v % 32, high = (v % 64) / 32;
      qs[size_t(32 * j + l)] = char(uint8_t(qs[size_t(32 * j + l)]) | (q4(v) << (4 * high)));
    }
    return qs;
  };
  const float d = 2.0f, dmin = 0.5f;
  SECTION("Q4_K: d * sc * q - dmin * m") {
    const std::string blk = f16_bytes(d) + f16_bytes(dmin) + pack_scales() + pack_qs();
    REQUIRE(blk.size() == 144);
    float out[256];
    dequantize(dtype::q4_k, blk.data(), out, 256);
    for (int v = 0; v < 256; ++v) {
      INFO("value " << v);
      CHECK(out[v] == d * float(sc[v / 32]) * float(q4(v)) - dmin * float(mn[v / 32]));
    }
  }
  SECTION("Q5_K: the fifth bit of value v is bit v / 32 of qh[v % 32]") {
    auto h = [](int v) { return (v * 7 / 3) % 2; };
    std::string qh(32, '\0');
    for (int v = 0; v < 256; ++v)
      qh[size_t(v % 32)] = char(uint8_t(qh[size_t(v % 32)]) | (h(v) << (v / 32)));
    const std::string blk = f16_bytes(d) + f16_bytes(dmin) + pack_scales() + qh + pack_qs();
    REQUIRE(blk.size() == 176);
    float out[256];
    dequantize(dtype::q5_k, blk.data(), out, 256);
    for (int v = 0; v < 256; ++v) {
      INFO("value " << v);
      CHECK(out[v] == d * float(sc[v / 32]) * float(q4(v) + 16 * h(v)) - dmin * float(mn[v / 32]));
    }
  }
  SECTION("Q6_K: d * scales[v / 16] * (q - 32)") {
    // ggml's order: each half of 128 values takes 64 bytes of ql and 32 of qh; in it value
    // 32 * quarter + l has its low 4 bits in ql[l + 32 * (quarter & 1)] (high nibble for quarters
    // 2, 3) and its high 2 bits at bit 2 * quarter of qh[l].
    auto q6 = [](int v) { return (v * 11 + 5) % 64; };
    std::string ql(128, '\0'), qh(64, '\0'), scales(16, '\0');
    for (int v = 0; v < 256; ++v) {
      const int half = v / 128, quarter = (v % 128) / 32, l = v % 32;
      const size_t lo = size_t(64 * half + l + 32 * (quarter & 1)), hi = size_t(32 * half + l);
      ql[lo] = char(uint8_t(ql[lo]) | ((q6(v) & 15) << (quarter >= 2 ? 4 : 0)));
      qh[hi] = char(uint8_t(qh[hi]) | ((q6(v) >> 4) << (2 * quarter)));
    }
    for (int g = 0; g < 16; ++g) scales[size_t(g)] = char(int8_t(g * 17 - 128));  // -128 .. 127
    const std::string blk = ql + qh + scales + f16_bytes(0.5f);
    REQUIRE(blk.size() == 210);
    float out[256];
    dequantize(dtype::q6_k, blk.data(), out, 256);
    for (int v = 0; v < 256; ++v) {
      INFO("value " << v);
      CHECK(out[v] == 0.5f * float(int8_t(scales[size_t(v / 16)])) * float(q6(v) - 32));
    }
  }
}

// Where a block's f16 scale d sits, and whether a second f16 (dmin or the minimum m) follows it.
static size_t scale_offset(dtype t) {
  return t == dtype::q6_k ? 208 : t == dtype::q2_k ? 80 : t == dtype::q3_k ? 108 : 0;
}
static bool has_second_scale(dtype t) {
  return t == dtype::q4_k || t == dtype::q5_k || t == dtype::q2_k || t == dtype::q4_1 ||
         t == dtype::q5_1;
}

TEST_CASE("gguf quant: dequantize through convert_to_f32 and over several blocks",
          "[model][quant]") {
  std::mt19937 rng(5);
  for (dtype t :
       {dtype::q8_0, dtype::q4_0, dtype::q4_1, dtype::q5_0, dtype::q5_1, dtype::q2_k, dtype::q3_k,
        dtype::q4_k, dtype::q5_k, dtype::q6_k, dtype::iq4_nl, dtype::iq4_xs}) {
    INFO(dtype_name(t));
    const int64_t n = 3 * 256;
    std::string bytes(dtype_bytes(t, n), '\0');
    for (char& c : bytes) c = char(rng());
    // finite f16 scales
    const size_t bb = dtype_block_bytes(t);
    for (size_t b = 0; b < bytes.size() / bb; ++b) {
      const size_t at = b * bb + scale_offset(t);
      std::memcpy(&bytes[at], f16_bytes(0.01f * float(b + 1)).data(), 2);
      if (has_second_scale(t)) std::memcpy(&bytes[at + 2], f16_bytes(0.003f).data(), 2);
    }
    std::vector<float> whole(static_cast<size_t>(n)), by_block(static_cast<size_t>(n)),
        via_convert(static_cast<size_t>(n));
    dequantize(t, bytes.data(), whole.data(), size_t(n));
    const int64_t be = dtype_block_elems(t);
    for (int64_t b = 0; b < n / be; ++b)
      dequantize(t, bytes.data() + size_t(b) * bb, by_block.data() + b * be, size_t(be));
    convert_to_f32(t, bytes.data(), via_convert.data(), size_t(n));
    CHECK(whole == by_block);
    CHECK(whole == via_convert);
    for (float x : whole) CHECK(std::isfinite(x));
  }
}

TEST_CASE("gguf quant: vec_dot_ref equals the dot product of the dequantized rows",
          "[model][quant]") {
  std::mt19937 rng(11);
  std::uniform_real_distribution<float> uni(-1.0f, 1.0f);
  const int64_t k = 1024;
  for (dtype t :
       {dtype::q8_0, dtype::q4_0, dtype::q4_1, dtype::q5_0, dtype::q5_1, dtype::q2_k, dtype::q3_k,
        dtype::q4_k, dtype::q5_k, dtype::q6_k, dtype::iq4_nl, dtype::iq4_xs}) {
    for (int trial = 0; trial < 4; ++trial) {
      INFO(dtype_name(t) << ", trial " << trial);
      std::string w(dtype_bytes(t, k), '\0');
      for (char& c : w) c = char(rng());
      const size_t bb = dtype_block_bytes(t);
      for (size_t b = 0; b < w.size() / bb; ++b) {
        const size_t at = b * bb + scale_offset(t);
        std::memcpy(&w[at], f16_bytes(uni(rng) * 0.05f).data(), 2);
        if (has_second_scale(t)) std::memcpy(&w[at + 2], f16_bytes(uni(rng) * 0.02f).data(), 2);
      }
      std::vector<float> x(static_cast<size_t>(k));
      for (float& v : x) v = uni(rng) * (trial == 3 ? 100.0f : 1.0f);
      if (trial == 2) std::fill(x.begin(), x.begin() + 256, 0.0f);  // an all-zero activation block

      std::vector<float> wf(static_cast<size_t>(k)), af(static_cast<size_t>(k));
      dequantize(t, w.data(), wf.data(), size_t(k));
      float got = 0;
      if (uses_q8k(t)) {
        std::vector<q8k_block> a(size_t(k / 256));
        quantize_q8_k(x.data(), a.data(), k);
        for (int64_t b = 0; b < k / 256; ++b) {
          for (int g = 0; g < 16; ++g) {
            int s = 0;
            for (int i = 0; i < 16; ++i) s += a[size_t(b)].q[16 * g + i];
            CHECK(a[size_t(b)].bsums[g] == s);
          }
          for (int i = 0; i < 256; ++i)
            af[size_t(b * 256 + i)] = a[size_t(b)].d * float(a[size_t(b)].q[i]);
        }
        got = vec_dot_ref(t, w.data(), a.data(), k);
      } else {
        std::vector<q8_block> a(size_t(k / 32));
        quantize_q8_0(x.data(), a.data(), k);
        for (int64_t b = 0; b < k / 32; ++b) {
          CHECK(a[size_t(b)].d ==
                f16_to_f32(f32_to_f16(a[size_t(b)].d)));  // the scale is an f16 value
          for (int i = 0; i < 32; ++i)
            af[size_t(b * 32 + i)] = a[size_t(b)].d * float(a[size_t(b)].q[i]);
        }
        got = vec_dot_ref(t, w.data(), a.data(), k);
      }
      // The activations' quantization error is about half a step per value (the Q8_0 scale is
      // rounded to f16 after the values are quantized with the unrounded one).
      // The tolerance scales with the magnitude of the terms summed: for Q4_K / Q5_K the scaled
      // quants and the block's min (at most dmin * 63) are summed apart.
      const int64_t be = dtype_block_elems(t);
      double want = 0, mag = 0, xerr = 0;
      for (int64_t i = 0; i < k; ++i) {
        double min_part = 0;
        if (has_second_scale(
                t)) {  // the block's min term: dmin * (at most 63, Q2_K 15), or Q4_1/Q5_1's m
          uint16_t h;
          std::memcpy(&h, w.data() + size_t(i / be) * bb + scale_offset(t) + 2, 2);
          const double most = t == dtype::q2_k                       ? 15.0
                              : t == dtype::q4_1 || t == dtype::q5_1 ? 1.0
                                                                     : 63.0;
          min_part = most * std::fabs(double(f16_to_f32(h)));
        }
        want += double(wf[size_t(i)]) * double(af[size_t(i)]);
        mag += (std::fabs(double(wf[size_t(i)])) + min_part) * std::fabs(double(af[size_t(i)]));
        xerr = std::max(xerr, std::fabs(double(af[size_t(i)]) - double(x[size_t(i)])));
      }
      CHECK(xerr <= (trial == 3 ? 100.0 : 1.0) / 127.0 * 0.6);
      CHECK(std::fabs(double(got) - want) <= 1e-5 * mag + 1e-6);
    }
  }
}

}  // namespace coserve

TEST_CASE("gguf: interleaved_row inverts llama.cpp's q/k permutation", "[gguf]") {
  // convert_hf_to_gguf.py permute(): rows viewed as [heads, 2, d/2], axes 1 and 2 swapped, so
  // GGUF row h*d + 2i + j holds Hugging Face row h*d + j*d/2 + i.
  for (int64_t d : {2, 8, 64, 128})
    for (int64_t heads : {1, 3}) {
      std::vector<int64_t> gguf_holds(size_t(heads * d));
      for (int64_t h = 0; h < heads; ++h)
        for (int64_t i = 0; i < d / 2; ++i)
          for (int64_t j = 0; j < 2; ++j)
            gguf_holds[size_t(h * d + 2 * i + j)] = h * d + j * (d / 2) + i;
      for (int64_t r = 0; r < heads * d; ++r) {
        const int64_t g = r / d * d + coserve::interleaved_row(r % d, d);
        REQUIRE(gguf_holds[size_t(g)] == r);
      }
    }
}
