// The scheduling policy without actors: each input and the exact output it produces.
#include <gtest/gtest.h>

#include "actors/scheduler/scheduler_core.h"

namespace troupe {
namespace {

constexpr int32_t k_eos = 2;

scheduler_config config(int32_t max_running = 4, int32_t max_draft = 0) {
    scheduler_config c;
    c.max_waiting = 3;
    c.max_running = max_running;
    c.n_ctx = 16;
    c.max_draft = max_draft;
    c.eog_ids = {k_eos};
    return c;
}

enqueue_request req(request_id id, std::vector<int32_t> prompt, int32_t max_tokens,
                    std::vector<int32_t> stop_tokens = {}) {
    sampling_params p;
    p.max_tokens = max_tokens;
    p.stop_tokens = std::move(stop_tokens);
    return {id, std::make_shared<const std::vector<int32_t>>(std::move(prompt)),
            std::make_shared<const sampling_params>(p), steady_clock::now()};
}

step_done done(const step_plan& plan, std::vector<std::vector<int32_t>> tokens, std::vector<int32_t> accepted = {}) {
    step_done d;
    d.step_id = plan.step_id;
    for (size_t i = 0; i < plan.seqs.size(); ++i) {
        sequence_result r;
        r.seq_id = plan.seqs[i].seq_id;
        r.tokens = tokens[i];
        r.n_accepted = accepted.empty() ? 0 : accepted[i];
        r.n_drafted = plan.seqs[i].max_draft;
        d.results.push_back(r);
    }
    return d;
}

std::vector<int64_t> ids_of(const step_plan& p) {
    std::vector<int64_t> ids;
    for (const auto& s : p.seqs) ids.push_back(s.seq_id);
    return ids;
}

TEST(scheduler_core, a_request_is_reserved_prefilled_decoded_and_released_at_max_tokens) {
    scheduler_core s(config());
    scheduler_output out;
    s.enqueue(req(1, {1, 10, 11}, 3), out);
    ASSERT_EQ(out.reserve.size(), 1u);
    EXPECT_EQ(out.reserve[0].seq_id, 1);
    EXPECT_EQ(out.reserve[0].n_tokens, 6);  // prompt + max_tokens, within n_ctx
    EXPECT_FALSE(out.step);

    out.clear();
    s.granted({1, {0}, 16}, out);
    ASSERT_TRUE(out.step);
    EXPECT_EQ(out.step->seqs[0].tokens, (std::vector<int32_t>{1, 10, 11}));
    EXPECT_EQ(out.step->seqs[0].pos0, 0);
    EXPECT_EQ(*out.step->seqs[0].block_table, std::vector<int32_t>{0});

    struct step_t {
        int32_t sampled;
        std::vector<int32_t> delivered;
        std::optional<finish_reason> finish;
        int32_t next_pos0;
    };
    for (const step_t& t : std::vector<step_t>{
             {12, {12}, std::nullopt, 3}, {13, {13}, std::nullopt, 4}, {14, {14}, finish_reason::length, -1}}) {
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
        } else {
            EXPECT_FALSE(out.step);
            ASSERT_EQ(out.release.size(), 1u);
            EXPECT_EQ(out.release[0].seq_id, 1);
            EXPECT_EQ(out.retire, std::vector<int64_t>{1});
        }
    }
    EXPECT_EQ(s.n_running(), 0u);
    EXPECT_FALSE(s.knows(1));
}

TEST(scheduler_core, stop_tokens_and_end_of_generation_are_counted_but_not_delivered) {
    for (int32_t stop : {k_eos, 50}) {
        scheduler_core s(config());
        scheduler_output out;
        s.enqueue(req(1, {1, 10}, 10, {50}), out);
        s.granted({1, {0}, 16}, out);
        step_plan plan = *out.step;
        out.clear();
        s.step_finished(done(plan, {{stop}}), out);
        ASSERT_EQ(out.deliveries.size(), 1u);
        EXPECT_TRUE(out.deliveries[0].tokens.empty());
        EXPECT_EQ(out.deliveries[0].n_counted, 1);
        EXPECT_EQ(out.deliveries[0].finish, finish_reason::stop);
    }
}

TEST(scheduler_core, admission_is_first_come_first_served_within_max_running) {
    scheduler_core s(config(2));
    scheduler_output out;
    s.enqueue(req(1, {1, 10}, 5), out);
    s.enqueue(req(2, {1, 11}, 5), out);
    s.enqueue(req(3, {1, 12}, 5), out);
    ASSERT_EQ(out.reserve.size(), 1u);  // one reservation in flight at a time
    out.clear();
    s.granted({1, {0}, 16}, out);
    ASSERT_EQ(out.reserve.size(), 1u);
    EXPECT_EQ(out.reserve[0].seq_id, 2);
    ASSERT_TRUE(out.step);
    EXPECT_EQ(ids_of(*out.step), std::vector<int64_t>{1});
    step_plan first = *out.step;
    out.clear();
    s.granted({2, {1}, 16}, out);
    EXPECT_TRUE(out.reserve.empty());  // two running: 3 waits
    EXPECT_FALSE(out.step);            // step 1 still in flight
    out.clear();
    s.step_finished(done(first, {{20}}), out);
    ASSERT_TRUE(out.step);
    EXPECT_EQ(ids_of(*out.step), (std::vector<int64_t>{1, 2}));  // 2 joins with its prefill
    EXPECT_EQ(out.step->seqs[1].tokens, (std::vector<int32_t>{1, 11}));
    EXPECT_EQ(s.n_waiting(), 1u);
}

TEST(scheduler_core, a_refused_reservation_waits_for_a_release_and_one_that_never_fits_fails) {
    scheduler_core s(config());
    scheduler_output out;
    s.enqueue(req(1, {1, 10}, 5), out);
    s.granted({1, {0}, 16}, out);
    step_plan plan = *out.step;
    s.enqueue(req(2, {1, 11}, 5), out);
    out.clear();
    s.refused({2, 7, false}, out);
    EXPECT_TRUE(out.reserve.empty());
    EXPECT_TRUE(out.failures.empty());
    out.clear();
    s.step_finished(done(plan, {{k_eos}}), out);  // 1 ends, frees its blocks: 2 is asked again
    ASSERT_EQ(out.reserve.size(), 1u);
    EXPECT_EQ(out.reserve[0].seq_id, 2);
    out.clear();
    s.refused({2, 7, true}, out);
    ASSERT_EQ(out.failures.size(), 1u);
    EXPECT_EQ(out.failures[0].id, 2);
    EXPECT_NE(out.failures[0].message.find("cannot hold 7 tokens"), std::string::npos);
}

TEST(scheduler_core, cancel_ends_a_request_wherever_it_is) {
    scheduler_core s(config(1));
    scheduler_output out;
    s.enqueue(req(1, {1, 10}, 5), out);  // reserving
    s.enqueue(req(2, {1, 11}, 5), out);  // waiting
    out.clear();
    s.cancel(2, out);
    ASSERT_EQ(out.deliveries.size(), 1u);
    EXPECT_EQ(out.deliveries[0].finish, finish_reason::cancelled);
    EXPECT_TRUE(out.release.empty());
    out.clear();
    s.cancel(1, out);
    EXPECT_TRUE(out.deliveries.empty());  // its grant is still coming
    s.granted({1, {0}, 16}, out);
    ASSERT_EQ(out.deliveries.size(), 1u);
    EXPECT_EQ(out.deliveries[0].finish, finish_reason::cancelled);
    ASSERT_EQ(out.release.size(), 1u);
    EXPECT_FALSE(out.step);

    s.enqueue(req(3, {1, 12}, 5), out);
    s.granted({3, {0}, 16}, out);
    step_plan plan = *out.step;
    out.clear();
    s.cancel(3, out);  // running, step in flight
    EXPECT_EQ(out.deliveries[0].finish, finish_reason::cancelled);
    EXPECT_EQ(out.retire, std::vector<int64_t>{3});
    out.clear();
    s.step_finished(done(plan, {{20}}), out);  // the late result is dropped
    EXPECT_TRUE(out.deliveries.empty());
    EXPECT_FALSE(out.step);
}

TEST(scheduler_core, a_failed_step_fails_every_sequence_in_it) {
    scheduler_core s(config());
    scheduler_output out;
    s.enqueue(req(1, {1, 10}, 5), out);
    s.granted({1, {0}, 16}, out);
    s.enqueue(req(2, {1, 11}, 5), out);
    s.granted({2, {1}, 16}, out);
    step_plan plan = *out.step;
    out.clear();
    step_done d;
    d.step_id = plan.step_id;
    d.error = "out of memory";
    s.step_finished(d, out);
    EXPECT_EQ(ids_of(plan), std::vector<int64_t>{1});
    ASSERT_EQ(out.failures.size(), 1u);
    EXPECT_EQ(out.failures[0].message, "step 1 failed: out of memory");
    ASSERT_TRUE(out.step);  // 2 goes on
    EXPECT_EQ(ids_of(*out.step), std::vector<int64_t>{2});
}

TEST(scheduler_core, draft_room_is_bounded_by_config_blocks_and_remaining_tokens) {
    scheduler_core s(config(4, 5));
    scheduler_output out;
    s.enqueue(req(1, {1, 10, 11, 12}, 6), out);
    s.granted({1, {0}, 10}, out);               // covers 10 positions
    EXPECT_EQ(out.step->seqs[0].max_draft, 0);  // no drafts for a prefill
    step_plan plan = *out.step;
    out.clear();
    s.step_finished(done(plan, {{13}}), out);
    // pos0 4, 1 input: room 10 - 5 = 5; tokens left after this step's own: 6 - 1 - 1 = 4.
    EXPECT_EQ(out.step->seqs[0].max_draft, 4);
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

TEST(scheduler_core, a_full_queue_and_a_stopping_scheduler_refuse_requests) {
    scheduler_core s(config(1));
    scheduler_output out;
    for (request_id id = 1; id <= 4; ++id) s.enqueue(req(id, {1, 10}, 5), out);
    ASSERT_EQ(out.failures.size(), 1u);
    EXPECT_EQ(out.failures[0].id, 4);
    EXPECT_EQ(out.failures[0].message, "overloaded: 3 requests are already waiting (limit 3)");
    out.clear();
    s.abort_all("engine stopped", out);
    EXPECT_EQ(out.failures.size(), 3u);
    s.granted({1, {0}, 16}, out);
    EXPECT_EQ(out.release.size(), 1u);
    out.clear();
    s.enqueue(req(5, {1, 10}, 5), out);
    ASSERT_EQ(out.failures.size(), 1u);
    EXPECT_EQ(out.failures[0].message, "engine stopped");
    EXPECT_EQ(s.n_waiting(), 0u);
}

TEST(scheduler_core, a_stop_string_finish_drops_the_request_without_a_delivery) {
    scheduler_core s(config());
    scheduler_output out;
    s.enqueue(req(1, {1, 10}, 5), out);
    s.granted({1, {0}, 16}, out);
    out.clear();
    s.finish(1, out);
    EXPECT_TRUE(out.deliveries.empty());
    EXPECT_EQ(out.release.size(), 1u);
    EXPECT_FALSE(s.knows(1));
}

}  // namespace
}  // namespace troupe
