#include <catch2/catch.hpp>
#include <string>
#include <vector>

#include "actors/stop_checker.hpp"

using coserve::actors::stop_checker;

namespace {
std::string run(stop_checker& c, const std::vector<std::string>& deltas) {
  std::string out;
  for (const auto& d : deltas) out += c.push(d);
  return out;
}
}  // namespace

TEST_CASE("stop_checker: a stop string split across tokens is never emitted", "[actors][stop]") {
  stop_checker c({"END"}, false);
  CHECK(c.push("hello E") == "hello ");  // "E" may start "END": held back
  CHECK(c.push("N") == "");
  CHECK(c.push("D and more") == "");
  CHECK(c.stopped());
  CHECK(c.matched() == "END");
  CHECK(c.push("x") == "");
}

TEST_CASE("stop_checker: a held-back prefix that does not complete is released", "[actors][stop]") {
  stop_checker c({"END"}, false);
  CHECK(run(c, {"a E", "Nx", "y"}) == "a ENxy");
  CHECK_FALSE(c.stopped());
  stop_checker d({"END"}, false);
  CHECK(d.push("EN") == "");
  CHECK(d.flush() == "EN");
}

TEST_CASE("stop_checker: include_stop_str_in_output and earliest match", "[actors][stop]") {
  stop_checker c({"bc", "abcd"}, true);
  CHECK(run(c, {"xa", "b", "c", "d"}) == "xabc");
  CHECK(c.matched() == "bc");
  stop_checker e({"\n\n", "###"}, false);
  CHECK(run(e, {"line\n", "##", "#rest"}) == "line\n");
  CHECK(e.matched() == "###");
}

TEST_CASE("stop_checker: random splits give the same output as one push", "[actors][stop]") {
  const std::string text = "The quick brown fox STOPjumps over STOP the lazy dog";
  const std::vector<std::string> stops{"STOP", "lazy"};
  stop_checker whole(stops, false);
  const std::string expected = whole.push(text) + whole.flush();
  CHECK(expected == "The quick brown fox ");
  for (uint32_t seed = 1; seed < 50; ++seed) {
    stop_checker c(stops, false);
    std::string out;
    uint32_t x = seed;
    for (size_t i = 0; i < text.size();) {
      x = x * 1103515245u + 12345u;
      const size_t len = 1 + (x >> 16) % 4;
      out += c.push(text.substr(i, len));
      i += len;
    }
    out += c.flush();
    CHECK(out == expected);
  }
}
