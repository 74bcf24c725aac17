// The scheduling policy without actors: step-by-step tables of what each input produces, driven by a
// fake executor (each sampled token is the step's last input + 1, unless a table says otherwise).
// The scheduler and KV allocator cores run joined (scheduler_kv_loop): each kv_step_request is
// granted at once, as the two actors would by messages. Here: a request's way through the steps, admission,
// prefill chunks, stop conditions, cancels and failures, drafts, the static policy; running out of KV blocks
// (preemption) and sharing them (prefix cache) are in test_scheduler_kv_blocks.cpp.
#include <gtest/gtest.h>

#include <algorithm>

#include "tests/actors/scheduler_tables.h"

namespace troupe {
namespace {

using namespace scheduler_tables;

TEST(scheduler_core, a_request_is_prefilled_decoded_and_finished_at_max_tokens_with_blocks_growing_per_step) {
    scheduler_kv_loop s(config());
    scheduler_output out;
    s.enqueue(req(1, {1, 10, 11}, 4), out);
    ASSERT_TRUE(out.step);  // the KV round trip is answered at once: the first step is planned
    EXPECT_EQ(s.n_round_trips(), 1);
    EXPECT_EQ(out.step->seqs[0].tokens, (std::vector<int32_t>{1, 10, 11}));
    EXPECT_EQ(out.step->seqs[0].pos0, 0);
    EXPECT_EQ(*out.step->seqs[0].block_table, std::vector<int32_t>{0});

    struct step_t {
        int32_t sampled;
        std::vector<int32_t> delivered;
        std::optional<finish_reason> finish;
        int32_t next_pos0;
        std::vector<int32_t> next_table;
    };
    for (const step_t& t : std::vector<step_t>{{12, {12}, std::nullopt, 3, {0}},
                                               {13, {13}, std::nullopt, 4, {0, 1}},  // position 4 needs block 2
                                               {14, {14}, std::nullopt, 5, {0, 1}},
                                               {15, {15}, finish_reason::length, -1, {}}}) {
        step_plan plan = *out.step;
        out.clear();
        s.step_finished(done(plan, {{t.sampled}}), out);
        ASSERT_EQ(out.deliveries.size(), 1u);
        EXPECT_EQ(out.deliveries[0].tokens, t.delivered);
        EXPECT_EQ(out.deliveries[0].finish, t.finish);
        if (t.next_pos0 >= 0) {
            ASSERT_TRUE(out.step);
            EXPECT_EQ(out.step->seqs[0].tokens, std::vector<int32_t>{t.sampled});
            EXPECT_EQ(out.step->seqs[0].pos0, t.next_pos0);
            EXPECT_EQ(*out.step->seqs[0].block_table, t.next_table);
        } else {
            EXPECT_FALSE(out.step);
            EXPECT_EQ(out.retire, std::vector<int64_t>{1});
        }
    }
    EXPECT_EQ(s.n_running(), 0u);
    EXPECT_FALSE(s.knows(1));
    EXPECT_EQ(s.pool().n_free(), 16);  // every block back
}

TEST(scheduler_core, stop_tokens_and_end_of_generation_are_counted_but_not_delivered) {
    for (int32_t stop : {k_eos, 50}) {
        scheduler_kv_loop s(config());
        scheduler_output out;
        s.enqueue(req(1, {1, 10}, 10, {50}), out);
        step_plan plan = *out.step;
        out.clear();
        s.step_finished(done(plan, {{stop}}), out);
        ASSERT_EQ(out.deliveries.size(), 1u);
        EXPECT_TRUE(out.deliveries[0].tokens.empty());
        EXPECT_EQ(out.deliveries[0].n_counted, 1);
        EXPECT_EQ(out.deliveries[0].finish, finish_reason::stop);
    }
}

TEST(scheduler_core, admission_is_first_come_first_served_within_max_running_and_joins_running_decodes) {
    scheduler_kv_loop s(config(2));
    scheduler_output out;
    s.enqueue(req(1, {1, 10}, 5), out);
    ASSERT_TRUE(out.step);
    step_plan first = *out.step;
    s.enqueue(req(2, {1, 11}, 5), out);  // a step is in flight: 2 waits for the next plan
    s.enqueue(req(3, {1, 12}, 5), out);
    EXPECT_EQ(s.n_waiting(), 2u);
    out.clear();
    s.step_finished(done(first), out);
    ASSERT_TRUE(out.step);
    // 1 decodes first, then 2 is admitted with its prefill in the same step; 3 waits (max_running 2).
    EXPECT_EQ(shape(*out.step), (std::vector<planned>{{1, 2, 1, true}, {2, 0, 2, true}})) << show(shape(*out.step));
    EXPECT_EQ(s.n_waiting(), 1u);
    out = run(s, out);
    EXPECT_EQ(shape(*out.step), (std::vector<planned>{{1, 3, 1, true}, {2, 2, 1, true}}));
}

TEST(scheduler_core, a_long_prompt_is_prefilled_in_chunks_behind_the_running_decodes) {
    scheduler_params c = config();
    c.max_batched_tokens = 4;
    c.n_ctx = 32;
    scheduler_kv_loop s(c);
    scheduler_output out;
    s.enqueue(req(1, {1, 10}, 8), out);
    out = run(s, out);  // 1 now decodes
    s.enqueue(req(2, range(20, 10), 3), out);
    ASSERT_TRUE(out.step);
    // Step by step: the decode of 1 always runs; 2's 10 prompt tokens take the 3 tokens left each step.
    const std::vector<std::vector<planned>> steps = {
        {{1, 2, 1, true}},  // planned before 2 arrived
        {{1, 3, 1, true}, {2, 0, 3, false}},
        {{1, 4, 1, true}, {2, 3, 3, false}},
        {{1, 5, 1, true}, {2, 6, 3, false}},
        {{1, 6, 1, true}, {2, 9, 1, true}},  // the last chunk samples
        {{1, 7, 1, true}, {2, 10, 1, true}},
    };
    for (size_t i = 0; i < steps.size(); ++i) {
        SCOPED_TRACE("step " + std::to_string(i));
        ASSERT_TRUE(out.step);
        EXPECT_EQ(shape(*out.step), steps[i]) << show(shape(*out.step));
        const size_t n_delivered_expected = i >= 4 ? 2 : 1;
        out = run(s, out);
        EXPECT_EQ(out.deliveries.size(), n_delivered_expected);
    }
}

TEST(scheduler_core, cancel_ends_a_request_wherever_it_is_even_mid_step) {
    scheduler_kv_loop s(config(1));
    scheduler_output out;
    s.enqueue(req(1, {1, 10}, 5), out);  // running, step in flight
    step_plan plan = *out.step;
    s.enqueue(req(2, {1, 11}, 5), out);  // waiting
    out.clear();
    s.cancel(2, out);
    ASSERT_EQ(out.deliveries.size(), 1u);
    EXPECT_EQ(out.deliveries[0].finish, finish_reason::cancelled);
    EXPECT_TRUE(out.retire.empty());  // the executor never saw it
    out.clear();
    s.cancel(1, out);  // mid-step
    ASSERT_EQ(out.deliveries.size(), 1u);
    EXPECT_EQ(out.deliveries[0].finish, finish_reason::cancelled);
    EXPECT_EQ(out.retire, std::vector<int64_t>{1});
    EXPECT_FALSE(out.step);  // the step is still in flight
    EXPECT_EQ(s.pool().n_free(), 16);
    out.clear();
    s.step_finished(done(plan, {{20}}), out);  // the late result is dropped
    EXPECT_TRUE(out.deliveries.empty());
    EXPECT_FALSE(out.step);
    s.enqueue(req(3, {1, 12}, 5), out);
    ASSERT_TRUE(out.step);
    EXPECT_EQ(shape(*out.step), (std::vector<planned>{{3, 0, 2, true}}));
}

TEST(scheduler_core, a_failed_step_fails_every_sequence_in_it) {
    scheduler_kv_loop s(config());
    scheduler_output out;
    s.enqueue(req(1, {1, 10}, 5), out);
    step_plan plan = *out.step;
    s.enqueue(req(2, {1, 11}, 5), out);
    out.clear();
    step_done d;
    d.step_id = plan.step_id;
    d.error = "out of memory";
    s.step_finished(d, out);
    ASSERT_EQ(out.failures.size(), 1u);
    EXPECT_EQ(out.failures[0].id, 1);
    EXPECT_EQ(out.failures[0].message, "step 1 failed: out of memory");
    ASSERT_TRUE(out.step);  // 2 goes on
    EXPECT_EQ(shape(*out.step), (std::vector<planned>{{2, 0, 2, true}}));
}

TEST(scheduler_core, draft_room_is_bounded_by_config_context_and_remaining_tokens) {
    scheduler_kv_loop s(config(4, 5));
    scheduler_output out;
    s.enqueue(req(1, {1, 10, 11, 12}, 6), out);
    EXPECT_EQ(out.step->seqs[0].max_draft, 0);  // no drafts for a prefill
    step_plan plan = *out.step;
    out.clear();
    s.step_finished(done(plan, {{13}}), out);
    // tokens left after this step's own: 6 - 1 - 1 = 4; blocks are grown to cover them.
    EXPECT_EQ(out.step->seqs[0].max_draft, 4);
    EXPECT_EQ(out.step->seqs[0].block_table->size(), 3u);  // positions 4..8
    plan = *out.step;
    out.clear();
    s.step_finished(done(plan, {{14, 15, 16}}, {2}), out);  // 2 drafts accepted, 1 sampled
    EXPECT_EQ(out.deliveries[0].tokens, (std::vector<int32_t>{14, 15, 16}));
    EXPECT_EQ(out.step->seqs[0].pos0, 7);  // 4 + 1 input + 2 accepted
    EXPECT_EQ(out.step->seqs[0].tokens, std::vector<int32_t>{16});
    EXPECT_EQ(out.step->seqs[0].max_draft, 1);  // 6 - 4 - 1
    plan = *out.step;
    out.clear();
    s.step_finished(done(plan, {{17, 18}}, {1}), out);
    EXPECT_EQ(out.deliveries[0].finish, finish_reason::length);
}

TEST(scheduler_core, the_draft_controller_plans_without_drafts_once_steps_with_them_take_longer_than_they_produce) {
    scheduler_params c = config(4, 4);
    c.n_ctx = 1024;
    c.kv = {16, 64};
    scheduler_kv_loop s(c);
    scheduler_output out;
    s.enqueue(req(1, {1, 10}, 500), out);
    std::vector<int32_t> caps;
    time_point t = steady_clock::now();
    for (int32_t i = 0; i < 120 && out.step; ++i) {
        const step_plan plan = *out.step;
        caps.push_back(plan.seqs[0].max_draft);
        step_done d = done(plan);  // every draft rejected: one token per step
        if (plan.seqs[0].max_draft > 0) d.results[0].n_draft_nodes = plan.seqs[0].max_draft;
        // The executor's own time is the same; the time from the previous step's end triples with drafts (what
        // the controller must measure: the clients wait for that).
        d.step_s = 1e-3;
        t += std::chrono::microseconds(plan.seqs[0].max_draft > 0 ? 3000 : 1000);
        d.t_end = t;
        out.clear();
        s.step_finished(d, out);
    }
    ASSERT_EQ(caps.size(), 120u);
    EXPECT_EQ(caps[0], 0);  // the prefill
    // Windows of at least 8 steps and 50 ms: 17 steps of 3 ms with drafts, then a probe of 50 of 1 ms without,
    // after which drafting is off for 8 times the drafting window (408 ms).
    EXPECT_EQ(caps[1], 4);  // the first window measures drafting ...
    EXPECT_EQ(caps[17], 4);
    EXPECT_EQ(caps[18], 0);  // ... the second plain decoding
    EXPECT_EQ(caps[119], 0);
    EXPECT_FALSE(s.scheduler().drafts().drafting(1));
    EXPECT_EQ(s.counters().draft_cap, 0);
    EXPECT_EQ(s.counters().n_draft_steps, std::count_if(caps.begin(), caps.end(), [](int32_t k) { return k > 0; }));
}

TEST(scheduler_core, a_full_queue_a_prompt_that_never_fits_and_a_stopping_scheduler_refuse_requests) {
    scheduler_params c = config(1);
    scheduler_kv_loop s(c);
    scheduler_output out;
    for (request_id id = 1; id <= 5; ++id) s.enqueue(req(id, {1, 10}, 5), out);  // 1 runs, 3 wait
    ASSERT_EQ(out.failures.size(), 1u);
    EXPECT_EQ(out.failures[0].id, 5);
    EXPECT_EQ(out.failures[0].message, "overloaded: 3 requests are already waiting (limit 3)");
    out.clear();
    s.abort_all("engine stopped", out);
    EXPECT_EQ(out.failures.size(), 4u);
    EXPECT_EQ(s.pool().n_free(), 16);
    out.clear();
    s.enqueue(req(6, {1, 10}, 5), out);
    ASSERT_EQ(out.failures.size(), 1u);
    EXPECT_EQ(out.failures[0].message, "engine stopped");
    EXPECT_EQ(s.n_waiting(), 0u);

    c.kv = {4, 2};
    scheduler_kv_loop small(c);
    out.clear();
    small.enqueue(req(7, range(10, 8), 5), out);  // 8 + 1 tokens need 3 blocks of 4; the pool has 2
    ASSERT_EQ(out.failures.size(), 1u);
    EXPECT_NE(out.failures[0].message.find("cannot hold 9 tokens"), std::string::npos) << out.failures[0].message;
}

TEST(scheduler_core, a_stop_string_finish_drops_the_request_without_a_delivery) {
    scheduler_kv_loop s(config());
    scheduler_output out;
    s.enqueue(req(1, {1, 10}, 5), out);
    out.clear();
    s.finish(1, out);
    EXPECT_TRUE(out.deliveries.empty());
    EXPECT_EQ(out.retire, std::vector<int64_t>{1});
    EXPECT_FALSE(s.knows(1));
    EXPECT_EQ(s.pool().n_free(), 16);
}

TEST(scheduler_core, the_static_policy_admits_a_batch_only_when_nothing_runs) {
    scheduler_params c = config(2);
    c.policy = batching_policy::static_batch;
    scheduler_kv_loop s(c);
    scheduler_output out;
    s.enqueue(req(1, {1, 10}, 2), out);
    step_plan first = *out.step;
    s.enqueue(req(2, {1, 11}, 3), out);
    s.enqueue(req(3, {1, 12}, 1), out);
    out.clear();
    s.step_finished(done(first), out);
    // 1 runs alone: 2 and 3 wait although a slot is free.
    EXPECT_EQ(shape(*out.step), (std::vector<planned>{{1, 2, 1, true}}));
    out = run(s, out);  // 1 ends: the next batch is 2 and 3 together
    EXPECT_EQ(shape(*out.step), (std::vector<planned>{{2, 0, 2, true}, {3, 0, 2, true}}));
    out = run(s, out);  // 3 ends (1 token) but nobody joins 2
    EXPECT_EQ(shape(*out.step), (std::vector<planned>{{2, 2, 1, true}}));

    c.policy = batching_policy::continuous;
    scheduler_kv_loop t(c);
    out.clear();
    t.enqueue(req(1, {1, 10}, 2), out);
    first = *out.step;
    t.enqueue(req(2, {1, 11}, 3), out);
    out.clear();
    t.step_finished(done(first), out);
    EXPECT_EQ(shape(*out.step), (std::vector<planned>{{1, 2, 1, true}, {2, 0, 2, true}}));
}

TEST(scheduler_core, inputs_that_arrive_while_a_kv_grant_is_awaited_are_planned_after_it) {
    scheduler_params c = config();
    c.plan_on_events = false;  // as in the actor: plan() is called, and grants arrive later
    scheduler_core s(c);
    kv_allocator_core kv(kv_allocator_params_from(c));
    scheduler_output out;
    s.enqueue(req(1, {1, 10}, 5), out);
    EXPECT_FALSE(out.kv_request);
    s.plan(out);
    ASSERT_TRUE(out.kv_request);
    const kv_step_request first = *out.kv_request;
    ASSERT_EQ(first.admits.size(), 1u);
    out.clear();
    // 2 arrives and 1 is cancelled before the grant comes back.
    s.enqueue(req(2, {1, 11}, 5), out);
    s.cancel(1, out);
    EXPECT_FALSE(out.kv_request);
    EXPECT_FALSE(s.wants_step());
    out.clear();
    s.granted(kv.grant(first), out);
    // 1's blocks were granted but it ended: no step; the scheduler asks again, freeing them, for 2.
    EXPECT_FALSE(out.step);
    ASSERT_TRUE(out.kv_request);
    EXPECT_EQ(out.kv_request->frees, std::vector<int64_t>{1});
    ASSERT_EQ(out.kv_request->admits.size(), 1u);
    EXPECT_EQ(out.kv_request->admits[0].seq_id, 2);
    const kv_step_request second = *out.kv_request;
    out.clear();
    s.granted(kv.grant(second), out);
    ASSERT_TRUE(out.step);
    EXPECT_EQ(shape(*out.step), (std::vector<planned>{{2, 0, 2, true}})) << show(shape(*out.step));
    EXPECT_EQ(kv.pool().stats().n_used, 1);
    EXPECT_EQ(s.kv_pool().n_used, 1);  // the snapshot's KV view, as the grant reported it
}

}  // namespace
}  // namespace troupe
