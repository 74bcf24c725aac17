// token_constraint: a grammar applied to a vocabulary, as a mask of the tokens allowed next.
//
// vocab_index holds every token's output bytes sorted, with each one's common prefix length with the
// one before: walking that list is a depth-first walk of the vocabulary's trie, so the matcher advances
// once per trie edge, not once per byte of every token, and a refused prefix skips every token under it.
// Tokens with no bytes (control tokens) are never allowed, except the end-of-generation tokens once
// the grammar is complete (then generation can end; when nothing can follow, only they are allowed).
//
// The walk runs on a lazily built DFA: each distinct grammar state met is interned once, and its
// transition on a byte is computed by the matcher the first time and read from a table afterwards, so a
// mask costs about one table read per trie edge (a JSON string's body is one state, or one per
// remaining character under maxLength, whatever the bytes).
//
// Masks are cached by grammar state (canonical, so equal states share one mask): a JSON string's
// body, a number's digits, the same key at the same place reach the same states again, so after the
// first few requests of one schema nearly every step is a cache hit. The cache is bounded
// (max_cache_bytes; it starts over when full) and guarded by a mutex (one constraint is shared by the
// requests of one schema; masks_for computes a step's missing masks once each, whatever the batch).
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/sampling/grammar/grammar.h"

namespace troupe::grammar {

class vocab_index {
public:
    // pieces[id]: the bytes the token adds to the output text (empty for control tokens); eog: the
    // end-of-generation ids.
    vocab_index(std::vector<std::string> pieces, std::vector<int32_t> eog);

    int32_t n_vocab() const { return static_cast<int32_t>(pieces_.size()); }
    const std::string& piece(int32_t id) const { return pieces_[static_cast<size_t>(id)]; }
    const std::vector<int32_t>& eog() const { return eog_; }

    struct entry {
        int32_t id = 0;
        uint32_t lcp = 0;  // bytes shared with the previous entry's piece
    };
    const std::vector<entry>& sorted() const { return sorted_; }  // non-empty pieces, in byte order

    // The trie of the sorted pieces in depth-first order: a node's subtree is [its index + 1, end), and the
    // tokens whose piece ends at it are sorted()[token_begin, token_end).
    struct node {
        uint8_t byte = 0;
        uint16_t depth = 0;  // 1 for a first byte
        uint32_t end = 0;
        uint32_t token_begin = 0;
        uint32_t token_end = 0;
    };
    const std::vector<node>& trie() const { return trie_; }
    size_t max_depth() const { return max_depth_; }

private:
    std::vector<std::string> pieces_;  // [n_vocab]
    std::vector<int32_t> eog_;
    std::vector<entry> sorted_;
    std::vector<node> trie_;  // [n_nodes]
    size_t max_depth_ = 0;
};

// One bit per token: allowed.
struct token_mask {
    std::vector<uint64_t> bits;  // [ceil(n_vocab / 64)]
    bool allowed(int32_t id) const { return (bits[static_cast<size_t>(id) >> 6] >> (id & 63)) & 1u; }
    // Sets every refused token's logit to -inf.
    void apply(std::span<float> logits) const;
    int32_t count() const;
};

struct constraint_stats {
    int64_t n_lookups = 0;
    int64_t n_computed = 0;  // cache misses
    double compute_s = 0;    // time spent computing missed masks
};

class token_constraint {
public:
    token_constraint(grammar g, std::shared_ptr<const vocab_index> vocab, size_t max_cache_bytes = 16 << 20);

    const grammar& rules() const { return g_; }
    const vocab_index& vocab() const { return *vocab_; }
    grammar_state start() const;
    // The state after a token (dead when the token is refused); an end-of-generation token leaves it as is.
    grammar_state after(const grammar_state& s, int32_t token) const;
    bool complete(const grammar_state& s) const { return matcher::complete(s); }

    // The mask for each state (computed once per distinct missing state, then cached).
    std::vector<std::shared_ptr<const token_mask>> masks_for(std::span<const grammar_state* const> states) const;
    std::shared_ptr<const token_mask> mask_for(const grammar_state& s) const;
    // Computes a mask without the cache (benchmarks; the cache's cold cost).
    token_mask compute(const grammar_state& s) const;
    constraint_stats stats() const;

private:
    struct state_hash {
        size_t operator()(const grammar_state& s) const;
    };
    // The interned states and their byte transitions (-2: not computed yet, -1: refused).
    struct dfa {
        std::unordered_map<grammar_state, int32_t, state_hash> ids;
        std::vector<const grammar_state*> states;    // [n_states] keys of ids
        std::vector<std::array<int32_t, 256>> next;  // [n_states]
        std::vector<uint8_t> complete;               // [n_states]
        size_t n_words = 0;                          // in the states' keys
    };
    static constexpr size_t max_dfa_states = 8192;    // 8 MiB of transitions
    static constexpr size_t max_dfa_words = 1 << 22;  // 16 MiB of state keys
    int32_t intern(const grammar_state& s) const;
    int32_t step(const matcher& m, int32_t id, unsigned char c) const;
    token_mask compute_locked(const grammar_state& s) const;

    grammar g_;
    std::shared_ptr<const vocab_index> vocab_;
    size_t max_cache_bytes_;
    mutable std::mutex mutex_;
    mutable std::unordered_map<grammar_state, std::shared_ptr<const token_mask>, state_hash> cache_;
    mutable size_t cache_bytes_ = 0;
    mutable constraint_stats stats_;
    mutable dfa dfa_;
};

}  // namespace troupe::grammar
