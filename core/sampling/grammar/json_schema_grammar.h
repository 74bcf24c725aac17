// json_schema_grammar: the byte grammar of the JSON texts a JSON schema accepts (OpenAI's
// response_format json_schema), and of any JSON object (response_format json_object).
//
// Supported: type (string, number, integer, boolean, null, object, array, or a list of them), properties
// (in the schema's order; required ones always present, optional ones may be left out),
// additionalProperties (false or absent: no other keys; true or a schema: other keys after the named
// ones), items, tuples (prefixItems, or items as an array, with items / additionalItems for the rest; every
// listed item written), minItems / maxItems, minLength / maxLength (in characters), pattern (matched in full:
// regex_grammar.h), format date, time,
// date-time, uuid, email, hostname, ipv4 and uri (the last four a common subset: ASCII, http(s)), minimum / maximum /
// exclusiveMinimum / exclusiveMaximum (integers: exactly the integers in range; numbers: the integers and the decimals
// without exponent whose whole unit lies in range, a subset that never leaves it), enum, const, anyOf, oneOf, allOf
// (merged: properties and required united, bounds tightened, anyOf inside distributed), $ref into #/$defs or
// #/definitions (recursion allowed); without a type, a schema's object, array, string or number keywords give values of
// that type; descriptive keywords (title, description, default, examples, $schema, $id, $comment) are ignored. Other
// keywords and formats are refused with the schema path, never silently ignored.
//
// Text shape: strings are valid UTF-8 with JSON's escapes; numbers are JSON numbers with at most
// max_digits digits in each part; whitespace is bounded: between tokens nothing, one space, or a
// newline and at most max_indent spaces or tabs, so a sampler cannot pad forever. The root value may
// be preceded by such whitespace and nothing may follow it (generation ends with the value).
#pragma once

#include <boost/json/value.hpp>

#include <cstdint>

#include "core/result.h"
#include "core/sampling/grammar/grammar.h"

namespace troupe::grammar {

struct json_grammar_options {
    int32_t max_indent = 20;        // spaces / tabs after a newline between tokens
    int32_t max_digits = 16;        // per number part (integer, fraction); exponents take at most 3
    int32_t max_repetition = 4096;  // the largest maxLength / maxItems accepted
};

result<grammar> json_schema_grammar(const boost::json::value& schema, const json_grammar_options& options = {});
grammar json_object_grammar(const json_grammar_options& options = {});

}  // namespace troupe::grammar
