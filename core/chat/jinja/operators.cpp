// Python's arithmetic on values: int op int stays int (except /), any float makes a float, bool counts as
// int; + joins strings, lists and tuples; * repeats them; // and % floor as Python does; ~ joins str() texts.
#include <cmath>
#include <cstdint>

#include "core/chat/jinja/evaluator.h"
#include "core/chat/jinja/printf_format.h"

namespace troupe::jinja {
namespace {

const char* op_text(binary_op op) {
    switch (op) {
        case binary_op::add:
            return "+";
        case binary_op::sub:
            return "-";
        case binary_op::mul:
            return "*";
        case binary_op::div:
            return "/";
        case binary_op::floordiv:
            return "//";
        case binary_op::mod:
            return "%";
        case binary_op::pow:
            return "**";
        case binary_op::concat:
            return "~";
        case binary_op::and_:
            return "and";
        case binary_op::or_:
            return "or";
    }
    return "?";
}

[[noreturn]] void unsupported(binary_op op, const value& a, const value& b) {
    if (op == binary_op::add && a.is_string()) {
        throw render_error("can only concatenate str (not \"" + type_name(b) + "\") to str");
    }
    throw render_error(std::string("unsupported operand type(s) for ") + op_text(op) + ": '" + type_name(a) +
                       "' and '" + type_name(b) + "'");
}

bool is_int(const value& v) {
    return v.kind == value_kind::integer || v.kind == value_kind::boolean;
}
int64_t int_of(const value& v) {
    return v.kind == value_kind::boolean ? int64_t{v.b} : v.i;
}

int64_t floor_div(int64_t a, int64_t b) {
    int64_t q = a / b;
    if ((a % b != 0) && ((a < 0) != (b < 0))) --q;
    return q;
}

// Python's ints are unbounded; troupe's are 64-bit, so a result past that range fails plainly rather than
// wrapping to a wrong number.
[[noreturn]] void int_overflow(binary_op op) {
    throw render_error(std::string("integer overflow in '") + op_text(op) +
                       "': the result does not fit in 64 bits (troupe's integers are 64-bit)");
}

int64_t checked_pow(int64_t base, int64_t exponent) {
    int64_t result = 1;
    while (exponent > 0) {
        if ((exponent & 1) != 0 && __builtin_mul_overflow(result, base, &result)) int_overflow(binary_op::pow);
        exponent >>= 1;
        if (exponent > 0 && __builtin_mul_overflow(base, base, &base)) int_overflow(binary_op::pow);
    }
    return result;
}

value repeat(const value& seq, int64_t n) {
    if (n <= 0) return seq.is_string() ? value::string("") : value::list();
    if (seq.is_string()) {
        if (seq.s.size() * static_cast<size_t>(n) > (size_t{64} << 20))
            throw render_error("string repetition too large");
        std::string out;
        for (int64_t k = 0; k < n; ++k) out += seq.s;
        return value::string(std::move(out));
    }
    if (seq.l->size() * static_cast<size_t>(n) > 1'000'000) throw render_error("list repetition too large");
    std::vector<value> out;
    for (int64_t k = 0; k < n; ++k) out.insert(out.end(), seq.l->begin(), seq.l->end());
    return seq.kind == value_kind::tuple ? value::tuple(std::move(out)) : value::list(std::move(out));
}

value arithmetic(binary_op op, const value& a, const value& b) {
    if (is_int(a) && is_int(b)) {
        const int64_t x = int_of(a);
        const int64_t y = int_of(b);
        switch (op) {
            case binary_op::add:
            case binary_op::sub:
            case binary_op::mul: {
                int64_t r = 0;
                const bool overflow = op == binary_op::add   ? __builtin_add_overflow(x, y, &r)
                                      : op == binary_op::sub ? __builtin_sub_overflow(x, y, &r)
                                                             : __builtin_mul_overflow(x, y, &r);
                if (overflow) int_overflow(op);
                return value::integer(r);
            }
            case binary_op::div:
                if (y == 0) throw render_error("division by zero");
                return value::floating(static_cast<double>(x) / static_cast<double>(y));
            case binary_op::floordiv:
                if (y == 0) throw render_error("integer division or modulo by zero");
                if (x == INT64_MIN && y == -1) int_overflow(op);
                return value::integer(floor_div(x, y));
            case binary_op::mod:
                if (y == 0) throw render_error("integer division or modulo by zero");
                if (y == -1) return value::integer(0);
                return value::integer(x - floor_div(x, y) * y);
            case binary_op::pow:
                if (y >= 0) return value::integer(checked_pow(x, y));
                return value::floating(std::pow(static_cast<double>(x), static_cast<double>(y)));
            case binary_op::concat:
            case binary_op::and_:
            case binary_op::or_:
                break;
        }
    }
    const double x = a.as_double();
    const double y = b.as_double();
    switch (op) {
        case binary_op::add:
            return value::floating(x + y);
        case binary_op::sub:
            return value::floating(x - y);
        case binary_op::mul:
            return value::floating(x * y);
        case binary_op::div:
            if (y == 0) throw render_error("float division by zero");
            return value::floating(x / y);
        case binary_op::floordiv:
            if (y == 0) throw render_error("float floor division by zero");
            return value::floating(std::floor(x / y));
        case binary_op::mod: {
            if (y == 0) throw render_error("float modulo");
            double r = std::fmod(x, y);
            if (r != 0 && ((r < 0) != (y < 0))) r += y;
            return value::floating(r);
        }
        case binary_op::pow:
            return value::floating(std::pow(x, y));
        case binary_op::concat:
        case binary_op::and_:
        case binary_op::or_:
            break;
    }
    unsupported(op, a, b);
}

}  // namespace

value binary_operation(binary_op op, const value& a, const value& b) {
    if (op == binary_op::concat) return value::string(to_str(a) + to_str(b));
    // 'text %s' % x: Python's printf-style formatting (an undefined x prints as "", as str() of it does).
    if (op == binary_op::mod && a.is_string()) return value::string(printf_format(a.s, b));
    if (a.is_undefined()) fail_undefined(a);
    if (b.is_undefined()) fail_undefined(b);
    if (a.is_number() && b.is_number()) return arithmetic(op, a, b);
    if (op == binary_op::add) {
        if (a.is_string() && b.is_string()) return value::string(a.s + b.s);
        if (a.is_sequence() && b.kind == a.kind) {
            std::vector<value> items = *a.l;
            items.insert(items.end(), b.l->begin(), b.l->end());
            return a.kind == value_kind::tuple ? value::tuple(std::move(items)) : value::list(std::move(items));
        }
    }
    if (op == binary_op::mul) {
        if ((a.is_string() || a.is_sequence()) && is_int(b)) return repeat(a, int_of(b));
        if ((b.is_string() || b.is_sequence()) && is_int(a)) return repeat(b, int_of(a));
    }
    unsupported(op, a, b);
}

value unary_operation(unary_op op, const value& a) {
    if (op == unary_op::not_) return value::boolean(!a.truthy());
    if (a.is_undefined()) fail_undefined(a);
    if (!a.is_number()) {
        throw render_error(std::string("bad operand type for unary ") + (op == unary_op::neg ? "-" : "+") + ": '" +
                           type_name(a) + "'");
    }
    if (a.kind == value_kind::floating) return value::floating(op == unary_op::neg ? -a.f : a.f);
    if (op == unary_op::neg && int_of(a) == INT64_MIN) int_overflow(binary_op::sub);
    return value::integer(op == unary_op::neg ? -int_of(a) : int_of(a));
}

bool contains(const value& container, const value& item) {
    switch (container.kind) {
        case value_kind::undefined:
            return false;
        case value_kind::string:
            if (!item.is_string()) {
                throw render_error("'in <string>' requires string as left operand, not " + type_name(item));
            }
            return container.s.find(item.s) != std::string::npos;
        case value_kind::list:
        case value_kind::tuple:
            for (const auto& v : *container.l) {
                if (equal(v, item)) return true;
            }
            return false;
        case value_kind::dict:
        case value_kind::ns:
            if (item.is_string()) return container.d->find(item.s) != nullptr;
            if (container.kind == value_kind::ns || item.is_undefined()) return false;
            return container.d->find(dict_key(item)) != nullptr;
        case value_kind::none:
        case value_kind::boolean:
        case value_kind::integer:
        case value_kind::floating:
        case value_kind::callable:
            break;
    }
    throw render_error("argument of type '" + type_name(container) + "' is not iterable");
}

}  // namespace troupe::jinja
