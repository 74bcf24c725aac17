// A recursive-descent reader of the pattern that writes grammar rules as it goes: one rule per group,
// alternation, sequence, repetition and character set, each knowing whether it can match nothing (a part that
// can is refused under * and +: the matcher would loop without consuming a byte).
#include "core/sampling/grammar/regex_grammar.h"

#include <algorithm>
#include <bitset>
#include <cctype>
#include <cstdio>
#include <utility>

#include "core/tokenizer/utf8.h"

namespace troupe::grammar {
namespace {

struct piece {
    uint32_t rule = 0;
    bool nullable = false;
};

// A set of characters: ASCII members, and past ASCII either every character or the listed ones.
struct char_set {
    std::bitset<128> ascii;
    bool all_non_ascii = false;
    std::vector<uint32_t> non_ascii;  // code points
};

class compiler {
public:
    compiler(grammar& g, std::string_view pattern, const regex_helpers& h) : g_(g), p_(pattern), h_(h) {}

    result<uint32_t> run() {
        if (!p_.empty() && p_[0] == '^') at_ = 1;
        size_t end = p_.size();
        if (end > at_ && p_[end - 1] == '$' && !(end >= 2 && p_[end - 2] == '\\')) --end;
        p_ = p_.substr(0, end);
        const piece body = alternation();
        if (error_.empty() && at_ < p_.size()) fail("an unmatched ')'");
        if (!error_.empty()) return make_error(error_);
        return body.rule;
    }

private:
    grammar& g_;
    std::string_view p_;
    const regex_helpers& h_;
    size_t at_ = 0;
    std::string error_;

    piece fail(const std::string& what) {
        if (error_.empty()) error_ = "pattern at " + std::to_string(at_) + ": " + what + " is not supported";
        return {};
    }
    bool refuse(const std::string& what) {
        fail(what);
        return false;
    }
    bool more() const { return error_.empty() && at_ < p_.size(); }

    piece alternation() {
        std::vector<piece> options = {sequence()};
        while (more() && p_[at_] == '|') {
            ++at_;
            options.push_back(sequence());
        }
        if (options.size() == 1) return options[0];
        piece r{g_.declare("re_or"), false};
        for (const piece& o : options) {
            g_.add_alternative(r.rule, std::vector<element>{g_.ref(o.rule)});
            r.nullable = r.nullable || o.nullable;
        }
        return r;
    }

    piece sequence() {
        std::vector<element> seq;
        bool nullable = true;
        while (more() && p_[at_] != '|' && p_[at_] != ')') {
            const piece q = quantified();
            seq.push_back(g_.ref(q.rule));
            nullable = nullable && q.nullable;
        }
        piece r{g_.declare("re_seq"), nullable};
        g_.add_alternative(r.rule, seq);
        return r;
    }

    // n in "{n" or "{n,m}"; false where the text there is not a number.
    bool number(int64_t& n) {
        const size_t start = at_;
        n = 0;
        while (at_ < p_.size() && p_[at_] >= '0' && p_[at_] <= '9') {
            n = std::min<int64_t>(n * 10 + (p_[at_++] - '0'), h_.max_repetition + 1);  // past the limit: refused
        }
        return at_ > start;
    }

    piece quantified() {
        const piece a = atom();
        if (!more()) return a;
        int64_t min = 1, max = 1;
        const char c = p_[at_];
        if (c == '*' || c == '+' || c == '?') {
            ++at_;
            min = c == '+' ? 1 : 0;
            max = c == '?' ? 1 : -1;
        } else if (c == '{') {
            const size_t open = at_++;
            if (!number(min)) {  // not a quantifier: ECMA reads '{' as itself there, this reader does not
                at_ = open;
                return fail("a '{' that does not start {n}, {n,} or {n,m}");
            }
            max = min;
            if (at_ < p_.size() && p_[at_] == ',') {
                ++at_;
                max = -1;
                if (at_ < p_.size() && p_[at_] != '}' && !number(max)) return fail("a malformed {n,m}");
            }
            if (at_ >= p_.size() || p_[at_] != '}') return fail("a malformed {n,m}");
            ++at_;
            if (min > h_.max_repetition || max > h_.max_repetition || (max >= 0 && max < min)) {
                return fail("{n,m} beyond " + std::to_string(h_.max_repetition) + " or with m below n");
            }
        } else {
            return a;
        }
        if (at_ < p_.size() && p_[at_] == '?') ++at_;  // lazy: the same strings
        if (max < 0 && a.nullable) return fail("a repeated part that can match nothing");
        return {h_.repeat("re_repeat", {g_.ref(a.rule)}, min, max), a.nullable || min == 0};
    }

    piece atom() {
        const char c = p_[at_];
        if (c == '(') {
            ++at_;
            if (p_.substr(at_).starts_with("?:")) {
                at_ += 2;
            } else if (p_.substr(at_).starts_with("?<") && !p_.substr(at_).starts_with("?<=") &&
                       !p_.substr(at_).starts_with("?<!")) {
                const size_t close = p_.find('>', at_);
                if (close == std::string_view::npos) return fail("a malformed named group");
                at_ = close + 1;
            } else if (at_ < p_.size() && p_[at_] == '?') {
                return fail("lookaround");
            }
            const piece inner = alternation();
            if (!error_.empty()) return {};
            if (at_ >= p_.size() || p_[at_] != ')') return fail("an unclosed '('");
            ++at_;
            return inner;
        }
        if (c == '[') {
            ++at_;
            char_set s;
            if (!read_class(s)) return {};
            return set_rule(s);
        }
        if (c == '.') {
            ++at_;
            char_set s;
            s.ascii.set();
            s.ascii.reset('\n');
            s.ascii.reset('\r');
            s.all_non_ascii = true;
            return set_rule(s);
        }
        if (c == '^' || c == '$') return fail("an anchor inside the pattern");
        if (c == '*' || c == '+' || c == '?') return fail("a quantifier with nothing before it");
        char_set s;
        if (c == '\\') {
            ++at_;
            if (!read_escape(s)) return {};
        } else {
            add_char(s, read_utf8());
        }
        return set_rule(s);
    }

    // The code point at at_ (the pattern is JSON text, so well-formed UTF-8), moving past it.
    uint32_t read_utf8() {
        const size_t n = std::min(tok::utf8_sequence_length(static_cast<uint8_t>(p_[at_])), p_.size() - at_);
        const std::vector<uint32_t> cps = tok::decode_utf8_lenient(p_.substr(at_, n));
        at_ += n;
        return cps.empty() ? tok::k_replacement_char : cps[0];
    }

    static void add_char(char_set& s, uint32_t cp) {
        if (cp < 128) {
            s.ascii.set(cp);
        } else {
            s.non_ascii.push_back(cp);
        }
    }

    // \d \w \s and their negations into s; true when e is one of them.
    static bool class_escape(char e, char_set& s) {
        std::bitset<128> m;
        switch (e == 'D' || e == 'W' || e == 'S' ? e + ('a' - 'A') : e) {
            case 'd':
                for (char x = '0'; x <= '9'; ++x) m.set(static_cast<size_t>(x));
                break;
            case 'w':
                for (unsigned x = 0; x < 128; ++x) {
                    if ((x >= '0' && x <= '9') || (x >= 'a' && x <= 'z') || (x >= 'A' && x <= 'Z') || x == '_')
                        m.set(x);
                }
                break;
            case 's':
                for (char x : {' ', '\t', '\n', '\r', '\f', '\v'}) m.set(static_cast<size_t>(x));
                break;
            default:
                return false;
        }
        if (e >= 'A' && e <= 'Z') {
            s.ascii |= ~m;
            s.all_non_ascii = true;
        } else {
            s.ascii |= m;
        }
        return true;
    }

    // After a '\': one escaped character or class into s.
    bool read_escape(char_set& s) {
        if (at_ >= p_.size()) return refuse("a '\\' at the end");
        const char e = p_[at_++];
        if (class_escape(e, s)) return true;
        const auto hex = [&](int digits) -> int64_t {
            int64_t v = 0;
            for (int i = 0; i < digits; ++i) {
                if (at_ >= p_.size() || !std::isxdigit(static_cast<unsigned char>(p_[at_]))) return -1;
                const char h = p_[at_++];
                v = v * 16 + (h <= '9' ? h - '0' : (h | 0x20) - 'a' + 10);
            }
            return v;
        };
        // The escapes of single control characters.
        static constexpr std::pair<char, char> k_controls[] = {{'n', '\n'}, {'t', '\t'}, {'r', '\r'},
                                                               {'f', '\f'}, {'v', '\v'}, {'0', '\0'}};
        for (const auto& [letter, control] : k_controls) {
            if (e == letter) {
                add_char(s, static_cast<unsigned char>(control));
                return true;
            }
        }
        switch (e) {
            case 'x':
            case 'u': {
                const int64_t v = hex(e == 'x' ? 2 : 4);
                if (v < 0) return refuse("a malformed \\x or \\u escape");
                add_char(s, static_cast<uint32_t>(v));
                return true;
            }
            case 'b':
            case 'B':
                return refuse("a word boundary (\\b, \\B)");
            default:
                break;
        }
        if (e >= '1' && e <= '9') return refuse("a backreference");
        if (std::isalnum(static_cast<unsigned char>(e))) return refuse(std::string("the escape \\") + e);
        if (static_cast<unsigned char>(e) >= 0x80) {  // an escaped non-ASCII character: the whole of it
            --at_;
            add_char(s, read_utf8());
            return true;
        }
        add_char(s, static_cast<unsigned char>(e));  // escaped punctuation stands for itself
        return true;
    }

    // One character of a class at at_ (escaped or not) into cp; false where it is a class escape (\d ...), added
    // to s instead, or an error.
    bool class_char(uint32_t& cp, char_set& s, bool& is_class) {
        is_class = false;
        if (p_[at_] != '\\') {
            cp = read_utf8();
            return true;
        }
        ++at_;
        if (at_ >= p_.size()) return refuse("a '\\' at the end");
        if (class_escape(p_[at_], s)) {
            ++at_;
            is_class = true;
            return true;
        }
        if (p_[at_] == 'b') {  // [\b] is a backspace
            ++at_;
            cp = '\b';
            return true;
        }
        char_set one;
        if (!read_escape(one)) return false;
        cp = one.non_ascii.empty() ? first_of(one.ascii) : one.non_ascii[0];
        return true;
    }

    static uint32_t first_of(const std::bitset<128>& b) {
        for (uint32_t i = 0; i < 128; ++i) {
            if (b.test(i)) return i;
        }
        return 0;
    }

    // After '[': the class up to its ']'.
    bool read_class(char_set& s) {
        const bool negate = at_ < p_.size() && p_[at_] == '^';
        if (negate) ++at_;
        char_set in;
        for (bool first = true;; first = false) {
            if (at_ >= p_.size()) return refuse("an unclosed '['");
            if (p_[at_] == ']' && !first) break;
            uint32_t lo = 0;
            bool is_class = false;
            if (!class_char(lo, in, is_class)) return false;
            if (is_class) continue;
            if (at_ + 1 < p_.size() && p_[at_] == '-' && p_[at_ + 1] != ']') {
                ++at_;
                uint32_t hi = 0;
                if (!class_char(hi, in, is_class)) return false;
                if (is_class) return refuse("a range ending in a class");
                if (hi < lo) return refuse("a range whose end is below its start");
                if (hi >= 128) return refuse("a range past ASCII");
                for (uint32_t x = lo; x <= hi; ++x) in.ascii.set(x);
                continue;
            }
            add_char(in, lo);
        }
        ++at_;  // ']'
        if (!negate) {
            s = in;
            return true;
        }
        if (!in.non_ascii.empty() || in.all_non_ascii) return refuse("a negated class naming non-ASCII characters");
        s.ascii = ~in.ascii;
        s.all_non_ascii = true;
        return true;
    }

    // The rule for one character of s, as JSON writes it.
    piece set_rule(const char_set& s) {
        std::vector<std::vector<element>> alternatives;
        byte_set plain;
        for (unsigned c = 0x20; c < 0x80; ++c) {
            if (s.ascii.test(c) && c != '"' && c != '\\') plain.set(c);
        }
        if (plain.any()) alternatives.push_back({g_.bytes(plain)});
        for (unsigned c = 0; c < 0x20; ++c) {
            if (s.ascii.test(c)) alternatives.push_back({g_.ref(g_.literal(json_escape(c)))});
        }
        for (unsigned char c : {'"', '\\'}) {
            if (s.ascii.test(c)) alternatives.push_back({g_.byte('\\'), g_.byte(c)});
        }
        if (s.all_non_ascii) alternatives.push_back({g_.ref(h_.non_ascii_char)});
        for (uint32_t cp : s.non_ascii) {
            std::string bytes;
            tok::append_utf8(bytes, cp);
            alternatives.push_back({g_.ref(g_.literal(bytes))});
        }
        if (alternatives.empty()) return fail("a class that matches no character");
        const piece r{g_.declare("re_char"), false};
        for (const auto& a : alternatives) g_.add_alternative(r.rule, a);
        return r;
    }

    // A control character as JSON writes it: \b \f \n \r \t, else \u00XX.
    static std::string json_escape(unsigned c) {
        switch (c) {
            case '\b':
                return "\\b";
            case '\f':
                return "\\f";
            case '\n':
                return "\\n";
            case '\r':
                return "\\r";
            case '\t':
                return "\\t";
            default: {
                char buf[8];
                std::snprintf(buf, sizeof buf, "\\u%04x", c);
                return buf;
            }
        }
    }
};

}  // namespace

result<uint32_t> regex_string_body(grammar& g, std::string_view pattern, const regex_helpers& h) {
    return compiler(g, pattern, h).run();
}

}  // namespace troupe::grammar
