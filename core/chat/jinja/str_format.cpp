// str.format as jinja2's sandbox runs it (SandboxedFormatter: Python's format mini-language, fields looked
// up with the environment's getattr/getitem, so '{0.role}' reads a dict's key).
#include "core/chat/jinja/str_format.h"

#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string_view>

#include "core/chat/jinja/unicode_case.h"

namespace troupe::jinja {
namespace {

struct format_spec {
    std::string fill = " ";
    char align = 0;  // '<', '>', '^', '=' or 0 (the type's default)
    char sign = '-';
    bool alt = false;
    int64_t width = -1;
    char grouping = 0;  // ',' or '_'
    int64_t precision = -1;
    char type = 0;
};

format_spec parse_spec(std::string_view s) {
    format_spec f;
    size_t k = 0;
    auto is_align = [](char c) { return c == '<' || c == '>' || c == '^' || c == '='; };
    // A fill character may be any code point: look past the first one for an alignment.
    size_t cp_len = 1;
    if (!s.empty()) {
        const auto c = static_cast<unsigned char>(s[0]);
        cp_len = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : 4;
    }
    if (s.size() > cp_len && is_align(s[cp_len])) {
        f.fill = std::string(s.substr(0, cp_len));
        f.align = s[cp_len];
        k = cp_len + 1;
    } else if (!s.empty() && is_align(s[0])) {
        f.align = s[0];
        k = 1;
    }
    if (k < s.size() && (s[k] == '+' || s[k] == '-' || s[k] == ' ')) f.sign = s[k++];
    if (k < s.size() && s[k] == '#') f.alt = (++k, true);
    if (k < s.size() && s[k] == '0') {
        if (f.align == 0) {
            f.fill = "0";
            f.align = '=';
        }
        ++k;
    }
    auto number = [&]() {
        int64_t n = -1;
        while (k < s.size() && s[k] >= '0' && s[k] <= '9') {
            n = (n < 0 ? 0 : n * 10) + (s[k++] - '0');
            if (n > 100000) throw render_error("Too many decimal digits in format string");
        }
        return n;
    };
    f.width = number();
    if (k < s.size() && (s[k] == ',' || s[k] == '_')) f.grouping = s[k++];
    if (k < s.size() && s[k] == '.') {
        ++k;
        f.precision = number();
        if (f.precision < 0) throw render_error("Format specifier missing precision");
    }
    if (k < s.size()) f.type = s[k++];
    if (k < s.size()) throw render_error("Invalid format specifier '" + std::string(s) + "'");
    return f;
}

std::string aligned(const std::string& sign, const std::string& body, const format_spec& f, char default_align) {
    const auto n = static_cast<int64_t>(code_point_offsets(sign + body).size());
    if (f.width <= n) return sign + body;
    std::string fill;
    for (int64_t k = 0; k < f.width - n; ++k) fill += f.fill;
    const char align = f.align ? f.align : default_align;
    if (align == '=') return sign + fill + body;
    if (align == '<') return sign + body + fill;
    if (align == '>') return fill + sign + body;
    const auto total = static_cast<size_t>(f.width - n);  // '^': the extra one on the right
    std::string left;
    for (size_t k = 0; k < total / 2; ++k) left += f.fill;
    std::string right;
    for (size_t k = 0; k < total - total / 2; ++k) right += f.fill;
    return left + sign + body + right;
}

std::string grouped(std::string digits, char grouping, size_t group = 3) {
    if (!grouping) return digits;
    const size_t point = digits.find_first_of(".eE%");
    const size_t int_end = point == std::string::npos ? digits.size() : point;
    for (auto k = static_cast<int64_t>(int_end) - static_cast<int64_t>(group); k > 0;
         k -= static_cast<int64_t>(group)) {
        digits.insert(static_cast<size_t>(k), 1, grouping);
    }
    return digits;
}

std::string format_number(const value& v, const format_spec& f) {
    const bool integer = v.kind == value_kind::integer || v.kind == value_kind::boolean;
    char type = f.type;
    if (integer && (type == 0 || type == 'd' || type == 'n' || type == 'b' || type == 'o' || type == 'x' ||
                    type == 'X' || type == 'c')) {
        if (f.precision >= 0) throw render_error("Precision not allowed in integer format specifier");
        const int64_t x = v.kind == value_kind::boolean ? int64_t{v.b} : v.i;
        if (type == 'c') return aligned("", std::string(1, static_cast<char>(x)), f, '<');
        const uint64_t m = x < 0 ? 0 - static_cast<uint64_t>(x) : static_cast<uint64_t>(x);
        const int base = type == 'b' ? 2 : type == 'o' ? 8 : (type == 'x' || type == 'X') ? 16 : 10;
        const char* symbols = type == 'X' ? "0123456789ABCDEF" : "0123456789abcdef";
        std::string digits;
        for (uint64_t r = m; r > 0 || digits.empty(); r /= static_cast<uint64_t>(base)) {
            digits.insert(digits.begin(), symbols[r % static_cast<uint64_t>(base)]);
        }
        digits = grouped(digits, f.grouping, base == 10 ? 3 : 4);
        std::string sign = x < 0 ? "-" : f.sign == '+' ? "+" : f.sign == ' ' ? " " : "";
        if (f.alt && base != 10) sign += type == 'b' ? "0b" : type == 'o' ? "0o" : type == 'x' ? "0x" : "0X";
        return aligned(sign, digits, f, '>');
    }
    if (!v.is_number()) throw render_error("Unknown format code for object of type '" + type_name(v) + "'");
    double x = v.as_double();
    std::string body;
    if (type == 0 && f.precision < 0) {
        body = v.kind == value_kind::floating ? float_repr(std::fabs(x)) : std::to_string(std::llabs(v.i));
    } else {
        const bool percent = type == '%';
        if (percent) x *= 100;
        const char c = type == 0 ? 'g' : percent ? 'f' : type == 'n' ? 'g' : type;
        if (std::string_view("eEfFgG").find(c) == std::string_view::npos) {
            throw render_error(std::string("Unknown format code '") + type + "' for object of type '" + type_name(v) +
                               "'");
        }
        const std::string fmt = std::string("%") + (f.alt ? "#" : "") + "." +
                                std::to_string(f.precision < 0 ? (type == 0 ? 12 : 6) : f.precision) + c;
        char buf[512];
        std::snprintf(buf, sizeof buf, fmt.c_str(), std::fabs(x));
        body = buf;
        // No type with a precision: like 'g', but a whole number keeps one decimal ('1.0'), as Python writes it.
        if (type == 0 && body.find_first_of(".einf") == std::string::npos) body += ".0";
        if (percent) body += '%';
    }
    body = grouped(body, f.grouping);
    const std::string sign = std::signbit(x) && !std::isnan(x) ? "-" : f.sign == '+' ? "+" : f.sign == ' ' ? " " : "";
    return aligned(sign, body, f, '>');
}

std::string format_value(const value& v, const format_spec& f, bool spec_given) {
    if (v.is_number()) {
        if (!spec_given && v.kind == value_kind::boolean) return to_str(v);
        return format_number(v, f);
    }
    if (!v.is_string() && !v.is_undefined()) {
        if (spec_given) throw render_error("unsupported format string passed to " + type_name(v) + ".__format__");
        return to_str(v);
    }
    if (f.type != 0 && f.type != 's') {
        throw render_error(std::string("Unknown format code '") + f.type + "' for object of type 'str'");
    }
    if (f.sign != '-' || f.align == '=') throw render_error("Sign not allowed in string format specifier");
    std::string s = to_str(v);
    if (f.precision >= 0) {
        const auto offsets = code_point_offsets(s);
        if (static_cast<size_t>(f.precision) < offsets.size()) s.resize(offsets[static_cast<size_t>(f.precision)]);
    }
    return aligned("", s, f, '<');
}

// The field's value: an index or keyword, then .attr and [key] parts (a dict's keys answer both).
value field_value(std::string_view name, const call_args& args, size_t& auto_index, bool& manual) {
    size_t k = 0;
    while (k < name.size() && name[k] != '.' && name[k] != '[') ++k;
    const std::string_view first = name.substr(0, k);
    value v;
    if (first.empty() || std::isdigit(static_cast<unsigned char>(first[0]))) {
        size_t index = 0;
        if (first.empty()) {
            if (manual)
                throw render_error("cannot switch from manual field specification to automatic field numbering");
            index = auto_index++;
        } else {
            if (auto_index > 0)
                throw render_error("cannot switch from automatic field numbering to manual field specification");
            manual = true;
            index = static_cast<size_t>(std::stoll(std::string(first)));
        }
        if (index >= args.pos.size()) {
            throw render_error("Replacement index " + std::to_string(index) +
                               " out of range for positional args tuple");
        }
        v = args.pos[index];
    } else {
        bool found = false;
        for (const auto& [key, x] : args.kw) {
            if (key == first) {
                v = x;
                found = true;
            }
        }
        if (!found) throw render_error("KeyError: '" + std::string(first) + "'");
    }
    while (k < name.size()) {
        const bool item = name[k] == '[';
        const size_t start = k + 1;
        size_t end = item ? name.find(']', start) : start;
        if (item && end == std::string_view::npos) throw render_error("Missing ']' in format string");
        if (!item) {
            while (end < name.size() && name[end] != '.' && name[end] != '[') ++end;
        }
        const std::string part(name.substr(start, end - start));
        k = item ? end + 1 : end;
        const bool numeric = !part.empty() && part.find_first_not_of("0123456789") == std::string::npos;
        if (v.is_sequence() && numeric) {
            const auto index = static_cast<size_t>(std::stoll(part));
            if (index >= v.l->size()) throw render_error("IndexError: list index out of range");
            v = (*v.l)[index];
        } else if (v.is_mapping() || v.kind == value_kind::ns) {
            const value* x = v.d->find(part);
            if (!x) throw render_error("'" + type_name(v) + " object' has no attribute '" + part + "'");
            v = *x;
        } else {
            throw render_error("'" + type_name(v) + " object' has no attribute '" + part + "'");
        }
    }
    return v;
}

}  // namespace

value str_format(const std::string& text, const call_args& args) {
    std::string out;
    size_t auto_index = 0;
    bool manual = false;
    for (size_t k = 0; k < text.size(); ++k) {
        const char c = text[k];
        if (c == '}') {
            if (k + 1 < text.size() && text[k + 1] == '}') {
                out += '}';
                ++k;
                continue;
            }
            throw render_error("Single '}' encountered in format string");
        }
        if (c != '{') {
            out += c;
            continue;
        }
        if (k + 1 < text.size() && text[k + 1] == '{') {
            out += '{';
            ++k;
            continue;
        }
        const size_t close = text.find('}', k + 1);
        if (close == std::string::npos) throw render_error("Single '{' encountered in format string");
        const std::string_view field = std::string_view(text).substr(k + 1, close - k - 1);
        if (field.find('{') != std::string_view::npos) throw render_error("nested format fields are not supported");
        size_t name_end = 0;
        while (name_end < field.size() && field[name_end] != '!' && field[name_end] != ':') {
            if (field[name_end] == '[') name_end = field.find(']', name_end);
            if (name_end == std::string_view::npos) throw render_error("Missing ']' in format string");
            ++name_end;
        }
        value v = field_value(field.substr(0, name_end), args, auto_index, manual);
        size_t rest = name_end;
        if (rest < field.size() && field[rest] == '!') {
            if (rest + 1 >= field.size()) throw render_error("end of string while looking for conversion specifier");
            const char conversion = field[rest + 1];
            if (conversion == 'r' || conversion == 'a') {
                v = value::string(repr(v));
            } else if (conversion == 's') {
                v = value::string(to_str(v));
            } else {
                throw render_error(std::string("Unknown conversion specifier ") + conversion);
            }
            rest += 2;
        }
        std::string_view spec;
        if (rest < field.size()) {
            if (field[rest] != ':') throw render_error("expected ':' after conversion specifier");
            spec = field.substr(rest + 1);
        }
        out += format_value(v, parse_spec(spec), !spec.empty());
        k = close;
    }
    return value::string(std::move(out));
}

}  // namespace troupe::jinja
