// Reasoning parsers: the split of recorded outputs of each family, and the streamed split (any
// piece size) concatenating to the whole-output split.
#include <catch2/catch.hpp>
#include <iterator>
#include <random>
#include <string>

#include "http/reasoning.hpp"

using namespace coserve::http;

namespace {

reasoning_split streamed(const reasoning_parser& p, std::string_view text, size_t step) {
  reasoning_stream s(p);
  reasoning_split all;
  for (size_t i = 0; i < text.size(); i += step) {
    auto part = s.push(text.substr(i, step));
    all.reasoning += part.reasoning;
    all.content += part.content;
    all.has_reasoning |= part.has_reasoning;
  }
  auto last = s.finish();
  all.reasoning += last.reasoning;
  all.content += last.content;
  all.has_reasoning |= last.has_reasoning;
  return all;
}

}  // namespace

TEST_CASE("reasoning: deepseek_r1 and qwen3 splits", "[reasoning]") {
  const reasoning_parser* r1 = find_reasoning_parser("deepseek_r1");
  const reasoning_parser* q3 = find_reasoning_parser("qwen3");
  REQUIRE((r1 && q3));
  CHECK(find_reasoning_parser("nope") == nullptr);
  // R1: the prompt opened <think>; the output starts inside it.
  auto s = split_reasoning(*r1, "Okay, 2+2 is 4.\n</think>\n\nThe answer is 4.");
  CHECK(s.has_reasoning);
  CHECK(s.reasoning == "Okay, 2+2 is 4.\n");
  CHECK(s.content == "\n\nThe answer is 4.");
  s = split_reasoning(*r1, "<think>\nhmm</think>ok");
  CHECK((s.reasoning == "\nhmm" && s.content == "ok"));
  s = split_reasoning(*r1, "still thinking when max_tokens hit");
  CHECK((s.has_reasoning && s.reasoning == "still thinking when max_tokens hit" &&
         s.content.empty()));
  // Qwen3: reasoning only after a leading <think>.
  s = split_reasoning(*q3, "<think>\nLet me see.\n</think>\n\nParis.");
  CHECK((s.has_reasoning && s.reasoning == "\nLet me see.\n" && s.content == "\n\nParis."));
  s = split_reasoning(*q3, "Paris, without thinking. </think> stays");
  CHECK_FALSE(s.has_reasoning);
  CHECK(s.content == "Paris, without thinking. </think> stays");
  s = split_reasoning(*q3, "  <think>cut off");
  CHECK((s.has_reasoning && s.reasoning == "cut off" && s.content.empty()));
}

TEST_CASE("reasoning: streamed in any pieces equals the whole split", "[reasoning]") {
  const char* texts[] = {"Okay.</think>Answer <tool_call>{}</tool_call>",
                         "<think>a</think>b",
                         "<thi",
                         "no tags at all",
                         "<think></think>",
                         "  \n<think>x</thi",
                         "</think>",
                         "abc</think",
                         "x</think></think>y"};
  for (const char* name : {"deepseek_r1", "qwen3"})
    for (const char* t : texts)
      for (size_t step : {1, 2, 5, 100}) {
        const reasoning_parser& p = *find_reasoning_parser(name);
        auto whole = split_reasoning(p, t);
        auto parts = streamed(p, t, step);
        INFO(name << " '" << t << "' step " << step);
        CHECK(parts.reasoning == whole.reasoning);
        CHECK(parts.content == whole.content);
        CHECK(parts.has_reasoning == whole.has_reasoning);
      }
}

TEST_CASE("reasoning: random outputs split at random points equal the whole split", "[reasoning]") {
  const char* frags[] = {"<think>", "</think>",     "<thi", "nk>", "</", "think>",
                         "<",       "Let me see. ", "\n",   " ",   "é😀", "ok"};
  std::mt19937 rng(7);
  for (const char* name : {"deepseek_r1", "qwen3"}) {
    const reasoning_parser& p = *find_reasoning_parser(name);
    for (int n = 0; n < 1000; ++n) {
      std::string text;
      for (int k = 1 + int(rng() % 6); k > 0; --k) text += frags[rng() % std::size(frags)];
      const auto whole = split_reasoning(p, text);
      reasoning_stream s(p);
      reasoning_split all;
      for (size_t i = 0; i < text.size();) {
        const size_t step = 1 + rng() % 6;
        auto part = s.push(std::string_view(text).substr(i, step));
        all.reasoning += part.reasoning;
        all.content += part.content;
        all.has_reasoning |= part.has_reasoning;
        i += step;
      }
      auto last = s.finish();
      all.reasoning += last.reasoning;
      all.content += last.content;
      all.has_reasoning |= last.has_reasoning;
      INFO(name << " '" << text << "'");
      CHECK(all.reasoning == whole.reasoning);
      CHECK(all.content == whole.content);
      CHECK(all.has_reasoning == whole.has_reasoning);
    }
  }
}
