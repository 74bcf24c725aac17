// Python's str.format as jinja2's sandboxed environment runs it: '{}', '{0}', '{name}' fields with .attr and
// [key] parts, !r / !s conversions and the format mini-language ([[fill]align][sign][#][0][width][,][.prec]
// [type]) for strings, ints and floats. Nested fields in a spec ('{:{w}}') are refused.
#pragma once

#include <string>

#include "core/chat/jinja/callable.h"
#include "core/chat/jinja/value.h"

namespace troupe::jinja {

value str_format(const std::string& text, const call_args& args);

}  // namespace troupe::jinja
