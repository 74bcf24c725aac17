// The expression half of the evaluator: names, attributes and subscripts (jinja2's getattr/getitem rules),
// slices, calls, filters, tests and comparisons.
#include <algorithm>

#include "core/chat/jinja/evaluator.h"

namespace troupe::jinja {
namespace {

template <class... fs>
struct overloaded : fs... {
    using fs::operator()...;
};

std::string object_name(const value& v) {
    return "'" + type_name(v) + " object'";
}

// Python's slice.indices for a sequence of length n.
std::vector<int64_t> slice_indices(int64_t n, const value& start, const value& stop, const value& step) {
    auto as_int = [](const value& v, const char* what) {
        if (v.kind != value_kind::integer && v.kind != value_kind::boolean) {
            throw render_error(std::string("slice ") + what + " must be an integer or none, not " + type_name(v));
        }
        return v.kind == value_kind::boolean ? int64_t{v.b} : v.i;
    };
    const bool no_step = step.is_undefined() || step.is_none();
    const int64_t st = no_step ? 1 : as_int(step, "step");
    if (st == 0) throw render_error("slice step cannot be zero");
    auto clamp = [&](const value& v, int64_t fallback) {
        if (v.is_undefined() || v.is_none()) return fallback;
        int64_t x = as_int(v, "index");
        if (x < 0) x += n;
        if (st > 0) return std::clamp<int64_t>(x, 0, n);
        return std::clamp<int64_t>(x, -1, n - 1);
    };
    const int64_t begin = clamp(start, st > 0 ? 0 : n - 1);
    const int64_t end = clamp(stop, st > 0 ? n : -1);
    std::vector<int64_t> out;
    for (int64_t k = begin; st > 0 ? k < end : k > end; k += st) out.push_back(k);
    return out;
}

}  // namespace

value evaluator::eval(const expr& e) {
    try {
        return eval_node(e);
    } catch (const located_error&) {
        throw;
    } catch (const render_error& err) {
        throw located_error(err.what(), e.line, e.column);
    }
}

call_args evaluator::eval_arguments(const arguments& a) {
    call_args args;
    args.pos.reserve(a.pos.size());
    for (const auto& p : a.pos) args.pos.push_back(eval(*p));
    if (a.star_args) {
        for (auto& v : iterate(eval(*a.star_args))) args.pos.push_back(std::move(v));
    }
    for (const auto& k : a.kw) args.kw.emplace_back(k.name, eval(*k.value));
    if (a.star_kwargs) {
        const value d = eval(*a.star_kwargs);
        if (!d.is_mapping()) throw render_error("argument after ** must be a mapping, not " + type_name(d));
        for (const auto& [k, v] : d.d->items) {
            const value key = key_value(k);
            if (!key.is_string()) throw render_error("keywords must be strings");
            args.kw.emplace_back(key.s, v);
        }
    }
    return args;
}

value evaluator::call(const value& fn, const call_args& args) {
    if (fn.is_undefined()) fail_undefined(fn);
    if (fn.kind != value_kind::callable) throw render_error("'" + type_name(fn) + "' object is not callable");
    return fn.fn->call(args, *this);
}

value evaluator::eval_node(const expr& e) {
    return std::visit(
        overloaded{
            [&](const literal_expr& l) { return l.v; },
            [&](const name_expr& n) { return lookup(n.name); },
            [&](const list_expr& l) {
                std::vector<value> items;
                items.reserve(l.items.size());
                for (const auto& item : l.items) items.push_back(eval(*item));
                return l.tuple ? value::tuple(std::move(items)) : value::list(std::move(items));
            },
            [&](const dict_expr& d) {
                dict out;
                for (const auto& [k, v] : d.items) {
                    std::string key = dict_key(eval(*k));
                    out.set(std::move(key), eval(*v));
                }
                return value::dict(std::move(out));
            },
            [&](const unary_expr& u) { return unary_operation(u.op, eval(*u.operand)); },
            [&](const binary_expr& b) {
                value lhs = eval(*b.lhs);
                if (b.op == binary_op::and_) return lhs.truthy() ? eval(*b.rhs) : lhs;
                if (b.op == binary_op::or_) return lhs.truthy() ? lhs : eval(*b.rhs);
                return binary_operation(b.op, lhs, eval(*b.rhs));
            },
            [&](const compare_expr& c) { return eval_compare(c); },
            [&](const attribute_expr& a) { return eval_attribute(eval(*a.object), a.name); },
            [&](const subscript_expr& s) { return eval_subscript(eval(*s.object), eval(*s.index)); },
            [&](const slice_expr& s) { return eval_slice(s); },
            [&](const call_expr& c) {
                value fn = eval(*c.callee);
                return call(fn, eval_arguments(c.args));
            },
            [&](const filter_expr& f) { return eval_filter(f, eval(*f.operand)); },
            [&](const test_expr& t) {
                const bool r = apply_test(t.name, eval(*t.operand), eval_arguments(t.args));
                return value::boolean(t.negated ? !r : r);
            },
            [&](const conditional_expr& c) {
                if (eval(*c.condition).truthy()) return eval(*c.then);
                return c.otherwise ? eval(*c.otherwise) : value::undefined("the conditional expression has no else");
            },
        },
        e.node);
}

value evaluator::eval_filter(const filter_expr& f, const value& operand) {
    return apply_filter(f.name, operand, eval_arguments(f.args));
}

// obj.name: as jinja2's getattr, a method of the object first, then the item of that name.
value evaluator::eval_attribute(const value& object, const std::string& name) {
    if (object.is_undefined()) fail_undefined(object);
    if (object.kind == value_kind::ns) {
        if (const value* v = object.d->find(name)) return *v;
        return value::undefined("'Namespace' object has no attribute '" + name + "'");
    }
    if (is_unsafe_method(object, name)) return unsafe_attribute(object, name);
    // Values with named attributes besides their kind: a recursive loop's `loop` (callable) and groupby's
    // groups (tuples with .grouper and .list).
    if ((object.kind == value_kind::callable || object.kind == value_kind::tuple) && object.d) {
        if (const value* v = object.d->find(name)) return *v;
    }
    value method = bound_method(object, name);
    if (!method.is_undefined()) return method;
    if (object.kind == value_kind::dict) {
        if (const value* v = object.d->find(name)) return *v;
    }
    return value::undefined(object_name(object) + " has no attribute '" + name + "'");
}

// obj[index]: as jinja2's getitem, the item first, then (for a string index) the attribute.
value evaluator::eval_subscript(const value& object, const value& index) {
    if (object.is_undefined()) fail_undefined(object);
    switch (object.kind) {
        case value_kind::dict:
        case value_kind::ns:
            if (index.is_string()) {
                if (const value* v = object.d->find(index.s)) return *v;
                return eval_attribute(object, index.s);
            }
            if (object.kind == value_kind::dict && !index.is_sequence() && !index.is_mapping() &&
                !index.is_undefined()) {
                if (const value* v = object.d->find(dict_key(index))) return *v;
            }
            return value::undefined(object_name(object) + " has no element " + repr(index));
        case value_kind::list:
        case value_kind::tuple:
        case value_kind::string: {
            if (index.is_string()) return eval_attribute(object, index.s);
            if (index.kind != value_kind::integer && index.kind != value_kind::boolean) {
                throw render_error(type_name(object) + " indices must be integers or slices, not " + type_name(index));
            }
            const int64_t n = length(object);
            int64_t k = index.kind == value_kind::boolean ? int64_t{index.b} : index.i;
            if (k < 0) k += n;
            if (k < 0 || k >= n) return value::undefined(object_name(object) + " has no element " + repr(index));
            if (object.kind != value_kind::string) return (*object.l)[static_cast<size_t>(k)];
            const auto offsets = code_point_offsets(object.s);
            const size_t begin = offsets[static_cast<size_t>(k)];
            const size_t end =
                static_cast<size_t>(k) + 1 < offsets.size() ? offsets[static_cast<size_t>(k) + 1] : object.s.size();
            return value::string(object.s.substr(begin, end - begin));
        }
        case value_kind::undefined:
        case value_kind::none:
        case value_kind::boolean:
        case value_kind::integer:
        case value_kind::floating:
        case value_kind::callable:
            break;
    }
    return value::undefined(object_name(object) + " has no element " + repr(index));
}

value evaluator::eval_slice(const slice_expr& s) {
    const value object = eval(*s.object);
    if (object.is_undefined()) fail_undefined(object);
    const value none = value::none();
    const value start = s.start ? eval(*s.start) : none;
    const value stop = s.stop ? eval(*s.stop) : none;
    const value step = s.step ? eval(*s.step) : none;
    if (object.is_string()) {
        const std::vector<std::string> chars = code_points(object.s);
        std::string out;
        for (int64_t k : slice_indices(static_cast<int64_t>(chars.size()), start, stop, step)) {
            out += chars[static_cast<size_t>(k)];
        }
        return value::string(std::move(out));
    }
    if (!object.is_sequence()) throw render_error("'" + type_name(object) + "' object is not subscriptable");
    std::vector<value> out;
    for (int64_t k : slice_indices(static_cast<int64_t>(object.l->size()), start, stop, step)) {
        out.push_back((*object.l)[static_cast<size_t>(k)]);
    }
    return object.kind == value_kind::tuple ? value::tuple(std::move(out)) : value::list(std::move(out));
}

value evaluator::eval_compare(const compare_expr& c) {
    value lhs = eval(*c.first);
    for (const auto& [op, rhs_expr] : c.rest) {
        value rhs = eval(*rhs_expr);
        bool holds = false;
        switch (op) {
            case compare_op::eq:
                holds = equal(lhs, rhs);
                break;
            case compare_op::ne:
                holds = !equal(lhs, rhs);
                break;
            case compare_op::lt:
            case compare_op::le:
            case compare_op::gt:
            case compare_op::ge: {
                if (lhs.is_undefined()) fail_undefined(lhs);
                if (rhs.is_undefined()) fail_undefined(rhs);
                const bool lt = less(lhs, rhs);
                const bool gt = less(rhs, lhs);
                holds = op == compare_op::lt ? lt : op == compare_op::gt ? gt : op == compare_op::le ? !gt : !lt;
                break;
            }
            case compare_op::in:
                holds = contains(rhs, lhs);
                break;
            case compare_op::not_in:
                holds = !contains(rhs, lhs);
                break;
        }
        if (!holds) return value::boolean(false);
        lhs = std::move(rhs);
    }
    return value::boolean(true);
}

}  // namespace troupe::jinja
