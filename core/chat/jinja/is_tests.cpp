// The tests (value is name(args)): jinja2's built-in tests, with Python's notion of each type (bool counts
// as a number, as in Python; an undefined value is iterable and a sequence, as jinja2's Undefined is).
#include <unordered_map>

#include "core/chat/jinja/evaluator.h"
#include "core/chat/jinja/string_ops.h"

namespace troupe::jinja {
namespace {

using test_fn = bool (*)(const value&, const call_args&);

const value& arg0(const call_args& a, const char* test) {
    if (a.pos.empty()) throw render_error(std::string("the '") + test + "' test needs an argument");
    return a.pos[0];
}

int64_t int_of(const value& v, const char* test) {
    if (v.kind == value_kind::boolean) return v.b;
    if (v.kind == value_kind::integer) return v.i;
    if (v.kind == value_kind::floating && v.f == static_cast<double>(static_cast<int64_t>(v.f))) {
        return static_cast<int64_t>(v.f);
    }
    throw render_error(std::string("the '") + test + "' test needs an integer, not " + type_name(v));
}

bool t_defined(const value& v, const call_args&) {
    return !v.is_undefined();
}
bool t_undefined(const value& v, const call_args&) {
    return v.is_undefined();
}
bool t_none(const value& v, const call_args&) {
    return v.is_none();
}
bool t_boolean(const value& v, const call_args&) {
    return v.kind == value_kind::boolean;
}
bool t_true(const value& v, const call_args&) {
    return v.kind == value_kind::boolean && v.b;
}
bool t_false(const value& v, const call_args&) {
    return v.kind == value_kind::boolean && !v.b;
}
bool t_integer(const value& v, const call_args&) {
    return v.kind == value_kind::integer;
}
bool t_float(const value& v, const call_args&) {
    return v.kind == value_kind::floating;
}
bool t_number(const value& v, const call_args&) {
    return v.is_number();
}
bool t_string(const value& v, const call_args&) {
    return v.is_string();
}
bool t_mapping(const value& v, const call_args&) {
    return v.is_mapping();
}
bool t_callable(const value& v, const call_args&) {
    // jinja2's Undefined has __call__ (calling it raises), so Python's callable() says True of it.
    return v.kind == value_kind::callable || v.is_undefined();
}
bool t_iterable(const value& v, const call_args&) {
    return v.is_undefined() || v.is_string() || v.is_sequence() || v.is_mapping();
}
bool t_sequence(const value& v, const call_args& a) {
    return t_iterable(v, a);
}
bool t_even(const value& v, const call_args&) {
    return int_of(v, "even") % 2 == 0;
}
bool t_odd(const value& v, const call_args&) {
    return int_of(v, "odd") % 2 != 0;
}
bool t_divisibleby(const value& v, const call_args& a) {
    const int64_t d = int_of(arg0(a, "divisibleby"), "divisibleby");
    if (d == 0) throw render_error("divisibleby 0");
    return int_of(v, "divisibleby") % d == 0;
}
bool t_eq(const value& v, const call_args& a) {
    return equal(v, arg0(a, "eq"));
}
bool t_ne(const value& v, const call_args& a) {
    return !equal(v, arg0(a, "ne"));
}
bool t_lt(const value& v, const call_args& a) {
    return less(v, arg0(a, "lt"));
}
bool t_le(const value& v, const call_args& a) {
    return !less(arg0(a, "le"), v);
}
bool t_gt(const value& v, const call_args& a) {
    return less(arg0(a, "gt"), v);
}
bool t_ge(const value& v, const call_args& a) {
    return !less(v, arg0(a, "ge"));
}
bool t_in(const value& v, const call_args& a) {
    return contains(arg0(a, "in"), v);
}
bool t_sameas(const value& v, const call_args& a) {
    const value& o = arg0(a, "sameas");
    if (v.kind != o.kind) return false;
    switch (v.kind) {
        case value_kind::undefined:
        case value_kind::none:
            return true;
        case value_kind::boolean:
            return v.b == o.b;
        case value_kind::integer:
            return v.i == o.i;
        case value_kind::list:
        case value_kind::tuple:
            return v.l == o.l;
        case value_kind::dict:
        case value_kind::ns:
            return v.d == o.d;
        case value_kind::callable:
            return v.fn == o.fn;
        case value_kind::floating:
        case value_kind::string:
            return false;
    }
    return false;
}
bool t_lower(const value& v, const call_args&) {
    return v.is_string() && py_lower(v.s) == v.s;
}
bool t_upper(const value& v, const call_args&) {
    return v.is_string() && py_upper(v.s) == v.s;
}
bool t_escaped(const value&, const call_args&) {
    return false;
}
bool t_filter(const value& v, const call_args&) {
    return v.is_string() && has_filter(v.s);
}
bool t_test(const value& v, const call_args&) {
    return v.is_string() && has_test(v.s);
}

const std::unordered_map<std::string_view, test_fn>& tests() {
    static const std::unordered_map<std::string_view, test_fn> table = {
        {"defined", t_defined},
        {"undefined", t_undefined},
        {"none", t_none},
        {"boolean", t_boolean},
        {"true", t_true},
        {"false", t_false},
        {"integer", t_integer},
        {"float", t_float},
        {"number", t_number},
        {"string", t_string},
        {"mapping", t_mapping},
        {"callable", t_callable},
        {"iterable", t_iterable},
        {"sequence", t_sequence},
        {"even", t_even},
        {"odd", t_odd},
        {"divisibleby", t_divisibleby},
        {"eq", t_eq},
        {"equalto", t_eq},
        {"==", t_eq},
        {"ne", t_ne},
        {"!=", t_ne},
        {"lt", t_lt},
        {"lessthan", t_lt},
        {"<", t_lt},
        {"le", t_le},
        {"<=", t_le},
        {"gt", t_gt},
        {"greaterthan", t_gt},
        {">", t_gt},
        {"ge", t_ge},
        {">=", t_ge},
        {"in", t_in},
        {"sameas", t_sameas},
        {"lower", t_lower},
        {"upper", t_upper},
        {"escaped", t_escaped},
        {"filter", t_filter},
        {"test", t_test},
    };
    return table;
}

}  // namespace

bool has_test(std::string_view name) {
    return tests().contains(name);
}

bool evaluator::apply_test(std::string_view name, const value& operand, const call_args& args) {
    auto it = tests().find(name);
    if (it == tests().end()) throw render_error("no test named '" + std::string(name) + "'");
    return it->second(operand, args);
}

}  // namespace troupe::jinja
