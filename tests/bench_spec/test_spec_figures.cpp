// spec_figures on step records made by hand: each figure against its definition in spec_figures.h.
#include <gtest/gtest.h>

#include <cmath>

#include "cli/bench_spec/spec_figures.h"

namespace troupe::bench {
namespace {

// Plain steps: one token each, forward 0.8 ms, whole step 1 ms.
spec_run plain_run(int32_t n_steps, double wall_s) {
    spec_run r;
    for (int32_t i = 0; i < n_steps; ++i) r.steps.push_back({1, 0, 0, 0, 0, 0.8e-3, 1e-3});
    r.wall_s = wall_s;
    return r;
}

TEST(spec_figures, acceptance_length_per_position_acceptance_and_costs_follow_their_definitions) {
    spec_run spec;
    // {tokens, depth, nodes, accepted, propose_s, forward_s, step_s}
    spec.steps = {
        {4, 3, 3, 3, 0.1e-3, 1.0e-3, 1.4e-3},  // all three accepted
        {2, 3, 5, 1, 0.1e-3, 1.2e-3, 1.5e-3},  // a tree of 5 nodes, depth 3; one accepted
        {1, 2, 2, 0, 0.1e-3, 0.9e-3, 1.2e-3},  // none accepted
        {1, 0, 0, 0, 0.1e-3, 0.9e-3, 1.1e-3},  // nothing proposed
    };
    spec.wall_s = 8 * 1e-3;                           // 8 tokens in 8 ms
    const spec_run plain = plain_run(10, 10 * 1e-3);  // 1000 tokens/s
    const spec_figures f = compute_spec_figures(plain, spec);

    EXPECT_DOUBLE_EQ(f.tokens_per_s_plain, 1000);
    EXPECT_DOUBLE_EQ(f.tokens_per_s_spec, 1000);
    EXPECT_DOUBLE_EQ(f.speedup, 1);
    EXPECT_DOUBLE_EQ(f.tau, 8.0 / 4);
    EXPECT_DOUBLE_EQ(f.mean_depth, 8.0 / 4);
    EXPECT_DOUBLE_EQ(f.mean_nodes, 10.0 / 4);
    ASSERT_EQ(f.accept_at.size(), 3u);
    // Depth 1 drafted by 3 steps, reached by 2; depth 2 drafted by 3, reached by 1; depth 3 drafted by 2, reached by 1.
    EXPECT_EQ(f.n_at[0], 3);
    EXPECT_EQ(f.n_at[1], 3);
    EXPECT_EQ(f.n_at[2], 2);
    EXPECT_DOUBLE_EQ(f.accept_at[0], 2.0 / 3);
    EXPECT_DOUBLE_EQ(f.accept_at[1], 1.0 / 3);
    EXPECT_DOUBLE_EQ(f.accept_at[2], 1.0 / 2);

    EXPECT_DOUBLE_EQ(f.step_plain_s, 1e-3);
    EXPECT_DOUBLE_EQ(f.propose_s, 0.1e-3);
    EXPECT_NEAR(f.c_draft, 0.1, 1e-12);
    EXPECT_NEAR(f.c_verify, (1.0e-3 - 0.8e-3) / 1e-3, 1e-12);  // mean spec forward 1.0 ms vs 0.8 ms
    EXPECT_NEAR(f.predicted, 2.0 / (1 + 0.1 + 0.2), 1e-12);
    EXPECT_NEAR(f.ideal, 2.0 / 1.1, 1e-12);
    EXPECT_NEAR(f.efficiency, 1.0 / (2.0 / 1.3), 1e-12);
}

TEST(spec_figures, drafts_never_accepted_give_zero_per_position_and_an_empty_run_gives_no_figures) {
    spec_run spec;
    spec.steps = {{1, 2, 2, 0, 0, 1e-3, 1e-3}};
    spec.wall_s = 1e-3;
    const spec_figures f = compute_spec_figures(plain_run(1, 1e-3), spec);
    ASSERT_EQ(f.accept_at.size(), 2u);
    EXPECT_DOUBLE_EQ(f.accept_at[0], 0);
    EXPECT_DOUBLE_EQ(f.accept_at[1], 0);
    EXPECT_DOUBLE_EQ(f.tau, 1);
    const spec_figures empty = compute_spec_figures(plain_run(1, 1e-3), spec_run{});
    EXPECT_TRUE(empty.accept_at.empty());
    EXPECT_EQ(empty.tau, 0);
    EXPECT_EQ(empty.speedup, 0);
}

}  // namespace
}  // namespace troupe::bench
