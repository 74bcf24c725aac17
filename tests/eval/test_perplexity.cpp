// core/eval/perplexity: windows, per-token NLL and the error bar against values computed by hand.
#include <gtest/gtest.h>

#include <cmath>
#include <numeric>
#include <string>
#include <vector>

#include "core/eval/perplexity.h"

namespace troupe::eval {
namespace {

TEST(perplexity, windows_are_whole_non_overlapping_and_score_their_second_half_less_the_last_token) {
    struct tcase {
        int64_t n_tokens;
        int32_t n_ctx;
        int32_t n_windows, first, n_scored_per_window;
        int64_t n_scored;
    };
    const tcase cases[] = {
        {1000, 256, 3, 128, 127, 381},  // the trailing 232 tokens are left out
        {512, 256, 2, 128, 127, 254},  {8, 4, 2, 2, 1, 2}, {9, 5, 1, 2, 2, 2}, {9999, 512, 19, 256, 255, 19 * 255},
    };
    for (const auto& c : cases) {
        SCOPED_TRACE(std::to_string(c.n_tokens) + " tokens, windows of " + std::to_string(c.n_ctx));
        auto plan = plan_windows(c.n_tokens, c.n_ctx);
        ASSERT_TRUE(plan.ok()) << plan.message();
        EXPECT_EQ(plan->n_ctx, c.n_ctx);
        EXPECT_EQ(plan->n_windows, c.n_windows);
        EXPECT_EQ(plan->first, c.first);
        EXPECT_EQ(plan->n_scored_per_window(), c.n_scored_per_window);
        EXPECT_EQ(plan->n_scored(), c.n_scored);
    }
}

TEST(perplexity, a_text_or_window_that_cannot_give_an_error_bar_is_refused_with_what_would_be_right) {
    struct tcase {
        int64_t n_tokens;
        int32_t n_ctx;
        std::string message_part;
    };
    const tcase cases[] = {
        {255, 256, "the text is 255 tokens, shorter than one window of 256"},
        {0, 256, "shorter than one window"},
        {100, 3, "must be at least 4"},
        {100, 1, "must be at least 4"},
        {100, -5, "must be at least 4"},
        {7, 4, "score 1 token(s), the error bar needs at least 2"},  // one window of 4 scores one token
    };
    for (const auto& c : cases) {
        SCOPED_TRACE(std::to_string(c.n_tokens) + " tokens, windows of " + std::to_string(c.n_ctx));
        auto plan = plan_windows(c.n_tokens, c.n_ctx);
        ASSERT_FALSE(plan.ok());
        EXPECT_NE(plan.message().find(c.message_part), std::string::npos) << plan.message();
    }
}

TEST(perplexity, a_window_is_its_slice_of_the_text_with_bos_in_place_of_its_first_token) {
    std::vector<int32_t> tokens(10);
    std::iota(tokens.begin(), tokens.end(), 100);  // 100 .. 109
    auto plan = plan_windows(static_cast<int64_t>(tokens.size()), 4);
    ASSERT_TRUE(plan.ok());
    struct tcase {
        int32_t w, bos;
        std::vector<int32_t> expected;
    };
    const tcase cases[] = {
        {0, 1, {1, 101, 102, 103}},
        {1, 1, {1, 105, 106, 107}},
        {1, -1, {104, 105, 106, 107}},  // a vocabulary without BOS keeps the text's token
    };
    for (const auto& c : cases) {
        EXPECT_EQ(window_tokens(tokens, *plan, c.w, c.bos), c.expected) << "window " << c.w << ", bos " << c.bos;
    }
}

TEST(perplexity, a_window_runs_in_steps_of_at_most_the_token_budget_with_logits_only_for_the_scored_half) {
    struct tcase {
        int32_t n_ctx, max_tokens;
        std::vector<window_chunk> expected;
    };
    const tcase cases[] = {
        {256, 2048, {{0, 128, false}, {128, 256, true}}},
        {256, 128, {{0, 128, false}, {128, 256, true}}},
        {10, 3, {{0, 3, false}, {3, 5, false}, {5, 8, true}, {8, 10, true}}},
        {5, 1, {{0, 1, false}, {1, 2, false}, {2, 3, true}, {3, 4, true}, {4, 5, true}}},
    };
    for (const auto& c : cases) {
        SCOPED_TRACE("window " + std::to_string(c.n_ctx) + ", budget " + std::to_string(c.max_tokens));
        auto plan = plan_windows(c.n_ctx, c.n_ctx);
        ASSERT_TRUE(plan.ok()) << plan.message();
        const auto chunks = window_chunks(*plan, c.max_tokens);
        ASSERT_EQ(chunks.size(), c.expected.size());
        for (size_t i = 0; i < chunks.size(); ++i) {
            EXPECT_EQ(chunks[i].begin, c.expected[i].begin) << "chunk " << i;
            EXPECT_EQ(chunks[i].end, c.expected[i].end) << "chunk " << i;
            EXPECT_EQ(chunks[i].with_logits, c.expected[i].with_logits) << "chunk " << i;
        }
    }
}

TEST(perplexity, token_nll_is_minus_the_log_softmax_of_the_token) {
    struct tcase {
        std::vector<float> logits;
        int32_t token;
        double nll;  // by hand: log Σ exp(l) - l[token]
    };
    const tcase cases[] = {
        {{0, 0, 0, 0}, 2, std::log(4.0)},
        {{1, 2, 3}, 2, std::log(1 + std::exp(-1.0) + std::exp(-2.0))},  // 0.40760596444438
        {{1, 2, 3}, 0, 2 + std::log(1 + std::exp(-1.0) + std::exp(-2.0))},
        {{-2, 0.5f}, 0, 2.5 + std::log(1 + std::exp(-2.5))},  // 2.57888973429255
        {{1000, 0}, 1, 1000.0},                               // no overflow: the maximum is subtracted first
        {{1000, 0}, 0, 0.0},
    };
    for (const auto& c : cases) {
        EXPECT_NEAR(token_nll(c.logits, c.token), c.nll, 1e-12) << "token " << c.token;
    }
}

TEST(perplexity, ppl_is_exp_of_the_mean_nll_and_its_error_is_ppl_times_the_standard_error_of_the_mean) {
    struct tcase {
        std::vector<double> nlls;
        double ppl, error;  // by hand
    };
    const tcase cases[] = {
        // mean 1, sample variance ((0.5² + 0.5² + 1²) / 2) = 0.75, standard error sqrt(0.75 / 3) = 0.5
        {{0.5, 0.5, 2.0}, std::exp(1.0), std::exp(1.0) * 0.5},
        // mean 2.5, sample variance 5/3, standard error sqrt(5/12)
        {{1, 2, 3, 4}, std::exp(2.5), std::exp(2.5) * std::sqrt(5.0 / 12.0)},  // 12.18249396, 7.86376604
        {{0.7, 0.7}, std::exp(0.7), 0.0},
    };
    for (const auto& c : cases) {
        nll_accumulator acc;
        for (double x : c.nlls) acc.add(x);
        EXPECT_EQ(acc.count(), static_cast<int64_t>(c.nlls.size()));
        EXPECT_NEAR(acc.ppl(), c.ppl, 1e-12 * c.ppl);
        EXPECT_NEAR(acc.ppl_error(), c.error, 1e-12 * c.ppl);
    }
    nll_accumulator one;
    one.add(1.0);
    EXPECT_TRUE(std::isnan(one.ppl_error())) << "one value has no spread";
}

TEST(perplexity, uniform_logits_give_the_vocabulary_size_as_perplexity) {
    const std::vector<float> logits(37, 0.25f);
    nll_accumulator acc;
    for (int32_t t = 0; t < 37; ++t) acc.add(token_nll(logits, t));
    EXPECT_NEAR(acc.ppl(), 37.0, 1e-9);
    EXPECT_NEAR(acc.ppl_error(), 0.0, 1e-9);
}

}  // namespace
}  // namespace troupe::eval
