// The two big alternations (gpt2, llama3) are written as the regex engine would walk them: at each
// position the alternatives are tried in order and the first that matches wins, with the greedy
// quantifiers and the (?!\S) lookahead spelled out. `piece` hides the bounds: outside the piece every
// codepoint reads as k_none with no flags.
#include "core/tokenizer/split_rules.h"

#include "core/tokenizer/unicode.h"

namespace troupe::tok {
namespace {

constexpr uint32_t k_none = 0xFFFFFFFF;

class piece {
public:
    piece(const std::vector<uint32_t>& cpts, size_t begin, size_t end, piece_lengths& out)
        : cpts_(cpts), begin_(begin), end_(end), prev_end_(begin), out_(out) {}

    size_t begin() const { return begin_; }
    size_t end() const { return end_; }
    uint32_t cpt(size_t pos) const { return pos >= begin_ && pos < end_ ? cpts_[pos] : k_none; }
    codepoint_flags flags(size_t pos) const {
        return pos >= begin_ && pos < end_ ? flags_of(cpts_[pos]) : codepoint_flags{};
    }
    // Emits [previous end, end) as a word if non-empty; returns its length.
    size_t emit(size_t end) {
        const size_t n = end - prev_end_;
        if (n > 0) out_.push_back(n);
        prev_end_ = end;
        return n;
    }

private:
    const std::vector<uint32_t>& cpts_;
    size_t begin_, end_, prev_end_;
    piece_lengths& out_;
};

bool is_cr_or_lf(uint32_t c) {
    return c == '\r' || c == '\n';
}
uint32_t ascii_lower(uint32_t c) {
    return c >= 'A' && c <= 'Z' ? c + ('a' - 'A') : c;
}
// [^\s\p{L}\p{N}] over a real codepoint
bool is_other(codepoint_flags f) {
    return f.is_codepoint() && !f.is_whitespace() && !f.is_letter() && !f.is_number();
}

// 's|'t|'re|'ve|'m|'ll|'d at pos (pos holds the apostrophe): the match length, 0 if none.
size_t contraction_length(const piece& p, size_t pos, bool case_insensitive) {
    if (p.cpt(pos) != '\'') return 0;
    const auto low = [&](uint32_t c) { return case_insensitive ? ascii_lower(c) : c; };
    const uint32_t c1 = low(p.cpt(pos + 1));
    if (c1 == 's' || c1 == 't' || c1 == 'm' || c1 == 'd') return 2;
    const uint32_t c2 = low(p.cpt(pos + 2));
    if ((c1 == 'r' && c2 == 'e') || (c1 == 'v' && c2 == 'e') || (c1 == 'l' && c2 == 'l')) return 3;
    return 0;
}

// \s+(?!\S)|\s+ at pos, given the whitespace run there: a run followed by a non-space keeps its last
// whitespace for the next word (" world"); at the end of the piece the whole run goes.
size_t whitespace_match_end(const piece& p, size_t pos) {
    size_t n = 0;
    while (p.flags(pos + n).is_whitespace()) ++n;
    if (n > 1 && p.cpt(pos + n) != k_none) return pos + n - 1;
    return pos + n;  // n == 0: no whitespace; the caller's fallback handles it
}

void gpt2_piece(piece& p) {
    for (size_t pos = p.begin(); pos < p.end();) {
        if (size_t n = contraction_length(p, pos, false)) {
            pos += p.emit(pos + n);
            continue;
        }
        const uint32_t c = p.cpt(pos);
        const size_t body = pos + (c == ' ' ? 1 : 0);  // the optional leading space of the next three
        const codepoint_flags f = p.flags(body);
        if (f.is_letter() || f.is_number() || is_other(f)) {
            size_t end = body;
            if (f.is_letter()) {
                while (p.flags(end).is_letter()) ++end;
            } else if (f.is_number()) {
                while (p.flags(end).is_number()) ++end;
            } else {
                while (is_other(p.flags(end))) ++end;
            }
            pos += p.emit(end);
            continue;
        }
        const size_t end = whitespace_match_end(p, pos);
        if (end > pos) {
            pos += p.emit(end);
            continue;
        }
        pos += p.emit(pos + 1);  // nothing matches: the character stands alone
    }
    p.emit(p.end());
}

void llama3_piece(piece& p, size_t max_digits) {
    for (size_t pos = p.begin(); pos < p.end();) {
        if (size_t n = contraction_length(p, pos, true)) {
            pos += p.emit(pos + n);
            continue;
        }
        const uint32_t c = p.cpt(pos);
        const codepoint_flags f = p.flags(pos);
        // [^\r\n\p{L}\p{N}]?\p{L}+
        if (!is_cr_or_lf(c) && !f.is_number() && (f.is_letter() || p.flags(pos + 1).is_letter())) {
            size_t end = pos + 1;
            while (p.flags(end).is_letter()) ++end;
            pos += p.emit(end);
            continue;
        }
        // \p{N}{1,max_digits}, repeatedly
        if (f.is_number()) {
            size_t end = pos;
            while (p.flags(end).is_number() && end - pos < max_digits) ++end;
            pos += p.emit(end);
            continue;
        }
        // ' '?[^\s\p{L}\p{N}]+[\r\n]*
        const size_t body = pos + (c == ' ' ? 1 : 0);
        if (is_other(p.flags(body))) {
            size_t end = body;
            while (is_other(p.flags(end))) ++end;
            while (is_cr_or_lf(p.cpt(end))) ++end;
            pos += p.emit(end);
            continue;
        }
        // \s*[\r\n]+ : the whitespace run up to its last CR or LF
        size_t n = 0, last_newline_end = 0;
        while (p.flags(pos + n).is_whitespace()) {
            if (is_cr_or_lf(p.cpt(pos + n))) last_newline_end = pos + n + 1;
            ++n;
        }
        if (last_newline_end > 0) {
            pos += p.emit(last_newline_end);
            continue;
        }
        const size_t end = whitespace_match_end(p, pos);
        if (end > pos) {
            pos += p.emit(end);
            continue;
        }
        pos += p.emit(pos + 1);
    }
    p.emit(p.end());
}

// Length of the body run at pos (capped at max_run when it is non-zero).
size_t body_run(const std::vector<uint32_t>& cpts, size_t pos, size_t end, const class_rule& rule) {
    size_t n = 0;
    while (pos + n < end && rule.body(cpts[pos + n]) && (rule.max_run == 0 || n < rule.max_run)) ++n;
    return n;
}

}  // namespace

piece_lengths split_gpt2(const std::vector<uint32_t>& cpts, const piece_lengths& pieces) {
    piece_lengths out;
    out.reserve(pieces.size() * 2);
    size_t begin = 0;
    for (size_t len : pieces) {
        piece p(cpts, begin, begin + len, out);
        gpt2_piece(p);
        begin += len;
    }
    return out;
}

piece_lengths split_llama3(const std::vector<uint32_t>& cpts, const piece_lengths& pieces, size_t max_digits) {
    piece_lengths out;
    out.reserve(pieces.size() * 2);
    size_t begin = 0;
    for (size_t len : pieces) {
        piece p(cpts, begin, begin + len, out);
        llama3_piece(p, max_digits);
        begin += len;
    }
    return out;
}

piece_lengths split_class(const std::vector<uint32_t>& cpts, const piece_lengths& pieces, const class_rule& rule) {
    piece_lengths out;
    out.reserve(pieces.size() * 2);
    size_t begin = 0;
    for (size_t len : pieces) {
        const size_t end = begin + len;
        piece p(cpts, begin, end, out);
        if (rule.at_end) {
            // The leftmost start of a body run that reaches the end is the start of the maximal final run.
            size_t start = end;
            while (start > begin && rule.body(cpts[start - 1])) --start;
            if (end - start >= rule.min_run) p.emit(start);
            p.emit(end);
            begin = end;
            continue;
        }
        for (size_t pos = begin; pos < end;) {
            size_t match_end = 0;
            if (rule.prefix && rule.prefix(cpts[pos])) {
                const size_t n = body_run(cpts, pos + 1, end, rule);
                if (n >= rule.min_run) match_end = pos + 1 + n;
            }
            if (match_end == 0) {
                const size_t n = body_run(cpts, pos, end, rule);
                if (n >= rule.min_run) match_end = pos + n;
            }
            if (match_end == 0) {
                ++pos;
                continue;
            }
            p.emit(pos);
            p.emit(match_end);
            pos = match_end;
        }
        p.emit(end);
        begin = end;
    }
    return out;
}

}  // namespace troupe::tok
