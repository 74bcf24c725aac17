// spec/draft's draft-length policy (plugins/spec/draft/draft_length.h): the length maximizing expected tokens per
// unit of cost, the step-cost fit and the acceptance estimate, on hand-computed cases.
#include <gtest/gtest.h>

#include "plugins/spec/draft/draft_length.h"

namespace spec_draft {
namespace {

TEST(draft_length, the_best_length_maximizes_expected_tokens_per_unit_of_cost) {
    // alpha 0.5, a step costs 1 plus 0.1 per draft: E(k) / cost(k) = 1.5/1.1, 1.75/1.2, 1.875/1.3: k = 2.
    EXPECT_EQ(best_length(0.5, 1.0, 0.1, 8), 2);
    // Drafts that always hold and cost little: as long as allowed.
    EXPECT_EQ(best_length(1.0, 1.0, 0.01, 16), 16);
    EXPECT_EQ(best_length(0.0, 1.0, 0.01, 16), 0);  // turned off: a draft that never holds only costs
    // 16 sequences share the fixed cost: a node at 0.1 of a step costs 1.6 times a sequence's share, so even
    // alpha 0.6 does not pay (E(1) / cost(1) = 1.6 / (0.0625 + 0.1) < 1 / 0.0625).
    EXPECT_EQ(best_length(0.6, 1.0 / 16, 0.1, 8), 0);
    // Dear nodes (a CPU verifying each one at 40% of a step): short drafts even at alpha 0.8.
    // E = 1.8, 2.44, 2.952 over 1.4, 1.8, 2.2: 1.286, 1.356, 1.342: k = 2.
    EXPECT_EQ(best_length(0.8, 1.0, 0.4, 8), 2);
}

TEST(draft_length, the_step_cost_fit_recovers_a_linear_cost_once_it_saw_steps_of_different_sizes) {
    step_cost same_size;
    for (int i = 0; i < 20; ++i) same_size.add(4, 0.03 + 0.008 * 4);
    EXPECT_FALSE(same_size.ready());  // one size only: the per-node cost is unknown

    step_cost fit;
    for (int i = 0; i < 20; ++i) {
        const double n = 1 + i % 4;
        fit.add(n, 0.03 + 0.008 * n);
        EXPECT_EQ(fit.ready(), i >= 7) << i;
    }
    EXPECT_NEAR(fit.fixed(), 0.03, 1e-9);
    EXPECT_NEAR(fit.per_node(), 0.008, 1e-9);
}

TEST(draft_length, acceptance_counts_accepted_positions_over_positions_tried) {
    acceptance a(0.5, 0.0, 1.0);  // no prior, no forgetting
    a.add(3, 4);                  // 3 accepted, the 4th rejected: 3 of 4 tried
    a.add(2, 2);                  // both accepted: 2 of 2
    EXPECT_DOUBLE_EQ(a.alpha(), 5.0 / 6.0);
}

}  // namespace
}  // namespace spec_draft
