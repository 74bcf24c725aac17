#include "core/chat/jinja/string_ops.h"

#include <algorithm>

#include "core/chat/jinja/unicode_case.h"
#include "core/chat/jinja/value.h"

namespace troupe::jinja {
namespace {

// The code point at byte k of s and its byte length (1 for a malformed byte, read as U+FFFD).
std::pair<char32_t, size_t> code_point_at(std::string_view s, size_t k) {
    const auto c = static_cast<unsigned char>(s[k]);
    const size_t n = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
    if (n == 0 || k + n > s.size()) return {0xFFFD, 1};
    return {decode_utf8(s.substr(k, n))[0], n};
}

// Byte k is where a whitespace character starts (Python's str.isspace: also U+00A0, U+3000, ...); its length.
size_t space_at(std::string_view s, size_t k) {
    const auto [c, n] = code_point_at(s, k);
    return py_is_space(c) ? n : 0;
}

// The byte where the whitespace character ending at byte `end` starts, or `end` if none ends there.
size_t space_before(std::string_view s, size_t end) {
    size_t k = end - 1;
    while (k > 0 && (static_cast<unsigned char>(s[k]) & 0xC0) == 0x80) --k;
    return space_at(s, k) == end - k ? k : end;
}

}  // namespace

std::string py_strip(std::string_view s, const std::optional<std::string>& chars, bool left, bool right) {
    size_t begin = 0;
    size_t end = s.size();
    if (!chars) {
        if (left) {
            for (size_t n; begin < end && (n = space_at(s, begin)) > 0;) begin += n;
        }
        if (right) {
            for (size_t k; end > begin && (k = space_before(s, end)) < end;) end = k;
        }
        return std::string(s.substr(begin, end - begin));
    }
    // Strip whole code points that are among `chars`' code points.
    const std::vector<char32_t> set = decode_utf8(*chars);
    auto in_set = [&](char32_t c) { return std::find(set.begin(), set.end(), c) != set.end(); };
    if (left) {
        while (begin < end) {
            const auto [c, n] = code_point_at(s, begin);
            if (!in_set(c)) break;
            begin += n;
        }
    }
    if (right) {
        while (end > begin) {
            size_t k = end - 1;
            while (k > begin && (static_cast<unsigned char>(s[k]) & 0xC0) == 0x80) --k;
            if (!in_set(code_point_at(s, k).first)) break;
            end = k;
        }
    }
    return std::string(s.substr(begin, end - begin));
}

std::vector<std::string> py_split(std::string_view s, const std::optional<std::string>& sep, int64_t max_split,
                                  bool from_right) {
    std::vector<std::string> out;
    if (!sep) {
        // Whitespace runs; leading and trailing whitespace gives no empty parts.
        std::vector<std::pair<size_t, size_t>> words;
        for (size_t k = 0; k < s.size();) {
            for (size_t n; k < s.size() && (n = space_at(s, k)) > 0;) k += n;
            if (k >= s.size()) break;
            size_t j = k;
            while (j < s.size() && space_at(s, j) == 0) j += code_point_at(s, j).second;
            words.emplace_back(k, j);
            k = j;
        }
        if (max_split < 0 || static_cast<size_t>(max_split) + 1 >= words.size()) {
            for (auto [b, e] : words) out.emplace_back(s.substr(b, e - b));
            return out;
        }
        const auto n = static_cast<size_t>(max_split);
        if (!from_right) {
            for (size_t k = 0; k < n; ++k) out.emplace_back(s.substr(words[k].first, words[k].second - words[k].first));
            out.push_back(py_strip(s.substr(words[n].first), std::nullopt, false, true));
        } else {
            const size_t first = words.size() - n;
            out.push_back(py_strip(s.substr(0, words[first - 1].second), std::nullopt, true, false));
            for (size_t k = first; k < words.size(); ++k) {
                out.emplace_back(s.substr(words[k].first, words[k].second - words[k].first));
            }
        }
        return out;
    }
    std::vector<std::string> parts;
    size_t start = 0;
    while (true) {
        const size_t k = s.find(*sep, start);
        if (k == std::string_view::npos) break;
        parts.emplace_back(s.substr(start, k - start));
        start = k + sep->size();
    }
    parts.emplace_back(s.substr(start));
    if (max_split < 0 || static_cast<size_t>(max_split) + 1 >= parts.size()) return parts;
    const auto n = static_cast<size_t>(max_split);
    auto join = [&](size_t b, size_t e) {
        std::string j;
        for (size_t k = b; k < e; ++k) j += (k > b ? *sep : std::string()) + parts[k];
        return j;
    };
    if (!from_right) {
        out.assign(parts.begin(), parts.begin() + static_cast<std::ptrdiff_t>(n));
        out.push_back(join(n, parts.size()));
    } else {
        out.push_back(join(0, parts.size() - n));
        out.insert(out.end(), parts.end() - static_cast<std::ptrdiff_t>(n), parts.end());
    }
    return out;
}

std::vector<std::string> py_splitlines(std::string_view s) {
    std::vector<std::string> out;
    size_t start = 0;
    for (size_t k = 0; k < s.size();) {
        const auto [c, n] = code_point_at(s, k);
        if (!py_is_line_break(c)) {
            k += n;
            continue;
        }
        out.emplace_back(s.substr(start, k - start));
        k += n;
        if (c == '\r' && k < s.size() && s[k] == '\n') ++k;
        start = k;
    }
    if (start < s.size()) out.emplace_back(s.substr(start));
    return out;
}

std::string py_upper(std::string_view s) {
    std::string out;
    for (char32_t c : decode_utf8(s)) append_upper(out, c);
    return out;
}

std::string py_lower(std::string_view s) {
    const std::vector<char32_t> cps = decode_utf8(s);
    std::string out;
    for (size_t k = 0; k < cps.size(); ++k) {
        // Σ at the end of a word is ς: after a cased letter and before none, looking past case-ignorable
        // characters both ways (SpecialCasing's Final_Sigma).
        auto cased_beside = [&](size_t from, int step) {
            for (auto j = static_cast<int64_t>(from) + step; j >= 0 && j < static_cast<int64_t>(cps.size());
                 j += step) {
                const char32_t c = cps[static_cast<size_t>(j)];
                if (!py_is_case_ignorable(c)) return py_is_cased(c);
            }
            return false;
        };
        if (cps[k] == 0x03A3 && cased_beside(k, -1) && !cased_beside(k, 1)) {
            append_utf8(out, 0x03C2);
        } else {
            append_lower(out, cps[k]);
        }
    }
    return out;
}

std::string py_title(std::string_view s) {
    std::string out;
    bool prev_cased = false;
    for (char32_t c : decode_utf8(s)) {
        const bool cased = py_is_cased(c);
        if (cased && prev_cased) {
            append_lower(out, c);
        } else if (cased) {
            append_title(out, c);
        } else {
            append_utf8(out, c);
        }
        prev_cased = cased;
    }
    return out;
}

std::string py_capitalize(std::string_view s) {
    const std::vector<char32_t> cps = decode_utf8(s);
    if (cps.empty()) return "";
    std::string out;
    append_title(out, cps[0]);
    return out + py_lower(s.substr(code_point_at(s, 0).second));
}

std::string py_replace(std::string_view s, std::string_view from, std::string_view to, int64_t count) {
    std::string out;
    size_t start = 0;
    int64_t done = 0;
    if (from.empty()) {  // Python inserts `to` between every character and at both ends
        for (size_t k = 0; k <= s.size(); ++k) {
            if (count < 0 || done < count) {
                out += to;
                ++done;
            }
            if (k < s.size()) out += s[k];
        }
        return out;
    }
    while (count < 0 || done < count) {
        const size_t k = s.find(from, start);
        if (k == std::string_view::npos) break;
        out.append(s.substr(start, k - start));
        out.append(to);
        start = k + from.size();
        ++done;
    }
    out.append(s.substr(start));
    return out;
}

int64_t py_count(std::string_view s, std::string_view sub) {
    if (sub.empty()) return static_cast<int64_t>(s.size()) + 1;
    int64_t n = 0;
    for (size_t k = s.find(sub); k != std::string_view::npos; k = s.find(sub, k + sub.size())) ++n;
    return n;
}

std::string py_pad(std::string_view s, int64_t width, std::string_view fill, std::string_view how) {
    const auto n = static_cast<int64_t>(code_point_offsets(s).size());
    if (width <= n) return std::string(s);
    auto repeat = [&](int64_t k) {
        std::string out;
        for (int64_t j = 0; j < k; ++j) out += fill;
        return out;
    };
    const int64_t total = width - n;
    if (how == "ljust") return std::string(s) + repeat(total);
    if (how == "rjust") return repeat(total) + std::string(s);
    if (how == "zfill") {
        // The zeros go after a leading sign.
        if (!s.empty() && (s[0] == '+' || s[0] == '-'))
            return std::string(1, s[0]) + repeat(total) + std::string(s.substr(1));
        return repeat(total) + std::string(s);
    }
    // center: CPython puts the odd extra character on the left when the width and the text's length are odd.
    const int64_t left = total / 2 + (total & width & 1);
    return repeat(left) + std::string(s) + repeat(total - left);
}

}  // namespace troupe::jinja
