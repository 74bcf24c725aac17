#include "plugins/spec/lookahead/jacobi_window.h"

#include <algorithm>

namespace troupe::spec_plugins {

namespace {

uint64_t next(uint64_t& s) {
    s ^= s << 13;
    s ^= s >> 7;
    s ^= s << 17;
    return s;
}

// Nodes with levels 0..f: level 0 has W+N-3-f tokens, each other level one more.
int32_t nodes_at_fill(int32_t w, int32_t n, int32_t f) {
    const int32_t level0 = w + n - 3 - f;
    return level0 + f * (level0 + 1);
}

}  // namespace

int32_t jacobi_window::max_nodes(int32_t width, int32_t n) {
    int32_t most = 0;
    for (int32_t f = 0; f <= n - 2; ++f) most = std::max(most, nodes_at_fill(width, n, f));
    return most;
}

void jacobi_window::seed(std::span<const int32_t> source, uint64_t& rng) {
    levels_.assign(1, std::vector<int32_t>(static_cast<size_t>(w_ + n_ - 3)));
    for (int32_t& t : levels_[0]) t = source.empty() ? 0 : source[next(rng) % source.size()];
}

int32_t jacobi_window::n_nodes() const {
    if (levels_.empty()) return 0;
    return nodes_at_fill(w_, n_, static_cast<int32_t>(levels_.size()) - 1);
}

void jacobi_window::lay_out(int32_t first, int32_t* tokens, int32_t* parents) {
    out_nodes_.clear();
    const std::vector<int32_t>& level0 = levels_[0];
    const size_t top = levels_.size() - 1;
    int32_t k = first;
    if (top == 0) {
        // Warm-up's first step: one chain, every node an output.
        for (size_t j = 0; j < level0.size(); ++j, ++k) {
            tokens[k] = level0[j];
            parents[k] = j == 0 ? -1 : k - 1;
            out_nodes_.push_back(k);
        }
        return;
    }
    // Column by column: L0[i-1] (which column i hangs from), then column i's levels 1..top.
    const size_t n_columns = levels_[1].size();  // == level0.size() + 1
    int32_t level0_prev = -1;                    // the node of L0[i-1]
    for (size_t i = 0; i < n_columns; ++i) {
        if (i >= 1) {
            tokens[k] = level0[i - 1];
            parents[k] = level0_prev;
            level0_prev = k++;
        }
        int32_t parent = level0_prev;
        for (size_t l = 1; l <= top; ++l, ++k) {
            tokens[k] = levels_[l][i];
            parents[k] = parent;
            parent = k;
        }
        out_nodes_.push_back(parent);
    }
}

void jacobi_window::slide(std::span<const int32_t> outputs) {
    const size_t top = levels_.size() - 1;
    if (levels_.size() < static_cast<size_t>(n_ - 1)) {
        // Warm-up: every level loses its first token, the outputs become a new level (all of them after the first
        // step's lone chain, whose outputs sit one column earlier than the levels' columns).
        const size_t skip = top == 0 ? 0 : 1;
        for (std::vector<int32_t>& level : levels_) level.erase(level.begin());
        levels_.emplace_back(outputs.begin() + static_cast<std::ptrdiff_t>(skip), outputs.end());
        return;
    }
    // Steady: L0 <- L1[1:], L_l <- L_{l+1}, L_top <- outputs.
    levels_[0].assign(levels_[1].begin() + 1, levels_[1].end());
    for (size_t l = 1; l < top; ++l) levels_[l].swap(levels_[l + 1]);
    levels_[top].assign(outputs.begin(), outputs.end());
}

}  // namespace troupe::spec_plugins
