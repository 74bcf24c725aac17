// Case mapping from the table gen_unicode_case_table.py writes from Python's own Unicode database, so
// upper(), lower() and title() give what CPython's str gives; the final sigma is context (py_lower).
#include "core/chat/jinja/unicode_case.h"

#include <algorithm>
#include <cstdint>

namespace troupe::jinja {
namespace {

struct case_run {
    char32_t first;
    int32_t count;
    int32_t upper;  // offsets from the code point
    int32_t lower;
    int32_t title;
};

struct case_special {
    char32_t cp;
    const char* upper;
    const char* lower;
    const char* title;
};

#include "core/chat/jinja/unicode_case_table.inc"

const case_run* run_of(char32_t c) {
    const auto* end = std::end(case_runs);
    const auto* it =
        std::upper_bound(std::begin(case_runs), end, c, [](char32_t x, const case_run& r) { return x < r.first; });
    if (it == std::begin(case_runs)) return nullptr;
    --it;
    return c < it->first + static_cast<char32_t>(it->count) ? it : nullptr;
}

const case_special* special_of(char32_t c) {
    const auto* end = std::end(case_specials);
    const auto* it =
        std::lower_bound(std::begin(case_specials), end, c, [](const case_special& s, char32_t x) { return s.cp < x; });
    return it != end && it->cp == c ? it : nullptr;
}

// One of the three mappings of c: run_offset picks it from a run, special_text from a special entry.
template <typename Run, typename Special>
void append_mapped(std::string& out, char32_t c, Run run_offset, Special special_text) {
    if (const case_special* s = special_of(c)) {
        out += special_text(*s);
        return;
    }
    const case_run* r = run_of(c);
    append_utf8(out, r ? static_cast<char32_t>(static_cast<int64_t>(c) + run_offset(*r)) : c);
}

}  // namespace

std::vector<char32_t> decode_utf8(std::string_view s) {
    std::vector<char32_t> out;
    out.reserve(s.size());
    for (size_t k = 0; k < s.size();) {
        const auto c = static_cast<unsigned char>(s[k]);
        const size_t n = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
        if (n == 0 || k + n > s.size()) {
            out.push_back(0xFFFD);
            ++k;
            continue;
        }
        char32_t cp = n == 1 ? c : (c & (0x7F >> n));
        for (size_t j = 1; j < n; ++j) cp = (cp << 6) | (static_cast<unsigned char>(s[k + j]) & 0x3F);
        out.push_back(cp);
        k += n;
    }
    return out;
}

void append_utf8(std::string& out, char32_t c) {
    if (c < 0x80) {
        out += static_cast<char>(c);
    } else if (c < 0x800) {
        out += static_cast<char>(0xC0 | (c >> 6));
        out += static_cast<char>(0x80 | (c & 0x3F));
    } else if (c < 0x10000) {
        out += static_cast<char>(0xE0 | (c >> 12));
        out += static_cast<char>(0x80 | ((c >> 6) & 0x3F));
        out += static_cast<char>(0x80 | (c & 0x3F));
    } else {
        out += static_cast<char>(0xF0 | (c >> 18));
        out += static_cast<char>(0x80 | ((c >> 12) & 0x3F));
        out += static_cast<char>(0x80 | ((c >> 6) & 0x3F));
        out += static_cast<char>(0x80 | (c & 0x3F));
    }
}

bool py_is_space(char32_t c) {
    return (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x20) || c == 0x85 || c == 0xA0 || c == 0x1680 ||
           (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
}

bool py_is_line_break(char32_t c) {
    return c == '\n' || c == '\r' || c == 0x0B || c == 0x0C || (c >= 0x1C && c <= 0x1E) || c == 0x85 || c == 0x2028 ||
           c == 0x2029;
}

bool py_is_cased(char32_t c) {
    if (run_of(c) != nullptr || special_of(c) != nullptr) return true;
    return std::any_of(std::begin(cased_only), std::end(cased_only),
                       [c](const char32_t* r) { return c >= r[0] && c <= r[1]; });
}

bool py_is_printable(char32_t c) {
    if (c < 0x80) return c >= 0x20 && c != 0x7F;
    const auto* end = std::end(non_printable);
    const auto* it =
        std::upper_bound(std::begin(non_printable), end, c, [](char32_t x, const char32_t* r) { return x < r[0]; });
    return it == std::begin(non_printable) || c > (it - 1)[0][1];
}

bool py_is_case_ignorable(char32_t c) {
    return std::any_of(std::begin(case_ignorable), std::end(case_ignorable),
                       [c](const char32_t* r) { return c >= r[0] && c <= r[1]; });
}

void append_upper(std::string& out, char32_t c) {
    append_mapped(
        out, c, [](const case_run& r) { return r.upper; }, [](const case_special& s) { return s.upper; });
}

void append_lower(std::string& out, char32_t c) {
    append_mapped(
        out, c, [](const case_run& r) { return r.lower; }, [](const case_special& s) { return s.lower; });
}

void append_title(std::string& out, char32_t c) {
    append_mapped(
        out, c, [](const case_run& r) { return r.title; }, [](const case_special& s) { return s.title; });
}

}  // namespace troupe::jinja
