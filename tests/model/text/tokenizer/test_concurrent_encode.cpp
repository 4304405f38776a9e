// encode/decode are const and may run on several threads at once (the BPE word cache is the only
// shared mutable state). Several threads encoding overlapping texts must each get exactly the
// single-threaded ids. Runs under TSan in CI (label concurrency).
#include <catch2/catch.hpp>
#include <thread>

#include "model/text/tokenizer/tokenizer.hpp"
#include "tests/model/text/tokenizer/test_support.hpp"

using namespace coserve;

TEST_CASE("concurrent encode matches single-threaded ids", "[tokenizer][concurrency]") {
  const auto path = test::fixtures() / "synthetic-ignore-merges.tokenizer.json";
  auto reference = tokenizer::load(path);
  auto shared = tokenizer::load(path);
  REQUIRE(reference.ok());
  REQUIRE(shared.ok());
  std::vector<std::string> texts;
  for (int i = 0; i < 64; ++i)
    texts.push_back("text " + std::to_string(i * 7919) + " the quick brown fox " +
                    std::string(i % 9, ' ') + "jumps over the lazy dog \xE4\xBD\xA0\xE5\xA5\xBD " +
                    std::to_string(i));
  std::vector<std::vector<int32_t>> expected;
  for (const auto& t : texts) expected.push_back(reference->encode(t, true));

  constexpr int k_threads = 4;
  std::vector<int> mismatches(k_threads, 0);
  std::vector<std::thread> threads;
  for (int th = 0; th < k_threads; ++th)
    threads.emplace_back([&, th] {
      const tokenizer copy = *shared;  // copies share the loaded state and its cache
      for (int round = 0; round < 20; ++round)
        for (std::size_t i = 0; i < texts.size(); ++i) {
          const std::size_t k = (i * (th + 1) + static_cast<std::size_t>(round)) % texts.size();
          if (copy.encode(texts[k], true) != expected[k])
            ++mismatches[static_cast<std::size_t>(th)];
          if (copy.decode(expected[k], true).empty()) ++mismatches[static_cast<std::size_t>(th)];
        }
    });
  for (auto& t : threads) t.join();
  for (int m : mismatches) CHECK(m == 0);
}
