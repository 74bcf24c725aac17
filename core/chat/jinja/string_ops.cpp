#include "core/chat/jinja/string_ops.h"

#include <cctype>

#include "core/chat/jinja/value.h"

namespace troupe::jinja {
namespace {

bool is_ws(char c) {
    return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
}
bool is_upper(char c) {
    return c >= 'A' && c <= 'Z';
}
bool is_lower(char c) {
    return c >= 'a' && c <= 'z';
}
char to_upper(char c) {
    return is_lower(c) ? static_cast<char>(c - 32) : c;
}
char to_lower(char c) {
    return is_upper(c) ? static_cast<char>(c + 32) : c;
}

}  // namespace

std::string py_strip(std::string_view s, const std::optional<std::string>& chars, bool left, bool right) {
    auto strip_char = [&](char c) { return chars ? chars->find(c) != std::string::npos : is_ws(c); };
    size_t begin = 0;
    size_t end = s.size();
    if (left) {
        while (begin < end && strip_char(s[begin])) ++begin;
    }
    if (right) {
        while (end > begin && strip_char(s[end - 1])) --end;
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
            while (k < s.size() && is_ws(s[k])) ++k;
            if (k >= s.size()) break;
            size_t j = k;
            while (j < s.size() && !is_ws(s[j])) ++j;
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
    for (size_t k = 0; k < s.size(); ++k) {
        if (s[k] == '\n' || s[k] == '\r') {
            out.emplace_back(s.substr(start, k - start));
            if (s[k] == '\r' && k + 1 < s.size() && s[k + 1] == '\n') ++k;
            start = k + 1;
        }
    }
    if (start < s.size()) out.emplace_back(s.substr(start));
    return out;
}

std::string py_upper(std::string_view s) {
    std::string out(s);
    for (char& c : out) c = to_upper(c);
    return out;
}

std::string py_lower(std::string_view s) {
    std::string out(s);
    for (char& c : out) c = to_lower(c);
    return out;
}

std::string py_title(std::string_view s) {
    std::string out(s);
    bool prev_cased = false;
    for (char& c : out) {
        const bool non_ascii = (static_cast<unsigned char>(c) & 0x80) != 0;
        if (is_upper(c) || is_lower(c)) {
            c = prev_cased ? to_lower(c) : to_upper(c);
            prev_cased = true;
        } else if (!non_ascii) {
            prev_cased = false;
        }
    }
    return out;
}

std::string py_capitalize(std::string_view s) {
    std::string out = py_lower(s);
    if (!out.empty()) out[0] = to_upper(out[0]);
    return out;
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
