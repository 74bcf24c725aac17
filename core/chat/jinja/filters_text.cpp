// The text filters: escape, indent, title, wordcount, center and truncate, as jinja2 writes them.
#include <algorithm>
#include <cctype>
#include <utility>

#include "core/chat/jinja/evaluator.h"
#include "core/chat/jinja/filter_support.h"
#include "core/chat/jinja/string_ops.h"
#include "core/chat/jinja/unicode_case.h"

namespace troupe::jinja {

value f_escape(evaluator&, const value& v, const call_args&) {
    std::string out;
    for (char c : to_str(v)) {
        switch (c) {
            case '&':
                out += "&amp;";
                break;
            case '<':
                out += "&lt;";
                break;
            case '>':
                out += "&gt;";
                break;
            case '"':
                out += "&#34;";
                break;
            case '\'':
                out += "&#39;";
                break;
            default:
                out += c;
        }
    }
    return value::string(std::move(out));
}

value f_indent(evaluator&, const value& v, const call_args& a) {
    a.expect_at_most("indent()", 3, {"width", "first", "blank"});
    const value width = a.get(0, "width", value::integer(4));
    const std::string pad =
        width.is_string() ? width.s : std::string(static_cast<size_t>(need_int(width, "indent() width")), ' ');
    const bool first = a.get(1, "first", value::boolean(false)).truthy();
    const bool blank = a.get(2, "blank", value::boolean(false)).truthy();
    const std::vector<std::string> lines = py_splitlines(to_str(v) + "\n");
    std::string out;
    for (size_t k = 0; k < lines.size(); ++k) {
        if (k > 0) out += "\n";
        if (k > 0 && (blank || !lines[k].empty())) out += pad;
        out += lines[k];
    }
    if (first) out = pad + out;
    return value::string(std::move(out));
}

value f_title(evaluator&, const value& v, const call_args&) {
    // jinja2's title: split at runs of '-', whitespace and opening brackets; in each word the first character
    // upper case (str.upper), the rest lowered (str.lower).
    auto separator = [](char32_t c) {
        return c == '-' || c == '(' || c == '{' || c == '[' || c == '<' || py_is_space(c);
    };
    std::string out;
    std::string rest;  // the current word after its first character
    bool word_start = true;
    for (char32_t c : decode_utf8(to_str(v))) {
        if (separator(c)) {
            out += py_lower(std::exchange(rest, {}));
            append_utf8(out, c);
            word_start = true;
        } else if (word_start) {
            append_upper(out, c);
            word_start = false;
        } else {
            append_utf8(rest, c);
        }
    }
    return value::string(out + py_lower(rest));
}

value f_wordcount(evaluator&, const value& v, const call_args&) {
    int64_t n = 0;
    bool in_word = false;
    for (char c : to_str(v)) {
        const auto u = static_cast<unsigned char>(c);
        const bool word = std::isalnum(u) || c == '_' || u >= 0x80;
        if (word && !in_word) ++n;
        in_word = word;
    }
    return value::integer(n);
}

value f_center(evaluator&, const value& v, const call_args& a) {
    a.expect_at_most("center()", 1, {"width"});
    return value::string(
        py_pad(to_str(v), need_int(a.get(0, "width", value::integer(80)), "center() width"), " ", "center"));
}

// jinja2's do_truncate: text within length + leeway code points stays; else cut to length - len(end),
// at the last space unless killwords, and end appended. leeway defaults to jinja2's policy, 5.
value f_truncate(evaluator&, const value& v, const call_args& a) {
    a.expect_at_most("truncate()", 4, {"length", "killwords", "end", "leeway"});
    // jinja2 measures the value itself (no str() first): undefined is empty, a list short enough stays.
    const int64_t length = need_int(a.get(0, "length", value::integer(255)), "truncate() length");
    const bool killwords = a.get(1, "killwords", value::boolean(false)).truthy();
    const std::string end = need_string(a.get(2, "end", value::string("...")), "truncate() end");
    const value leeway_arg = a.get(3, "leeway", value::none());
    const int64_t leeway = leeway_arg.is_none() ? 5 : need_int(leeway_arg, "truncate() leeway");
    const auto end_length = static_cast<int64_t>(code_points(end).size());
    if (length < end_length)
        throw render_error("expected length >= " + std::to_string(end_length) + ", got " + std::to_string(length));
    if (leeway < 0) throw render_error("expected leeway >= 0, got " + std::to_string(leeway));
    if (v.is_undefined() || ((v.is_sequence() || v.is_mapping()) && jinja::length(v) <= length + leeway)) return v;
    if (!v.is_string()) {
        throw render_error(v.is_sequence() || v.is_mapping()
                               ? "truncate() of a " + type_name(v) + " longer than its length"
                               : "object of type '" + type_name(v) + "' has no len()");
    }
    const std::string& s = v.s;
    const std::vector<size_t> offsets = code_point_offsets(s);
    if (static_cast<int64_t>(offsets.size()) <= length + leeway) return v;
    const auto keep = static_cast<size_t>(length - end_length);
    std::string head = s.substr(0, keep < offsets.size() ? offsets[keep] : s.size());
    if (!killwords) {
        const size_t space = head.rfind(' ');
        if (space != std::string::npos) head.resize(space);
    }
    return value::string(head + end);
}

}  // namespace troupe::jinja
