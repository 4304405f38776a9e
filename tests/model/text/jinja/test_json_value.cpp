// JSON value: construction, access, parsing and Python-compatible dumping.
#include <catch2/catch.hpp>

#include "model/text/json/value.hpp"

using namespace coserve;
using json::value;

TEST_CASE("json value kinds and accessors", "[json]") {
  value n;
  CHECK(n.is_null());
  value b = true, i = 42, d = 1.5, s = "hi";
  CHECK(b.is_bool());
  CHECK(i.is_int());
  CHECK(i.as_double() == 42.0);
  CHECK(d.is_double());
  CHECK(d.is_number());
  CHECK(s.is_string());
  CHECK(s.as_string() == "hi");
  value o;
  o["a"] = 1;
  o["b"].push_back("x");
  o["a"] = 2;
  REQUIRE(o.is_object());
  CHECK(o.size() == 2);
  CHECK(o.find("a")->as_int() == 2);
  CHECK(o.find("zz") == nullptr);
  CHECK(o.as_object()[0].first == "a");
  CHECK(value(1) == value(1.0));
  CHECK_FALSE(value(1) == value("1"));
  CHECK(value(uint32_t{7}).as_int() == 7);
}

TEST_CASE("json parse keeps order, rejects invalid input", "[json]") {
  auto v = json::parse(R"({"z":1,"a":[true,null,2.5,"\u00e9"],"big":123456789012345678901234})");
  REQUIRE(v.ok());
  CHECK(v->as_object()[0].first == "z");
  CHECK(v->find("a")->as_array()[3].as_string() == "\xc3\xa9");
  CHECK(v->find("big")->is_double());
  CHECK_FALSE(json::parse("{\"a\":").ok());
  CHECK_FALSE(json::parse("\"\xff\"").ok());
  CHECK(json::parse("{\"a\":1,\"a\":2}")->find("a")->as_int() == 2);
}

TEST_CASE("json dump matches Python json.dumps", "[json]") {
  auto v = json::parse(R"({"a":[1,2.0,0.1,1e-05,1e20,null,true],"b":{"c":"q\"\n\u00e9"}})");
  REQUIRE(v.ok());
  CHECK(json::dump(*v) == R"({"a": [1, 2.0, 0.1, 1e-05, 1e+20, null, true], "b": {"c": "q\"\n)"
                          "\xc3\xa9\"}}");
  json::dump_options o;
  o.ensure_ascii = true;
  CHECK(json::dump(value("\xc3\xa9\xf0\x9f\x98\x80"), o) == R"("\u00e9\ud83d\ude00")");
  o = {};
  o.indent = 2;
  CHECK(json::dump(*json::parse(R"({"a":[1,2],"b":{}})"), o) ==
        "{\n  \"a\": [\n    1,\n    2\n  ],\n  \"b\": {}\n}");
  o = {};
  o.sort_keys = true;
  CHECK(json::dump(*json::parse(R"({"b":1,"a":2})"), o) == R"({"a": 2, "b": 1})");
  std::string c;
  json::dump_compact(*json::parse(R"({"a": 1, "b": [1, 2]})"), c);
  CHECK(c == R"({"a":1,"b":[1,2]})");
}

TEST_CASE("floats print as Python repr", "[json]") {
  auto f = [](double d) {
    std::string s;
    json::append_python_float(s, d);
    return s;
  };
  CHECK(f(1.0) == "1.0");
  CHECK(f(0.1) == "0.1");
  CHECK(f(1e-05) == "1e-05");
  CHECK(f(0.0001) == "0.0001");
  CHECK(f(1e16) == "1e+16");
  CHECK(f(1e15) == "1000000000000000.0");
  CHECK(f(123.456) == "123.456");
  CHECK(f(-2.5e-7) == "-2.5e-07");
  CHECK(f(1.7976931348623157e308) == "1.7976931348623157e+308");
  CHECK(f(0.0) == "0.0");
  CHECK(json::dump(value(std::numeric_limits<double>::infinity())) == "Infinity");
}
