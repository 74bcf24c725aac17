// integer_range_grammar: grammar alternatives for the decimal forms of the integers in a range, digit range by digit
// range (JSON's forms: no leading zeros, no "-0", '-' for negatives), for the JSON schema's integer and number bounds.
//
// [123, 4567] becomes 12[3-9] | 1[3-9][0-9] | [2-9][0-9][0-9] | [1-3][0-9][0-9][0-9] | 4[0-4][0-9][0-9] | 45[0-5][0-9]
// | 456[0-7]: per number of digits, the common prefix, then the low end's tail, the full middle and the high end's.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <vector>

#include "core/sampling/grammar/grammar.h"

namespace troupe::grammar {

// Adds to `rule` one alternative per piece of the decimal forms of the integers in [lo, hi] (an absent bound:
// unbounded, up to max_digits digits), each followed by `tail`. Returns how many it added (0: the range is empty).
size_t add_integer_range(grammar& g, uint32_t rule, std::optional<int64_t> lo, std::optional<int64_t> hi,
                         const std::vector<element>& tail, int32_t max_digits);

}  // namespace troupe::grammar
