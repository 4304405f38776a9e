// fp8 checkpoints: the E4M3 / E5M2 codecs against ml_dtypes (fixture written by
// tests/reference/make_fp8_fixtures.py), the scale layouts of dequantize_fp8, and config.json's
// quantization_config. tests/python/test_fp8_checkpoint.py loads whole fp8 folders through the
// binary.
#include <simdjson.h>

#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>

#include "model/config.hpp"
#include "model/fp8.hpp"

namespace coserve {
namespace {

float from_bits(uint32_t b) {
  float f;
  std::memcpy(&f, &b, 4);
  return f;
}

void check_decode(simdjson::dom::array want, float (*decode)(uint8_t)) {
  REQUIRE(want.size() == 256);
  int code = 0;
  for (simdjson::dom::element e : want) {
    CAPTURE(code);
    const float got = decode(uint8_t(code));
    if (e.is_null()) {
      CHECK(std::isnan(got));
    } else if (e.is_string()) {
      CHECK(std::isinf(got));
      CHECK(std::signbit(got) == (std::string_view(e) == "-inf"));
    } else {
      CHECK(got == float(double(e)));
      CHECK(std::signbit(got) == std::signbit(double(e)));  // -0 included
    }
    ++code;
  }
}

tensor_view view(const std::string& name, dtype t, std::vector<int64_t> shape, const void* data) {
  tensor_view v;
  v.name = name;
  v.file = "mem";
  v.type = t;
  v.shape = std::move(shape);
  v.data = static_cast<const std::byte*>(data);
  v.nbytes = size_t(v.numel()) * dtype_size(t);
  return v;
}

}  // namespace

TEST_CASE("fp8: E4M3 and E5M2 decode and encode as ml_dtypes does", "[model][fp8]") {
  simdjson::dom::parser parser;
  simdjson::dom::element fx;
  REQUIRE(parser.load("tests/reference/fixtures/fp8/codec.json").get(fx) == simdjson::SUCCESS);
  check_decode(fx["decode_e4m3"].get_array(), e4m3_to_f32);
  check_decode(fx["decode_e5m2"].get_array(), e5m2_to_f32);
  auto check_encode = [](simdjson::dom::array pairs, uint8_t (*encode)(float)) {
    size_t n = 0;
    for (simdjson::dom::element pair : pairs) {
      const auto bits = uint32_t(int64_t(pair.at(0)));
      const auto want = uint8_t(int64_t(pair.at(1)));
      CAPTURE(bits, from_bits(bits));
      CHECK(int(encode(from_bits(bits))) == int(want));
      ++n;
    }
    CHECK(n > 5000);
  };
  check_encode(fx["encode_e4m3"].get_array(), f32_to_e4m3);
  check_encode(fx["encode_e5m2"].get_array(), f32_to_e5m2);
  // Every finite code survives a round trip; NaN stays NaN.
  for (int c = 0; c < 256; ++c) {
    if ((c & 0x7f) != 0x7f) CHECK(int(f32_to_e4m3(e4m3_to_f32(uint8_t(c)))) == c);
    if ((c & 0x7f) < 0x7c) CHECK(int(f32_to_e5m2(e5m2_to_f32(uint8_t(c)))) == c);
  }
  CHECK(std::isnan(e4m3_to_f32(f32_to_e4m3(std::nanf("")))));
  CHECK(std::isnan(e5m2_to_f32(f32_to_e5m2(std::nanf("")))));
}

TEST_CASE("fp8: dequantization with per-tensor, per-channel and per-block scales", "[model][fp8]") {
  const int64_t rows = 5, cols = 7;
  std::vector<uint8_t> codes(size_t(rows * cols));
  for (size_t i = 0; i < codes.size(); ++i)
    codes[i] = uint8_t((i * 37 + 11) & 0xff) & 0xf7;  // no NaN codes
  const tensor_view w = view("l.weight", dtype::f8_e4m3, {rows, cols}, codes.data());
  auto expect = [&](const std::vector<uint16_t>& got, auto scale_of) {
    REQUIRE(got.size() == codes.size());
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < cols; ++c) {
        CAPTURE(r, c);
        const float want = e4m3_to_f32(codes[size_t(r * cols + c)]) * scale_of(r, c);
        CHECK(got[size_t(r * cols + c)] == f32_to_bf16(want));
      }
  };
  SECTION("one scale") {
    const float s = 0.03125f * 3;
    auto got = dequantize_fp8(w, view("l.weight_scale", dtype::f32, {}, &s), 0, 0);
    REQUIRE(got);
    expect(*got, [&](int64_t, int64_t) { return s; });
  }
  SECTION("per output channel, [rows] and [rows, 1], bf16 scales") {
    std::vector<uint16_t> s;
    for (int64_t r = 0; r < rows; ++r) s.push_back(f32_to_bf16(0.01f * float(r + 1)));
    for (auto shape : {std::vector<int64_t>{rows}, std::vector<int64_t>{rows, 1}}) {
      auto got = dequantize_fp8(w, view("l.weight_scale", dtype::bf16, shape, s.data()), 0, 0);
      REQUIRE(got);
      expect(*got, [&](int64_t r, int64_t) { return bf16_to_f32(s[size_t(r)]); });
    }
  }
  SECTION("per 2 x 3 block, partial blocks at the edges") {
    std::vector<float> s;  // [3, 3]
    for (int i = 0; i < 9; ++i) s.push_back(0.5f + float(i));
    auto got = dequantize_fp8(w, view("l.weight_scale_inv", dtype::f32, {3, 3}, s.data()), 2, 3);
    REQUIRE(got);
    expect(*got, [&](int64_t r, int64_t c) { return s[size_t((r / 2) * 3 + c / 3)]; });
    // Without a block size from the config: 128 x 128, so this scale's shape is wrong.
    auto bad = dequantize_fp8(w, view("l.weight_scale_inv", dtype::f32, {3, 3}, s.data()), 0, 0);
    REQUIRE_FALSE(bad);
    CHECK_THAT(bad.err().message,
               Catch::Contains("l.weight") && Catch::Contains("ceil(rows / 128)"));
  }
  SECTION("E5M2 codes") {
    const float s = 2.0f;
    const tensor_view w2 = view("l.weight", dtype::f8_e5m2, {rows, cols}, codes.data());
    auto got = dequantize_fp8(w2, view("l.weight_scale", dtype::f32, {1}, &s), 0, 0);
    REQUIRE(got);
    for (size_t i = 0; i < codes.size(); ++i)
      CHECK((*got)[i] == f32_to_bf16(e5m2_to_f32(codes[i]) * 2.0f));
  }
  SECTION("malformed scales are errors naming both tensors") {
    std::vector<float> s(4, 1.0f);
    auto e1 = dequantize_fp8(w, view("l.weight_scale", dtype::f32, {4}, s.data()), 0, 0);
    REQUIRE_FALSE(e1);
    CHECK_THAT(e1.err().message, Catch::Contains("l.weight_scale") && Catch::Contains("[4]"));
    const float nan = std::nanf("");
    auto e2 = dequantize_fp8(w, view("l.weight_scale", dtype::f32, {}, &nan), 0, 0);
    REQUIRE_FALSE(e2);
    CHECK_THAT(e2.err().message, Catch::Contains("NaN"));
    const uint8_t q = 1;
    auto e3 = dequantize_fp8(w, view("l.weight_scale", dtype::f8_e4m3, {}, &q), 0, 0);
    REQUIRE_FALSE(e3);
    CHECK_THAT(e3.err().message, Catch::Contains("F8_E4M3"));
  }
}

TEST_CASE("fp8: quantization_config of fp8 and compressed-tensors checkpoints, others refused",
          "[model][fp8][config]") {
  const std::string base =
      R"({"architectures": ["LlamaForCausalLM"], "hidden_size": 64, "intermediate_size": 128,
    "num_hidden_layers": 1, "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 100)";
  auto parse = [&](const std::string& q) {
    return parse_model_config(base + R"(, "quantization_config": )" + q + "}", "c.json");
  };

  auto none = parse_model_config(base + "}", "c.json");
  REQUIRE(none);
  CHECK(none->quantization.method.empty());

  auto block = parse(
      R"({"quant_method": "fp8", "fmt": "e4m3", "activation_scheme": "dynamic", "weight_block_size": [128, 64]})");
  REQUIRE(block);
  CHECK(block->quantization.method == "fp8");
  CHECK(block->quantization.block_rows == 128);
  CHECK(block->quantization.block_cols == 64);
  CHECK_FALSE(block->quantization.static_activations);

  auto tensor = parse(
      R"({"quant_method": "fp8", "activation_scheme": "static", "ignored_layers": ["lm_head"]})");
  REQUIRE(tensor);
  CHECK(tensor->quantization.block_rows == 0);
  CHECK(tensor->quantization.static_activations);

  auto ct = parse(
      R"({"quant_method": "compressed-tensors", "format": "float-quantized", "ignore": ["lm_head"],
    "config_groups": {"group_0": {"targets": ["Linear"],
      "weights": {"num_bits": 8, "type": "float", "strategy": "channel", "symmetric": true, "dynamic": false},
      "input_activations": {"num_bits": 8, "type": "float", "strategy": "token", "dynamic": true}}}})");
  REQUIRE(ct);
  CHECK(ct->quantization.method == "compressed-tensors");
  CHECK_FALSE(ct->quantization.static_activations);

  auto ct_block = parse(R"({"quant_method": "compressed-tensors", "format": "float-quantized",
    "config_groups": {"g": {"weights": {"num_bits": 8, "type": "float", "strategy": "block", "block_structure": [128, 128]},
      "input_activations": {"num_bits": 8, "type": "float", "dynamic": false}}}})");
  REQUIRE(ct_block);
  CHECK(ct_block->quantization.block_rows == 128);
  CHECK(ct_block->quantization.static_activations);

  for (
      auto [q, needle] : std::initializer_list<std::pair<const char*, const char*>>{
          {R"({"quant_method": "gptq", "bits": 4})", "'gptq' is not supported"},
          {R"({"quant_method": "awq"})", "'awq' is not supported"},
          {R"({"bits": 4})", "no quant_method"},
          {R"({"quant_method": "fp8", "weight_block_size": [128]})", "weight_block_size"},
          {R"({"quant_method": "fp8", "activation_scheme": "per-token"})", "activation_scheme"},
          {R"({"quant_method": "compressed-tensors", "format": "pack-quantized", "config_groups": {}})",
           "pack-quantized"},
          {R"({"quant_method": "compressed-tensors", "format": "float-quantized",
                "config_groups": {"g": {"weights": {"num_bits": 4, "type": "float", "strategy": "channel"}}}})",
           "8-bit float"},
          {R"({"quant_method": "compressed-tensors", "format": "float-quantized",
                "config_groups": {"g": {"weights": {"num_bits": 8, "type": "float", "strategy": "group"}}}})",
           "'group'"},
          {R"("fp8")", "must be an object"}}) {
    CAPTURE(q);
    auto r = parse(q);
    REQUIRE_FALSE(r);
    CHECK_THAT(r.err().message, Catch::Contains(needle) && Catch::Contains("c.json"));
  }
}

}  // namespace coserve
