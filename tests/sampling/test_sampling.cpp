// Sampler: each method on crafted logits with exact expected outcomes, and the RNG's determinism.
#include <gtest/gtest.h>

#include <cmath>
#include <numeric>
#include <vector>

#include "core/sampling/sampler.h"

namespace troupe {
namespace {

sampling_params plain(float temperature = 1.0f) {
    sampling_params p;
    p.temperature = temperature;
    p.top_k = 0;
    p.top_p = 1.0f;
    p.min_p = 0.0f;
    return p;
}

std::vector<float> dist(const sampling_params& p, const std::vector<float>& logits,
                        const std::vector<int32_t>& history = {}) {
    std::vector<float> probs;
    sampler(p).distribution(logits, history, probs);
    return probs;
}

std::vector<int32_t> kept(const std::vector<float>& probs) {
    std::vector<int32_t> ids;
    for (size_t i = 0; i < probs.size(); ++i) {
        if (probs[i] > 0.0f) ids.push_back(static_cast<int32_t>(i));
    }
    return ids;
}

// A large random-ish vocabulary for the efficiency paths.
std::vector<float> big_logits(size_t n, uint32_t seed) {
    std::mt19937 gen(seed);
    std::normal_distribution<float> nd(0.0f, 3.0f);
    std::vector<float> l(n);
    for (auto& x : l) x = nd(gen);
    return l;
}

TEST(sampler, greedy_picks_the_argmax_and_ties_go_to_the_lower_id) {
    sampler s(plain(0.0f));
    EXPECT_TRUE(s.greedy());
    EXPECT_EQ(s.sample(std::vector<float>{0.1f, 2.0f, -1.0f, 1.9f}, {}), 1);
    EXPECT_EQ(s.sample(std::vector<float>{3.0f, 1.0f, 3.0f}, {}), 0);
    const auto probs = dist(plain(0.0f), {0.1f, 2.0f, -1.0f, 1.9f});
    EXPECT_EQ(probs, (std::vector<float>{0.0f, 1.0f, 0.0f, 0.0f}));
}

TEST(sampler, temperature_one_without_truncation_is_the_softmax) {
    const std::vector<float> logits{1.0f, 2.0f, 3.0f};
    const auto probs = dist(plain(1.0f), logits);
    const double z = std::exp(1.0) + std::exp(2.0) + std::exp(3.0);
    EXPECT_NEAR(probs[0], std::exp(1.0) / z, 1e-6);
    EXPECT_NEAR(probs[1], std::exp(2.0) / z, 1e-6);
    EXPECT_NEAR(probs[2], std::exp(3.0) / z, 1e-6);
}

TEST(sampler, temperature_scales_the_logits_before_the_softmax) {
    const auto probs = dist(plain(0.5f), {0.0f, std::log(2.0f)});
    // logits / 0.5 -> 0, 2 ln 2: probabilities 1/5, 4/5
    EXPECT_NEAR(probs[0], 0.2, 1e-6);
    EXPECT_NEAR(probs[1], 0.8, 1e-6);
}

TEST(sampler, top_k_keeps_exactly_the_k_best) {
    auto p = plain();
    p.top_k = 3;
    const auto probs = dist(p, {0.5f, 4.0f, -2.0f, 3.0f, 2.0f, 1.0f});
    EXPECT_EQ(kept(probs), (std::vector<int32_t>{1, 3, 4}));
    const double z = std::exp(4.0) + std::exp(3.0) + std::exp(2.0);
    EXPECT_NEAR(probs[1], std::exp(4.0) / z, 1e-6);
}

TEST(sampler, top_k_breaks_ties_at_the_boundary_toward_lower_ids) {
    auto p = plain();
    p.top_k = 2;
    EXPECT_EQ(kept(dist(p, {1.0f, 2.0f, 1.0f, 2.0f, 2.0f})), (std::vector<int32_t>{1, 3}));
    EXPECT_EQ(kept(dist(p, {2.0f, 1.0f, 3.0f, 1.0f})), (std::vector<int32_t>{0, 2}));
}

TEST(sampler, top_k_on_a_large_vocabulary_keeps_the_k_largest_logits) {
    const auto logits = big_logits(50000, 1);
    auto p = plain();
    p.top_k = 40;
    const auto ids = kept(dist(p, logits));
    ASSERT_EQ(ids.size(), 40u);
    std::vector<float> sorted = logits;
    std::sort(sorted.begin(), sorted.end(), std::greater<>());
    for (int32_t id : ids) EXPECT_GE(logits[static_cast<size_t>(id)], sorted[39]);
}

TEST(sampler, top_p_keeps_the_smallest_prefix_reaching_p) {
    // probabilities 0.5, 0.25, 0.125, 0.125 (as logits: log p)
    const std::vector<float> logits{std::log(0.125f), std::log(0.5f), std::log(0.125f), std::log(0.25f)};
    struct tcase {
        float top_p;
        std::vector<int32_t> kept;
    };
    for (const auto& c :
         std::vector<tcase>{{0.4f, {1}}, {0.5f, {1}}, {0.6f, {1, 3}}, {0.75f, {1, 3}}, {0.8f, {0, 1, 3}}}) {
        auto p = plain();
        p.top_p = c.top_p;
        const auto probs = dist(p, logits);
        EXPECT_EQ(kept(probs), c.kept) << "top_p " << c.top_p;
    }
    auto p = plain();
    p.top_p = 0.7f;
    const auto probs = dist(p, logits);
    EXPECT_NEAR(probs[1], 2.0 / 3.0, 1e-6);
    EXPECT_NEAR(probs[3], 1.0 / 3.0, 1e-6);
}

TEST(sampler, top_p_on_a_large_vocabulary_matches_a_full_sort) {
    const auto logits = big_logits(32000, 2);
    auto p = plain();
    p.top_p = 0.9f;
    const auto ids = kept(dist(p, logits));
    // Reference: full sort, smallest prefix with mass >= 0.9.
    std::vector<int32_t> order(logits.size());
    std::iota(order.begin(), order.end(), 0);
    std::sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return logits[a] > logits[b]; });
    const float l_max = logits[static_cast<size_t>(order[0])];
    double z = 0.0;
    for (float l : logits) z += std::exp(static_cast<double>(l - l_max));
    double cum = 0.0;
    size_t n = 0;
    while (cum < 0.9 * z) cum += std::exp(static_cast<double>(logits[static_cast<size_t>(order[n++])] - l_max));
    std::vector<int32_t> expected(order.begin(), order.begin() + static_cast<std::ptrdiff_t>(n));
    std::sort(expected.begin(), expected.end());
    EXPECT_GT(n, 256u);  // exercises the growing prefix
    EXPECT_EQ(ids, expected);
}

TEST(sampler, min_p_drops_tokens_below_min_p_times_the_best) {
    // probabilities 0.4, 0.3, 0.2, 0.1; min_p 0.45 keeps p >= 0.18
    const std::vector<float> logits{std::log(0.4f), std::log(0.3f), std::log(0.2f), std::log(0.1f)};
    auto p = plain();
    p.min_p = 0.45f;
    auto probs = dist(p, logits);
    EXPECT_EQ(kept(probs), (std::vector<int32_t>{0, 1, 2}));
    EXPECT_NEAR(probs[0], 0.4 / 0.9, 1e-6);
    p.min_p = 0.8f;
    EXPECT_EQ(kept(dist(p, logits)), (std::vector<int32_t>{0}));
}

TEST(sampler, truncations_compose_in_the_documented_order) {
    // top-k 3 -> {0.4, 0.3, 0.2} renormalized to {4/9, 3/9, 2/9}; top-p 0.7 keeps {4/9, 3/9};
    // then min-p 0.8 keeps only p >= 0.8 * 4/9, i.e. the first.
    const std::vector<float> logits{std::log(0.4f), std::log(0.3f), std::log(0.2f), std::log(0.1f)};
    auto p = plain();
    p.top_k = 3;
    p.top_p = 0.7f;
    EXPECT_EQ(kept(dist(p, logits)), (std::vector<int32_t>{0, 1}));
    p.min_p = 0.8f;
    EXPECT_EQ(kept(dist(p, logits)), (std::vector<int32_t>{0}));
    // Without top-k the top-p mass is relative to all four: 0.4 + 0.3 = 0.7 reaches 0.7 as well.
    p.top_k = 0;
    p.min_p = 0.0f;
    p.top_p = 0.75f;
    EXPECT_EQ(kept(dist(p, logits)), (std::vector<int32_t>{0, 1, 2}));
}

TEST(sampler, repetition_penalty_divides_positive_and_multiplies_negative_logits) {
    auto p = plain(0.0f);
    p.repetition_penalty = 2.0f;
    // token 0: 3 -> 1.5 (below token 1's 2.0); token 2: -1 -> -2
    sampler s(p);
    const std::vector<float> logits{3.0f, 2.0f, -1.0f};
    EXPECT_EQ(s.sample(logits, {}), 0);
    EXPECT_EQ(s.sample(logits, std::vector<int32_t>{0, 2}), 1);
    auto q = plain(1.0f);
    q.repetition_penalty = 2.0f;
    const auto probs = dist(q, {3.0f, 2.0f, -1.0f}, {0, 2});
    const double z = std::exp(1.5) + std::exp(2.0) + std::exp(-2.0);
    EXPECT_NEAR(probs[0], std::exp(1.5) / z, 1e-6);
    EXPECT_NEAR(probs[2], std::exp(-2.0) / z, 1e-6);
}

TEST(sampler, frequency_penalty_grows_with_the_count_and_presence_penalty_does_not) {
    const std::vector<float> logits{5.0f, 4.0f};
    const std::vector<int32_t> history{0, 0, 0};
    auto f = plain(0.0f);
    f.frequency_penalty = 0.5f;  // 5 - 3 * 0.5 = 3.5 < 4
    EXPECT_EQ(sampler(f).sample(logits, history), 1);
    f.frequency_penalty = 0.3f;  // 5 - 0.9 = 4.1 > 4
    EXPECT_EQ(sampler(f).sample(logits, history), 0);
    auto pr = plain(0.0f);
    pr.presence_penalty = 0.9f;  // 5 - 0.9 = 4.1 regardless of the count
    EXPECT_EQ(sampler(pr).sample(logits, history), 0);
    pr.presence_penalty = 1.1f;
    EXPECT_EQ(sampler(pr).sample(logits, history), 1);
}

TEST(sampler, penalties_only_look_at_the_last_n_tokens) {
    const std::vector<float> logits{5.0f, 4.0f};
    const std::vector<int32_t> history{0, 1, 1};
    auto p = plain(0.0f);
    p.presence_penalty = 2.0f;
    p.penalty_last_n = 2;  // sees {1, 1}: token 1 -> 2
    EXPECT_EQ(sampler(p).sample(logits, history), 0);
    p.penalty_last_n = -1;  // sees everything: 3 vs 2
    EXPECT_EQ(sampler(p).sample(logits, history), 0);
    p.penalty_last_n = 3;
    p.presence_penalty = 0.0f;
    p.frequency_penalty = 1.0f;  // 5 - 1 = 4, 4 - 2 = 2
    EXPECT_EQ(sampler(p).sample(logits, history), 0);
    p.penalty_last_n = 0;  // off
    p.frequency_penalty = 100.0f;
    EXPECT_EQ(sampler(p).sample(logits, history), 0);
}

TEST(sampler, draws_follow_the_distribution_within_statistical_bounds) {
    // temperature 2 over logits (0, ln 4, ln 16): probabilities 1/7, 2/7, 4/7
    auto p = plain(2.0f);
    p.seed = 1234;
    sampler s(p);
    const std::vector<float> logits{0.0f, std::log(4.0f), std::log(16.0f)};
    constexpr int n = 70000;
    std::vector<int> counts(3, 0);
    for (int i = 0; i < n; ++i) counts[static_cast<size_t>(s.sample(logits, {}))]++;
    const double expected[3] = {1.0 / 7, 2.0 / 7, 4.0 / 7};
    for (int i = 0; i < 3; ++i) {
        const double sd = std::sqrt(n * expected[i] * (1 - expected[i]));
        EXPECT_NEAR(counts[static_cast<size_t>(i)], n * expected[i], 5 * sd) << "token " << i;
    }
}

TEST(sampler, the_same_seed_gives_the_same_sequence_and_different_seeds_differ) {
    const auto logits = big_logits(1000, 3);
    auto run = [&](uint64_t seed) {
        auto p = plain(1.0f);
        p.seed = seed;
        p.top_k = 100;
        sampler s(p);
        std::vector<int32_t> out;
        for (int i = 0; i < 64; ++i) out.push_back(s.sample(logits, out));
        return out;
    };
    EXPECT_EQ(run(42), run(42));
    EXPECT_NE(run(42), run(43));
}

TEST(sampler, sample_equals_draw_from_distribution_with_the_same_rng_state) {
    const auto logits = big_logits(5000, 4);
    auto p = plain(0.9f);
    p.top_k = 50;
    p.top_p = 0.9f;
    p.min_p = 0.01f;
    p.seed = 9;
    sampler a(p), b(p);
    std::vector<int32_t> history{1, 2, 3};
    std::vector<float> probs;
    for (int i = 0; i < 200; ++i) {
        b.distribution(logits, history, probs);
        EXPECT_EQ(a.sample(logits, history), b.draw(probs)) << "draw " << i;
    }
}

TEST(sampler, distribution_sums_to_one_for_every_setting) {
    const auto logits = big_logits(32000, 5);
    struct tcase {
        float temperature;
        int32_t top_k;
        float top_p, min_p;
    };
    for (const auto& c : std::vector<tcase>{{1.0f, 0, 1.0f, 0.0f},
                                            {0.7f, 40, 0.95f, 0.05f},
                                            {1.3f, 0, 0.5f, 0.0f},
                                            {0.0f, 40, 0.9f, 0.0f},
                                            {2.0f, 0, 1.0f, 0.2f},
                                            {1.0f, 1, 1.0f, 0.0f}}) {
        sampling_params p;
        p.temperature = c.temperature;
        p.top_k = c.top_k;
        p.top_p = c.top_p;
        p.min_p = c.min_p;
        p.frequency_penalty = 0.2f;
        const auto probs = dist(p, logits, {5, 6, 7});
        const double sum = std::accumulate(probs.begin(), probs.end(), 0.0);
        EXPECT_NEAR(sum, 1.0, 1e-5) << "temperature " << c.temperature << " top_k " << c.top_k;
        for (float x : probs) ASSERT_GE(x, 0.0f);
    }
}

TEST(sampler, masked_logits_are_never_drawn) {
    const float ninf = -std::numeric_limits<float>::infinity();
    auto p = plain(1.0f);
    sampler s(p);
    for (int i = 0; i < 100; ++i) EXPECT_EQ(s.sample(std::vector<float>{ninf, 0.0f, ninf}, {}), 1);
}

TEST(sampler, uniform_is_in_the_unit_interval_and_reproducible) {
    sampling_params p;
    p.seed = 77;
    sampler a(p), b(p);
    for (int i = 0; i < 1000; ++i) {
        const float u = a.uniform();
        EXPECT_GE(u, 0.0f);
        EXPECT_LT(u, 1.0f);
        EXPECT_EQ(u, b.uniform());
    }
}

}  // namespace
}  // namespace troupe
