// json_schema_all_of: a JSON schema's allOf of several schemas as one schema (the conjunction, for the keywords the
// grammar builder reads), and the $ref lookup it and the builder share.
//
// Merging: $refs resolved; anyOf / oneOf inside a part distributed (allOf(A, anyOf(B, C)) = anyOf(allOf(A, B),
// allOf(A, C)), at most 64 ways); properties united, a property in several parts the allOf of its schemas; required
// united; types intersected; lower bounds the largest, upper bounds the smallest; items and schema-valued
// additionalProperties the allOf of theirs; descriptive keywords the first part's. Where a part closes its object
// (additionalProperties false) only the properties it names stay, so the merged schema admits no object a part
// refuses. Other keywords must be equal in every part that has them.
#pragma once

#include <boost/json/array.hpp>
#include <boost/json/value.hpp>

#include <string>
#include <variant>

namespace troupe::grammar {

struct schema_error {
    std::string path;  // a JSON pointer into the schema ("#/allOf")
    std::string message;
};

// The schema a "$ref" target ("#/$defs/x" or "#/definitions/x") names in `root`, or the error's message.
std::variant<const boost::json::value*, std::string> schema_definition(const boost::json::value* root,
                                                                       const std::string& target);

// allOf's parts (schemas, or $refs into root's definitions) merged into one schema (see above).
std::variant<boost::json::value, schema_error> merge_all_of(const boost::json::value* root,
                                                            const boost::json::array& parts, const std::string& path);

}  // namespace troupe::grammar
