// Methods called on values, as Python's str, list and dict have them: 'x'.strip(), text.split(','),
// message.get('content'), d.items(), list.append(x) ... A method name on an object that has no such method
// is not a method: the caller then looks the name up as an item.
#include <algorithm>

#include "core/chat/jinja/evaluator.h"
#include "core/chat/jinja/str_format.h"
#include "core/chat/jinja/string_ops.h"
#include "core/chat/jinja/unicode_case.h"

namespace troupe::jinja {
namespace {

std::optional<std::string> optional_string(const value& v, const std::string& what) {
    if (v.is_undefined() || v.is_none()) return std::nullopt;
    if (!v.is_string()) throw render_error(what + " must be a string or None, not " + type_name(v));
    return v.s;
}

std::string string_arg(const value& v, const std::string& what) {
    if (!v.is_string()) throw render_error(what + " must be a string, not " + type_name(v));
    return v.s;
}

int64_t int_arg(const value& v, int64_t fallback, const std::string& what) {
    if (v.is_undefined()) return fallback;
    if (v.kind == value_kind::boolean) return v.b;
    if (v.kind != value_kind::integer) throw render_error(what + " must be an integer, not " + type_name(v));
    return v.i;
}

value string_list(std::vector<std::string> parts) {
    std::vector<value> items;
    items.reserve(parts.size());
    for (auto& p : parts) items.push_back(value::string(std::move(p)));
    return value::list(std::move(items));
}

// startswith / endswith take a string or a tuple of strings.
bool affix(const std::string& s, const value& arg, bool prefix, const std::string& what) {
    auto one = [&](const value& a) {
        const std::string x = string_arg(a, what);
        return prefix ? s.starts_with(x) : s.ends_with(x);
    };
    if (arg.is_sequence()) {
        for (const auto& a : *arg.l) {
            if (one(a)) return true;
        }
        return false;
    }
    return one(arg);
}

value string_method(const std::string& s, const std::string& name, const call_args& a) {
    const std::string what = "str." + name + "()";
    if (name == "strip" || name == "lstrip" || name == "rstrip") {
        a.expect_at_most(what, 1, {});
        return value::string(
            py_strip(s, optional_string(a.get(0, ""), what + " chars"), name != "rstrip", name != "lstrip"));
    }
    if (name == "split" || name == "rsplit") {
        a.expect_at_most(what, 2, {"sep", "maxsplit"});
        const auto sep = optional_string(a.get(0, "sep"), what + " sep");
        if (sep && sep->empty()) throw render_error("empty separator in " + what);
        return string_list(py_split(s, sep, int_arg(a.get(1, "maxsplit"), -1, what + " maxsplit"), name == "rsplit"));
    }
    if (name == "splitlines") return string_list(py_splitlines(s));
    if (name == "format") return str_format(s, a);
    if (name == "startswith" || name == "endswith") {
        a.expect_at_most(what, 1, {});
        return value::boolean(affix(s, a.get(0, ""), name == "startswith", what + " argument"));
    }
    if (name == "upper") return value::string(py_upper(s));
    if (name == "lower") return value::string(py_lower(s));
    if (name == "title") return value::string(py_title(s));
    if (name == "capitalize") return value::string(py_capitalize(s));
    if (name == "replace") {
        a.expect_at_most(what, 3, {"count"});
        return value::string(py_replace(s, string_arg(a.get(0, ""), what + " old"),
                                        string_arg(a.get(1, ""), what + " new"),
                                        int_arg(a.get(2, "count"), -1, what + " count")));
    }
    if (name == "find" || name == "rfind" || name == "index") {
        a.expect_at_most(what, 1, {});
        const std::string sub = string_arg(a.get(0, ""), what + " argument");
        const size_t k = name == "rfind" ? s.rfind(sub) : s.find(sub);
        if (k == std::string::npos && name == "index") throw render_error("substring not found");
        if (k == std::string::npos) return value::integer(-1);
        return value::integer(static_cast<int64_t>(code_point_offsets(std::string_view(s).substr(0, k)).size()));
    }
    if (name == "count") return value::integer(py_count(s, string_arg(a.get(0, ""), what + " argument")));
    if (name == "join") {
        std::string out;
        bool first = true;
        for (const auto& item : iterate(a.get(0, ""))) {
            if (!item.is_string()) throw render_error(what + ": sequence item must be a str, not " + type_name(item));
            if (!first) out += s;
            out += item.s;
            first = false;
        }
        return value::string(std::move(out));
    }
    auto all_of = [&](auto pred) {
        if (s.empty()) return value::boolean(false);
        for (char c : s) {
            if (!pred(static_cast<unsigned char>(c))) return value::boolean(false);
        }
        return value::boolean(true);
    };
    if (name == "isdigit") return all_of([](unsigned char c) { return std::isdigit(c) != 0; });
    if (name == "isalpha") return all_of([](unsigned char c) { return std::isalpha(c) != 0; });
    if (name == "isalnum") return all_of([](unsigned char c) { return std::isalnum(c) != 0; });
    if (name == "isspace") {
        const auto cps = decode_utf8(s);
        return value::boolean(!cps.empty() && std::all_of(cps.begin(), cps.end(), py_is_space));
    }
    if (name == "islower") return value::boolean(py_lower(s) == s && py_upper(s) != s);
    if (name == "isupper") return value::boolean(py_upper(s) == s && py_lower(s) != s);
    if (name == "isnumeric" || name == "isdecimal") return all_of([](unsigned char c) { return std::isdigit(c) != 0; });
    if (name == "isascii") {
        for (char c : s) {
            if (static_cast<unsigned char>(c) >= 0x80) return value::boolean(false);
        }
        return value::boolean(true);
    }
    if (name == "istitle") return value::boolean(py_title(s) == s && py_lower(s) != s);
    if (name == "casefold") return value::string(py_lower(s));
    if (name == "swapcase") {
        std::string out;
        for (char32_t c : decode_utf8(s)) {
            // Upper case letters lowered, lower case ones raised; title case ones (ǅ) and the rest kept.
            std::string self;
            std::string lower;
            std::string upper;
            append_utf8(self, c);
            append_lower(lower, c);
            append_upper(upper, c);
            out += lower != self && upper == self ? lower : upper != self && lower == self ? upper : self;
        }
        return value::string(std::move(out));
    }
    if (name == "ljust" || name == "rjust" || name == "center" || name == "zfill") {
        a.expect_at_most(what, name == "zfill" ? 1 : 2, {});
        const int64_t width = int_arg(a.get(0, ""), 0, what + " width");
        const std::string fill = name == "zfill" ? "0"
                                 : a.has(1, "")  ? string_arg(a.get(1, ""), what + " fillchar")
                                                 : " ";
        if (code_points(fill).size() != 1) throw render_error("The fill character must be exactly one character long");
        return value::string(py_pad(s, width, fill, name));
    }
    if (name == "partition" || name == "rpartition") {
        a.expect_at_most(what, 1, {});
        const std::string sep = string_arg(a.get(0, ""), what + " sep");
        if (sep.empty()) throw render_error("empty separator");
        const size_t k = name == "partition" ? s.find(sep) : s.rfind(sep);
        if (k == std::string::npos) {
            return name == "partition" ? value::tuple({value::string(s), value::string(""), value::string("")})
                                       : value::tuple({value::string(""), value::string(""), value::string(s)});
        }
        return value::tuple(
            {value::string(s.substr(0, k)), value::string(sep), value::string(s.substr(k + sep.size()))});
    }
    if (name == "removeprefix" || name == "removesuffix") {
        a.expect_at_most(what, 1, {});
        const std::string affix_text = string_arg(a.get(0, ""), what + " argument");
        if (name == "removeprefix" && s.starts_with(affix_text)) return value::string(s.substr(affix_text.size()));
        if (name == "removesuffix" && !affix_text.empty() && s.ends_with(affix_text)) {
            return value::string(s.substr(0, s.size() - affix_text.size()));
        }
        return value::string(s);
    }
    throw render_error("'str object' has no method '" + name + "'");
}

value dict_method(const value& d, const std::string& name, const call_args& a) {
    const std::string what = "dict." + name + "()";
    if (name == "items" || name == "keys" || name == "values") {
        a.expect_at_most(what, 0, {});
        std::vector<value> out;
        for (const auto& [k, v] : d.d->items) {
            if (name == "items") out.push_back(value::tuple({key_value(k), v}));
            if (name == "keys") out.push_back(key_value(k));
            if (name == "values") out.push_back(v);
        }
        return value::list(std::move(out));
    }
    if (name == "get") {
        a.expect_at_most(what, 2, {});
        const value key = a.get(0, "");
        if (!key.is_undefined()) {
            if (const value* v = d.d->find(dict_key(key))) return *v;
        }
        return a.has(1, "") ? a.pos[1] : value::none();
    }
    if (name == "copy") return value::dict(*d.d);
    throw render_error("'dict object' has no method '" + name + "'");
}

value list_method(const value& l, const std::string& name, const call_args& a) {
    const std::string what = type_name(l) + "." + name + "()";
    if (name == "index" || name == "count") {
        const value x = a.get(0, "");
        int64_t n = 0;
        for (size_t k = 0; k < l.l->size(); ++k) {
            if (!equal((*l.l)[k], x)) continue;
            if (name == "index") return value::integer(static_cast<int64_t>(k));
            ++n;
        }
        if (name == "index") throw render_error(repr(x) + " is not in list");
        return value::integer(n);
    }
    if (name == "copy") return value::list(*l.l);
    throw render_error("'" + type_name(l) + " object' has no method '" + name + "'");
}

bool is_method(const value& object, const std::string& name) {
    static const char* string_methods[] = {
        "strip",     "lstrip",    "rstrip",    "split",      "rsplit",       "splitlines", "startswith",  "endswith",
        "upper",     "lower",     "title",     "capitalize", "replace",      "find",       "rfind",       "index",
        "count",     "join",      "isdigit",   "isalpha",    "isalnum",      "isspace",    "islower",     "isupper",
        "isnumeric", "isdecimal", "isascii",   "istitle",    "casefold",     "swapcase",   "ljust",       "rjust",
        "center",    "zfill",     "partition", "rpartition", "removeprefix", "format",     "removesuffix"};
    static const char* dict_methods[] = {"items", "keys", "values", "get", "copy"};
    static const char* list_methods[] = {"index", "count", "copy"};
    auto in = [&](const auto& names) {
        for (const char* n : names) {
            if (name == n) return true;
        }
        return false;
    };
    switch (object.kind) {
        case value_kind::string:
            return in(string_methods);
        case value_kind::dict:
            return in(dict_methods);
        case value_kind::list:
            return in(list_methods);
        case value_kind::tuple:
            return name == "index" || name == "count";
        case value_kind::undefined:
        case value_kind::none:
        case value_kind::boolean:
        case value_kind::integer:
        case value_kind::floating:
        case value_kind::ns:
        case value_kind::callable:
            return false;
    }
    return false;
}

}  // namespace

bool is_unsafe_method(const value& object, const std::string& name) {
    static const char* list_changes[] = {"append", "extend", "remove", "sort", "clear", "pop", "reverse", "insert"};
    static const char* dict_changes[] = {"clear", "pop", "update", "popitem", "setdefault"};
    auto in = [&](const auto& names) {
        for (const char* n : names) {
            if (name == n) return true;
        }
        return false;
    };
    return (object.kind == value_kind::list && in(list_changes)) ||
           (object.kind == value_kind::dict && in(dict_changes));
}

value unsafe_attribute(const value& object, const std::string& name) {
    return value::undefined("access to attribute '" + name + "' of '" + type_name(object) + "' object is unsafe.");
}

value bound_method(const value& object, const std::string& name) {
    if (!is_method(object, name)) return value::undefined("");
    return make_function(name, [object, name](const call_args& args, evaluator&) {
        if (object.is_string()) return string_method(object.s, name, args);
        if (object.is_mapping()) return dict_method(object, name, args);
        return list_method(object, name, args);
    });
}

}  // namespace troupe::jinja
