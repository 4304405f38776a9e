// Checks on a JSON schema before the grammar engine compiles it: keywords it would ignore, and
// whether each oneOf's branches are provably disjoint (so that anyOf semantics, which is what the
// grammar engine builds for a oneOf, accept exactly what oneOf accepts).
#pragma once

#include <string>

#include "model/text/json/value.hpp"

namespace coserve {

// The first keyword (with its path, "properties.a.uniqueItems") the grammar engine cannot enforce
// and ignores without a warning, or "" when there is none.
std::string unsupported_schema_keyword(const json::value& schema);

// A constraint the grammar engine would ignore because it reads one keyword per schema object
// (the first of $ref, const, enum, anyOf, oneOf, allOf, type, object or array keywords) and it
// could reject what the grammar emits, explained: "properties.a: 'maxLength' beside '$ref' is not
// enforced (...)", "items: 'minLength' without a 'type' is not enforced (...)"; "" when there is
// none. Redundant siblings pass: a type that every
// enum value or every branch already has, annotations, keywords of types the grammar cannot emit.
std::string ignored_beside_keyword(const json::value& schema);

// True when every oneOf in the schema (local $refs followed) has pairwise disjoint branches:
// branches whose possible JSON types do not meet (integer within number), finite const/enum
// branches with no value in common, or object-only branches told apart by a required property
// whose const/enum values do not meet (a discriminator, as Pydantic's tagged unions write it).
// False when any oneOf is not proven so. A schema without oneOf is trivially true.
bool one_of_branches_disjoint(const json::value& schema);

}  // namespace coserve
