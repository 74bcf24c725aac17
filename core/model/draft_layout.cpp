#include "core/model/draft_layout.h"

#include <algorithm>

namespace troupe {

status check_drafts(const sequence_step& s, const std::string& no_trees) {
    const std::string id = "sequence " + std::to_string(s.seq_id);
    const auto n_tokens = static_cast<int32_t>(s.tokens.size());
    if (s.n_draft < 0 || s.n_draft > n_tokens) {
        return make_error(id + ": n_draft " + std::to_string(s.n_draft) + " outside 0.." + std::to_string(n_tokens) +
                          " (the step's tokens)");
    }
    if (s.tree_parents.empty()) return {};  // a chain runs causally
    if (!no_trees.empty())
        return make_error(id + ": a tree of drafts, but this runner verifies chains only (" + no_trees + ")");
    if (static_cast<int32_t>(s.tree_parents.size()) != s.n_draft) {
        return make_error(id + ": tree_parents has " + std::to_string(s.tree_parents.size()) +
                          " entries, expected n_draft = " + std::to_string(s.n_draft));
    }
    if (s.n_draft > k_max_tree_nodes) {
        return make_error(id + ": a tree of " + std::to_string(s.n_draft) + " drafts, above the " +
                          std::to_string(k_max_tree_nodes) + " nodes verified in one step");
    }
    if (s.n_draft == n_tokens) {
        return make_error(id + ": a tree of drafts needs the token it follows in the step (n_draft " +
                          std::to_string(s.n_draft) + " of " + std::to_string(n_tokens) + " tokens)");
    }
    for (int32_t i = 0; i < s.n_draft; ++i) {
        if (s.tree_parents[i] < -1 || s.tree_parents[i] >= i) {
            return make_error(id + ": tree node " + std::to_string(i) + " has parent " +
                              std::to_string(s.tree_parents[i]) + ", expected -1.." + std::to_string(i - 1));
        }
    }
    return {};
}

int32_t tree_mask_words(const forward_batch& batch) {
    int32_t words = 0;
    for (const sequence_step& s : batch.seqs) {
        if (!s.tree_parents.empty()) words = std::max(words, std::max(1, (s.n_draft + 63) / 64));
    }
    return words;
}

bool has_drafts(const forward_batch& batch) {
    return std::any_of(batch.seqs.begin(), batch.seqs.end(), [](const sequence_step& s) { return s.n_draft > 0; });
}

void lay_out_drafts(const sequence_step& s, int32_t words, const draft_rows& out) {
    const auto n = static_cast<int32_t>(s.tokens.size());
    const int32_t n_before = n - s.n_draft;
    const auto w = static_cast<size_t>(words);
    for (int32_t i = 0; i < n; ++i) {
        out.positions[i] = s.pos0 + i;
        out.nodes[i] = i < n_before ? -1 : i - n_before;
        out.rows[i] = s.pos0 + i;
        out.mask_base[i] = s.pos0 + i + 1;
        if (w > 0) std::fill_n(out.mask + i * w, w, uint64_t{0});
    }
    if (s.tree_parents.empty()) return;
    const int32_t first = s.pos0 + n_before;
    for (int32_t i = 0; i < s.n_draft; ++i) {
        const int32_t t = n_before + i;
        const int32_t parent = s.tree_parents[i];
        uint64_t* mask = out.mask + t * w;
        if (parent >= 0) {
            std::copy_n(out.mask + (n_before + parent) * w, w, mask);
            out.positions[t] = out.positions[n_before + parent] + 1;
        } else {
            out.positions[t] = first;
        }
        mask[i / 64] |= uint64_t{1} << (i % 64);
        out.mask_base[t] = first;
    }
}

result<std::vector<std::pair<int32_t, int32_t>>> tree_path_moves(const sequence_step& s, std::span<const int32_t> path,
                                                                 const std::string& who) {
    const std::string id = who + " of sequence " + std::to_string(s.seq_id);
    if (status st = check_drafts(s, {}); !st.ok()) return st.err();
    if (path.size() > static_cast<size_t>(s.n_draft)) {
        return make_error(id + ": a path of " + std::to_string(path.size()) + " nodes in a step of " +
                          std::to_string(s.n_draft) + " drafts");
    }
    const int32_t first = s.pos0 + static_cast<int32_t>(s.tokens.size()) - s.n_draft;
    std::vector<std::pair<int32_t, int32_t>> moves;
    for (size_t i = 0; i < path.size(); ++i) {
        const int32_t node = path[i];
        const int32_t parent = i == 0 ? -1 : path[i - 1];
        const int32_t actual =
            s.tree_parents.empty() ? node - 1 : (node >= 0 && node < s.n_draft ? s.tree_parents[node] : -2);
        if (node < 0 || node >= s.n_draft || actual != parent) {
            return make_error(
                id + ": path entry " + std::to_string(i) + " is node " + std::to_string(node) +
                ", expected a child of " +
                (parent < 0 ? std::string("the last token before the drafts") : "node " + std::to_string(parent)) +
                " among the " + std::to_string(s.n_draft) + " nodes");
        }
        if (node != static_cast<int32_t>(i)) moves.emplace_back(first + node, first + static_cast<int32_t>(i));
    }
    return moves;
}

}  // namespace troupe
