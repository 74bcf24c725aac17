// draft_trie: deterministic draft continuations merged into one proposal tree (troupe_spec_proposal's tokens and
// parents), sharing common prefixes so that siblings are distinct tokens. The first continuation added is the first
// path of the tree (first children all the way down), which is what a host that verifies chains only keeps.
//
//   add(4 5 6), add(4 5 7), add(8)   ->   root ─┬─ 4 ── 5 ─┬─ 6          tokens  = {4, 5, 6, 7, 8}
//                                              │          └─ 7          parents = {-1, 0, 1, 1, -1}
//                                              └─ 8
//
// Header-only: spec/ngram and spec/lookahead each get their own copy.
#pragma once

#include <cstdint>

namespace troupe::spec_plugins {

class draft_trie {
public:
    // Writes into tokens[0, capacity) and parents[0, capacity), after the `n_nodes` nodes already there.
    draft_trie(int32_t* tokens, int32_t* parents, int32_t capacity, int32_t n_nodes = 0)
        : tokens_(tokens), parents_(parents), capacity_(capacity), n_(n_nodes) {}

    // Adds path[0, len) below the root, reusing the nodes of an equal prefix; stops where the capacity is reached.
    // Returns the number of nodes added.
    int32_t add(const int32_t* path, int32_t len) {
        int32_t parent = -1;
        int32_t added = 0;
        for (int32_t i = 0; i < len; ++i) {
            const int32_t child = find_child(parent, path[i]);
            if (child >= 0) {
                parent = child;
                continue;
            }
            if (n_ == capacity_) break;
            tokens_[n_] = path[i];
            parents_[n_] = parent;
            parent = n_++;
            ++added;
        }
        return added;
    }

    int32_t size() const { return n_; }
    bool full() const { return n_ == capacity_; }

private:
    int32_t find_child(int32_t parent, int32_t token) const {
        for (int32_t j = parent + 1; j < n_; ++j) {
            if (parents_[j] == parent && tokens_[j] == token) return j;
        }
        return -1;
    }

    int32_t* tokens_;
    int32_t* parents_;
    int32_t capacity_;
    int32_t n_;
};

}  // namespace troupe::spec_plugins
