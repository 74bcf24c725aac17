#include "core/sampling/grammar/grammar.h"

#include <algorithm>

#include "core/result.h"

namespace troupe::grammar {

uint32_t grammar::declare(std::string name) {
    rules_.push_back({std::move(name), {}});
    return static_cast<uint32_t>(rules_.size() - 1);
}

void grammar::add_alternative(uint32_t rule, std::span<const element> seq) {
    TROUPE_ASSERT(rule < rules_.size(), "grammar: alternative for undeclared rule " + std::to_string(rule));
    rules_[rule].starts.push_back(static_cast<uint32_t>(flat_.size()));
    flat_.insert(flat_.end(), seq.begin(), seq.end());
    flat_.push_back({element::kind::end, 0});
}

element grammar::bytes(const byte_set& s) {
    for (size_t i = 0; i < sets_.size(); ++i) {
        if (sets_[i] == s) return {element::kind::bytes, static_cast<uint32_t>(i)};
    }
    sets_.push_back(s);
    return {element::kind::bytes, static_cast<uint32_t>(sets_.size() - 1)};
}

element grammar::byte(unsigned char c) {
    byte_set s;
    s.set(c);
    return bytes(s);
}

uint32_t grammar::literal(std::string_view text) {
    const uint32_t r = declare("\"" + std::string(text) + "\"");
    std::vector<element> seq;
    for (char c : text) seq.push_back(byte(static_cast<unsigned char>(c)));
    add_alternative(r, seq);
    return r;
}

std::string grammar::check() const {
    for (const auto& r : rules_) {
        if (r.starts.empty()) return "grammar: rule '" + r.name + "' has no alternative";
    }
    for (const auto& e : flat_) {
        if (e.what == element::kind::rule && e.index >= rules_.size()) {
            return "grammar: a reference names rule " + std::to_string(e.index) + " of " +
                   std::to_string(rules_.size());
        }
    }
    if (root_ >= rules_.size()) return "grammar: no root rule";
    // Left recursion (a rule reaching itself before any byte, through rules that may match nothing) would
    // make the matcher's expansion recurse forever: refused. nullable[r]: r may match the empty text.
    const size_t n = rules_.size();
    std::vector<char> nullable(n, 0);
    for (bool changed = true; changed;) {
        changed = false;
        for (size_t r = 0; r < n; ++r) {
            if (nullable[r]) continue;
            for (uint32_t p : rules_[r].starts) {
                while (flat_[p].what == element::kind::rule && nullable[flat_[p].index]) ++p;
                if (flat_[p].what == element::kind::end) {
                    nullable[r] = 1;
                    changed = true;
                    break;
                }
            }
        }
    }
    // first[r]: the rules r may expand into before any byte.
    std::vector<std::vector<uint32_t>> first(n);
    for (size_t r = 0; r < n; ++r) {
        for (uint32_t p : rules_[r].starts) {
            for (; flat_[p].what == element::kind::rule; ++p) {
                first[r].push_back(flat_[p].index);
                if (!nullable[flat_[p].index]) break;
            }
        }
    }
    std::vector<char> mark(n, 0);  // 0 unseen, 1 on the path, 2 done
    std::vector<std::pair<uint32_t, size_t>> path;
    for (uint32_t s = 0; s < n; ++s) {
        if (mark[s]) continue;
        path.assign(1, {s, 0});
        mark[s] = 1;
        while (!path.empty()) {
            auto& [r, i] = path.back();
            if (i == first[r].size()) {
                mark[r] = 2;
                path.pop_back();
                continue;
            }
            const uint32_t next = first[r][i++];
            if (mark[next] == 1) return "grammar: rule '" + rules_[next].name + "' is left-recursive";
            if (mark[next] == 0) {
                mark[next] = 1;
                path.emplace_back(next, 0);
            }
        }
    }
    return {};
}

std::string grammar::describe() const {
    auto set_text = [](const byte_set& s) {
        if (s.count() == 1) {
            for (int c = 0; c < 256; ++c) {
                if (s.test(static_cast<size_t>(c))) {
                    if (c >= 0x20 && c < 0x7F) return std::string("'") + static_cast<char>(c) + "'";
                    return "0x" + std::to_string(c);
                }
            }
        }
        return "[" + std::to_string(s.count()) + " bytes]";
    };
    std::string out;
    for (size_t r = 0; r < rules_.size(); ++r) {
        out += std::to_string(r) + " " + rules_[r].name + " ::=";
        for (size_t a = 0; a < rules_[r].starts.size(); ++a) {
            if (a > 0) out += " |";
            for (uint32_t p = rules_[r].starts[a]; flat_[p].what != element::kind::end; ++p) {
                const element& e = flat_[p];
                out += " ";
                out += e.what == element::kind::bytes ? set_text(sets_[e.index]) : "<" + rules_[e.index].name + ">";
            }
            if (flat_[rules_[r].starts[a]].what == element::kind::end) out += " ()";
        }
        out += "\n";
    }
    return out;
}

void matcher::push_unique(const std::vector<uint32_t>& stack, grammar_state& out) const {
    const auto& w = out.words;
    if (w.size() + stack.size() + 1 > max_state_words) return;
    size_t b = 0;
    for (size_t i = 0; i < w.size(); ++i) {
        if (w[i] != grammar_state::separator) continue;
        if (i - b == stack.size() &&
            std::equal(stack.begin(), stack.end(), w.begin() + static_cast<std::ptrdiff_t>(b))) {
            return;
        }
        b = i + 1;
    }
    out.words.insert(out.words.end(), stack.begin(), stack.end());
    out.words.push_back(grammar_state::separator);
}

void matcher::expand(std::vector<uint32_t>& stack, grammar_state& out) const {
    if (++n_expansions_ > max_expansions) return;
    if (stack.empty()) {
        push_unique(stack, out);
        return;
    }
    const uint32_t p = stack.back();
    const element& e = g_.at(p);
    switch (e.what) {
        case element::kind::end:
            stack.pop_back();
            expand(stack, out);
            stack.push_back(p);
            return;
        case element::kind::bytes:
            push_unique(stack, out);
            return;
        case element::kind::rule: {
            const bool tail = g_.at(p + 1).what == element::kind::end;
            if (tail) {
                stack.pop_back();
            } else {
                stack.back() = p + 1;
            }
            for (uint32_t start : g_.starts(e.index)) {
                stack.push_back(start);
                expand(stack, out);
                stack.pop_back();
            }
            if (tail) {
                stack.push_back(p);
            } else {
                stack.back() = p;
            }
            return;
        }
    }
}

grammar_state matcher::start() const {
    n_expansions_ = 0;
    grammar_state s;
    std::vector<uint32_t> stack;
    for (uint32_t start : g_.starts(g_.root())) {
        stack.assign(1, start);
        expand(stack, s);
    }
    canonicalize(s);
    return s;
}

void matcher::advance(const grammar_state& in, unsigned char c, grammar_state& out) const {
    out.words.clear();
    n_expansions_ = 0;
    const auto& w = in.words;
    size_t b = 0;
    for (size_t i = 0; i < w.size(); ++i) {
        if (w[i] != grammar_state::separator) continue;
        if (i > b) {
            const uint32_t top = w[i - 1];
            const element& e = g_.at(top);
            if (e.what == element::kind::bytes && g_.set(e.index).test(c)) {
                scratch_.assign(w.begin() + static_cast<std::ptrdiff_t>(b), w.begin() + static_cast<std::ptrdiff_t>(i));
                scratch_.back() = top + 1;
                expand(scratch_, out);
            }
        }
        b = i + 1;
    }
}

bool matcher::advance(grammar_state& s, std::string_view text) const {
    grammar_state next;
    for (char c : text) {
        advance(s, static_cast<unsigned char>(c), next);
        std::swap(s, next);
        if (s.dead()) return false;
    }
    canonicalize(s);
    return true;
}

void matcher::canonicalize(grammar_state& s) const {
    std::vector<std::vector<uint32_t>> stacks;
    std::vector<uint32_t> cur;
    for (uint32_t x : s.words) {
        if (x == grammar_state::separator) {
            stacks.push_back(std::move(cur));
            cur.clear();
        } else {
            cur.push_back(x);
        }
    }
    std::sort(stacks.begin(), stacks.end());
    stacks.erase(std::unique(stacks.begin(), stacks.end()), stacks.end());
    s.words.clear();
    for (const auto& st : stacks) {
        s.words.insert(s.words.end(), st.begin(), st.end());
        s.words.push_back(grammar_state::separator);
    }
}

bool matcher::complete(const grammar_state& s) {
    const auto& w = s.words;
    for (size_t i = 0; i < w.size(); ++i) {
        if (w[i] == grammar_state::separator && (i == 0 || w[i - 1] == grammar_state::separator)) return true;
    }
    return false;
}

byte_set matcher::next_bytes(const grammar_state& s) const {
    byte_set out;
    const auto& w = s.words;
    for (size_t i = 1; i < w.size(); ++i) {
        if (w[i] != grammar_state::separator || w[i - 1] == grammar_state::separator) continue;
        const element& e = g_.at(w[i - 1]);
        if (e.what == element::kind::bytes) out |= g_.set(e.index);
    }
    return out;
}

bool matcher::finished(const grammar_state& s) const {
    return complete(s) && next_bytes(s).none();
}

}  // namespace troupe::grammar
