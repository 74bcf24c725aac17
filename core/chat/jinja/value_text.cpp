// str() and repr() of values as CPython writes them, since a template that prints a list or a float prints
// Python's text for it: [1, 'a', None], {'k': "it's"}, 0.30000000000000004, 1e-05, 1e+16, (1,).
#include <charconv>
#include <cmath>
#include <cstdio>

#include "core/chat/jinja/callable.h"
#include "core/chat/jinja/unicode_case.h"
#include "core/chat/jinja/value.h"

namespace troupe::jinja {
namespace {

// The code point at s[k..] (k at a lead byte) and its byte length; invalid bytes read as themselves.
std::pair<uint32_t, size_t> decode_utf8(std::string_view s, size_t k) {
    const auto c = static_cast<unsigned char>(s[k]);
    size_t n = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 1;
    if (k + n > s.size()) n = 1;
    if (n == 1) return {c, 1};
    uint32_t cp = c & (0x7F >> n);
    for (size_t j = 1; j < n; ++j) cp = (cp << 6) | (static_cast<unsigned char>(s[k + j]) & 0x3F);
    return {cp, n};
}

std::string string_repr(std::string_view s) {
    const bool has_single = s.find('\'') != std::string_view::npos;
    const bool has_double = s.find('"') != std::string_view::npos;
    const char quote = has_single && !has_double ? '"' : '\'';
    std::string out(1, quote);
    for (size_t k = 0; k < s.size();) {
        auto [cp, n] = decode_utf8(s, k);
        char buf[16];
        if (cp == '\\' || cp == static_cast<uint32_t>(quote)) {
            out += '\\';
            out += static_cast<char>(cp);
        } else if (cp == '\n') {
            out += "\\n";
        } else if (cp == '\r') {
            out += "\\r";
        } else if (cp == '\t') {
            out += "\\t";
        } else if (!py_is_printable(cp)) {  // as CPython's repr: \xNN, \uNNNN or \UNNNNNNNN
            std::snprintf(buf, sizeof buf, cp < 0x100 ? "\\x%02x" : cp < 0x10000 ? "\\u%04x" : "\\U%08x", cp);
            out += buf;
        } else {
            out.append(s.substr(k, n));
        }
        k += n;
    }
    out += quote;
    return out;
}

std::string items_text(const std::vector<value>& items) {
    std::string out;
    for (size_t k = 0; k < items.size(); ++k) {
        if (k > 0) out += ", ";
        out += repr(items[k]);
    }
    return out;
}

std::string dict_text(const dict& d) {
    std::string out = "{";
    for (size_t k = 0; k < d.items.size(); ++k) {
        if (k > 0) out += ", ";
        out += repr(key_value(d.items[k].first)) + ": " + repr(d.items[k].second);
    }
    return out + "}";
}

}  // namespace

std::string float_repr(double x) {
    if (std::isnan(x)) return "nan";
    if (std::isinf(x)) return x > 0 ? "inf" : "-inf";
    char buf[64];
    // Shortest round-trip digits in scientific form: [-]d[.ddd]e[+-]XX.
    auto [end, ec] = std::to_chars(buf, buf + sizeof buf, x, std::chars_format::scientific);
    (void)ec;
    std::string_view sci(buf, static_cast<size_t>(end - buf));
    const bool negative = sci.front() == '-';
    if (negative) sci.remove_prefix(1);
    const size_t e_pos = sci.find('e');
    std::string digits;
    for (char c : sci.substr(0, e_pos)) {
        if (c != '.') digits += c;
    }
    const int exponent = std::stoi(std::string(sci.substr(e_pos + 1)));
    const int decpt = exponent + 1;  // x = 0.digits * 10^decpt
    std::string out = negative ? "-" : "";
    if (decpt <= -4 || decpt > 16) {
        out += digits.substr(0, 1);
        if (digits.size() > 1) out += "." + digits.substr(1);
        char e[16];
        std::snprintf(e, sizeof e, "e%c%02d", exponent < 0 ? '-' : '+', std::abs(exponent));
        return out + e;
    }
    if (decpt <= 0) return out + "0." + std::string(static_cast<size_t>(-decpt), '0') + digits;
    if (static_cast<size_t>(decpt) >= digits.size()) {
        return out + digits + std::string(static_cast<size_t>(decpt) - digits.size(), '0') + ".0";
    }
    return out + digits.substr(0, static_cast<size_t>(decpt)) + "." + digits.substr(static_cast<size_t>(decpt));
}

std::string to_str(const value& v) {
    switch (v.kind) {
        case value_kind::undefined:
            return "";
        case value_kind::string:
            return v.s;
        case value_kind::none:
        case value_kind::boolean:
        case value_kind::integer:
        case value_kind::floating:
        case value_kind::list:
        case value_kind::tuple:
        case value_kind::dict:
        case value_kind::ns:
        case value_kind::callable:
            return repr(v);
    }
    return "";
}

std::string repr(const value& v) {
    switch (v.kind) {
        case value_kind::undefined:
            return "";
        case value_kind::none:
            return "None";
        case value_kind::boolean:
            return v.b ? "True" : "False";
        case value_kind::integer:
            return std::to_string(v.i);
        case value_kind::floating:
            return float_repr(v.f);
        case value_kind::string:
            return string_repr(v.s);
        case value_kind::list:
            return "[" + items_text(*v.l) + "]";
        case value_kind::tuple:
            return "(" + items_text(*v.l) + (v.l->size() == 1 ? ",)" : ")");
        case value_kind::dict:
            return dict_text(*v.d);
        case value_kind::ns:
            return "<Namespace " + dict_text(*v.d) + ">";
        case value_kind::callable:
            return "<function " + v.fn->name + ">";
    }
    return "";
}

}  // namespace troupe::jinja
