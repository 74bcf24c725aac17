#include "plugins/spec/draft/draft_length.h"

#include <algorithm>
#include <cmath>

namespace spec_draft {

void step_cost::add(double n_nodes, double seconds) {
    w_ = decay_ * w_ + 1;
    n_ = decay_ * n_ + n_nodes;
    nn_ = decay_ * nn_ + n_nodes * n_nodes;
    t_ = decay_ * t_ + seconds;
    nt_ = decay_ * nt_ + n_nodes * seconds;
    ++count_;
    const double mean_n = n_ / w_, mean_t = t_ / w_;
    const double var_n = nn_ / w_ - mean_n * mean_n;
    if (var_n > 1e-9) {
        per_node_ = std::max(0.0, (nt_ / w_ - mean_n * mean_t) / var_n);
        fixed_ = std::max(1e-9, mean_t - per_node_ * mean_n);
    }
}

bool step_cost::ready() const {
    if (count_ < 8 || w_ <= 0) return false;
    const double mean_n = n_ / w_;
    return nn_ / w_ - mean_n * mean_n >= 0.25;  // sizes spread by at least half a node
}

void acceptance::add(int32_t m, int32_t k) {
    accepted_ = decay_ * accepted_ + m;
    tried_ = decay_ * tried_ + m + (m < k ? 1 : 0);
}

int32_t best_length(double alpha, double fixed_share, double per_token, int32_t max_draft) {
    alpha = std::clamp(alpha, 0.0, 1.0);
    int32_t best = 0;  // no draft: one token per fixed_share
    double best_rate = 1.0 / fixed_share;
    double expected = 1, power = 1;  // E(k) and alpha^k, built up from k = 0
    for (int32_t k = 1; k <= max_draft; ++k) {
        power *= alpha;
        expected += power;
        const double rate = expected / (fixed_share + per_token * k);
        if (rate > best_rate * (1 + 1e-9)) {  // ties go to the shorter draft
            best_rate = rate;
            best = k;
        }
    }
    return best;
}

}  // namespace spec_draft
