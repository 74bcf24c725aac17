// The filters (value | name(args)): jinja2's built-in filters that chat templates use, with jinja2's
// argument names and defaults, and transformers' tojson (json.dumps with ensure_ascii=False).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <unordered_map>

#include "core/chat/jinja/evaluator.h"
#include "core/chat/jinja/filter_support.h"
#include "core/chat/jinja/printf_format.h"
#include "core/chat/jinja/string_ops.h"
#include "core/chat/jinja/unicode_case.h"

namespace troupe::jinja {

std::string need_string(const value& v, const char* what) {
    if (v.is_undefined()) return "";
    if (!v.is_string()) return to_str(v);
    (void)what;
    return v.s;
}

int64_t need_int(const value& v, const char* what) {
    if (v.kind == value_kind::boolean) return v.b;
    if (v.kind != value_kind::integer) {
        throw render_error(std::string(what) + " must be an integer, not " + type_name(v));
    }
    return v.i;
}

// "a.b.0": each part an item (integer parts index sequences), as jinja2's make_attrgetter.
value attribute_path(evaluator& ev, value v, const value& path) {
    if (path.kind == value_kind::integer) return ev.eval_subscript(v, path);
    for (const auto& part : py_split(need_string(path, "attribute"), std::string("."), -1)) {
        if (v.is_undefined()) return v;
        const bool numeric = !part.empty() && std::all_of(part.begin(), part.end(), ::isdigit);
        v = numeric ? ev.eval_subscript(v, value::integer(std::stoll(part)))
                    : ev.eval_subscript(v, value::string(part));
    }
    return v;
}

// The sort key for sort, dictsort, unique, min and max: strings lowercased unless case-sensitive.
value sort_key(const value& v, bool case_sensitive) {
    if (!case_sensitive && v.is_string()) return value::string(py_lower(v.s));
    return v;
}

namespace {

value f_abs(evaluator&, const value& v, const call_args&) {
    if (v.kind == value_kind::floating) return value::floating(std::fabs(v.f));
    if (v.is_number()) return value::integer(std::llabs(v.kind == value_kind::boolean ? v.b : v.i));
    throw render_error("bad operand type for abs(): '" + type_name(v) + "'");
}

// jinja2's attr is Python's getattr only: a dict's keys are not attributes (a namespace's are).
value f_attr(evaluator&, const value& v, const call_args& a) {
    const std::string name = need_string(a.get(0, "name"), "attr() name");
    if (v.kind == value_kind::ns) {
        if (const value* x = v.d->find(name)) return *x;
    } else if (is_unsafe_method(v, name)) {
        return unsafe_attribute(v, name);
    } else if (value method = bound_method(v, name); !method.is_undefined()) {
        return method;
    }
    return value::undefined("'" + type_name(v) + " object' has no attribute '" + name + "'");
}

value f_batch(evaluator&, const value& v, const call_args& a) {
    const int64_t n = need_int(a.get(0, "linecount"), "batch() linecount");
    if (n <= 0) throw render_error("batch() linecount must be positive");
    const value fill = a.get(1, "fill_with", value::none());
    std::vector<value> out;
    std::vector<value> row;
    for (auto& item : iterate(v)) {
        row.push_back(std::move(item));
        if (static_cast<int64_t>(row.size()) == n) out.push_back(value::list(std::exchange(row, {})));
    }
    if (!row.empty()) {
        if (!fill.is_none()) {
            while (static_cast<int64_t>(row.size()) < n) row.push_back(fill);
        }
        out.push_back(value::list(std::move(row)));
    }
    return value::list(std::move(out));
}

value f_capitalize(evaluator&, const value& v, const call_args&) {
    return value::string(py_capitalize(to_str(v)));
}

value f_default(evaluator&, const value& v, const call_args& a) {
    a.expect_at_most("default()", 2, {"default_value", "boolean"});
    const bool boolean = a.get(1, "boolean", value::boolean(false)).truthy();
    if (v.is_undefined() || (boolean && !v.truthy())) return a.get(0, "default_value", value::string(""));
    return v;
}

value f_dictsort(evaluator&, const value& v, const call_args& a) {
    a.expect_at_most("dictsort()", 3, {"case_sensitive", "by", "reverse"});
    if (!v.is_mapping()) throw render_error("dictsort() needs a dict, not " + type_name(v));
    const bool case_sensitive = a.get(0, "case_sensitive", value::boolean(false)).truthy();
    const value by = a.get(1, "by", value::string("key"));
    const bool reverse = a.get(2, "reverse", value::boolean(false)).truthy();
    if (!by.is_string() || (by.s != "key" && by.s != "value")) {
        throw render_error("dictsort() 'by' must be 'key' or 'value'");
    }
    std::vector<value> items;
    for (const auto& [k, x] : v.d->items) items.push_back(value::tuple({key_value(k), x}));
    const size_t pos = by.s == "key" ? 0 : 1;
    std::stable_sort(items.begin(), items.end(), [&](const value& p, const value& q) {
        const value x = sort_key((*p.l)[pos], case_sensitive);
        const value y = sort_key((*q.l)[pos], case_sensitive);
        return reverse ? less(y, x) : less(x, y);
    });
    return value::list(std::move(items));
}

value f_first(evaluator&, const value& v, const call_args&) {
    auto items = iterate(v);
    if (items.empty()) return value::undefined("No first item, sequence was empty.");
    return items.front();
}

value f_last(evaluator&, const value& v, const call_args&) {
    auto items = iterate(v);
    if (items.empty()) return value::undefined("No last item, sequence was empty.");
    return items.back();
}

std::optional<double> parse_float(const std::string& text) {
    const std::string s = py_strip(text, std::nullopt, true, true);
    if (s.empty()) return std::nullopt;
    char* end = nullptr;
    const double x = std::strtod(s.c_str(), &end);
    if (end != s.c_str() + s.size()) return std::nullopt;
    return x;
}

value f_float(evaluator&, const value& v, const call_args& a) {
    const value fallback = a.get(0, "default", value::floating(0.0));
    if (v.is_number()) return value::floating(v.as_double());
    if (v.is_string()) {
        if (auto x = parse_float(v.s)) return value::floating(*x);
    }
    return fallback;
}

value f_int(evaluator&, const value& v, const call_args& a) {
    const value fallback = a.get(0, "default", value::integer(0));
    const int64_t base = a.has(1, "base") ? need_int(a.get(1, "base"), "int() base") : 10;
    if (v.kind == value_kind::floating) return value::integer(static_cast<int64_t>(std::trunc(v.f)));
    if (v.is_number()) return value::integer(v.kind == value_kind::boolean ? v.b : v.i);
    if (v.is_string()) {
        std::string s = py_strip(v.s, std::nullopt, true, true);
        std::erase(s, '_');
        char* end = nullptr;
        errno = 0;
        const long long x = std::strtoll(s.c_str(), &end, static_cast<int>(base));
        if (!s.empty() && end == s.c_str() + s.size() && errno == 0) return value::integer(x);
        if (auto f = parse_float(v.s); f && std::isfinite(*f)) return value::integer(static_cast<int64_t>(*f));
    }
    return fallback;
}

value f_items(evaluator&, const value& v, const call_args&) {
    if (v.is_undefined()) return value::list();
    if (!v.is_mapping()) throw render_error("items() needs a dict, not " + type_name(v));
    std::vector<value> out;
    for (const auto& [k, x] : v.d->items) out.push_back(value::tuple({key_value(k), x}));
    return value::list(std::move(out));
}

value f_join(evaluator& ev, const value& v, const call_args& a) {
    a.expect_at_most("join()", 2, {"d", "attribute"});
    const std::string sep = need_string(a.get(0, "d", value::string("")), "join() separator");
    const value attribute = a.get(1, "attribute", value::none());
    std::string out;
    bool first = true;
    for (const auto& item : iterate(v)) {
        if (!first) out += sep;
        out += to_str(attribute.is_none() ? item : attribute_path(ev, item, attribute));
        first = false;
    }
    return value::string(std::move(out));
}

value f_length(evaluator&, const value& v, const call_args&) {
    return value::integer(length(v));
}
value f_list(evaluator&, const value& v, const call_args&) {
    return value::list(iterate(v));
}
value f_lower(evaluator&, const value& v, const call_args&) {
    return value::string(py_lower(to_str(v)));
}
value f_upper(evaluator&, const value& v, const call_args&) {
    return value::string(py_upper(to_str(v)));
}
value f_safe(evaluator&, const value& v, const call_args&) {
    return v.is_string() ? v : value::string(to_str(v));
}
value f_string(evaluator&, const value& v, const call_args&) {
    return value::string(to_str(v));
}

value f_map(evaluator& ev, const value& v, const call_args& a) {
    std::vector<value> out;
    if (!v.truthy()) return value::list();  // jinja2 maps nothing over a falsy value (None included)
    if (a.has(99, "attribute")) {
        const value attribute = a.get(99, "attribute");
        const value fallback = a.get(99, "default");
        for (const auto& item : iterate(v)) {
            value x = attribute_path(ev, item, attribute);
            out.push_back(x.is_undefined() && a.has(99, "default") ? fallback : x);
        }
        return value::list(std::move(out));
    }
    if (a.pos.empty() || !a.pos[0].is_string()) throw render_error("map() needs a filter name or attribute=");
    call_args rest{{a.pos.begin() + 1, a.pos.end()}, a.kw};
    for (const auto& item : iterate(v)) out.push_back(ev.apply_filter(a.pos[0].s, item, rest));
    return value::list(std::move(out));
}

value extreme(evaluator& ev, const value& v, const call_args& a, bool want_max) {
    const bool case_sensitive = a.get(0, "case_sensitive", value::boolean(false)).truthy();
    const value attribute = a.get(1, "attribute", value::none());
    auto key = [&](const value& x) {
        return sort_key(attribute.is_none() ? x : attribute_path(ev, x, attribute), case_sensitive);
    };
    const auto items = iterate(v);
    if (items.empty()) return value::undefined(std::string("No aggregated item, sequence was empty."));
    size_t best = 0;
    for (size_t k = 1; k < items.size(); ++k) {
        if (want_max ? less(key(items[best]), key(items[k])) : less(key(items[k]), key(items[best]))) best = k;
    }
    return items[best];
}

value f_max(evaluator& ev, const value& v, const call_args& a) {
    return extreme(ev, v, a, true);
}
value f_min(evaluator& ev, const value& v, const call_args& a) {
    return extreme(ev, v, a, false);
}

// select / reject (by a test on the item) and selectattr / rejectattr (by a test on an attribute).
value choose(evaluator& ev, const value& v, const call_args& a, bool by_attribute, bool keep_if) {
    size_t k = 0;
    value attribute;
    if (by_attribute) {
        if (a.pos.empty()) throw render_error("selectattr() / rejectattr() need an attribute name");
        attribute = a.pos[k++];
    }
    std::string test;
    if (k < a.pos.size()) test = need_string(a.pos[k++], "test name");
    call_args rest{{a.pos.begin() + static_cast<std::ptrdiff_t>(std::min(k, a.pos.size())), a.pos.end()}, a.kw};
    std::vector<value> out;
    if (!v.truthy()) return value::list();  // jinja2 selects nothing from a falsy value (None included)
    for (const auto& item : iterate(v)) {
        const value x = by_attribute ? attribute_path(ev, item, attribute) : item;
        const bool pass = test.empty() ? x.truthy() : ev.apply_test(test, x, rest);
        if (pass == keep_if) out.push_back(item);
    }
    return value::list(std::move(out));
}

value f_select(evaluator& ev, const value& v, const call_args& a) {
    return choose(ev, v, a, false, true);
}
value f_reject(evaluator& ev, const value& v, const call_args& a) {
    return choose(ev, v, a, false, false);
}
value f_selectattr(evaluator& ev, const value& v, const call_args& a) {
    return choose(ev, v, a, true, true);
}
value f_rejectattr(evaluator& ev, const value& v, const call_args& a) {
    return choose(ev, v, a, true, false);
}

value f_replace(evaluator&, const value& v, const call_args& a) {
    a.expect_at_most("replace()", 3, {"old", "new", "count"});
    const value count = a.get(2, "count", value::none());
    return value::string(py_replace(to_str(v), to_str(a.get(0, "old")), to_str(a.get(1, "new")),
                                    count.is_none() ? -1 : need_int(count, "replace() count")));
}

value f_reverse(evaluator&, const value& v, const call_args&) {
    if (v.is_string()) {
        auto chars = code_points(v.s);
        std::string out;
        for (auto it = chars.rbegin(); it != chars.rend(); ++it) out += *it;
        return value::string(std::move(out));
    }
    auto items = iterate(v);
    std::reverse(items.begin(), items.end());
    return value::list(std::move(items));
}

value f_round(evaluator&, const value& v, const call_args& a) {
    a.expect_at_most("round()", 2, {"precision", "method"});
    const int64_t precision = need_int(a.get(0, "precision", value::integer(0)), "round() precision");
    const std::string method = need_string(a.get(1, "method", value::string("common")), "round() method");
    if (!v.is_number()) throw render_error("round() needs a number, not " + type_name(v));
    if (method != "common" && method != "ceil" && method != "floor") {
        throw render_error("round() method must be common, ceil or floor");
    }
    if (method == "common" && v.kind != value_kind::floating) return v;  // Python: round(int, n) is the int
    const double x = v.as_double();
    const double scale = std::pow(10.0, static_cast<double>(precision));
    if (method == "ceil") return value::floating(std::ceil(x * scale) / scale);
    if (method == "floor") return value::floating(std::floor(x * scale) / scale);
    // Python's round(x, n): the correctly rounded decimal (ties to even), which printf also gives.
    char buf[512];
    std::snprintf(buf, sizeof buf, "%.*f", static_cast<int>(std::clamp<int64_t>(precision, 0, 300)), x);
    return value::floating(std::strtod(buf, nullptr));
}

value f_sort(evaluator& ev, const value& v, const call_args& a) {
    a.expect_at_most("sort()", 3, {"reverse", "case_sensitive", "attribute"});
    const bool reverse = a.get(0, "reverse", value::boolean(false)).truthy();
    const bool case_sensitive = a.get(1, "case_sensitive", value::boolean(false)).truthy();
    const value attribute = a.get(2, "attribute", value::none());
    auto items = iterate(v);
    auto key = [&](const value& x) {
        return sort_key(attribute.is_none() ? x : attribute_path(ev, x, attribute), case_sensitive);
    };
    std::stable_sort(items.begin(), items.end(), [&](const value& p, const value& q) {
        return reverse ? less(key(q), key(p)) : less(key(p), key(q));
    });
    return value::list(std::move(items));
}

value f_sum(evaluator& ev, const value& v, const call_args& a) {
    const value attribute = a.get(0, "attribute", value::none());
    value total = a.get(1, "start", value::integer(0));
    for (const auto& item : iterate(v)) {
        total =
            binary_operation(binary_op::add, total, attribute.is_none() ? item : attribute_path(ev, item, attribute));
    }
    return total;
}

value f_tojson(evaluator&, const value& v, const call_args& a) {
    a.expect_at_most("tojson()", 4, {"ensure_ascii", "indent", "separators", "sort_keys"});
    json_dump_options o;
    o.ensure_ascii = a.get(0, "ensure_ascii", value::boolean(false)).truthy();
    const value indent = a.get(1, "indent", value::none());
    // json.dumps: a string indent is each level's text, a number that many spaces (none for a negative one).
    if (indent.is_string()) {
        o.indent = indent.s;
    } else if (!indent.is_none()) {
        o.indent = std::string(static_cast<size_t>(std::max<int64_t>(0, need_int(indent, "tojson() indent"))), ' ');
    }
    const value separators = a.get(2, "separators", value::none());
    if (!separators.is_none()) {
        if (!separators.is_sequence() || separators.l->size() != 2 || !(*separators.l)[0].is_string() ||
            !(*separators.l)[1].is_string()) {
            throw render_error("tojson() separators must be a pair of strings");
        }
        o.item_separator = (*separators.l)[0].s;
        o.key_separator = (*separators.l)[1].s;
    }
    o.sort_keys = a.get(3, "sort_keys", value::boolean(false)).truthy();
    return value::string(to_json(v, o));
}

value f_trim(evaluator&, const value& v, const call_args& a) {
    const value chars = a.get(0, "chars", value::none());
    return value::string(
        py_strip(to_str(v), chars.is_none() ? std::nullopt : std::optional(to_str(chars)), true, true));
}

value f_unique(evaluator& ev, const value& v, const call_args& a) {
    a.expect_at_most("unique()", 2, {"case_sensitive", "attribute"});
    const bool case_sensitive = a.get(0, "case_sensitive", value::boolean(false)).truthy();
    const value attribute = a.get(1, "attribute", value::none());
    std::vector<value> seen;
    std::vector<value> out;
    for (const auto& item : iterate(v)) {
        const value key = sort_key(attribute.is_none() ? item : attribute_path(ev, item, attribute), case_sensitive);
        if (std::any_of(seen.begin(), seen.end(), [&](const value& s) { return equal(s, key); })) continue;
        seen.push_back(key);
        out.push_back(item);
    }
    return value::list(std::move(out));
}

const std::unordered_map<std::string_view, filter_fn>& filters() {
    static const std::unordered_map<std::string_view, filter_fn> table = {
        {"abs", f_abs},
        {"attr", f_attr},
        {"batch", f_batch},
        {"capitalize", f_capitalize},
        {"count", f_length},
        {"center", f_center},
        {"d", f_default},
        {"default", f_default},
        {"dictsort", f_dictsort},
        {"e", f_escape},
        {"escape", f_escape},
        {"first", f_first},
        {"float", f_float},
        {"forceescape", f_escape},
        {"format", format_filter},
        {"groupby", f_groupby},
        {"indent", f_indent},
        {"int", f_int},
        {"items", f_items},
        {"join", f_join},
        {"last", f_last},
        {"length", f_length},
        {"list", f_list},
        {"lower", f_lower},
        {"map", f_map},
        {"max", f_max},
        {"min", f_min},
        {"reject", f_reject},
        {"rejectattr", f_rejectattr},
        {"replace", f_replace},
        {"reverse", f_reverse},
        {"round", f_round},
        {"safe", f_safe},
        {"select", f_select},
        {"selectattr", f_selectattr},
        {"slice", f_slice},
        {"sort", f_sort},
        {"string", f_string},
        {"sum", f_sum},
        {"title", f_title},
        {"tojson", f_tojson},
        {"trim", f_trim},
        {"truncate", f_truncate},
        {"unique", f_unique},
        {"upper", f_upper},
        {"wordcount", f_wordcount},
    };
    return table;
}

}  // namespace

bool has_filter(std::string_view name) {
    return filters().contains(name);
}

value evaluator::apply_filter(std::string_view name, const value& operand, const call_args& args) {
    auto it = filters().find(name);
    if (it == filters().end()) throw render_error("no filter named '" + std::string(name) + "'");
    return it->second(*this, operand, args);
}

}  // namespace troupe::jinja
