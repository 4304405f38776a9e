// The JSON-schema checks run before xgrammar compiles a schema: ignored keywords, and oneOf
// branches proven disjoint (so the anyOf grammar xgrammar builds for them is exact).
#include <catch2/catch.hpp>
#include <string>

#include "model/json_schema_check.hpp"
#include "model/text/json/value.hpp"

namespace {

coserve::json::value parse(const char* text) {
  auto v = coserve::json::parse(text);
  REQUIRE(v);
  return std::move(*v);
}

bool disjoint(const char* schema) { return coserve::one_of_branches_disjoint(parse(schema)); }

}  // namespace

TEST_CASE("schema check: keywords the grammar engine would ignore are named with their path",
          "[structured]") {
  using coserve::unsupported_schema_keyword;
  CHECK(unsupported_schema_keyword(
            parse(R"({"type":"object","properties":{"a":{"type":"integer"}}})"))
            .empty());
  CHECK(unsupported_schema_keyword(parse(R"({"type":"array","uniqueItems":true})")) ==
        "uniqueItems");
  CHECK(unsupported_schema_keyword(
            parse(R"({"properties":{"a":{"items":{"not":{"type":"null"}}}}})")) ==
        "properties.a.items.not");
  CHECK(unsupported_schema_keyword(parse(R"({"anyOf":[{"type":"string"},{"if":{},"then":{}}]})")) ==
        "anyOf[1].if");
  CHECK(unsupported_schema_keyword(parse(R"({"$defs":{"x":{"contains":{}}}})")) ==
        "$defs.x.contains");
  // Data is not schema: the members of a const value are not keywords.
  CHECK(unsupported_schema_keyword(parse(R"({"const":{"not":1}})")).empty());
}

TEST_CASE("schema check: oneOf branches of different JSON types are disjoint", "[structured]") {
  CHECK(disjoint(R"({"type":"object"})"));  // no oneOf at all
  CHECK(disjoint(
      R"({"oneOf":[{"type":"object","properties":{"a":{"type":"integer"}}},{"type":"string"}]})"));
  CHECK(disjoint(R"({"oneOf":[{"type":"string","format":"email"},{"type":"null"}]})"));
  CHECK(disjoint(R"({"oneOf":[{"type":["string","null"]},{"type":"array"},{"type":"boolean"}]})"));
  CHECK(disjoint(R"({"oneOf":[{"type":"integer"},{"const":2.5}]})"));  // 2.5 is not an integer
  CHECK(disjoint(R"({"oneOf":[{"anyOf":[{"type":"string"},{"type":"null"}]},{"type":"number"}]})"));
  // integer lies within number; 2.0 is an integer; a schema without a type may be anything.
  CHECK_FALSE(disjoint(R"({"oneOf":[{"type":"integer"},{"type":"number"}]})"));
  CHECK_FALSE(disjoint(R"({"oneOf":[{"type":"integer"},{"const":2.0}]})"));
  CHECK_FALSE(disjoint(R"({"oneOf":[{"type":"object"},{"properties":{"a":{}}}]})"));
  CHECK_FALSE(disjoint(R"({"oneOf":[{"type":"string"},{"type":"string","maxLength":3}]})"));
  CHECK_FALSE(disjoint(R"({"oneOf":[{"type":"string"},true]})"));
}

TEST_CASE("schema check: finite oneOf branches are disjoint when no value is shared",
          "[structured]") {
  CHECK(disjoint(R"({"oneOf":[{"enum":["a","b"]},{"enum":["c",1]},{"const":"d"}]})"));
  CHECK_FALSE(disjoint(R"({"oneOf":[{"enum":[1,"a"]},{"enum":[1.0]}]})"));  // 1 == 1.0
  CHECK_FALSE(disjoint(
      R"({"oneOf":[{"const":{"a":1,"b":[2]}},{"const":{"b":[2],"a":1}}]})"));  // member order
  CHECK(disjoint(
      R"({"oneOf":[{"const":[1,2]},{"enum":[1,2]}]})"));  // the array [1,2] vs the numbers 1 and 2
}

TEST_CASE("schema check: object branches told apart by a required discriminator, through $refs",
          "[structured]") {
  // Pydantic's tagged union: oneOf over $refs, the tag a const or a one-value enum.
  CHECK(disjoint(R"({"$defs":{
      "Cat":{"type":"object","properties":{"pet_type":{"const":"cat"},"meows":{"type":"integer"}},"required":["pet_type","meows"]},
      "Dog":{"type":"object","properties":{"pet_type":{"enum":["dog"],"type":"string"}},"required":["pet_type"]}},
    "type":"object","properties":{"pet":{"oneOf":[{"$ref":"#/$defs/Cat"},{"$ref":"#/$defs/Dog"}],
                                         "discriminator":{"propertyName":"pet_type"}}}})"));
  // The tag itself behind a $ref, and JSON-pointer escapes in the path.
  CHECK(disjoint(R"({"definitions":{"a~b":{"const":"x"},"c/d":{"const":"y"}},"oneOf":[
      {"type":"object","properties":{"k":{"$ref":"#/definitions/a~0b"}},"required":["k"]},
      {"type":"object","properties":{"k":{"$ref":"#/definitions/c~1d"}},"required":["k"]}]})"));
  // Not required on one side: {"other": 1} would match both objects.
  CHECK_FALSE(disjoint(R"({"oneOf":[
      {"type":"object","properties":{"k":{"const":"x"}},"required":["k"]},
      {"type":"object","properties":{"k":{"const":"y"}}}]})"));
  // Overlapping tags.
  CHECK_FALSE(disjoint(R"({"oneOf":[
      {"type":"object","properties":{"k":{"enum":["x","y"]}},"required":["k"]},
      {"type":"object","properties":{"k":{"const":"y"}},"required":["k"]}]})"));
  // A branch that need not be an object: "required" says nothing about strings.
  CHECK_FALSE(disjoint(R"({"oneOf":[
      {"properties":{"k":{"const":"x"}},"required":["k"]},
      {"type":"object","properties":{"k":{"const":"y"}},"required":["k"]}]})"));
  // A dangling $ref proves nothing; nested oneOfs are checked too.
  CHECK_FALSE(disjoint(R"({"oneOf":[{"$ref":"#/$defs/none"},{"type":"string"}]})"));
  CHECK_FALSE(disjoint(
      R"({"type":"object","properties":{"a":{"type":"array","items":{"oneOf":[{"type":"number"},{"type":"integer"}]}}}})"));
  CHECK(disjoint(
      R"({"type":"object","properties":{"a":{"type":"array","items":{"oneOf":[{"type":"number"},{"type":"string"}]}}}})"));
}

TEST_CASE("schema check: constraints beside the one keyword the grammar engine reads are named",
          "[structured]") {
  // The explanation's head: "path: 'k' beside 'D'" or "path: 'k' without a 'type'".
  auto ignored = [](const char* s) {
    std::string why = coserve::ignored_beside_keyword(parse(s));
    return why.substr(0, why.find(" is not enforced"));
  };
  // Redundant or harmless siblings: annotations, a type every value or branch has, a keyword of a
  // type the grammar cannot emit there, object keywords without a type, propertyNames' strings.
  CHECK(ignored(R"({"enum":["a","b"],"type":"string","title":"Color","description":"d"})").empty());
  CHECK(ignored(R"({"const":"cat","type":"string"})").empty());
  CHECK(ignored(R"({"type":["integer","null"],"enum":[1,null]})").empty());
  CHECK(ignored(R"({"const":"a","enum":["a","b"]})").empty());
  CHECK(ignored(R"({"enum":[1,2],"maxLength":3})").empty());
  CHECK(ignored(R"({"anyOf":[{"type":"integer"},{"type":"null"}],"default":null,"title":"Age"})")
            .empty());
  CHECK(ignored(R"({"anyOf":[{"type":"integer"},{"type":"number"}],"type":"number"})").empty());
  CHECK(
      ignored(R"({"$ref":"#/$defs/a","description":"x","$defs":{"a":{"type":"string"}}})").empty());
  CHECK(ignored(R"({"properties":{"a":{"type":"integer"}},"required":["a"]})").empty());
  CHECK(ignored(R"({"type":"object","propertyNames":{"pattern":"^[a-c]$"}})").empty());
  // Constraints the grammar engine would not apply.
  CHECK(ignored(R"({"type":"integer","enum":[1,"a"]})") == "the schema: 'type' beside 'enum'");
  CHECK(ignored(R"({"const":"x","enum":["a"]})") == "the schema: 'enum' beside 'const'");
  CHECK(ignored(R"({"enum":["abcd"],"maxLength":3})") == "the schema: 'maxLength' beside 'enum'");
  CHECK(
      ignored(
          R"({"properties":{"p":{"$ref":"#/$defs/a","maxLength":2}},"$defs":{"a":{"type":"string"}}})") ==
      "properties.p: 'maxLength' beside '$ref'");
  CHECK(ignored(R"({"type":"object","properties":{"a":{}},"anyOf":[{"required":["a"]}]})") ==
        "the schema: 'type' beside 'anyOf'");
  CHECK(ignored(R"({"anyOf":[{"type":"string"},{"type":"null"}],"minLength":2})") ==
        "the schema: 'minLength' beside 'anyOf'");
  CHECK(ignored(R"({"allOf":[{"type":"integer"},{"maximum":7}]})") ==
        "allOf[1]: 'maximum' without a 'type'");
  CHECK(ignored(R"({"type":"array","items":{"minLength":1}})") ==
        "items: 'minLength' without a 'type'");
  CHECK(ignored(R"({"oneOf":[{"type":"string"},{"type":"null"}],"anyOf":[{"type":"string"}]})") ==
        "the schema: 'oneOf' beside 'anyOf'");
  CHECK(coserve::ignored_beside_keyword(
            parse(R"({"$ref":"#/$defs/a","maxLength":2,"$defs":{"a":{"type":"string"}}})")) ==
        "the schema: 'maxLength' beside '$ref' is not enforced (the grammar engine reads only "
        "'$ref' in a schema "
        "object; move 'maxLength' into it)");
}
