// What the filter files share: argument helpers, jinja2's attribute paths and sort keys (filters.cpp), and
// the filters defined outside filters.cpp, for its table: text filters (filters_text.cpp) and groupings
// (filters_groups.cpp).
#pragma once

#include <string>

#include "core/chat/jinja/callable.h"
#include "core/chat/jinja/value.h"

namespace troupe::jinja {

class evaluator;

using filter_fn = value (*)(evaluator&, const value&, const call_args&);

// The argument as text ("" for undefined, str() of a non-string).
std::string need_string(const value& v, const char* what);
// The argument as an integer (a bool counts); raises naming `what` otherwise.
int64_t need_int(const value& v, const char* what);
// "a.b.0": each part an item (integer parts index sequences), as jinja2's make_attrgetter.
value attribute_path(evaluator& ev, value v, const value& path);
// The sort key for sort, dictsort, unique, groupby, min and max: strings lowercased unless case-sensitive.
value sort_key(const value& v, bool case_sensitive);

value f_center(evaluator& ev, const value& v, const call_args& a);
value f_escape(evaluator& ev, const value& v, const call_args& a);
value f_indent(evaluator& ev, const value& v, const call_args& a);
value f_title(evaluator& ev, const value& v, const call_args& a);
value f_truncate(evaluator& ev, const value& v, const call_args& a);
value f_wordcount(evaluator& ev, const value& v, const call_args& a);
value f_groupby(evaluator& ev, const value& v, const call_args& a);
value f_slice(evaluator& ev, const value& v, const call_args& a);

}  // namespace troupe::jinja
