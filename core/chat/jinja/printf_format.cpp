// Python's printf-style formatting (PyUnicode_Format): the conversion rules and error texts of CPython.
#include "core/chat/jinja/printf_format.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <optional>

#include "core/chat/jinja/unicode_case.h"

namespace troupe::jinja {
namespace {

struct spec {
    bool left = false;   // '-'
    bool plus = false;   // '+'
    bool space = false;  // ' '
    bool alt = false;    // '#'
    bool zero = false;   // '0'
    int64_t width = -1;
    int64_t precision = -1;
};

// The arguments as CPython walks them: a tuple's items in order, or the one value (consumed once).
class argument_cursor {
public:
    explicit argument_cursor(const value& args) : args_(args) {
        if (args.kind == value_kind::tuple) {
            count_ = static_cast<int64_t>(args.l->size());
            next_ = 0;
        }
    }
    value next() {
        if (next_ >= count_) throw render_error("not enough arguments for format string");
        const int64_t k = next_++;
        return count_ < 0 ? args_ : (*args_.l)[static_cast<size_t>(k)];
    }
    bool all_used() const { return next_ >= count_; }

private:
    const value& args_;
    int64_t count_ = -1;  // -1: one value, not a tuple
    int64_t next_ = -2;
};

size_t code_point_count(const std::string& s) {
    size_t n = 0;
    for (char c : s) n += (static_cast<unsigned char>(c) & 0xC0) != 0x80;
    return n;
}

std::string pad(std::string body, const spec& sp) {
    const auto n = static_cast<int64_t>(code_point_count(body));
    if (sp.width <= n) return body;
    const std::string fill(static_cast<size_t>(sp.width - n), ' ');
    return sp.left ? body + fill : fill + body;
}

// Sign, prefix and digits, padded as CPython pads numbers: zeros go between the prefix and the digits.
std::string pad_number(const std::string& sign_and_prefix, const std::string& digits, const spec& sp) {
    const auto n = static_cast<int64_t>(sign_and_prefix.size() + digits.size());
    if (sp.width > n && sp.zero && !sp.left) {
        return sign_and_prefix + std::string(static_cast<size_t>(sp.width - n), '0') + digits;
    }
    return pad(sign_and_prefix + digits, sp);
}

std::string format_integer(const value& v, char conversion, const spec& sp) {
    int64_t x = 0;
    if (v.kind == value_kind::integer || v.kind == value_kind::boolean) {
        x = v.kind == value_kind::boolean ? int64_t{v.b} : v.i;
    } else if (v.kind == value_kind::floating && (conversion == 'd' || conversion == 'i' || conversion == 'u')) {
        if (!std::isfinite(v.f)) throw render_error("cannot convert float " + to_str(v) + " to integer");
        x = static_cast<int64_t>(std::trunc(v.f));
    } else if (conversion == 'd' || conversion == 'i' || conversion == 'u') {
        throw render_error(std::string("%") + conversion + " format: a real number is required, not " + type_name(v));
    } else {
        throw render_error(std::string("%") + conversion + " format: an integer is required, not " + type_name(v));
    }
    const uint64_t magnitude = x < 0 ? 0 - static_cast<uint64_t>(x) : static_cast<uint64_t>(x);
    const int base = conversion == 'x' || conversion == 'X' ? 16 : conversion == 'o' ? 8 : 10;
    const char* symbols = conversion == 'X' ? "0123456789ABCDEF" : "0123456789abcdef";
    std::string digits;
    for (uint64_t m = magnitude; m > 0 || digits.empty(); m /= static_cast<uint64_t>(base)) {
        digits.insert(digits.begin(), symbols[m % static_cast<uint64_t>(base)]);
    }
    if (sp.precision > static_cast<int64_t>(digits.size())) {
        digits.insert(0, static_cast<size_t>(sp.precision) - digits.size(), '0');
    }
    std::string prefix = x < 0 ? "-" : sp.plus ? "+" : sp.space ? " " : "";
    if (sp.alt && base != 10) prefix += conversion == 'o' ? "0o" : conversion == 'x' ? "0x" : "0X";
    return pad_number(prefix, digits, sp);
}

std::string format_float(const value& v, char conversion, const spec& sp) {
    if (!v.is_number()) throw render_error("must be real number, not " + type_name(v));
    const double x = v.as_double();
    if (!std::isfinite(x)) {
        std::string text = std::isnan(x) ? "nan" : "inf";
        if (conversion == 'E' || conversion == 'F' || conversion == 'G') {
            for (auto& c : text) c = static_cast<char>(c - 'a' + 'A');
        }
        const std::string sign = std::signbit(x) && !std::isnan(x) ? "-" : sp.plus ? "+" : sp.space ? " " : "";
        return pad(sign + text, sp);
    }
    std::string format = "%";
    if (sp.left) format += '-';
    if (sp.plus) format += '+';
    if (sp.space) format += ' ';
    if (sp.alt) format += '#';
    if (sp.zero) format += '0';
    if (sp.width >= 0) format += std::to_string(sp.width);
    format += "." + std::to_string(sp.precision < 0 ? 6 : sp.precision);
    format += conversion;
    const int n = std::snprintf(nullptr, 0, format.c_str(), x);
    std::string out(static_cast<size_t>(n) + 1, '\0');
    std::snprintf(out.data(), out.size(), format.c_str(), x);
    out.resize(static_cast<size_t>(n));
    return out;
}

std::string format_char(const value& v, const spec& sp) {
    if (v.is_string() && code_point_count(v.s) == 1) return pad(v.s, sp);
    if (v.kind != value_kind::integer || v.i < 0 || v.i > 0x10FFFF) throw render_error("%c requires int or char");
    std::string out;
    append_utf8(out, static_cast<char32_t>(v.i));
    return pad(out, sp);
}

std::string truncate_code_points(const std::string& s, int64_t n) {
    if (n < 0) return s;
    const auto offsets = code_point_offsets(s);
    return static_cast<size_t>(n) < offsets.size() ? s.substr(0, offsets[static_cast<size_t>(n)]) : s;
}

int64_t star_argument(argument_cursor& args) {
    const value v = args.next();
    if (v.kind != value_kind::integer && v.kind != value_kind::boolean) throw render_error("* wants int");
    return v.kind == value_kind::boolean ? int64_t{v.b} : v.i;
}

}  // namespace

std::string printf_format(const std::string& format, const value& args) {
    argument_cursor cursor(args);
    // CPython takes any non-tuple, non-str argument with items (a dict, also a list) as a mapping: it need not
    // be used up.
    const bool mapping = args.kind == value_kind::dict || args.kind == value_kind::list;
    std::string out;
    size_t k = 0;
    while (k < format.size()) {
        const size_t percent = format.find('%', k);
        if (percent == std::string::npos) {
            out.append(format, k, std::string::npos);
            break;
        }
        out.append(format, k, percent - k);
        k = percent + 1;
        if (k >= format.size()) throw render_error("incomplete format");
        if (format[k] == '%') {
            out += '%';
            ++k;
            continue;
        }
        std::optional<value> keyed;
        if (format[k] == '(') {
            if (args.kind != value_kind::dict) throw render_error("format requires a mapping");
            int depth = 1;
            const size_t start = ++k;
            while (k < format.size() && depth > 0) {
                depth += format[k] == '(' ? 1 : format[k] == ')' ? -1 : 0;
                ++k;
            }
            if (depth > 0) throw render_error("incomplete format key");
            const std::string key = format.substr(start, k - 1 - start);
            const value* found = args.d->find(key);
            if (found == nullptr) throw render_error("KeyError: " + repr(value::string(key)));
            keyed = *found;
        }
        spec sp;
        for (; k < format.size(); ++k) {
            const char c = format[k];
            if (c == '-')
                sp.left = true;
            else if (c == '+')
                sp.plus = true;
            else if (c == ' ')
                sp.space = true;
            else if (c == '#')
                sp.alt = true;
            else if (c == '0')
                sp.zero = true;
            else
                break;
        }
        auto read_number = [&](bool allow_star) -> int64_t {
            if (allow_star && k < format.size() && format[k] == '*') {
                ++k;
                return star_argument(cursor);
            }
            int64_t n = -1;
            while (k < format.size() && format[k] >= '0' && format[k] <= '9') {
                n = (n < 0 ? 0 : n * 10) + (format[k] - '0');
                if (n > 100000) throw render_error("width too big");
                ++k;
            }
            return n;
        };
        sp.width = read_number(true);
        if (sp.width < -1) {  // a negative * width left-justifies, as in C
            sp.left = true;
            sp.width = -sp.width;
        }
        if (k < format.size() && format[k] == '.') {
            ++k;
            sp.precision = std::max<int64_t>(0, read_number(true));
        }
        while (k < format.size() && (format[k] == 'h' || format[k] == 'l' || format[k] == 'L')) ++k;
        if (k >= format.size()) throw render_error("incomplete format");
        const char conversion = format[k++];
        const std::string known = "sradiuxXocfFeEgG";
        if (known.find(conversion) == std::string::npos) {
            char buf[96];
            std::snprintf(buf, sizeof buf, "unsupported format character '%c' (0x%x) at index %zu", conversion,
                          static_cast<unsigned>(static_cast<unsigned char>(conversion)), k - 1);
            throw render_error(buf);
        }
        const value v = keyed ? *keyed : cursor.next();
        switch (conversion) {
            case 's':
                out += pad(truncate_code_points(to_str(v), sp.precision), sp);
                break;
            case 'r':
            case 'a':
                out += pad(truncate_code_points(repr(v), sp.precision), sp);
                break;
            case 'c':
                out += format_char(v, sp);
                break;
            case 'd':
            case 'i':
            case 'u':
            case 'x':
            case 'X':
            case 'o':
                out += format_integer(v, conversion, sp);
                break;
            default:
                out += format_float(v, conversion, sp);
                break;
        }
    }
    if (!mapping && !cursor.all_used()) throw render_error("not all arguments converted during string formatting");
    return out;
}

}  // namespace troupe::jinja

namespace troupe::jinja {

value format_filter(evaluator&, const value& v, const call_args& a) {
    if (!a.pos.empty() && !a.kw.empty()) {
        throw render_error("format(): can't handle positional and keyword arguments at the same time");
    }
    const std::string text = to_str(v);  // an undefined value formats as ""
    if (a.kw.empty()) return value::string(printf_format(text, value::tuple(a.pos)));
    dict keys;
    for (const auto& [k, x] : a.kw) keys.set(k, x);
    return value::string(printf_format(text, value::dict(std::move(keys))));
}

}  // namespace troupe::jinja
