// Render and parse bounds: runaway templates (deep nesting, unbounded recursion, huge ranges and
// repetitions, 64-bit overflow, endless work) end in errors, never in a crash or a hang.
#include <catch2/catch.hpp>
#include <string>

#include "model/text/jinja/chat_template.hpp"
#include "model/text/jinja/jvalue.hpp"

using namespace coserve;

namespace {

result<std::string> render(const std::string& src, const template_limits& limits = {}) {
  auto t = chat_template::parse(src);
  if (!t) return t.err();
  return t->render(json::object{}, 1721995200, limits);
}

void require_error(const result<std::string>& r, const std::string& code, const std::string& part) {
  REQUIRE_FALSE(r);
  CHECK(r.err().code == code);
  CHECK_THAT(r.err().message, Catch::Contains(part));
}

}  // namespace

TEST_CASE("chat_template limits: nesting beyond 100 levels is a syntax error",
          "[chat_template][limits]") {
  require_error(render("{{ " + std::string(150, '(') + "1" + std::string(150, ')') + " }}"),
                "template_syntax", "nested deeper");
  require_error(render("{{ " + std::string(300, '-') + "1 }}"), "template_syntax", "nested deeper");
  std::string ifs;
  for (int i = 0; i < 150; ++i) ifs += "{% if true %}";
  for (int i = 0; i < 150; ++i) ifs += "{% endif %}";
  require_error(render(ifs), "template_syntax", "nested deeper");
  CHECK(*render("{{ " + std::string(50, '(') + "7" + std::string(50, ')') + " }}") == "7");
}

TEST_CASE("chat_template limits: unbounded macro recursion stops at max_depth",
          "[chat_template][limits]") {
  const std::string src = "{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}";
  require_error(render(src), "template_error", "maximum recursion depth");
  // Bounded recursion within the limit renders.
  CHECK(*render("{% macro f(n) %}{% if n > 0 %}{{ n }}{{ f(n - 1) }}{% endif %}{% endmacro %}{{ "
                "f(5) }}") == "54321");
  // Deep left-nested chains built without parser recursion are bounded at render time too.
  std::string chain = "{{ 1";
  for (int i = 0; i < 1000; ++i) chain += "+1";
  require_error(render(chain + " }}"), "template_error", "maximum recursion depth");
}

TEST_CASE("chat_template limits: range() follows jinja2's sandbox MAX_RANGE",
          "[chat_template][limits]") {
  require_error(render("{{ range(100001) | length }}"), "template_error", "Range too big");
  require_error(render("{{ range(-9223372036854775807, 9223372036854775807) | length }}"),
                "template_error", "Range too big");
  CHECK(*render("{{ range(100000) | length }}") == "100000");
  CHECK(*render("{{ range(10, 0, -3) | join(',') }}") == "10,7,4,1");
  CHECK(*render("{{ range(9223372036854775806, 9223372036854775807) | list }}") ==
        "[9223372036854775806]");
}

TEST_CASE("chat_template limits: 64-bit integer overflow is an error", "[chat_template][limits]") {
  for (const char* e : {"9223372036854775807 + 1", "-9223372036854775807 - 2",
                        "4611686018427387904 * 2", "2 ** 63", "3 ** 9223372036854775807",
                        "(-9223372036854775807 - 1) // -1", "-(-9223372036854775807 - 1)"})
    require_error(render(std::string("{{ ") + e + " }}"), "template_error", "integer overflow");
  CHECK(*render("{{ 2 ** 62 }}") == "4611686018427387904");
  CHECK(*render("{{ 1 ** 9223372036854775807 }}") == "1");
  CHECK(*render("{{ (-1) ** 9223372036854775807 }}") == "-1");
  CHECK(*render("{{ (-9223372036854775807 - 1) % -1 }}") == "0");
  require_error(render("{{ range(1e300) }}"), "template_error", "64-bit integer");
}

TEST_CASE("chat_template limits: max_steps and max_bytes bound work and size",
          "[chat_template][limits]") {
  const std::string loops =
      "{% for a in range(1000) %}{% for b in range(1000) %}{% endfor %}{% endfor %}x";
  require_error(render(loops, {.max_steps = 10000}), "template_error", "10000 steps");
  CHECK(*render("{% for a in range(10) %}.{% endfor %}", {.max_steps = 1000}) == "..........");
  require_error(render("{{ 'ab' * 1000 }}", {.max_bytes = 1000}), "template_error",
                "over the 1000 limit");
  require_error(render("{{ [1, 2] * 600 }}", {.max_bytes = 1000}), "template_error",
                "over the 1000 limit");
  require_error(render("{% for i in range(600) %}ab{% endfor %}", {.max_bytes = 1000}),
                "template_error", "limit");
  require_error(render("{{ 'x' * 9223372036854775807 }}"), "template_error",
                "over the 268435456 limit");
  require_error(render("{{ 'xyz' * 9223372036854775807 }}"), "template_error", "integer overflow");
  CHECK(*render("{{ 'ab' * 3 }}", {.max_bytes = 1000}) == "ababab");
}

// Inputs that crashed the fuzz_jinja harness (tests/fuzz/) through UBSan or an allocation of
// gigabytes before the fixes; each now renders as Python does or ends in an error.
TEST_CASE("chat_template limits: fuzz regressions", "[chat_template][limits]") {
  // "%s" formatted into a fixed 512-byte buffer and cut longer strings short.
  CHECK(*render("{{ ('%s' % ('x' * 600)) | length }}") == "600");
  CHECK(*render("{{ '%-+ 0#5.3f|%x|%o|%5s|' % (1.5, 255, 8, 'ab') }}") == "+1.500|ff|10|   ab|");
  require_error(render("{{ '%.999999999f' % 1.5 }}"), "template_error", "format precision");
  require_error(render("{{ '%99999999999999999999d' % 1 }}"), "template_error", "format width");
  require_error(render("{{ 'a' | center(1000000000) }}"), "template_error", "center width");
  require_error(render("{{ 'a' | indent(1000000000) }}"), "template_error", "indent width");
  require_error(render("{{ [1] | tojson(indent=1000000000) }}"), "template_error", "indent");
  CHECK(*render("{{ 'a' | center(-5) }}|{{ 'a\nb' | indent(-3) }}") == "a|a\nb");
  // Signed 64-bit overflow (undefined behaviour) in abs, sum, slices, truncate and range.
  require_error(render("{{ (-9223372036854775807 - 1) | abs }}"), "template_error",
                "integer overflow");
  require_error(render("{{ [1, 2] | sum(start=9223372036854775807) }}"), "template_error",
                "integer overflow");
  CHECK(*render("{{ 'ab'[1:9223372036854775807:9223372036854775807] }}") == "b");
  CHECK(*render("{{ [1, 2, 3][::-9223372036854775807 - 1] }}") == "[3]");
  CHECK(*render("{{ 'x' | truncate(9223372036854775807) }}") == "x");
  CHECK(*render("{{ 'abcdefghijkl' | truncate(-9223372036854775807 - 1) }}") == "...");
  CHECK(*render("{{ range(-9223372036854775807 - 1, 9223372036854775807, 4611686018427387904) | "
                "list }}") ==
        "[-9223372036854775808, -4611686018427387904, 0, 4611686018427387904]");
}

TEST_CASE("chat_template: reference cycles a template builds are freed with the render",
          "[chat_template][limits]") {
  // Found by fuzzing (LeakSanitizer): a namespace holding itself was never freed. Under ASan the
  // leak check at exit fails this test if any of these renders leaks.
  CHECK(*render("{% set ns = namespace(a=0) %}{% set ns.a = ns %}{{ ns.a.a is defined }}") ==
        "True");
  CHECK(
      *render("{% set ns = namespace(l=0) %}{% set ns.l = [ns, {'k': ns}] %}{{ ns.l | length }}") ==
      "2");
  CHECK(*render("{% set a = namespace() %}{% set b = namespace(x=a) %}{% set a.y = b %}{{ "
                "a.y.x.y.x is defined }}") == "True");
  // The same through the arena directly: a self-referencing dict is emptied, so it is freed.
  std::weak_ptr<jinja::jdict> watch;
  {
    jinja::render_arena arena;
    auto d = jinja::new_dict();
    d->set("self", jinja::jvalue(d));
    watch = d;
  }
  CHECK(watch.expired());
  // Made outside an arena: ordinary shared ownership, nothing recorded.
  auto plain = jinja::new_dict();
  CHECK(plain.use_count() == 1);
}

TEST_CASE(
    "chat_template limits: the values a template builds count against max_steps by their size",
    "[chat_template][limits]") {
  // Few statements, much work: each range() builds 100000 items (3125 steps), each product 1 MB.
  const std::string ranges = "{% for i in range(300) %}{% set x = range(100000) %}{% endfor %}done";
  require_error(render(ranges, {.max_steps = 500000}), "template_error", "500000 steps");
  CHECK(*render(ranges, {.max_steps = 2000000}) == "done");
  require_error(render("{% for i in range(50) %}{{ ('x' * 1000000) | length }}{% endfor %}",
                       {.max_steps = 100000}),
                "template_error", "100000 steps");
  // Without a bound nothing is counted against anything.
  CHECK(*render(ranges) == "done");
}
