#include <catch2/catch.hpp>
#include <filesystem>

#include "model/config.hpp"
#include "model/demo_args.hpp"
#include "model_test_util.hpp"
#include "tests/skip.hpp"

namespace coserve {

TEST_CASE("demo model: same options, same bytes, another seed, other weights", "[model][demo]") {
  test::temp_dir a("demo-a"), b("demo-b"), c("demo-c");
  REQUIRE(make_demo_model(a.str(), test::tiny_options(1)).ok());
  REQUIRE(make_demo_model(b.str(), test::tiny_options(1)).ok());
  REQUIRE(make_demo_model(c.str(), test::tiny_options(2)).ok());
  auto ra = read_text_file(a.file("model.safetensors"));
  auto rb = read_text_file(b.file("model.safetensors"));
  auto rc = read_text_file(c.file("model.safetensors"));
  REQUIRE((ra.ok() && rb.ok() && rc.ok()));
  CHECK(*ra == *rb);
  CHECK(*ra != *rc);
  auto cfg = load_model_config(a.str());
  REQUIRE(cfg.ok());
  CHECK(cfg->vocab_size == 96);
  CHECK(cfg->num_key_value_heads == 2);
  auto gen = load_generation_config(a.str());
  REQUIRE(gen.ok());
  CHECK(gen->eos_token_ids == std::vector<int32_t>{95});
}

TEST_CASE("demo model: flags parse into options, bad flags are errors", "[model][demo]") {
  auto ok = parse_demo_args({"DIR", "--seed", "5", "--architecture", "qwen2", "--dtype", "f16",
                             "--num-kv-heads", "1", "--rope-scaling", "llama3", "--tie-embeddings",
                             "--head-dim", "16"});
  REQUIRE(ok.ok());
  CHECK(ok->dir == "DIR");
  CHECK(ok->options.seed == 5);
  CHECK(ok->options.architecture == "qwen2");
  CHECK(ok->options.weight_dtype == dtype::f16);
  CHECK(ok->options.num_kv_heads == 1);
  CHECK(ok->options.rope_type == "llama3");
  CHECK(ok->options.tie_embeddings);
  CHECK(ok->options.head_dim == 16);
  CHECK(parse_demo_args({"--help"})->help);
  CHECK_FALSE(parse_demo_args({"--dtype", "int8"}).ok());
  CHECK_FALSE(parse_demo_args({"--rope-scaling", "dynamic"}).ok());
  CHECK(parse_demo_args({"DIR", "--rope-scaling", "yarn"})->options.rope_type == "yarn");
  CHECK_FALSE(parse_demo_args({"--hidden-size", "x"}).ok());
  CHECK_FALSE(parse_demo_args({"--hidden-size"}).ok());
  CHECK_FALSE(parse_demo_args({"--bogus"}).ok());
  CHECK_FALSE(parse_demo_args({"a", "b"}).ok());
  test::temp_dir d("demo-bad");
  auto o = test::tiny_options();
  o.architecture = "gpt2";
  CHECK_FALSE(make_demo_model(d.str(), o).ok());
  o = test::tiny_options();
  o.num_kv_heads = 3;
  CHECK_FALSE(make_demo_model(d.str(), o).ok());
  o = test::tiny_options();
  o.vocab_size = 0;
  CHECK_FALSE(make_demo_model(d.str(), o).ok());
}

TEST_CASE("demo model: default tokenizer copied, vocabulary taken from it", "[model][demo]") {
  COSERVE_SKIP_UNLESS_EXISTS(test::testdata() / "tokenizers/gpt2/tokenizer.json");
  test::temp_dir d("demo-tok");
  demo_options o = test::tiny_options();
  o.copy_tokenizer = true;
  o.vocab_size = 0;
  o.weight_dtype = dtype::bf16;
  REQUIRE(make_demo_model(d.str(), o).ok());
  CHECK(std::filesystem::exists(d.file("tokenizer.json")));
  CHECK(std::filesystem::exists(d.file("tokenizer_config.json")));
  auto cfg = load_model_config(d.str());
  REQUIRE(cfg.ok());
  CHECK(cfg->vocab_size == 50257);
  CHECK(cfg->eos_token_ids == std::vector<int32_t>{50256});
  CHECK(cfg->torch_dtype == dtype::bf16);
  // Rewriting over an existing folder (tokenizer copies must be writable).
  REQUIRE(make_demo_model(d.str(), o).ok());
}

}  // namespace coserve
