// The teacher-forced logprobs-close criterion (tests/model/logprobs_close.hpp): its verdicts on
// constructed rows, and two real CPU executors that differ only in rounding (fp32 vs bf16
// activations of bf16 weights) pass it on every prompt. The GPU executor's comparison against the
// CPU executor uses the same functions (tests/gpu/test_gpu_executor.cpp).
#include <catch2/catch.hpp>

#include "model_test_util.hpp"
#include "tests/model/logprobs_close.hpp"

namespace coserve {

TEST_CASE(
    "logprobs close: equal argmaxes pass, a flip inside both top-5 stops there, one outside fails",
    "[model][logprobs_close]") {
  const std::vector<float> base{0.1f, 3.0f, 2.9f, 0.5f, -1.0f, 0.2f, 0.3f, 0.0f};
  auto flipped = base;
  flipped[2] = 3.1f;  // the near-tie flips
  auto far = base;
  far[4] = 9.0f;  // a token the other side ranks last
  {
    auto r = test::logprobs_close({base, base, base}, {base, base, base});
    CHECK(r.ok);
    CHECK(r.steps_compared == 3);
    CHECK(r.diverged_at == -1);
  }
  {
    auto r = test::logprobs_close({base, base, base}, {base, flipped, far});
    CHECK(r.ok);
    CHECK(r.diverged_at == 1);
    CHECK(r.steps_compared == 2);  // the prompt's comparison stops at the allowed divergence
    CHECK(r.max_abs_logit_diff[1] == Approx(0.2f));
  }
  {
    auto r = test::logprobs_close({base, base}, {base, far});
    CHECK_FALSE(r.ok);
    CHECK_THAT(r.why, Catch::Contains("step 1"));
  }
  CHECK_FALSE(test::logprobs_close({base}, {{1.0f}}).ok);
}

TEST_CASE(
    "logprobs close: fp32 and bf16 activations and KV cache of the same bf16 model pass, "
    "teacher-forced",
    "[model][logprobs_close]") {
  test::temp_dir dir("close");
  demo_options dm = test::tiny_options(41);
  dm.weight_dtype = dtype::bf16;
  REQUIRE(make_demo_model(dir.str(), dm).ok());
  auto make = [&](bool bf16) {
    cpu_executor_options o;
    o.num_kv_blocks = 32;
    o.num_threads = 1;
    o.return_logits = true;
    o.bf16_activations = bf16;
    o.kv_cache_dtype = bf16 ? dtype::bf16 : dtype::f32;
    auto ex = cpu_executor::load(dir.str(), o);
    REQUIRE(ex.ok());
    return std::move(*ex);
  };
  auto ref = make(false);
  auto other = make(true);
  float worst = 0.0f;
  int diverged = 0;
  for (int32_t i = 0; i < 8; ++i) {
    CAPTURE(i);
    std::vector<int32_t> prompt;
    for (int32_t t = 0; t < 3 + 4 * i; ++t) prompt.push_back((t * 7 + i * 13) % 90 + 3);
    const auto a = test::run_logits(*ref, 1, prompt, nullptr, 24, 16);
    REQUIRE(a.rows.size() == 25);
    const auto b = test::run_logits(*other, 1, prompt, &a.tokens, 24, 16);
    REQUIRE(b.rows.size() == 25);
    const auto r = test::logprobs_close(a.rows, b.rows);
    INFO(r.why);
    CHECK(r.ok);
    diverged += r.diverged_at >= 0;
    for (float d : r.max_abs_logit_diff) worst = std::max(worst, d);
    CHECK(r.max_abs_logit_diff[0] > 0.0f);  // the two really round differently
  }
  INFO("largest |logit difference| " << worst
                                     << ", prompts with an allowed divergence: " << diverged);
  CHECK(worst < 0.5f);
}

}  // namespace coserve
