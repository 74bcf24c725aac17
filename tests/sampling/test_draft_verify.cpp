// draft_verifier (core/sampling/draft_verify.h) against a fake target whose logits after a prefix are a fixed
// function of the prefix's tokens: greedy takes the longest path the target agrees with, and sampling emits exactly
// the target's distribution (Pearson's chi-square over 200,000 draws, p > 0.001) for chains and trees, with draft
// distributions (siblings independent draws from their q rows) and without (deterministic drafts, distinct or
// repeated siblings), and that the check catches a drafter that misstates its q.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "core/sampling/draft_verify.h"
#include "core/sampling/sampler.h"
#include "tests/sampling/chi_square.h"

namespace troupe {
namespace {

constexpr int32_t n_vocab = 6;

// The fake target's logits after `prefix` (tokens after the context): a hash of the prefix spread over [-2, 2].
std::vector<float> target_logits(const std::vector<int32_t>& prefix) {
    uint64_t h = 0x243f6a8885a308d3ull;
    for (int32_t t : prefix) h = (h ^ static_cast<uint64_t>(t + 1)) * 0x100000001b3ull;
    std::vector<float> row(n_vocab);
    for (int32_t v = 0; v < n_vocab; ++v) {
        uint64_t x = h + static_cast<uint64_t>(v) * 0x9e3779b97f4a7c15ull;
        x = (x ^ (x >> 31)) * 0xbf58476d1ce4e5b9ull;
        x ^= x >> 29;
        row[static_cast<size_t>(v)] = -2.0f + 4.0f * static_cast<float>(x % 10007) / 10006.0f;
    }
    return row;
}

std::vector<double> softmax(const std::vector<float>& logits) {
    double max = logits[0];
    for (float l : logits) max = std::max<double>(max, l);
    std::vector<double> p(logits.size());
    double sum = 0;
    for (size_t i = 0; i < p.size(); ++i) sum += p[i] = std::exp(logits[i] - max);
    for (double& x : p) x /= sum;
    return p;
}

// Greedy sampling parameters (assigned, not a designated initializer that leaves the rest to
// -Wmissing-field-initializers).
sampling_params greedy_params() {
    sampling_params p;
    p.temperature = 0;
    return p;
}

int32_t argmax(const std::vector<float>& row) {
    return static_cast<int32_t>(std::max_element(row.begin(), row.end()) - row.begin());
}

// The tokens on the path from the root to `node` (inclusive; none for -1).
std::vector<int32_t> path_tokens(const draft_tree& tree, int32_t node) {
    std::vector<int32_t> out;
    for (; node >= 0; node = tree.parents[static_cast<size_t>(node)])
        out.push_back(tree.tokens[static_cast<size_t>(node)]);
    return {out.rbegin(), out.rend()};
}

sampling_params plain_sampling(uint64_t seed) {
    sampling_params p;
    p.temperature = 1.0f;
    p.top_k = 0;
    p.top_p = 1.0f;
    p.min_p = 0.0f;
    p.seed = seed;
    return p;
}

// ---- greedy ---------------------------------------------------------------------------------------------------------

TEST(draft_verify_greedy, takes_the_longest_path_the_target_agrees_with_even_through_second_children) {
    // The target's own greedy chain a0 a1 a2 a3.
    std::vector<int32_t> a;
    for (int i = 0; i < 4; ++i) a.push_back(argmax(target_logits(a)));
    auto wrong = [](int32_t t) { return (t + 1) % n_vocab; };
    draft_tree tree;
    tree.tokens = {wrong(a[0]), a[0], wrong(a[1]), a[1], a[2], wrong(a[3])};
    tree.parents = {-1, -1, 1, 1, 3, 4};
    draft_verifier verifier;
    sampler greedy_sampler(greedy_params());
    std::vector<int32_t> history;
    const auto rows = [&](int32_t node) {
        static thread_local std::vector<float> row;
        row = target_logits(path_tokens(tree, node));
        return std::span<const float>(row);
    };
    const draft_verdict v = verifier.verify(tree, rows, greedy_sampler, history);
    EXPECT_EQ(v.path, (std::vector<int32_t>{1, 3, 4}));
    EXPECT_EQ(v.token, a[3]);
    EXPECT_EQ(history, (std::vector<int32_t>{a[0], a[1], a[2]}));
}

TEST(draft_verify_greedy, emits_the_target_token_when_no_root_matches_and_picks_the_first_of_equal_siblings) {
    std::vector<int32_t> a;
    for (int i = 0; i < 2; ++i) a.push_back(argmax(target_logits(a)));
    auto wrong = [](int32_t t) { return (t + 1) % n_vocab; };
    draft_verifier verifier;
    sampler greedy_sampler(greedy_params());
    draft_tree none;
    none.tokens = {wrong(a[0]), wrong(wrong(a[0]))};
    none.parents = {-1, -1};
    draft_tree* current = &none;
    const auto rows = [&](int32_t node) {
        static thread_local std::vector<float> row;
        row = target_logits(path_tokens(*current, node));
        return std::span<const float>(row);
    };
    std::vector<int32_t> history;
    draft_verdict v = verifier.verify(none, rows, greedy_sampler, history);
    EXPECT_TRUE(v.path.empty());
    EXPECT_EQ(v.token, a[0]);

    draft_tree twins;
    twins.tokens = {a[0], a[0], a[1]};
    twins.parents = {-1, -1, 1};  // the second twin has the matching child, but the first twin is taken
    current = &twins;
    history.clear();
    v = verifier.verify(twins, rows, greedy_sampler, history);
    EXPECT_EQ(v.path, (std::vector<int32_t>{0}));
    EXPECT_EQ(v.token, a[1]);
}

// ---- sampling -------------------------------------------------------------------------------------------------------

struct sampling_case {
    const char* name;
    std::vector<int32_t> parents;
    // With q: each node's q row ([n_vocab] weights, normalized here); its token is drawn from it anew at every draw.
    std::vector<std::vector<double>> q;
    // Without q: the fixed tokens of the deterministic drafts.
    std::vector<int32_t> tokens;
};

void PrintTo(const sampling_case& c, std::ostream* os) {
    *os << c.name;
}

class draft_verify_sampling : public ::testing::TestWithParam<sampling_case> {};

// The joint distribution of the first two emitted tokens (a second token that the step did not emit is drawn by
// plain sampling after the first, as the next step would) equals p(t0) p(t1 | t0) of the target.
TEST_P(draft_verify_sampling, emits_the_first_two_tokens_with_the_target_joint_distribution) {
    const sampling_case& c = GetParam();
    constexpr int64_t n_draws = 200000;
    draft_tree tree;
    tree.parents = c.parents;
    tree.tokens = c.tokens;
    const size_t n_nodes = c.parents.size();
    std::vector<std::discrete_distribution<int32_t>> draft_dists;
    if (!c.q.empty()) {
        tree.tokens.assign(n_nodes, 0);
        tree.q.assign(n_nodes * n_vocab, 0.0f);
        for (size_t i = 0; i < n_nodes; ++i) {
            double sum = 0;
            for (double w : c.q[i]) sum += w;
            for (size_t v = 0; v < n_vocab; ++v) tree.q[i * n_vocab + v] = static_cast<float>(c.q[i][v] / sum);
            draft_dists.emplace_back(c.q[i].begin(), c.q[i].end());
        }
    }
    const auto rows = [&](int32_t node) {
        static thread_local std::vector<float> row;
        row = target_logits(path_tokens(tree, node));
        return std::span<const float>(row);
    };

    std::vector<double> observed(n_vocab * n_vocab, 0.0);
    std::mt19937_64 drafter(12345);
    draft_verifier verifier;
    int64_t n_accepted = 0;
    for (int64_t d = 0; d < n_draws; ++d) {
        for (size_t i = 0; i < draft_dists.size(); ++i) tree.tokens[i] = draft_dists[i](drafter);
        sampler smp(plain_sampling(static_cast<uint64_t>(d) + 1));
        std::vector<int32_t> history;
        const draft_verdict v = verifier.verify(tree, rows, smp, history);
        std::vector<int32_t> emitted = history;
        emitted.push_back(v.token);
        n_accepted += static_cast<int64_t>(v.path.size());
        if (emitted.size() < 2) emitted.push_back(smp.sample(target_logits({emitted[0]}), history));
        observed[static_cast<size_t>(emitted[0] * n_vocab + emitted[1])] += 1;
    }
    std::vector<double> expected(n_vocab * n_vocab);
    const std::vector<double> p0 = softmax(target_logits({}));
    for (int32_t a = 0; a < n_vocab; ++a) {
        const std::vector<double> p1 = softmax(target_logits({a}));
        for (int32_t b = 0; b < n_vocab; ++b) expected[static_cast<size_t>(a * n_vocab + b)] = n_draws * p0[a] * p1[b];
    }
    const testing::chi_square_result r = testing::chi_square(observed, expected);
    EXPECT_GT(r.p_value, 0.001) << "chi-square " << r.statistic << " with " << r.dof << " degrees of freedom";
    EXPECT_GT(n_accepted, n_draws / 50) << "the drafts were hardly ever accepted: the case tests little";
}

INSTANTIATE_TEST_SUITE_P(
    trees, draft_verify_sampling,
    ::testing::Values(
        sampling_case{"chain_with_q", {-1, 0, 1}, {{1, 2, 3, 1, 1, 2}, {3, 1, 1, 1, 2, 1}, {1, 1, 1, 1, 1, 1}}, {}},
        // Three siblings from one q row at the root, two below the first, one below the second.
        sampling_case{"siblings_iid_from_one_q",
                      {-1, -1, -1, 0, 0, 1},
                      {{4, 1, 1, 2, 1, 1},
                       {4, 1, 1, 2, 1, 1},
                       {4, 1, 1, 2, 1, 1},
                       {1, 3, 1, 1, 1, 1},
                       {1, 3, 1, 1, 1, 1},
                       {1, 1, 1, 1, 5, 1}},
                      {}},
        // Siblings from different q rows, some with tokens they can never draw.
        sampling_case{
            "siblings_from_different_q_with_zeros",
            {-1, -1, 0, 0, 1},
            {{0, 0, 5, 1, 0, 1}, {1, 1, 1, 1, 1, 1}, {2, 0, 0, 1, 1, 0}, {1, 1, 0, 0, 3, 1}, {0, 1, 1, 1, 1, 0}},
            {}},
        sampling_case{"deterministic_chain", {-1, 0, 1}, {}, {2, 3, 1}},
        sampling_case{"deterministic_distinct_siblings", {-1, -1, -1, 0, 0, 2}, {}, {2, 3, 0, 1, 4, 5}},
        // A repeated sibling is rejected for sure once its twin was (p(x) is 0 then): still exact.
        sampling_case{"deterministic_repeated_siblings", {-1, -1, -1, 1, 1}, {}, {3, 3, 1, 0, 0}}),
    [](const ::testing::TestParamInfo<sampling_case>& info) { return std::string(info.param.name); });

// The check has power: drafts drawn from one distribution but verified as if from another (a drafter that misstates
// its q) emit a distribution the chi-square test rejects.
TEST(draft_verify_sampling_power, a_drafter_that_misstates_its_q_is_caught) {
    constexpr int64_t n_draws = 200000;
    draft_tree tree;
    tree.parents = {-1, -1};
    tree.tokens = {0, 0};
    const std::vector<double> drawn_from = {1, 1, 1, 1, 1, 1};
    const std::vector<float> stated = {0.5f, 0.3f, 0.05f, 0.05f, 0.05f, 0.05f};
    for (int i = 0; i < 2; ++i) tree.q.insert(tree.q.end(), stated.begin(), stated.end());
    std::discrete_distribution<int32_t> draft(drawn_from.begin(), drawn_from.end());
    std::mt19937_64 drafter(99);
    draft_verifier verifier;
    std::vector<double> observed(n_vocab, 0.0);
    for (int64_t d = 0; d < n_draws; ++d) {
        for (int32_t& t : tree.tokens) t = draft(drafter);
        sampler smp(plain_sampling(static_cast<uint64_t>(d) + 1));
        std::vector<int32_t> history;
        const auto rows = [&](int32_t node) {
            static thread_local std::vector<float> row;
            row = target_logits(path_tokens(tree, node));
            return std::span<const float>(row);
        };
        const draft_verdict v = verifier.verify(tree, rows, smp, history);
        observed[static_cast<size_t>(history.empty() ? v.token : history[0])] += 1;
    }
    const std::vector<double> p0 = softmax(target_logits({}));
    std::vector<double> expected(n_vocab);
    for (int32_t t = 0; t < n_vocab; ++t) expected[static_cast<size_t>(t)] = n_draws * p0[static_cast<size_t>(t)];
    EXPECT_LT(testing::chi_square(observed, expected).p_value, 0.001);
}

TEST(chi_square_check, rejects_a_distribution_that_is_slightly_off_and_computes_known_tail_values) {
    // Q(k/2, x/2): the chi-square upper tail; 3.841 is the 5% point for 1 degree of freedom, 18.307 for 10.
    EXPECT_NEAR(testing::gamma_q(0.5, 3.841 / 2), 0.05, 1e-4);
    EXPECT_NEAR(testing::gamma_q(5.0, 18.307 / 2), 0.05, 1e-4);
    // Integer a: Q(a, x) = e^-x sum_{k < a} x^k / k!, on both sides of a + 1 (series and continued fraction).
    for (const auto& [a, x] : std::vector<std::pair<int, double>>{{3, 1.0}, {10, 20.0}, {40, 25.0}, {40, 60.0}}) {
        double term = 1, sum = 0;
        for (int k = 0; k < a; ++k) {
            sum += term;
            term *= x / (k + 1);
        }
        const double closed = std::exp(-x) * sum;
        EXPECT_NEAR(testing::gamma_q(a, x), closed, 1e-9 * std::max(1.0, closed)) << "Q(" << a << ", " << x << ")";
    }
    // 100,000 draws from p tested against a 2% perturbation of p.
    std::mt19937_64 rng(7);
    const std::vector<double> p = {0.3, 0.25, 0.2, 0.15, 0.1};
    std::discrete_distribution<int> draw(p.begin(), p.end());
    std::vector<double> observed(p.size(), 0.0);
    for (int i = 0; i < 100000; ++i) observed[static_cast<size_t>(draw(rng))] += 1;
    std::vector<double> exact(p.size()), off(p.size());
    for (size_t i = 0; i < p.size(); ++i) exact[i] = 100000 * p[i];
    off = exact;
    off[0] *= 1.02;
    off[4] -= exact[0] * 0.02;
    EXPECT_GT(testing::chi_square(observed, exact).p_value, 0.001);
    EXPECT_LT(testing::chi_square(observed, off).p_value, 0.001);
}

}  // namespace
}  // namespace troupe
