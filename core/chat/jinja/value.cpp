#include "core/chat/jinja/value.h"

#include <algorithm>
#include <cmath>

#include "core/chat/jinja/callable.h"

namespace troupe::jinja {

value value::undefined(std::string hint) {
    value v;
    v.s = std::move(hint);
    return v;
}
value value::none() {
    value v;
    v.kind = value_kind::none;
    return v;
}
value value::boolean(bool x) {
    value v;
    v.kind = value_kind::boolean;
    v.b = x;
    return v;
}
value value::integer(int64_t x) {
    value v;
    v.kind = value_kind::integer;
    v.i = x;
    return v;
}
value value::floating(double x) {
    value v;
    v.kind = value_kind::floating;
    v.f = x;
    return v;
}
value value::string(std::string x) {
    value v;
    v.kind = value_kind::string;
    v.s = std::move(x);
    return v;
}
value value::list(std::vector<value> items) {
    value v;
    v.kind = value_kind::list;
    v.l = std::make_shared<std::vector<value>>(std::move(items));
    return v;
}
value value::tuple(std::vector<value> items) {
    value v = list(std::move(items));
    v.kind = value_kind::tuple;
    return v;
}
value value::dict(jinja::dict items) {
    value v;
    v.kind = value_kind::dict;
    v.d = std::make_shared<jinja::dict>(std::move(items));
    return v;
}
value value::dict() {
    return dict(jinja::dict{});
}
value value::ns(jinja::dict items) {
    value v = dict(std::move(items));
    v.kind = value_kind::ns;
    return v;
}
value value::function(callable_ptr f) {
    value v;
    v.kind = value_kind::callable;
    v.fn = std::move(f);
    return v;
}

bool value::truthy() const {
    switch (kind) {
        case value_kind::undefined:
        case value_kind::none:
            return false;
        case value_kind::boolean:
            return b;
        case value_kind::integer:
            return i != 0;
        case value_kind::floating:
            return f != 0.0;
        case value_kind::string:
            return !s.empty();
        case value_kind::list:
        case value_kind::tuple:
            return !l->empty();
        case value_kind::dict:
            return !d->items.empty();
        case value_kind::ns:
        case value_kind::callable:
            return true;
    }
    return false;
}

double value::as_double() const {
    if (kind == value_kind::floating) return f;
    if (kind == value_kind::boolean) return b ? 1.0 : 0.0;
    return static_cast<double>(i);
}

namespace {
// Tags no text key holds: a key text that starts with it stands for a non-string key.
constexpr char key_tag = '\x01';
}  // namespace

std::string dict_key(const value& key) {
    switch (key.kind) {
        case value_kind::string:
            return key.s;
        case value_kind::none:
            return std::string{key_tag, 'n'};
        case value_kind::boolean:
            return std::string{key_tag, 'i'} + (key.b ? "1" : "0");
        case value_kind::integer:
            return std::string{key_tag, 'i'} + std::to_string(key.i);
        case value_kind::floating:
            if (std::fabs(key.f) < 9e18 && key.f == static_cast<double>(static_cast<int64_t>(key.f))) {
                return std::string{key_tag, 'i'} + std::to_string(static_cast<int64_t>(key.f));
            }
            return std::string{key_tag, 'f'} + float_repr(key.f);
        case value_kind::undefined:
        case value_kind::list:
        case value_kind::tuple:
        case value_kind::dict:
        case value_kind::ns:
        case value_kind::callable:
            break;
    }
    throw render_error("unhashable type: '" + type_name(key) + "'");
}

value key_value(const std::string& key) {
    if (key.size() < 2 || key[0] != key_tag) return value::string(key);
    if (key[1] == 'n') return value::none();
    if (key[1] == 'i') return value::integer(std::stoll(key.substr(2)));
    return value::floating(std::stod(key.substr(2)));
}

const value* dict::find(std::string_view key) const {
    for (const auto& [k, v] : items) {
        if (k == key) return &v;
    }
    return nullptr;
}

value* dict::find(std::string_view key) {
    for (auto& [k, v] : items) {
        if (k == key) return &v;
    }
    return nullptr;
}

void dict::set(std::string key, value v) {
    if (value* old = find(key)) {
        *old = std::move(v);
        return;
    }
    items.emplace_back(std::move(key), std::move(v));
}

bool dict::erase(std::string_view key) {
    auto it = std::find_if(items.begin(), items.end(), [&](const auto& kv) { return kv.first == key; });
    if (it == items.end()) return false;
    items.erase(it);
    return true;
}

std::string type_name(const value& v) {
    switch (v.kind) {
        case value_kind::undefined:
            return "Undefined";
        case value_kind::none:
            return "NoneType";
        case value_kind::boolean:
            return "bool";
        case value_kind::integer:
            return "int";
        case value_kind::floating:
            return "float";
        case value_kind::string:
            return "str";
        case value_kind::list:
            return "list";
        case value_kind::tuple:
            return "tuple";
        case value_kind::dict:
            return "dict";
        case value_kind::ns:
            return "Namespace";
        case value_kind::callable:
            return "function";
    }
    return "?";
}

void fail_undefined(const value& v) {
    throw render_error(v.s.empty() ? std::string("value is undefined") : v.s);
}

namespace {

int compare_numbers(const value& a, const value& b) {
    if (a.kind != value_kind::floating && b.kind != value_kind::floating) {
        const int64_t x = a.kind == value_kind::boolean ? a.b : a.i;
        const int64_t y = b.kind == value_kind::boolean ? b.b : b.i;
        return x < y ? -1 : (x > y ? 1 : 0);
    }
    const double x = a.as_double();
    const double y = b.as_double();
    return x < y ? -1 : (x > y ? 1 : 0);
}

}  // namespace

bool equal(const value& a, const value& b) {
    if (a.is_number() && b.is_number()) {
        if (a.kind == value_kind::floating || b.kind == value_kind::floating) return a.as_double() == b.as_double();
        return compare_numbers(a, b) == 0;
    }
    if (a.is_sequence() && b.is_sequence()) {
        if (a.kind != b.kind || a.l->size() != b.l->size()) return false;
        for (size_t k = 0; k < a.l->size(); ++k) {
            if (!equal((*a.l)[k], (*b.l)[k])) return false;
        }
        return true;
    }
    if (a.kind != b.kind) return false;
    switch (a.kind) {
        case value_kind::undefined:
        case value_kind::none:
            return true;
        case value_kind::string:
            return a.s == b.s;
        case value_kind::dict: {
            if (a.d->items.size() != b.d->items.size()) return false;
            for (const auto& [k, v] : a.d->items) {
                const value* w = b.d->find(k);
                if (!w || !equal(v, *w)) return false;
            }
            return true;
        }
        case value_kind::ns:
            return a.d == b.d;
        case value_kind::callable:
            return a.fn == b.fn;
        case value_kind::boolean:
        case value_kind::integer:
        case value_kind::floating:
        case value_kind::list:
        case value_kind::tuple:
            return false;  // handled above
    }
    return false;
}

bool less(const value& a, const value& b) {
    if (a.is_number() && b.is_number()) return compare_numbers(a, b) < 0;
    if (a.is_string() && b.is_string()) return a.s < b.s;  // UTF-8 byte order is code point order
    if (a.is_sequence() && b.kind == a.kind) {
        const size_t n = std::min(a.l->size(), b.l->size());
        for (size_t k = 0; k < n; ++k) {
            if (!equal((*a.l)[k], (*b.l)[k])) return less((*a.l)[k], (*b.l)[k]);
        }
        return a.l->size() < b.l->size();
    }
    throw render_error("'<' not supported between instances of '" + type_name(a) + "' and '" + type_name(b) + "'");
}

std::vector<size_t> code_point_offsets(std::string_view s) {
    std::vector<size_t> offsets;
    offsets.reserve(s.size());
    for (size_t k = 0; k < s.size(); ++k) {
        if ((static_cast<unsigned char>(s[k]) & 0xC0) != 0x80) offsets.push_back(k);
    }
    return offsets;
}

std::vector<std::string> code_points(std::string_view s) {
    const auto offsets = code_point_offsets(s);
    std::vector<std::string> out;
    out.reserve(offsets.size());
    for (size_t k = 0; k < offsets.size(); ++k) {
        const size_t end = k + 1 < offsets.size() ? offsets[k + 1] : s.size();
        out.emplace_back(s.substr(offsets[k], end - offsets[k]));
    }
    return out;
}

std::vector<value> iterate(const value& v) {
    switch (v.kind) {
        case value_kind::undefined:
            return {};
        case value_kind::list:
        case value_kind::tuple:
            return *v.l;
        case value_kind::dict: {
            std::vector<value> keys;
            keys.reserve(v.d->items.size());
            for (const auto& kv : v.d->items) keys.push_back(key_value(kv.first));
            return keys;
        }
        case value_kind::string: {
            std::vector<value> chars;
            for (auto& c : code_points(v.s)) chars.push_back(value::string(std::move(c)));
            return chars;
        }
        case value_kind::none:
        case value_kind::boolean:
        case value_kind::integer:
        case value_kind::floating:
        case value_kind::ns:
        case value_kind::callable:
            break;
    }
    throw render_error("'" + type_name(v) + "' object is not iterable");
}

int64_t length(const value& v) {
    switch (v.kind) {
        case value_kind::undefined:
            return 0;
        case value_kind::string:
            return static_cast<int64_t>(code_point_offsets(v.s).size());
        case value_kind::list:
        case value_kind::tuple:
            return static_cast<int64_t>(v.l->size());
        case value_kind::dict:
            return static_cast<int64_t>(v.d->items.size());
        case value_kind::none:
        case value_kind::boolean:
        case value_kind::integer:
        case value_kind::floating:
        case value_kind::ns:
        case value_kind::callable:
            break;
    }
    throw render_error("object of type '" + type_name(v) + "' has no len()");
}

}  // namespace troupe::jinja
