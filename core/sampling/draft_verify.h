// draft_verify: speculative verification of a tree of draft tokens against the target's logits, keeping the
// target's output distribution exactly.
//
// rows(u) is the target's logits row after node u of the tree (u = -1: after the context's last token). From the
// root down, at node u with children c_1..c_m (in node order):
//   greedy:   t = argmax of the (penalized) row; follow the child whose token is t, else emit t and stop. The
//             result is the longest path the target agrees with, and the emitted text is what plain greedy
//             decoding gives.
//   sampling: p = the row's sampling distribution; for each child c_i with token x_i and draft distribution q_i
//             (its q row, or one-hot at x_i for a deterministic draft): accept with probability
//             min(1, p(x_i) / q_i(x_i)) and descend; else p <- normalize(max(0, p - q_i)). With every child
//             rejected (or none), draw the emitted token from p. When siblings are independent draws from their q
//             rows (or deterministic and distinct), the emitted sequence has exactly the distribution of plain
//             sampling (SpecInfer's multi-round speculative sampling; a chain is Leviathan et al.'s rule).
// Accepted draft tokens are appended to `history` as they are accepted (penalties see them); the emitted token is
// not (the caller's next step brings it).
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "core/sampling/draft_tree.h"
#include "core/sampling/sampler.h"

namespace troupe {

struct draft_verdict {
    std::vector<int32_t> path;  // accepted nodes, root to leaf
    int32_t token = -1;         // the token the target chose after the path
};

class draft_verifier {
public:
    using row_fn = std::function<std::span<const float>(int32_t node)>;

    draft_verdict verify(const draft_tree& tree, const row_fn& rows, sampler& smp, std::vector<int32_t>& history);

private:
    std::vector<std::vector<int32_t>> children_;  // [n_nodes + 1] children of the root (index 0) and of each node
    std::vector<float> p_;                        // [n_vocab] the target's distribution at the current node
};

}  // namespace troupe
