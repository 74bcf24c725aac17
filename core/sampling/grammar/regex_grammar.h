// regex_grammar: the rule for the JSON string bodies (between the quotes, JSON-escaped) that a JSON schema
// "pattern" matches in full.
//
// A schema's pattern is an ECMA-262 regular expression that must match somewhere in the string; the rule
// accepts the strings it matches from start to end (a leading ^ and a trailing $ are dropped), a subset of
// the valid strings that keeps a sampler from padding around the match. Supported: literals (any UTF-8
// character), escapes \d \w \s \D \W \S and escaped punctuation, \n \t \r \f \v, \uXXXX; '.'; classes [...]
// and [^...] with ranges of ASCII characters, escapes and single non-ASCII characters; groups (...) and
// (?:...); alternation |; quantifiers ? * + {n} {n,} {n,m} (a lazy '?' after them changes nothing here).
// Refused with a message naming the position: backreferences, lookaround, \b, anchors inside the pattern,
// ranges between non-ASCII characters, a repeated part that can match nothing under * or +, {n,m} past
// max_repetition.
//
// Characters are written as JSON writes them: '"' and '\' escaped, control characters as \n \t \r \b \f or
// \u00XX, others as themselves.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "core/result.h"
#include "core/sampling/grammar/grammar.h"

namespace troupe::grammar {

struct regex_helpers {
    // x{min,max} (max < 0: unbounded) as a rule, the JSON schema builder's repetition.
    std::function<uint32_t(const std::string& name, std::vector<element> x, int64_t min, int64_t max)> repeat;
    uint32_t non_ascii_char = 0;  // a rule: one UTF-8 encoded character past U+007F
    int64_t max_repetition = 4096;
};

// The rule for the string bodies `pattern` matches in full; an error (with the position) where the pattern
// uses what is not supported.
result<uint32_t> regex_string_body(grammar& g, std::string_view pattern, const regex_helpers& h);

}  // namespace troupe::grammar
