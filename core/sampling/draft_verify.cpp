#include "core/sampling/draft_verify.h"

#include <algorithm>

namespace troupe {

draft_verdict draft_verifier::verify(const draft_tree& tree, const row_fn& rows, sampler& smp,
                                     std::vector<int32_t>& history) {
    const size_t n = tree.size();
    children_.resize(n + 1);
    for (auto& c : children_) c.clear();
    for (size_t i = 0; i < n; ++i)
        children_[static_cast<size_t>(tree.parents[i] + 1)].push_back(static_cast<int32_t>(i));

    draft_verdict v;
    int32_t node = -1;
    for (;;) {
        const std::span<const float> row = rows(node);
        const std::vector<int32_t>& kids = children_[static_cast<size_t>(node + 1)];
        int32_t next = -1;
        if (smp.greedy()) {
            const int32_t t = smp.sample(row, history);
            for (int32_t c : kids) {
                if (tree.tokens[static_cast<size_t>(c)] == t) {
                    next = c;
                    break;
                }
            }
            if (next < 0) {
                v.token = t;
                return v;
            }
        } else {
            smp.distribution(row, history, p_);
            const size_t n_vocab = p_.size();
            for (int32_t c : kids) {
                const int32_t x = tree.tokens[static_cast<size_t>(c)];
                const float* q = tree.q.empty() ? nullptr : tree.q.data() + static_cast<size_t>(c) * n_vocab;
                const float qx = q != nullptr ? q[x] : 1.0f;
                const float px = p_[static_cast<size_t>(x)];
                // Accept with min(1, p/q); a token its own q could not draw (qx == 0) is accepted where p allows it.
                if (px > 0 && (qx <= px || smp.uniform() * qx < px)) {
                    next = c;
                    break;
                }
                // Rejected: the residual max(0, p - q), renormalized. A residual of zero mass can only come from
                // rounding (p == q); p is then kept.
                double sum = 0;
                if (q != nullptr) {
                    for (size_t t = 0; t < n_vocab; ++t) sum += std::max(0.0f, p_[t] - q[t]);
                    if (sum > 0) {
                        for (size_t t = 0; t < n_vocab; ++t)
                            p_[t] = static_cast<float>(std::max(0.0f, p_[t] - q[t]) / sum);
                    }
                } else {
                    for (size_t t = 0; t < n_vocab; ++t) sum += t == static_cast<size_t>(x) ? 0.0 : p_[t];
                    if (sum > 0) {
                        p_[static_cast<size_t>(x)] = 0;
                        for (float& p : p_) p = static_cast<float>(p / sum);
                    }
                }
            }
            if (next < 0) {
                v.token = smp.draw(p_);
                return v;
            }
        }
        v.path.push_back(next);
        history.push_back(tree.tokens[static_cast<size_t>(next)]);
        node = next;
    }
}

}  // namespace troupe
