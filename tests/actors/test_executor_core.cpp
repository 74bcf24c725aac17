// The executor's core on the fake model: steps, per-request samplers, draft verification.
#include <gtest/gtest.h>

#include <boost/json.hpp>

#include <cmath>

#include "actors/executor/executor_core.h"
#include "core/sampling/grammar/json_schema_grammar.h"
#include "tests/actors/fakes.h"
#include "tests/common/fn_speculator.h"

namespace troupe {
namespace {

using testing::fake_id;
using testing::fake_model_runner;

step_sequence seq(int64_t id, std::vector<int32_t> tokens, int32_t pos0, sampling_params p, int32_t max_draft = 0,
                  int32_t block = 0) {
    step_sequence s;
    s.seq_id = id;
    s.tokens = std::move(tokens);
    s.pos0 = pos0;
    s.block_table = std::make_shared<const std::vector<int32_t>>(std::vector<int32_t>{block});
    s.params = std::make_shared<const sampling_params>(p);
    s.max_draft = max_draft;
    return s;
}

sampling_params greedy() {
    sampling_params p;
    p.temperature = 0;
    return p;
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

TEST(executor_core, greedy_drafts_are_accepted_while_they_match_and_a_bonus_token_follows) {
    struct case_t {
        std::vector<int32_t> drafts;
        std::vector<int32_t> tokens;
        int32_t n_accepted;
    };
    const int32_t c = fake_id('c'), d = fake_id('d'), e = fake_id('e'), f = fake_id('f'), q = fake_id('q');
    for (const auto& t :
         std::vector<case_t>{{{c, d, e}, {c, d, e, f}, 3}, {{c, q, e}, {c, d}, 1}, {{q}, {c}, 0}, {{}, {c}, 0}}) {
        auto drafts = t.drafts;
        executor_core ex(
            std::make_shared<fake_model_runner>(),
            testing::speculator_from([drafts](int64_t, std::span<const int32_t>, int32_t) { return drafts; }));
        step_plan plan{1, {seq(7, testing::fake_ids("ab"), 0, greedy(), 4)}};
        step_done done = ex.run(plan);
        ASSERT_TRUE(done.error.empty()) << done.error;
        EXPECT_EQ(done.results[0].tokens, t.tokens);
        EXPECT_EQ(done.results[0].n_accepted, t.n_accepted);
        EXPECT_EQ(done.results[0].n_drafted, static_cast<int32_t>(t.drafts.size()));
    }
}

TEST(executor_core, drafts_beyond_max_draft_or_the_vocabulary_are_cut) {
    executor_core ex(std::make_shared<fake_model_runner>(),
                     testing::speculator_from([](int64_t, std::span<const int32_t>, int32_t) {
                         return std::vector<int32_t>{fake_id('c'), fake_id('d'), 5000, fake_id('f')};
                     }));
    step_done d1 = ex.run({1, {seq(1, testing::fake_ids("ab"), 0, greedy(), 1)}});
    EXPECT_EQ(d1.results[0].n_drafted, 1);
    step_done d2 = ex.run({2, {seq(2, testing::fake_ids("ab"), 0, greedy(), 4, 1)}});
    EXPECT_EQ(d2.results[0].n_drafted, 2);
    EXPECT_EQ(d2.results[0].tokens, (std::vector<int32_t>{fake_id('c'), fake_id('d'), fake_id('e')}));
}

// Rejection sampling with a deterministic draft must leave the first token's distribution exactly p.
TEST(executor_core, rejection_sampling_keeps_the_target_distribution) {
    auto runner = std::make_shared<fake_model_runner>();
    runner->keep_batches(false);
    // p for the row after BOS, as the sampler sees it.
    forward_output out;
    forward_batch b;
    b.seqs.push_back({0, {testing::k_fake_bos}, 0, {0}, false});
    ASSERT_TRUE(runner->forward(b, out).ok());
    sampler ref(plain_sampling(0));
    std::vector<float> p;
    ref.distribution(out.row(0), std::vector<int32_t>{testing::k_fake_bos}, p);

    for (int32_t draft : {fake_id('a'), fake_id('k')}) {  // a likely and an unlikely draft
        executor_core ex(runner, testing::speculator_from([draft](int64_t, std::span<const int32_t>, int32_t) {
                             return std::vector<int32_t>{draft};
                         }));
        const int n = 20000;
        std::vector<int> counts(testing::k_fake_vocab, 0);
        int n_accepted = 0;
        for (int i = 0; i < n; ++i) {
            step_done d = ex.run({i, {seq(i, {testing::k_fake_bos}, 0, plain_sampling(1000 + i), 1)}});
            ASSERT_TRUE(d.error.empty());
            counts[d.results[0].tokens[0]]++;
            n_accepted += d.results[0].n_accepted;
            ex.retire({i});
        }
        // Bins with enough mass to be tested one by one: 'a', the draft, and the other tokens grouped
        // by their logit (13 levels). A wrong rejection rule moves mass into or out of the draft's bin.
        std::vector<double> expected(15, 0.0), seen(15, 0.0);
        for (int v = 0; v < testing::k_fake_vocab; ++v) {
            const size_t bin = v == fake_id('a') ? 13 : v == draft ? 14 : static_cast<size_t>((v * 7) % 13);
            expected[bin] += p[v];
            seen[bin] += counts[v] / double(n);
        }
        for (size_t bin = 0; bin < expected.size(); ++bin) {
            const double sigma = std::sqrt(expected[bin] * (1 - expected[bin]) / n);
            EXPECT_NEAR(seen[bin], expected[bin], 4.5 * sigma + 1e-9) << "draft " << draft << ", bin " << bin;
        }
        EXPECT_NEAR(n_accepted / double(n), p[draft], 0.02) << "acceptance is p(draft)";
        EXPECT_EQ(ex.n_sequences(), 0u);
    }
}

TEST(executor_core, each_sequence_samples_with_its_own_seed_whatever_the_batch) {
    auto sample_alone = [](uint64_t seed) {
        executor_core ex(std::make_shared<fake_model_runner>());
        return ex.run({1, {seq(1, testing::fake_ids("ab"), 0, plain_sampling(seed))}}).results[0].tokens;
    };
    executor_core ex(std::make_shared<fake_model_runner>());
    step_done d = ex.run({1,
                          {seq(1, testing::fake_ids("ab"), 0, plain_sampling(11), 0, 0),
                           seq(2, testing::fake_ids("ab"), 0, plain_sampling(22), 0, 1),
                           seq(3, testing::fake_ids("ab"), 0, plain_sampling(11), 0, 2)}});
    EXPECT_EQ(d.results[0].tokens, sample_alone(11));
    EXPECT_EQ(d.results[1].tokens, sample_alone(22));
    EXPECT_EQ(d.results[2].tokens, d.results[0].tokens);
}

TEST(executor_core, a_failed_forward_or_a_gap_in_positions_fails_the_step) {
    executor_core ex(std::make_shared<fake_model_runner>());
    step_sequence s = seq(1, testing::fake_ids("ab"), 0, greedy());
    s.block_table = std::make_shared<const std::vector<int32_t>>();
    step_done d = ex.run({4, {s}});
    EXPECT_EQ(d.step_id, 4);
    EXPECT_EQ(d.error, "fake model: sequence 1 has blocks for 0 positions, needs 3");
    step_done gap = ex.run({5, {seq(2, {fake_id('x')}, 5, greedy())}});
    EXPECT_EQ(gap.error, "sequence 2 starts at position 5 but the executor knows only 0 positions");
}

TEST(executor_core, a_step_after_a_prefix_hit_learns_the_cached_tokens_from_its_context) {
    std::vector<int32_t> seen;
    executor_core ex(std::make_shared<fake_model_runner>(),
                     testing::speculator_from([&](int64_t, std::span<const int32_t> history, int32_t) {
                         seen.assign(history.begin(), history.end());
                         return std::vector<int32_t>{};
                     }));
    const auto ids = testing::fake_ids("abc");  // BOS a b c: positions 0..2 cached, c runs at 3
    step_sequence q = seq(9, {ids[3]}, 3, greedy(), 2);
    step_plan plan{1, {q}};
    EXPECT_NE(ex.run(plan).error, "");  // without the context the executor knows no position 0..2
    q.context = std::make_shared<const std::vector<int32_t>>(ids.begin(), ids.begin() + 3);
    plan = {2, {q}};
    step_done d = ex.run(plan);
    ASSERT_EQ(d.error, "");
    EXPECT_EQ(seen, ids);  // the draft proposer (and the penalties) see the whole history
}

// response_format: a sequence with a grammar samples only what it allows (the fake model would rather
// continue "cdef..."), ends with EOS once the value is complete, and gets no drafts (a draft is not
// checked against the grammar).
TEST(executor_core, a_constrained_sequence_samples_only_what_its_grammar_allows_and_is_not_drafted) {
    std::vector<std::string> pieces(testing::k_fake_vocab);
    for (int b = 0; b < 256; ++b)
        pieces[static_cast<size_t>(fake_id(static_cast<char>(b)))] = std::string(1, static_cast<char>(b));
    auto vocab = std::make_shared<const grammar::vocab_index>(pieces, std::vector<int32_t>{testing::k_fake_eos});
    auto schema = grammar::json_schema_grammar(boost::json::parse(R"({"enum": ["xy", "cd"]})"));
    ASSERT_TRUE(schema.ok()) << schema.message();
    sampling_params p = greedy();
    p.constraint = std::make_shared<const grammar::token_constraint>(std::move(*schema), vocab);
    executor_core ex(std::make_shared<fake_model_runner>(),
                     testing::speculator_from([](int64_t, std::span<const int32_t>, int32_t) {
                         return std::vector<int32_t>{fake_id('z'), fake_id('z')};
                     }));
    std::vector<int32_t> inputs = testing::fake_ids("ab");
    int32_t pos = 0;
    std::string text;
    bool ended = false;
    for (int64_t step = 1; step < 40 && !ended; ++step) {
        step_plan plan{step, {seq(7, inputs, pos, p, 2)}};
        step_done done = ex.run(plan);
        ASSERT_TRUE(done.error.empty()) << done.error;
        ASSERT_EQ(done.results[0].tokens.size(), 1u);
        EXPECT_EQ(done.results[0].n_drafted, 0);
        const int32_t t = done.results[0].tokens[0];
        pos += static_cast<int32_t>(inputs.size());
        inputs = {t};
        if (t == testing::k_fake_eos) {
            ended = true;
        } else {
            text += pieces[static_cast<size_t>(t)];
        }
    }
    ASSERT_TRUE(ended) << text;
    const std::string value = text.substr(std::min(text.find('"'), text.size()));
    EXPECT_TRUE(value == "\"cd\"" || value == "\"xy\"") << text;
    EXPECT_EQ(text.find_first_not_of(" \t\n"), text.find('"')) << text;
}

}  // namespace
}  // namespace troupe
