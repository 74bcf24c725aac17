#include "medusa_tree.h"

#include <algorithm>
#include <map>
#include <numeric>
#include <stdexcept>

namespace troupe::medusa {
namespace {

bool before(const std::vector<int32_t>& a, const std::vector<int32_t>& b) {
    if (a.size() != b.size()) return a.size() < b.size();
    const int32_t sa = std::accumulate(a.begin(), a.end(), 0), sb = std::accumulate(b.begin(), b.end(), 0);
    if (sa != sb) return sa < sb;
    return a < b;
}

// The depth and each depth's top-k from the nodes.
void recount(medusa_tree& tree) {
    tree.depth = 0;
    for (const tree_node& n : tree.nodes) tree.depth = std::max(tree.depth, n.depth());
    tree.k_by_depth.assign(static_cast<size_t>(tree.depth), 0);
    for (const tree_node& n : tree.nodes) {
        int32_t& k = tree.k_by_depth[static_cast<size_t>(n.depth() - 1)];
        k = std::max(k, n.ranks.back() + 1);
    }
}

// Orders the paths, links parents and computes the per-depth top-k; `key` names the parameter in errors.
medusa_tree build(std::vector<std::vector<int32_t>> paths, const std::string& key) {
    std::sort(paths.begin(), paths.end(), before);
    paths.erase(std::unique(paths.begin(), paths.end()), paths.end());
    medusa_tree tree;
    std::map<std::vector<int32_t>, int32_t> index;
    for (const std::vector<int32_t>& p : paths) {
        tree_node n;
        n.ranks = p;
        if (p.size() > 1) {
            const std::vector<int32_t> up(p.begin(), p.end() - 1);
            auto it = index.find(up);
            if (it == index.end()) {
                std::string text;
                for (int32_t r : p) text += (text.empty() ? "" : ", ") + std::to_string(r);
                throw std::invalid_argument("params." + key + ": path [" + text +
                                            "] has no parent path (every prefix of a path must be listed)");
            }
            n.parent = it->second;
        }
        index[p] = static_cast<int32_t>(tree.nodes.size());
        tree.nodes.push_back(std::move(n));
    }
    if (static_cast<int32_t>(tree.nodes.size()) > max_tree_nodes) {
        throw std::invalid_argument("params." + key + ": the tree has " + std::to_string(tree.nodes.size()) +
                                    " nodes, more than the " + std::to_string(max_tree_nodes) +
                                    " a proposal may hold (use smaller top-k values or fewer paths)");
    }
    recount(tree);
    return tree;
}

}  // namespace

medusa_tree tree_from_topk(const std::vector<int32_t>& topk) {
    if (topk.empty()) throw std::invalid_argument("params.topk: must list at least one top-k (e.g. [4, 2, 2, 1])");
    std::vector<std::vector<int32_t>> paths, level{{}};
    int64_t total = 0;
    for (size_t d = 0; d < topk.size(); ++d) {
        total += static_cast<int64_t>(level.size()) * topk[d];
        if (total > max_tree_nodes) {
            throw std::invalid_argument("params.topk: the tree of every combination has more than " +
                                        std::to_string(max_tree_nodes) +
                                        " nodes, the most a proposal may hold (use smaller top-k values)");
        }
        std::vector<std::vector<int32_t>> next;
        for (const std::vector<int32_t>& p : level) {
            for (int32_t r = 0; r < topk[d]; ++r) {
                std::vector<int32_t> q = p;
                q.push_back(r);
                next.push_back(q);
                paths.push_back(q);
            }
        }
        level = std::move(next);
    }
    return build(std::move(paths), "topk");
}

medusa_tree tree_from_choices(const std::vector<std::vector<int32_t>>& choices) {
    if (choices.empty()) throw std::invalid_argument("params.choices: must list at least one path (e.g. [[0], [1]])");
    for (const std::vector<int32_t>& p : choices) {
        if (p.empty()) throw std::invalid_argument("params.choices: a path is empty (paths are lists of ranks)");
    }
    return build(choices, "choices");
}

void truncate(medusa_tree& tree, int32_t n) {
    if (n >= static_cast<int32_t>(tree.nodes.size())) return;
    tree.nodes.resize(static_cast<size_t>(std::max(0, n)));
    recount(tree);
}

}  // namespace troupe::medusa
