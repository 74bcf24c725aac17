// grammar: a context-free grammar over bytes, and the pushdown matcher that walks text through it.
//
// A grammar is a list of rules; a rule is a list of alternatives; an alternative is a sequence of
// elements, each a byte set or a reference to a rule. All alternatives are stored in one flat array
// of elements, each alternative closed by an `end` element, so a position in the grammar is one
// index into that array:
//
//   rule value:  [bytes "t"][bytes "r"][bytes "u"][bytes "e"][end] [rule object][end] ...
//                 ^ alternative start                               ^ alternative start
//
// The matcher's state is a set of stacks of positions (the grammar may be ambiguous for a few bytes,
// e.g. a number that may go on or end). The top of every stack is a byte-set position: the bytes it
// accepts are the bytes the text may continue with. An empty stack means the root rule is complete.
// Advancing by a byte keeps the stacks whose top accepts it, steps past that element and expands:
// a rule reference is replaced by its continuation (dropped when that is the alternative's end: tail
// calls keep repetition from growing the stack) with each alternative's start pushed on top; an `end`
// pops. Left recursion and alternatives that can loop without consuming a byte are not allowed (the
// builders here never make them).
//
// States are canonical (stacks sorted, duplicates removed), so equal states compare equal and can key
// a cache of token masks (token_constraint).
#pragma once

#include <bitset>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace troupe::grammar {

using byte_set = std::bitset<256>;

struct element {
    enum class kind : uint8_t { end, bytes, rule };
    kind what = kind::end;
    uint32_t index = 0;  // bytes: index into grammar::sets; rule: the rule's id
};

class grammar {
public:
    // Rules are declared first (so they can refer to each other, recursively) and defined later.
    uint32_t declare(std::string name);
    // Adds one alternative to a declared rule.
    void add_alternative(uint32_t rule, std::span<const element> seq);

    element bytes(const byte_set& s);
    element byte(unsigned char c);
    element ref(uint32_t rule) const { return {element::kind::rule, rule}; }
    // A rule matching exactly this text.
    uint32_t literal(std::string_view text);

    void set_root(uint32_t rule) { root_ = rule; }
    uint32_t root() const { return root_; }
    size_t n_rules() const { return rules_.size(); }
    const std::string& rule_name(uint32_t rule) const { return rules_[rule].name; }
    // Every declared rule has an alternative and every reference names a rule; the error names the rule.
    std::string check() const;

    // Positions.
    const element& at(uint32_t pos) const { return flat_[pos]; }
    const byte_set& set(uint32_t index) const { return sets_[index]; }
    const std::vector<uint32_t>& starts(uint32_t rule) const { return rules_[rule].starts; }

    // A readable listing, one rule a line (for errors and tests).
    std::string describe() const;

private:
    struct rule_def {
        std::string name;
        std::vector<uint32_t> starts;  // positions of its alternatives' first elements
    };
    std::vector<rule_def> rules_;
    std::vector<element> flat_;
    std::vector<byte_set> sets_;
    uint32_t root_ = 0;
};

// The matcher's state: stacks stored back to back, each followed by `separator`, in canonical order.
struct grammar_state {
    static constexpr uint32_t separator = 0xFFFFFFFFu;
    std::vector<uint32_t> words;
    bool operator==(const grammar_state&) const = default;
    bool dead() const { return words.empty(); }
};

class matcher {
public:
    // The most words a state holds: overlapping alternatives nested deeply would otherwise double the
    // stacks at every level; past the bound further stacks are dropped (each kept one is still a parse of
    // the text, so what the mask allows stays valid).
    static constexpr size_t max_state_words = 1 << 14;
    // The most expansion steps one byte may take (a chain of definitions each with two alternatives that
    // refer to the next is exponential in the chain's length); past it the paths not yet taken are dropped.
    static constexpr size_t max_expansions = 1 << 16;

    explicit matcher(const grammar& g) : g_(g) {}

    // The state before any byte: the root's alternatives expanded.
    grammar_state start() const;
    // The state after one more byte (dead when no stack accepts it). Not canonical: stacks are in the
    // order found, duplicates removed. in and out must differ.
    void advance(const grammar_state& in, unsigned char c, grammar_state& out) const;
    // After each of the bytes; false (and a dead state) when one is refused.
    bool advance(grammar_state& s, std::string_view text) const;
    // Sorts the stacks so equal states have equal words.
    void canonicalize(grammar_state& s) const;
    // Some stack is empty: the text so far is a whole sentence of the grammar.
    static bool complete(const grammar_state& s);
    // Complete and no byte can follow.
    bool finished(const grammar_state& s) const;
    // The bytes some stack accepts next.
    byte_set next_bytes(const grammar_state& s) const;

private:
    // Expands the stack (its top a rule reference or an end) into byte-set tops, added to out.
    void expand(std::vector<uint32_t>& stack, grammar_state& out) const;
    void push_unique(const std::vector<uint32_t>& stack, grammar_state& out) const;

    const grammar& g_;
    mutable std::vector<uint32_t> scratch_;
    mutable size_t n_expansions_ = 0;  // in the current start() or advance()
};

}  // namespace troupe::grammar
