// safetensors reading/writing and the clear errors for malformed files and folders.
#include <catch2/catch.hpp>
#include <cstring>

#include "model/safetensors.hpp"
#include "model/weights.hpp"
#include "model_test_util.hpp"

namespace coserve {
namespace {

tensor_data f32_tensor(const std::string& name, std::vector<int64_t> shape, float start) {
  tensor_data t{name, dtype::f32, std::move(shape), {}};
  size_t n = 1;
  for (auto d : t.shape) n *= size_t(d);
  t.bytes.resize(n * 4);
  for (size_t i = 0; i < n; ++i) {
    const float v = start + float(i);
    std::memcpy(t.bytes.data() + 4 * i, &v, 4);
  }
  return t;
}

std::string header_file(const std::string& header, size_t data_bytes) {
  std::string s(8, '\0');
  const uint64_t n = header.size();
  for (int i = 0; i < 8; ++i) s[size_t(i)] = char((n >> (8 * i)) & 0xff);
  return s + header + std::string(data_bytes, '\0');
}

}  // namespace

TEST_CASE("safetensors: write and read back f32/f16/bf16", "[model][safetensors]") {
  test::temp_dir dir("st");
  std::vector<tensor_data> ts{f32_tensor("a", {2, 3}, 1.0f)};
  tensor_data h{"h", dtype::f16, {2}, {}};
  for (float v : {0.5f, -2.0f}) {
    const uint16_t x = f32_to_f16(v);
    h.bytes.push_back(std::byte(x & 0xff));
    h.bytes.push_back(std::byte(x >> 8));
  }
  tensor_data b{"b", dtype::bf16, {1}, {}};
  const uint16_t y = f32_to_bf16(3.0f);
  b.bytes = {std::byte(y & 0xff), std::byte(y >> 8)};
  ts.push_back(h);
  ts.push_back(b);
  REQUIRE(write_safetensors(dir.file("model.safetensors"), ts).ok());
  auto set = safetensors_set::open_dir(dir.str());
  REQUIRE(set.ok());
  CHECK(set->size() == 3);
  auto a = set->get("a", {2, 3});
  REQUIRE(a.ok());
  float got[6];
  convert_to_f32((*a)->type, (*a)->data, got, 6);
  CHECK(got[0] == 1.0f);
  CHECK(got[5] == 6.0f);
  auto hv = set->get("h");
  REQUIRE(hv.ok());
  convert_to_f32((*hv)->type, (*hv)->data, got, 2);
  CHECK(got[0] == 0.5f);
  CHECK(got[1] == -2.0f);
  auto bv = set->get("b", {1});
  REQUIRE(bv.ok());
  convert_to_f32((*bv)->type, (*bv)->data, got, 1);
  CHECK(got[0] == 3.0f);

  auto wrong = set->get("a", {3, 2});
  REQUIRE_FALSE(wrong.ok());
  CHECK_THAT(wrong.err().message, Catch::Contains("'a'") && Catch::Contains("[2, 3]") &&
                                      Catch::Contains("model.safetensors"));
  auto missing = set->get("nope");
  REQUIRE_FALSE(missing.ok());
  CHECK_THAT(missing.err().message, Catch::Contains("'nope'"));
}

TEST_CASE("safetensors: sharded checkpoints via the index", "[model][safetensors]") {
  test::temp_dir dir("shard");
  REQUIRE(write_safetensors(dir.file("m-1.safetensors"), {f32_tensor("x", {2}, 0.0f)}).ok());
  REQUIRE(write_safetensors(dir.file("m-2.safetensors"), {f32_tensor("y", {3}, 10.0f)}).ok());
  test::write_file(dir.file("model.safetensors.index.json"),
                   R"({"metadata":{},"weight_map":{"x":"m-1.safetensors","y":"m-2.safetensors"}})");
  auto set = safetensors_set::open_dir(dir.str());
  REQUIRE(set.ok());
  auto y = set->get("y", {3});
  REQUIRE(y.ok());
  CHECK((*y)->file == dir.file("m-2.safetensors"));
  float v[3];
  convert_to_f32(dtype::f32, (*y)->data, v, 3);
  CHECK(v[2] == 12.0f);

  test::write_file(dir.file("model.safetensors.index.json"),
                   R"({"weight_map":{"x":"m-1.safetensors","z":"m-2.safetensors"}})");
  auto bad = safetensors_set::open_dir(dir.str());
  REQUIRE_FALSE(bad.ok());
  CHECK_THAT(bad.err().message, Catch::Contains("'z'") && Catch::Contains("m-2.safetensors"));
  test::write_file(dir.file("model.safetensors.index.json"),
                   R"({"weight_map":{"x":"../m-1.safetensors"}})");
  CHECK_FALSE(safetensors_set::open_dir(dir.str()).ok());
  test::write_file(dir.file("model.safetensors.index.json"), R"({"nothing":1})");
  auto nomap = safetensors_set::open_dir(dir.str());
  REQUIRE_FALSE(nomap.ok());
  CHECK_THAT(nomap.err().message, Catch::Contains("weight_map"));
}

TEST_CASE("safetensors: malformed files are errors naming file and tensor",
          "[model][safetensors]") {
  test::temp_dir dir("bad");
  const std::string path = dir.file("model.safetensors");
  auto open_err = [&](const std::string& bytes) {
    test::write_file(path, bytes);
    auto f = safetensors_file::open(path);
    REQUIRE_FALSE(f.ok());
    CHECK_THAT(f.err().message, Catch::Contains(path));
    return f.err().message;
  };
  CHECK_THAT(open_err("abc"), Catch::Contains("truncated"));
  CHECK_THAT(open_err(std::string("\xff\xff\0\0\0\0\0\0", 8) + "{}"),
             Catch::Contains("header length"));
  CHECK_THAT(open_err(header_file("{not json", 0)), Catch::Contains("header"));
  CHECK_THAT(open_err(header_file(R"({"w":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})", 8)),
             Catch::Contains("'w'") && Catch::Contains("beyond"));
  CHECK_THAT(
      open_err(header_file(R"({"w":{"dtype":"F32","shape":[3],"data_offsets":[0,16]}})", 16)),
      Catch::Contains("'w'") && Catch::Contains("[3]"));
  CHECK_THAT(
      open_err(header_file(R"({"w":{"dtype":"I64","shape":[2],"data_offsets":[0,16]}})", 16)),
      Catch::Contains("'w'") && Catch::Contains("I64"));
  CHECK_THAT(open_err(header_file(R"({"w":{"dtype":"F32","shape":[2]}})", 16)),
             Catch::Contains("'w'"));
  CHECK_THAT(open_err(header_file(R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[8,0]}})", 16)),
             Catch::Contains("'w'"));

  // A valid file cut short: the last tensor's data now lies beyond the end.
  REQUIRE(write_safetensors(path, {f32_tensor("p", {4}, 0.0f), f32_tensor("q", {4}, 0.0f)}).ok());
  std::string whole;
  {
    std::ifstream in(path, std::ios::binary);
    whole.assign(std::istreambuf_iterator<char>(in), {});
  }
  CHECK_THAT(open_err(whole.substr(0, whole.size() - 4)),
             Catch::Contains("'q'") && Catch::Contains("truncated"));
  auto none = safetensors_file::open(dir.file("absent.safetensors"));
  REQUIRE_FALSE(none.ok());
  CHECK(none.err().code == "io");
}

TEST_CASE("safetensors: shapes whose size overflows 64 bits are errors", "[model][safetensors]") {
  // [2^40, 2^40, 16] f32 is 2^86 bytes; computed in 64 bits it wrapped to 0 and matched empty data.
  const std::string header =
      R"({"w":{"dtype":"F32","shape":[1099511627776,1099511627776,16],"data_offsets":[0,0]}})";
  const std::string image = header_file(header, 0);
  auto parsed = parse_safetensors(reinterpret_cast<const std::byte*>(image.data()), image.size(),
                                  "m.safetensors");
  REQUIRE_FALSE(parsed.ok());
  CHECK_THAT(parsed.err().message, Catch::Contains("m.safetensors") && Catch::Contains("'w'"));
  // The same parser accepts an in-memory image and points into it.
  const std::string ok =
      header_file(R"({"w":{"dtype":"BF16","shape":[2,3],"data_offsets":[0,12]}})", 12);
  auto good =
      parse_safetensors(reinterpret_cast<const std::byte*>(ok.data()), ok.size(), "m.safetensors");
  REQUIRE(good.ok());
  const tensor_view& w = good->at("w");
  CHECK(w.nbytes == 12);
  CHECK(w.data == reinterpret_cast<const std::byte*>(ok.data()) + ok.size() - 12);
}

TEST_CASE("weights: malformed model folders are clear errors", "[model][weights]") {
  test::temp_dir dir("folder");
  auto o = test::tiny_options();
  REQUIRE(make_demo_model(dir.str(), o).ok());
  REQUIRE(load_weights(dir.str()).ok());

  size_t calls = 0, last_done = 0, total_seen = 0;
  REQUIRE(load_weights(dir.str(), [&](size_t done, size_t total, size_t) {
            ++calls;
            last_done = done;
            total_seen = total;
          }).ok());
  CHECK(calls == total_seen);
  CHECK(last_done == total_seen);

  // A tensor missing: rewrite the file without one layer weight.
  auto set = safetensors_set::open_dir(dir.str());
  REQUIRE(set.ok());
  std::vector<tensor_data> kept;
  for (const auto& name : set->names()) {
    const tensor_view* v = set->find(name);
    if (name == "model.layers.1.mlp.up_proj.weight") continue;
    tensor_data t{name, v->type, v->shape, std::vector<std::byte>(v->data, v->data + v->nbytes)};
    kept.push_back(std::move(t));
  }
  test::temp_dir dir2("folder2");
  std::filesystem::copy_file(dir.file("config.json"), dir2.file("config.json"));
  REQUIRE(write_safetensors(dir2.file("model.safetensors"), kept).ok());
  auto missing = load_weights(dir2.str());
  REQUIRE_FALSE(missing.ok());
  CHECK_THAT(missing.err().message, Catch::Contains("model.layers.1.mlp.up_proj.weight"));

  // A misshaped tensor: config says hidden 32, make the embedding think otherwise.
  std::string cfg;
  {
    std::ifstream in(dir.file("config.json"));
    cfg.assign(std::istreambuf_iterator<char>(in), {});
  }
  const auto pos = cfg.find("\"vocab_size\": 96");
  REQUIRE(pos != std::string::npos);
  test::write_file(dir.file("config.json"),
                   cfg.substr(0, pos) + "\"vocab_size\": 97" + cfg.substr(pos + 16));
  auto shaped = load_weights(dir.str());
  REQUIRE_FALSE(shaped.ok());
  CHECK_THAT(shaped.err().message,
             Catch::Contains("model.embed_tokens.weight") && Catch::Contains("[96, 32]"));

  std::filesystem::remove(dir.file("config.json"));
  auto nocfg = load_weights(dir.str());
  REQUIRE_FALSE(nocfg.ok());
  CHECK_THAT(nocfg.err().message, Catch::Contains("config.json"));
  std::filesystem::remove(dir2.file("model.safetensors"));
  auto noweights = load_weights(dir2.str());
  REQUIRE_FALSE(noweights.ok());
  CHECK_THAT(noweights.err().message, Catch::Contains("model.safetensors"));
}

}  // namespace coserve
