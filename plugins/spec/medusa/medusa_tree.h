// medusa_tree: the static candidate tree of spec/medusa. A node is a path of ranks (r_1, ..., r_d): its token is
// the r_d-th most likely token of head d-1 (head i proposes depth i + 1), and its parent is the path (r_1..r_{d-1}).
//
//   topk: [3, 2]   ->  (0) (1) (2) (0,0) (0,1) (1,0) (1,1) (2,0) (2,1)         every combination, k_d per depth
//   choices: [[0], [1], [0, 0], [0, 1], [1, 0]]   ->  exactly those paths (Medusa's "medusa choices")
//
// Nodes are ordered by depth, then by the sum of their ranks (the likelier paths first), then lexicographically, so
// every prefix of the order is a tree (a parent comes before its children): a proposal cut at max_nodes keeps the
// shallow, likely part.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace troupe::medusa {

struct tree_node {
    std::vector<int32_t> ranks;  // [depth]
    int32_t parent = -1;         // index of the node of ranks[0..depth-1), -1 at depth 1
    int32_t depth() const { return static_cast<int32_t>(ranks.size()); }
};

struct medusa_tree {
    std::vector<tree_node> nodes;
    int32_t depth = 0;                // the deepest node's depth
    std::vector<int32_t> k_by_depth;  // [depth] the top-k each depth's head must give (the largest rank + 1)
};

// The largest tree a proposal may hold (the KV rows the host reserves per sequence).
constexpr int32_t max_tree_nodes = 256;

// Every combination of top-k per depth. Throws std::invalid_argument with "params.<key>: ..." on a bad shape.
medusa_tree tree_from_topk(const std::vector<int32_t>& topk);
// Explicit paths; each path's prefixes must be paths too.
medusa_tree tree_from_choices(const std::vector<std::vector<int32_t>>& choices);
// The first n nodes (a tree by the order above).
void truncate(medusa_tree& tree, int32_t n);

}  // namespace troupe::medusa
