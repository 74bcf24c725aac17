// spec/lookahead's parts on their own: the Jacobi window's tree (the paper's lookahead mask as parents, depths,
// warm-up, the slide), the n-grams it collects from a trajectory, and the pool's LRU per first token.
#include <gtest/gtest.h>

#include <map>
#include <vector>

#include "plugins/spec/lookahead/jacobi_window.h"
#include "plugins/spec/lookahead/ngram_pool.h"

namespace troupe::spec_plugins {
namespace {

struct laid_out {
    std::vector<int32_t> tokens, parents, outputs;
};

laid_out lay_out(jacobi_window& w) {
    laid_out l;
    l.tokens.resize(static_cast<size_t>(w.n_nodes()));
    l.parents.resize(l.tokens.size());
    w.lay_out(0, l.tokens.data(), l.parents.data());
    l.outputs = w.output_nodes();
    return l;
}

int32_t depth(const std::vector<int32_t>& parents, int32_t node) {
    int32_t d = 0;
    for (; node >= 0; node = parents[static_cast<size_t>(node)]) ++d;
    return d;
}

// A target whose next token is always the last one plus one (mod 97): Jacobi iteration converges to counting.
constexpr int32_t n_vocab = 97;
int32_t next_of(int32_t t) {
    return (t + 1) % n_vocab;
}

TEST(jacobi_window, warms_up_one_level_per_step_then_keeps_w_minus_1_plus_n_minus_2_times_w_nodes) {
    const int32_t w = 4, n = 4;
    jacobi_window win(w, n);
    uint64_t rng = 1;
    const std::vector<int32_t> prompt = {10, 20, 30};
    win.seed(prompt, rng);
    std::vector<int32_t> sizes;
    for (int step = 0; step < 4; ++step) {
        const laid_out l = lay_out(win);
        sizes.push_back(win.n_nodes());
        for (size_t i = 0; i < l.tokens.size(); ++i) EXPECT_LT(l.parents[i], static_cast<int32_t>(i));
        std::vector<int32_t> outs;
        for (int32_t node : l.outputs) outs.push_back(next_of(l.tokens[static_cast<size_t>(node)]));
        win.advance(0, outs, [](int32_t, const int32_t*) {});
    }
    EXPECT_EQ(sizes, (std::vector<int32_t>{w + n - 3, (w + n - 4) + (w + n - 3), (w - 1) + (n - 2) * w,
                                           (w - 1) + (n - 2) * w}));
    EXPECT_EQ(jacobi_window::max_nodes(w, n), (w - 1) + (n - 2) * w);
}

TEST(jacobi_window, lays_out_the_lookahead_mask_a_chain_for_level_0_and_a_chain_per_column_from_it) {
    const int32_t w = 4, n = 4;
    jacobi_window win(w, n);
    uint64_t rng = 1;
    win.seed(std::vector<int32_t>{5}, rng);
    for (int step = 0; step < 2; ++step) {  // to the steady state
        const laid_out l = lay_out(win);
        std::vector<int32_t> outs(l.outputs.size(), 7);
        win.advance(0, outs, [](int32_t, const int32_t*) {});
    }
    const laid_out l = lay_out(win);
    ASSERT_EQ(l.tokens.size(), 11u);
    // Column order: L1[0] L2[0] | L0[0] L1[1] L2[1] | L0[1] L1[2] L2[2] | L0[2] L1[3] L2[3]  (W = 4, N = 4)
    EXPECT_EQ(l.parents, (std::vector<int32_t>{-1, 0, -1, 2, 3, 2, 5, 6, 5, 8, 9}));
    EXPECT_EQ(l.outputs, (std::vector<int32_t>{1, 4, 7, 10}));
    // Column i's level-l node sits at depth i + l; level 0's j-th node at depth j + 1.
    const std::vector<int32_t> depths = {1, 2, 1, 2, 3, 2, 3, 4, 3, 4, 5};
    for (size_t i = 0; i < depths.size(); ++i) EXPECT_EQ(depth(l.parents, static_cast<int32_t>(i)), depths[i]);
}

TEST(jacobi_window, collects_the_trajectory_n_grams_once_the_target_has_converged_it) {
    const int32_t w = 5, n = 3;
    jacobi_window win(w, n);
    uint64_t rng = 3;
    win.seed(std::vector<int32_t>{40, 41, 42, 43}, rng);
    int32_t root = 50;
    std::vector<std::vector<int32_t>> last_ngrams;
    for (int step = 0; step < 8; ++step) {
        const laid_out l = lay_out(win);
        // The target's argmax after each column: the next count after the column's last token.
        std::vector<int32_t> outs;
        for (int32_t node : l.outputs) outs.push_back(next_of(l.tokens[static_cast<size_t>(node)]));
        last_ngrams.clear();
        win.advance(root, outs, [&](int32_t key, const int32_t* c) { last_ngrams.push_back({key, c[0], c[1]}); });
        root = next_of(root);  // the sequence advances one token per step
    }
    ASSERT_EQ(last_ngrams.size(), static_cast<size_t>(w));
    // Columns 1.. hang from level 0, whose tokens came from the same trajectory: counting n-grams. (Column 0 hangs
    // from the root, which this test advances on its own.)
    for (size_t i = 1; i < last_ngrams.size(); ++i) {
        const auto& g = last_ngrams[i];
        EXPECT_EQ(g, (std::vector<int32_t>{g[0], next_of(g[0]), next_of(next_of(g[0]))})) << "column " << i;
    }
}

TEST(ngram_pool, keeps_the_most_recent_continuations_per_key_up_to_its_capacity_most_recent_first) {
    ngram_pool pool(3, 2);
    const std::vector<int32_t> text = {1, 2, 3, 1, 4, 5, 1, 2, 3, 1, 6, 7};
    pool.add_text(text, 0);
    std::vector<std::vector<int32_t>> seen;
    pool.for_each_recent(1, [&](const int32_t* c) {
        seen.push_back({c[0], c[1]});
        return true;
    });
    // "1 2 3" seen again moved ahead of "1 4 5", which "1 6 7" then pushed out.
    EXPECT_EQ(seen, (std::vector<std::vector<int32_t>>{{6, 7}, {2, 3}}));
    // add_text from an index adds only the n-grams ending there or later.
    ngram_pool later(3, 4);
    later.add_text(text, 11);
    int32_t n_keys_with_entries = 0;
    for (int32_t key = 0; key < 8; ++key)
        later.for_each_recent(key, [&](const int32_t*) { return ++n_keys_with_entries, false; });
    EXPECT_EQ(n_keys_with_entries, 1);  // only "1 6 7"
}

}  // namespace
}  // namespace troupe::spec_plugins
