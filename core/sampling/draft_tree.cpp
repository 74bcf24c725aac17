#include "core/sampling/draft_tree.h"

#include <algorithm>

namespace troupe {

void keep_first_path(draft_tree& tree, size_t n_vocab) {
    if (tree.is_chain()) return;
    std::vector<int32_t> path;
    int32_t parent = -1;
    for (size_t i = 0; i < tree.size(); ++i) {
        if (tree.parents[i] == parent) {
            path.push_back(static_cast<int32_t>(i));
            parent = static_cast<int32_t>(i);
        }
    }
    // Nodes are in topological order, so each kept node's first child comes after it; compact in place.
    for (size_t k = 0; k < path.size(); ++k) {
        const auto i = static_cast<size_t>(path[k]);
        tree.tokens[k] = tree.tokens[i];
        tree.parents[k] = static_cast<int32_t>(k) - 1;
        if (!tree.q.empty()) std::copy_n(tree.q.begin() + i * n_vocab, n_vocab, tree.q.begin() + k * n_vocab);
    }
    tree.tokens.resize(path.size());
    tree.parents.resize(path.size());
    if (!tree.q.empty()) tree.q.resize(path.size() * n_vocab);
}

int32_t tree_depth(const draft_tree& tree) {
    std::vector<int32_t> depth(tree.size());
    int32_t deepest = 0;
    for (size_t i = 0; i < tree.size(); ++i) {
        depth[i] = tree.parents[i] < 0 ? 1 : depth[static_cast<size_t>(tree.parents[i])] + 1;
        deepest = std::max(deepest, depth[i]);
    }
    return deepest;
}

}  // namespace troupe
