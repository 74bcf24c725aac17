// The engine's serving features on the fake model (whose cache is written and read through the block
// tables, so a wrongly shared or lost block shows up as wrong text): prefix caching, preemption under
// a small pool, the static policy, logprobs, snapshot() and drain().
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "actors/engine/engine.h"
#include "actors/engine/engine_params_from.h"
#include "core/runtime/lane.h"
#include "tests/actors/fakes.h"
#include "tests/actors/sink_recorder.h"

namespace troupe {
namespace {

using testing::fake_id;
using testing::fake_model_params;
using testing::fake_model_runner;
using testing::greedy;
using testing::record_into;
using testing::sink_record;

fake_model_params paged(int32_t n_blocks, int32_t block_size = 4) {
    fake_model_params m;
    m.n_ctx = 64;
    m.block_size = block_size;
    m.n_blocks = n_blocks;
    return m;
}

struct manual_engine {
    explicit manual_engine(engine_params params = {}, fake_model_params model = paged(64))
        : runner(std::make_shared<fake_model_runner>(model)),
          eng(engine_parts{runner, std::make_shared<testing::fake_codec>(), {}}, params, lane_) {
        EXPECT_TRUE(eng.start().ok());
    }
    std::shared_ptr<sink_record> submit(std::string prompt, sampling_params p, int32_t logprobs = -1,
                                        request_sink* out_sink = nullptr) {
        auto r = std::make_shared<sink_record>();
        request q{std::move(prompt), std::move(p), std::nullopt};
        q.logprobs = logprobs;
        request_sink s = out_sink ? *out_sink : record_into(r);
        auto id = eng.submit(std::move(q), s);
        EXPECT_TRUE(id.ok()) << id.message();
        return r;
    }
    void run() { lane_.run_until_idle(); }

    lane lane_{"test"};
    std::shared_ptr<fake_model_runner> runner;
    engine eng;
};

// The fake continues each byte with the next one: "abcdefghij" -> "klmn...".
TEST(engine_serving, a_repeated_prompt_is_served_from_shared_blocks_with_the_same_text) {
    manual_engine e;
    auto first = e.submit("abcdefghij", greedy(6));  // 11 tokens with BOS: 2 whole blocks of 4 cached
    e.run();
    auto second = e.submit("abcdefghij", greedy(6));
    auto other = e.submit("abcdeXYZab", greedy(3));  // shares the first block only
    e.run();
    EXPECT_EQ(first->text, "klmnop");
    EXPECT_EQ(second->text, "klmnop");
    EXPECT_EQ(other->text, "cde");
    const engine_snapshot s = e.eng.snapshot();
    EXPECT_EQ(s.kv.n_prefix_queries, 6);
    EXPECT_EQ(s.kv.n_prefix_hits, 2 + 1);
    EXPECT_NEAR(s.kv.prefix_hit_rate, 0.5, 1e-9);
    // The second request ran only its last prompt token (at pos0 8) in its first step.
    bool found = false;
    for (const auto& b : e.runner->batches()) {
        for (const auto& q : b.seqs) {
            if (q.pos0 == 8 && q.tokens == std::vector<int32_t>{fake_id('h'), fake_id('i'), fake_id('j')}) found = true;
        }
    }
    EXPECT_TRUE(found);
}

TEST(engine_serving, a_pool_too_small_for_all_requests_preempts_and_every_text_equals_the_text_alone) {
    const std::vector<std::string> prompts = {"abcd", "mnop", "stuv", "efgh"};
    std::vector<std::string> alone;
    for (const auto& p : prompts) {
        manual_engine e;
        auto r = e.submit(p, greedy(14));
        e.run();
        alone.push_back(r->text);
    }
    for (bool caching : {false, true}) {
        engine_params params;
        params.prefix_caching = caching;
        manual_engine e(params, paged(10));  // 40 positions; the four need 4 x 19
        std::vector<std::shared_ptr<sink_record>> rs;
        for (const auto& p : prompts) rs.push_back(e.submit(p, greedy(14)));
        e.run();
        for (size_t i = 0; i < prompts.size(); ++i) {
            EXPECT_FALSE(rs[i]->error) << *rs[i]->error;
            EXPECT_EQ(rs[i]->text, alone[i]) << prompts[i];
        }
        EXPECT_GT(e.eng.stats().n_preemptions, 0);
        EXPECT_EQ(e.eng.snapshot().kv.n_used, 0);
    }
}

TEST(engine_serving, swap_preemption_on_a_runner_with_device_memory_gives_the_same_texts) {
    const std::vector<std::string> prompts = {"abcd", "mnop", "stuv", "efgh"};
    std::vector<std::string> alone;
    for (const auto& p : prompts) {
        manual_engine e;
        auto r = e.submit(p, greedy(14));
        e.run();
        alone.push_back(r->text);
    }
    engine_params params;
    params.preemption = preemption_mode::swap;
    params.prefix_caching = false;  // every resumption must come from the swapped rows
    fake_model_params m = paged(10);
    m.separate_memory = true;
    manual_engine e(params, m);
    std::vector<std::shared_ptr<sink_record>> rs;
    for (const auto& p : prompts) rs.push_back(e.submit(p, greedy(14)));
    e.run();
    for (size_t i = 0; i < prompts.size(); ++i) {
        EXPECT_FALSE(rs[i]->error) << *rs[i]->error;
        EXPECT_EQ(rs[i]->text, alone[i]) << prompts[i];
    }
    EXPECT_GT(e.runner->n_swaps_out(), 0);
    EXPECT_EQ(e.runner->n_swaps_in(), e.runner->n_swaps_out());
    EXPECT_EQ(e.runner->n_host_copies(), 0u);
    EXPECT_EQ(e.eng.stats().n_preemptions, e.runner->n_swaps_out());
    // No recompute: every prompt token ran exactly once.
    int32_t n_prompt_rows = 0;
    for (const auto& b : e.runner->batches())
        for (const auto& q : b.seqs)
            if (q.tokens.size() > 1) n_prompt_rows += static_cast<int32_t>(q.tokens.size());
    EXPECT_EQ(n_prompt_rows, 4 * 5);
}

TEST(engine_serving, the_static_policy_gives_the_same_text_in_more_steps) {
    const std::vector<std::pair<std::string, int32_t>> work = {{"ab", 2}, {"mn", 12}, {"st", 3}, {"xy", 1}};
    int64_t steps[2] = {0, 0};
    std::vector<std::string> texts[2];
    for (int k = 0; k < 2; ++k) {
        engine_params params;
        params.max_running = 2;
        params.policy = k == 0 ? batching_policy::continuous : batching_policy::static_batch;
        manual_engine e(params);
        std::vector<std::shared_ptr<sink_record>> rs;
        for (const auto& [p, n] : work) rs.push_back(e.submit(p, greedy(n)));
        e.run();
        for (auto& r : rs) texts[k].push_back(r->text);
        steps[k] = e.eng.stats().n_steps;
    }
    EXPECT_EQ(texts[0], texts[1]);
    // Continuous: "st" and "xy" take the slot "ab" frees; static: they wait for "mn"'s 12 tokens.
    EXPECT_EQ(steps[0], 12);
    EXPECT_EQ(steps[1], 12 + 3);
}

TEST(engine_serving, logprobs_reach_the_sink_before_the_text_of_their_token) {
    manual_engine e;
    std::vector<std::string> events;
    std::vector<token_logprobs> lps;
    request_sink s;
    s.on_text = [&](std::string_view d) { events.push_back("text " + std::string(d)); };
    s.on_logprobs = [&](const token_logprobs& lp) {
        events.push_back("logprobs " + lp.piece);
        lps.push_back(lp);
    };
    s.on_done = [&](finish_reason, const usage&, const timings&) { events.push_back("done"); };
    e.submit("ab", greedy(2), 3, &s);
    e.run();
    EXPECT_EQ(events, (std::vector<std::string>{"logprobs c", "text c", "logprobs d", "text d", "done"}));
    ASSERT_EQ(lps.size(), 2u);
    EXPECT_EQ(lps[0].token, fake_id('c'));
    ASSERT_EQ(lps[0].top.size(), 3u);
    EXPECT_EQ(lps[0].top[0].first, fake_id('c'));
    EXPECT_FLOAT_EQ(lps[0].top[0].second, lps[0].logprob);
    EXPECT_GE(lps[0].top[0].second, lps[0].top[1].second);
    EXPECT_GE(lps[0].top[1].second, lps[0].top[2].second);
    // The fake's row for position 2 (the prompt's last token), log-softmaxed here in double.
    std::vector<double> row(testing::k_fake_vocab);
    for (int32_t v = 0; v < testing::k_fake_vocab; ++v) row[v] = -1.0 + 0.01 * ((v * 7 + 2) % 13);
    row[fake_id('c')] += 4.0;
    double z = 0;
    for (double l : row) z += std::exp(l);
    EXPECT_NEAR(lps[0].logprob, row[fake_id('c')] - std::log(z), 1e-4);
    std::vector<double> others = row;
    others[fake_id('c')] = -1e9;
    EXPECT_NEAR(lps[0].top[1].second, *std::max_element(others.begin(), others.end()) - std::log(z), 1e-4);

    // Not asked for: on_logprobs is never called.
    int n_calls = 0;
    request_sink quiet;
    quiet.on_logprobs = [&](const token_logprobs&) { n_calls++; };
    e.submit("ab", greedy(2), -1, &quiet);
    e.run();
    EXPECT_EQ(n_calls, 0);
}

TEST(engine_serving, snapshot_reports_requests_blocks_steps_and_latency_percentiles) {
    engine_params params;
    params.max_running = 1;
    manual_engine e(params);
    auto a = e.submit("abcdefgh", greedy(3));
    auto b = e.submit("mn", greedy(2));
    // Run only until the first step is planned: a runs, b waits.
    while (e.runner->batches().empty()) ASSERT_GT(e.lane_.poll_one(), 0u);
    engine_snapshot s = e.eng.snapshot();
    ASSERT_EQ(s.requests.size(), 2u);
    EXPECT_EQ(s.requests[0].state, request_state::prefilling);
    EXPECT_EQ(s.requests[0].n_prompt_tokens, 9);
    EXPECT_EQ(s.requests[0].n_kv_blocks, 3);
    EXPECT_EQ(s.requests[1].state, request_state::waiting);
    EXPECT_EQ(s.requests[1].n_kv_blocks, 0);
    EXPECT_EQ(s.kv.block_size, 4);
    EXPECT_EQ(s.kv.n_blocks, 64);
    EXPECT_EQ(s.kv.n_used, 3);
    EXPECT_EQ(s.kv.bytes_per_block, 16u);  // the fake's 4 bytes per token
    EXPECT_TRUE(s.accepting);
    e.run();
    s = e.eng.snapshot();
    EXPECT_TRUE(s.requests.empty());
    EXPECT_EQ(s.n_completed, 2);
    EXPECT_EQ(s.ttft_ms.n, 2);
    EXPECT_EQ(s.e2e_ms.n, 2);
    EXPECT_EQ(s.tpot_ms.n, 2);
    EXPECT_GE(s.e2e_ms.max_us, s.ttft_ms.median_us);
    EXPECT_EQ(s.n_generated_tokens, 5);
    EXPECT_EQ(s.n_prompt_tokens, 9 + 3);
    EXPECT_EQ(s.steps.n_steps, 5);
    EXPECT_EQ(s.steps.last_batch_size, 1);
    EXPECT_GT(s.tokens_per_s, 0);
    EXPECT_EQ(s.kv.n_used, 0);
}

TEST(engine_serving, drain_refuses_new_requests_and_lets_those_in_flight_finish) {
    manual_engine e;
    auto a = e.submit("ab", greedy(3));
    e.eng.drain();
    EXPECT_TRUE(e.eng.draining());
    EXPECT_FALSE(e.eng.snapshot().accepting);
    auto refused = e.eng.submit(request{"cd", greedy(2), std::nullopt}, record_into(std::make_shared<sink_record>()));
    ASSERT_FALSE(refused.ok());
    EXPECT_EQ(refused.message(), "engine is draining: no new requests");
    e.run();
    EXPECT_EQ(a->text, "cde");
    EXPECT_TRUE(e.eng.stop(std::chrono::milliseconds(100)).ok());
}

TEST(engine_serving, engine_params_follow_the_config) {
    engine_config c;
    c.scheduler.max_running_seqs = 7;
    c.scheduler.max_batched_tokens = 99;
    c.scheduler.max_waiting = 5;
    c.scheduler.policy = schedule_policy::static_batch;
    c.scheduler.preemption = preemption_policy::swap;
    c.kv.prefix_caching = false;
    const engine_params p = engine_params_from(c);
    EXPECT_EQ(p.max_running, 7);
    EXPECT_EQ(p.max_batched_tokens, 99);
    EXPECT_EQ(p.max_waiting, 5);
    EXPECT_EQ(p.policy, batching_policy::static_batch);
    EXPECT_EQ(p.preemption, preemption_mode::swap);
    EXPECT_FALSE(p.prefix_caching);
}

}  // namespace
}  // namespace troupe
