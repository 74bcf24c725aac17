#include "core/sampling/grammar/integer_range_grammar.h"

#include <algorithm>
#include <string>
#include <string_view>

namespace troupe::grammar {
namespace {

byte_set digits(unsigned lo, unsigned hi) {
    byte_set s;
    for (unsigned c = lo; c <= hi; ++c) s.set(c);
    return s;
}

struct range_writer {
    grammar& g;
    uint32_t rule;
    const std::vector<element>& tail;
    int32_t max_digits;
    size_t added = 0;

    void close(std::vector<element> seq) {
        seq.insert(seq.end(), tail.begin(), tail.end());
        g.add_alternative(rule, seq);
        ++added;
    }

    // Non-negative integers [lo, hi] (hi absent: up to max_digits digits), by their number of digits.
    void magnitudes(int64_t lo, std::optional<int64_t> hi, const std::vector<element>& prefix) {
        if (hi && lo > *hi) return;
        const std::string lo_digits = std::to_string(lo);
        const size_t max_len = hi ? std::to_string(*hi).size() : static_cast<size_t>(max_digits);
        for (size_t len = lo_digits.size(); len <= max_len; ++len) {
            const std::string first = len == lo_digits.size() ? lo_digits : "1" + std::string(len - 1, '0');
            const std::string last = hi && len == max_len ? std::to_string(*hi) : std::string(len, '9');
            same_length(first, last, prefix);
        }
    }

    // Decimal strings of one length from `first` to `last` (first <= last), digit by digit.
    void same_length(std::string_view first, std::string_view last, std::vector<element> prefix) {
        while (!first.empty() && first[0] == last[0]) {
            prefix.push_back(g.byte(static_cast<unsigned char>(first[0])));
            first.remove_prefix(1);
            last.remove_prefix(1);
        }
        if (first.empty()) return close(prefix);
        const size_t rest = first.size() - 1;
        const bool low_full = first.substr(1) == std::string(rest, '0');
        const bool high_full = last.substr(1) == std::string(rest, '9');
        // The first digits from first[0] (or the one after) to last[0] (or the one before), any digits after.
        const unsigned a = static_cast<unsigned char>(first[0]) + (low_full ? 0 : 1);
        const unsigned b = static_cast<unsigned char>(last[0]) - (high_full ? 0 : 1);
        if (!low_full) {
            std::vector<element> p = prefix;
            p.push_back(g.byte(static_cast<unsigned char>(first[0])));
            same_length(first.substr(1), std::string(rest, '9'), p);
        }
        if (a <= b) {
            std::vector<element> p = prefix;
            p.push_back(g.bytes(digits(a, b)));
            p.insert(p.end(), rest, g.bytes(digits('0', '9')));
            close(p);
        }
        if (!high_full) {
            std::vector<element> p = prefix;
            p.push_back(g.byte(static_cast<unsigned char>(last[0])));
            same_length(std::string(rest, '0'), last.substr(1), p);
        }
    }
};

}  // namespace

size_t add_integer_range(grammar& g, uint32_t rule, std::optional<int64_t> lo, std::optional<int64_t> hi,
                         const std::vector<element>& tail, int32_t max_digits) {
    if (lo && hi && *lo > *hi) return 0;
    range_writer w{g, rule, tail, max_digits};
    if (!lo || *lo < 0) {  // negatives: '-' then magnitudes [max(1, -hi), -lo]
        const int64_t m_lo = hi && *hi < 0 ? -*hi : 1;
        std::optional<int64_t> m_hi;  // -lo; absent: unbounded
        if (lo) m_hi = -*lo;
        w.magnitudes(m_lo, m_hi, {g.byte('-')});
    }
    if (!hi || *hi >= 0) w.magnitudes(std::max<int64_t>(lo.value_or(0), 0), hi, {});
    return w.added;
}

}  // namespace troupe::grammar
