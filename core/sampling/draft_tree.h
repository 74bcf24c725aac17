// draft_tree: a speculative proposal, candidate tokens in topological order (plugins/include/troupe/spec.h draws
// one). A chain is the tree whose parents are -1, 0, 1, ...
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace troupe {

// A proposal: nodes in topological order. q is empty (deterministic drafts) or [n_nodes, n_vocab]: row i is the
// distribution node i's token was drawn from, siblings drawn independently.
struct draft_tree {
    std::vector<int32_t> tokens;   // [n_nodes]
    std::vector<int32_t> parents;  // [n_nodes] -1 (follows the context) or an earlier node
    std::vector<float> q;          // [n_nodes, n_vocab] or empty
    size_t size() const { return tokens.size(); }
    bool empty() const { return tokens.empty(); }
    bool is_chain() const {
        for (size_t i = 0; i < parents.size(); ++i) {
            if (parents[i] != static_cast<int32_t>(i) - 1) return false;
        }
        return true;
    }
    void clear() {
        tokens.clear();
        parents.clear();
        q.clear();
    }
};

// Keeps only the path of first children from the root (for runners that verify chains only): node 0, its first
// child, that one's first child, ... with their q rows (n_vocab wide).
void keep_first_path(draft_tree& tree, size_t n_vocab);

// The depth of the deepest node (1 for roots only; 0 for an empty tree).
int32_t tree_depth(const draft_tree& tree);

}  // namespace troupe
