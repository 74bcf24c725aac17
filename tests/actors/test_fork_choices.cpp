// Parallel sampling (n > 1, best_of) through forks: the choices of one prompt are one sequence until its first
// sample, then each forks with the prompt's KV blocks shared (scheduler_core.h, "Parallel sampling"). Step-by-step
// tables on the scheduler and KV allocator cores (scheduler_kv_loop) with a fake executor, then the engine with the
// fake model, where a wrong block table or a missing copy shows up as wrong text.
#include <gtest/gtest.h>

#include <algorithm>

#include "actors/engine/engine.h"
#include "actors/scheduler/scheduler_kv_loop.h"
#include "core/runtime/lane.h"
#include "tests/actors/fakes.h"
#include "tests/actors/sink_recorder.h"

namespace troupe {
namespace {

scheduler_params config(int32_t n_blocks = 16, int32_t max_running = 4) {
    scheduler_params c;
    c.max_running = max_running;
    c.n_ctx = 32;
    c.eog_ids = {2};
    c.kv = {4, n_blocks};  // blocks of 4 tokens
    c.max_batched_tokens = 64;
    c.can_fork = true;
    return c;
}

// Choice `id` of a prompt: the first says how many more follow (n_forks), the others name it (fork_of).
enqueue_request choice(request_id id, std::vector<int32_t> prompt, int32_t max_tokens, int32_t n_forks,
                       request_id fork_of) {
    sampling_params p;
    p.max_tokens = max_tokens;
    p.seed = static_cast<uint64_t>(id);
    enqueue_request r{id, std::make_shared<const std::vector<int32_t>>(std::move(prompt)),
                      std::make_shared<const sampling_params>(p), steady_clock::now()};
    r.n_forks = n_forks;
    r.fork_of = fork_of;
    return r;
}

std::vector<int32_t> prompt_of(int32_t n, int32_t base = 10) {
    std::vector<int32_t> v{1};
    for (int32_t i = 1; i < n; ++i) v.push_back(base + i);
    return v;
}

// The fake executor: each sampling sequence's token is 100 * its id + its position, and so is each fork's.
step_done done(const step_plan& plan) {
    step_done d;
    d.step_id = plan.step_id;
    for (const step_sequence& q : plan.seqs) {
        sequence_result r;
        r.seq_id = q.seq_id;
        const int32_t pos = q.pos0 + static_cast<int32_t>(q.tokens.size());
        if (q.sample) r.tokens = {static_cast<int32_t>(100 * q.seq_id) + pos};
        for (const step_fork& f : q.forks) {
            sequence_result fr;
            fr.seq_id = f.seq_id;
            fr.tokens = {static_cast<int32_t>(100 * f.seq_id) + pos};
            r.forks.push_back(fr);
        }
        d.results.push_back(r);
    }
    return d;
}

std::vector<int64_t> ids_of(const step_plan& p) {
    std::vector<int64_t> v;
    for (const step_sequence& q : p.seqs) v.push_back(q.seq_id);
    return v;
}

// Steps until nothing runs; every delivered token by request, in order.
std::map<request_id, std::vector<int32_t>> run_to_end(scheduler_kv_loop& s, scheduler_output& out) {
    std::map<request_id, std::vector<int32_t>> got;
    for (int guard = 0; out.step && guard < 100; ++guard) {
        const step_plan plan = *out.step;
        out.clear();
        s.step_finished(done(plan), out);
        for (const token_delivery& d : out.deliveries)
            got[d.id].insert(got[d.id].end(), d.tokens.begin(), d.tokens.end());
    }
    EXPECT_FALSE(out.step) << "still stepping after 100 steps";
    return got;
}

TEST(fork_choices, the_prompt_is_computed_once_and_each_choice_forks_at_the_first_sample_sharing_its_blocks) {
    scheduler_kv_loop s(config());
    scheduler_output out;
    // A 6-token prompt: block 0 full, block 1 holds positions 4 and 5 (the partial last block).
    s.enqueue(choice(1, prompt_of(6), 3, 2, 0), out);
    EXPECT_FALSE(out.step);  // the first choice waits for the others
    s.enqueue(choice(2, prompt_of(6), 3, 0, 1), out);
    EXPECT_FALSE(out.step);
    s.enqueue(choice(3, prompt_of(6), 3, 0, 1), out);
    ASSERT_TRUE(out.step);
    ASSERT_EQ(ids_of(*out.step), std::vector<int64_t>{1});
    const step_sequence& prefill = out.step->seqs[0];
    EXPECT_EQ(prefill.tokens.size(), 6u);
    EXPECT_TRUE(prefill.sample);
    ASSERT_EQ(prefill.forks.size(), 2u);
    EXPECT_EQ(prefill.forks[0].seq_id, 2);
    EXPECT_EQ(prefill.forks[1].seq_id, 3);
    EXPECT_EQ(prefill.forks[1].params->seed, 3u);  // each choice keeps its own seed
    EXPECT_EQ(s.counters().n_prefill_tokens, 6);

    // The prompt's sample: each choice gets its own first token, and all three decode at position 6.
    step_plan plan = *out.step;
    out.clear();
    s.step_finished(done(plan), out);
    ASSERT_EQ(out.deliveries.size(), 3u);
    EXPECT_EQ(out.deliveries[0].tokens, std::vector<int32_t>{206});  // the forks' tokens come first
    EXPECT_EQ(out.deliveries[1].tokens, std::vector<int32_t>{306});
    EXPECT_EQ(out.deliveries[2].tokens, std::vector<int32_t>{106});
    ASSERT_TRUE(out.step);
    EXPECT_EQ(ids_of(*out.step), (std::vector<int64_t>{1, 2, 3}));
    for (const step_sequence& q : out.step->seqs) {
        EXPECT_EQ(q.pos0, 6);
        EXPECT_EQ(q.tokens, std::vector<int32_t>{static_cast<int32_t>(100 * q.seq_id) + 6});
        EXPECT_TRUE(q.forks.empty());
    }
    // Block 0 is shared by the three; the partial block 1 was copied for the first two writers, the third writes it.
    const std::vector<int32_t> t1 = s.pool().table(1), t2 = s.pool().table(2), t3 = s.pool().table(3);
    EXPECT_EQ(t1[0], 0);
    EXPECT_EQ(t2[0], 0);
    EXPECT_EQ(t3[0], 0);
    EXPECT_EQ(s.pool().ref_count(0), 3);
    EXPECT_EQ(t3[1], 1);
    EXPECT_EQ(s.grants().back().copy_src, (std::vector<int32_t>{1, 1}));
    EXPECT_EQ(s.grants().back().copy_dst, (std::vector<int32_t>{t1[1], t2[1]}));
    EXPECT_EQ(s.pool().n_free(), 16 - 4);  // the shared block counted once
    EXPECT_EQ(s.counters().n_prefill_tokens, 6);
    EXPECT_EQ(s.counters().n_forks, 2);

    auto got = run_to_end(s, out);
    EXPECT_EQ(got[1], (std::vector<int32_t>{107, 108}));
    EXPECT_EQ(got[2], (std::vector<int32_t>{207, 208}));
    EXPECT_EQ(got[3], (std::vector<int32_t>{307, 308}));
    EXPECT_EQ(s.counters().n_prefill_tokens, 6);  // never computed again
    EXPECT_EQ(s.pool().n_free(), 16);
}

TEST(fork_choices, a_prompt_that_ends_on_a_block_boundary_shares_all_its_blocks_and_copies_none) {
    scheduler_kv_loop s(config());
    scheduler_output out;
    s.enqueue(choice(1, prompt_of(8), 2, 1, 0), out);
    s.enqueue(choice(2, prompt_of(8), 2, 0, 1), out);
    ASSERT_TRUE(out.step);
    step_plan plan = *out.step;
    out.clear();
    s.step_finished(done(plan), out);
    ASSERT_TRUE(out.step);
    EXPECT_TRUE(s.grants().back().copy_src.empty());
    EXPECT_EQ(s.pool().ref_count(0), 2);
    EXPECT_EQ(s.pool().ref_count(1), 2);
    EXPECT_NE(s.pool().table(1)[2], s.pool().table(2)[2]);  // position 8: a new block each
    run_to_end(s, out);
    EXPECT_EQ(s.pool().n_free(), 16);
}

TEST(fork_choices, a_request_whose_choices_cannot_all_fit_waits_rather_than_half_starting) {
    scheduler_kv_loop s(config(/*n_blocks=*/8));
    scheduler_output out;
    s.enqueue(choice(9, prompt_of(13, 50), 2, 0, 0), out);  // 4 blocks with its first token
    ASSERT_TRUE(out.step);
    // 9 positions: 3 blocks for the prompt and its first token, and one per fork: 5 > the 4 free.
    s.enqueue(choice(1, prompt_of(9), 2, 2, 0), out);
    s.enqueue(choice(2, prompt_of(9), 2, 0, 1), out);
    s.enqueue(choice(3, prompt_of(9), 2, 0, 1), out);
    step_plan plan = *out.step;
    out.clear();
    s.step_finished(done(plan), out);
    ASSERT_TRUE(out.step);
    EXPECT_EQ(ids_of(*out.step), std::vector<int64_t>{9});  // the group waits, whole
    EXPECT_EQ(s.n_waiting(), 1u);
    plan = *out.step;
    out.clear();
    s.step_finished(done(plan), out);  // 9 ends: its blocks free the room
    ASSERT_TRUE(out.step);
    EXPECT_EQ(ids_of(*out.step), std::vector<int64_t>{1});
    EXPECT_EQ(out.step->seqs[0].forks.size(), 2u);
    auto got = run_to_end(s, out);
    EXPECT_EQ(got[3].size(), 2u);
    EXPECT_EQ(s.counters().n_prefill_tokens, 13 + 9);
}

TEST(fork_choices, cancelling_every_choice_mid_run_releases_all_their_blocks) {
    scheduler_kv_loop s(config());
    scheduler_output out;
    s.enqueue(choice(1, prompt_of(6), 10, 2, 0), out);
    s.enqueue(choice(2, prompt_of(6), 10, 0, 1), out);
    s.enqueue(choice(3, prompt_of(6), 10, 0, 1), out);
    for (int i = 0; i < 2; ++i) {
        ASSERT_TRUE(out.step);
        const step_plan plan = *out.step;
        out.clear();
        s.step_finished(done(plan), out);
    }
    EXPECT_LT(s.pool().n_free(), 16);
    for (request_id id : {1, 2, 3}) s.cancel(id, out);
    EXPECT_EQ(s.n_running(), 0u);
    if (out.step) {  // the step planned before the cancels: its results are dropped
        const step_plan plan = *out.step;
        out.clear();
        s.step_finished(done(plan), out);
    }
    s.plan(out);
    EXPECT_EQ(s.pool().n_free(), 16);
    EXPECT_EQ(s.pool().n_sequences(), 0);
}

TEST(fork_choices, choices_of_a_first_choice_cancelled_before_its_sample_run_on_their_own) {
    scheduler_kv_loop s(config());
    scheduler_output out;
    s.enqueue(choice(1, prompt_of(6), 2, 2, 0), out);
    s.enqueue(choice(2, prompt_of(6), 2, 0, 1), out);
    s.cancel(1, out);  // before choice 3 arrived: 2 runs alone, and so will 3
    s.enqueue(choice(3, prompt_of(6), 2, 0, 1), out);
    auto got = run_to_end(s, out);
    EXPECT_TRUE(got[1].empty());
    EXPECT_EQ(got[2], (std::vector<int32_t>{206, 207}));
    EXPECT_EQ(got[3], (std::vector<int32_t>{306, 307}));
    EXPECT_EQ(s.counters().n_forks, 0);
    EXPECT_EQ(s.pool().n_free(), 16);
}

TEST(fork_choices, a_forked_choice_preempted_for_blocks_recomputes_and_delivers_each_token_once) {
    // 6 blocks: the 6-token prompt's 2 plus a block per fork fit; growing past position 8 does not.
    scheduler_kv_loop s(config(/*n_blocks=*/6));
    scheduler_output out;
    s.enqueue(choice(1, prompt_of(6), 5, 2, 0), out);
    s.enqueue(choice(2, prompt_of(6), 5, 0, 1), out);
    s.enqueue(choice(3, prompt_of(6), 5, 0, 1), out);
    auto got = run_to_end(s, out);
    for (request_id id : {1, 2, 3}) {
        std::vector<int32_t> want;
        for (int32_t pos = 6; pos < 11; ++pos) want.push_back(static_cast<int32_t>(100 * id) + pos);
        EXPECT_EQ(got[id], want) << "request " << id;
    }
    EXPECT_GT(s.counters().n_preemptions, 0);
    EXPECT_EQ(s.pool().n_free(), 6);
}

TEST(fork_choices, a_forked_choice_swapped_out_for_blocks_comes_back_without_computing_anything_again) {
    scheduler_params c = config(/*n_blocks=*/6);
    c.preemption = preemption_mode::swap;
    c.can_swap = true;
    scheduler_kv_loop s(c);
    scheduler_output out;
    s.enqueue(choice(1, prompt_of(6), 5, 2, 0), out);
    s.enqueue(choice(2, prompt_of(6), 5, 0, 1), out);
    s.enqueue(choice(3, prompt_of(6), 5, 0, 1), out);
    auto got = run_to_end(s, out);
    for (request_id id : {1, 2, 3}) {
        std::vector<int32_t> want;
        for (int32_t pos = 6; pos < 11; ++pos) want.push_back(static_cast<int32_t>(100 * id) + pos);
        EXPECT_EQ(got[id], want) << "request " << id;
    }
    EXPECT_GT(s.counters().n_preemptions, 0);
    EXPECT_EQ(s.counters().n_prefill_tokens, 6);  // its rows went to host memory and back: nothing recomputed
    EXPECT_EQ(s.pool().n_free(), 6);
}

TEST(fork_choices, a_first_choice_preempted_before_its_sample_takes_its_choices_along_and_forks_after_recompute) {
    // 8 blocks, 2 tokens a step: the first choice's 14-token prompt runs a token a step beside request 9's decodes,
    // whose growth takes the last free block while the prompt is still running: the latest admitted is preempted.
    scheduler_params c = config(/*n_blocks=*/8);
    c.max_batched_tokens = 2;
    scheduler_kv_loop s(c);
    scheduler_output out;
    s.enqueue(choice(9, prompt_of(3, 50), 28, 0, 0), out);
    const step_plan first = *out.step;
    out.clear();
    s.step_finished(done(first), out);
    s.enqueue(choice(1, prompt_of(14), 3, 1, 0), out);
    s.enqueue(choice(2, prompt_of(14), 3, 0, 1), out);
    std::map<request_id, std::vector<int32_t>> got;
    int n_prompt_starts = 0;  // steps that run choice 1's prompt from position 0
    bool forked = false;
    for (int guard = 0; out.step && guard < 200; ++guard) {
        const step_plan plan = *out.step;
        for (const step_sequence& q : plan.seqs) {
            if (q.seq_id == 1 && q.pos0 == 0) n_prompt_starts++;
            forked = forked || !q.forks.empty();
        }
        EXPECT_TRUE(forked || s.counters().n_forks == 0);
        out.clear();
        s.step_finished(done(plan), out);
        for (const token_delivery& d : out.deliveries)
            got[d.id].insert(got[d.id].end(), d.tokens.begin(), d.tokens.end());
    }
    EXPECT_EQ(n_prompt_starts, 2);  // preempted while prefilling, then recomputed
    EXPECT_EQ(s.counters().n_forks, 1);
    EXPECT_EQ(got[1], (std::vector<int32_t>{114, 115, 116}));
    EXPECT_EQ(got[2], (std::vector<int32_t>{214, 215, 216}));
    EXPECT_EQ(got[9].size(), 28u);
    EXPECT_EQ(s.pool().n_free(), 8);
}

TEST(fork_choices, without_block_copies_each_choice_computes_its_own_prompt) {
    scheduler_params c = config();
    c.can_fork = false;
    scheduler_kv_loop s(c);
    scheduler_output out;
    s.enqueue(choice(1, prompt_of(6), 2, 1, 0), out);
    s.enqueue(choice(2, prompt_of(6), 2, 0, 1), out);
    auto got = run_to_end(s, out);
    EXPECT_EQ(got[2], (std::vector<int32_t>{206, 207}));
    EXPECT_EQ(s.counters().n_forks, 0);
    EXPECT_EQ(s.counters().n_prefill_tokens, 6 + 2);  // the second shares the full block 0 by the prefix cache
}

// The engine with the fake model: the forked choices read the prompt through the shared blocks and write their own
// rows after it, so their text is the prompt's continuation.
TEST(fork_choices, forked_choices_through_the_engine_continue_the_prompt_like_a_single_request) {
    lane test_lane("test");
    testing::fake_model_params mp;
    mp.block_size = 4;
    mp.n_blocks = 32;
    auto runner = std::make_shared<testing::fake_model_runner>(mp);
    engine eng(engine_parts{runner, std::make_shared<testing::fake_codec>(), nullptr}, engine_params{}, test_lane);
    ASSERT_TRUE(eng.start().ok());
    std::vector<std::shared_ptr<testing::sink_record>> rs;
    request_id first = 0;
    for (int i = 0; i < 3; ++i) {
        request r{"hello", testing::greedy(6), std::nullopt};
        r.n_forks = i == 0 ? 2 : 0;
        r.fork_of = first;
        rs.push_back(std::make_shared<testing::sink_record>());
        auto id = eng.submit(std::move(r), testing::record_into(rs.back()));
        ASSERT_TRUE(id.ok()) << id.message();
        if (i == 0) first = *id;
    }
    test_lane.run_until_idle();
    for (const auto& r : rs) {
        ASSERT_TRUE(r->finish.has_value()) << (r->error ? *r->error : "no ending");
        EXPECT_EQ(r->text, "pqrstu");  // after "hello": o + 1, ...
        EXPECT_EQ(r->use.n_prompt_tokens, 6);
    }
    const engine_snapshot snap = eng.snapshot();
    EXPECT_EQ(snap.steps.n_forks, 2);
    EXPECT_EQ(snap.steps.n_prefill_tokens, 6);  // BOS and "hello", once
    EXPECT_GE(runner->n_block_copies(), 2);     // the shared partial block, for two of the three writers
    EXPECT_TRUE(eng.stop(std::chrono::seconds(1)).ok());
}

}  // namespace
}  // namespace troupe
