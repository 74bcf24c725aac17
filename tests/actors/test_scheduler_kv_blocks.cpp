// The scheduler's KV blocks in step-by-step tables (scheduler_tables.h: the scheduler and KV allocator cores
// joined, a fake executor): running out of blocks preempts the latest admitted sequence (recompute, or swap where
// the runner can), a sequence too big for the pool fails, and identical prompt prefixes share blocks.
#include <gtest/gtest.h>

#include <map>
#include <string>

#include "tests/actors/scheduler_tables.h"

namespace troupe {
namespace {

using namespace scheduler_tables;

TEST(scheduler_core, running_out_of_blocks_preempts_the_latest_admitted_which_resumes_by_recompute) {
    for (bool caching : {false, true}) {
        SCOPED_TRACE(caching ? "prefix caching" : "no prefix caching");
        scheduler_params c = config();
        c.kv = {4, 4};  // 16 positions in all
        c.prefix_caching = caching;
        scheduler_kv_loop s(c);
        scheduler_output out;
        s.enqueue(req(1, range(10, 5), 8), out);  // 2 blocks
        s.enqueue(req(2, range(30, 3), 8), out);  // waits for the next plan
        out = run(s, out);
        EXPECT_EQ(shape(*out.step), (std::vector<planned>{{1, 5, 1, true}, {2, 0, 3, true}}));
        // Step table: (plan, preemptions so far). 1 holds blocks 0,1; 2 holds block 2.
        struct step_t {
            std::vector<planned> plan;
            int64_t n_preemptions;
        };
        const std::vector<step_t> steps = {
            {{{1, 6, 1, true}, {2, 3, 1, true}}, 0},  // 2 needs block 3 for position 4: the last free
            {{{1, 7, 1, true}, {2, 4, 1, true}}, 0},
            {{{1, 8, 1, true}}, 1},  // 1 needs a third block: none free, 2 (the latest) is preempted
            {{{1, 9, 1, true}}, 1},  // 2 waits: its 6 tokens + 1 need 2 blocks, 1 free
            {{{1, 10, 1, true}}, 1},
            {{{1, 11, 1, true}}, 1},  // 1 finishes after this step (8 tokens)
            // 2 resumes: its prompt and 3 sampled tokens are recomputed and the 4th sampled; with prefix
            // caching its own first block is still cached (evicted only when needed): only 2 tokens run.
            {{caching ? planned{2, 4, 2, true} : planned{2, 0, 6, true}}, 1},
            {{{2, 6, 1, true}}, 1},
        };
        for (size_t i = 0; i < steps.size(); ++i) {
            SCOPED_TRACE("step " + std::to_string(i));
            out = run(s, out);
            ASSERT_TRUE(out.step);
            EXPECT_EQ(shape(*out.step), steps[i].plan) << show(shape(*out.step));
            EXPECT_EQ(s.counters().n_preemptions, steps[i].n_preemptions);
            EXPECT_TRUE(out.failures.empty());
        }
        // The resumed sequence's recompute carries its own tokens, sampled ones included.
        EXPECT_EQ(s.pool().stats().n_prefix_hits, caching ? 1 : 0);
    }
}

TEST(scheduler_core, sequences_that_outgrow_the_whole_pool_fail_with_a_reason_and_nothing_is_left_stuck) {
    scheduler_params c = config();
    c.kv = {4, 4};  // 16 positions
    c.n_ctx = 32;
    scheduler_kv_loop s(c);
    scheduler_output out;
    s.enqueue(req(1, range(10, 3), 20), out);  // both want 23 positions: more than the pool
    s.enqueue(req(2, range(40, 3), 20), out);
    std::map<request_id, std::string> endings;
    for (int i = 0; i < 100 && out.step; ++i) {
        out = run(s, out);
        for (const auto& d : out.deliveries)
            if (d.finish) endings[d.id] = "finished";
        for (const auto& f : out.failures) endings[f.id] = f.message;
    }
    EXPECT_FALSE(out.step);
    ASSERT_EQ(endings.size(), 2u);
    for (const auto& [id, why] : endings) EXPECT_NE(why.find("cannot hold"), std::string::npos) << id << ": " << why;
    EXPECT_EQ(s.n_running() + s.n_waiting(), 0u);
    EXPECT_EQ(s.pool().n_free(), 4);
}

TEST(scheduler_core, a_resumed_sequence_delivers_each_token_once_and_in_order) {
    scheduler_params c = config();
    c.kv = {4, 4};
    scheduler_kv_loop s(c);
    scheduler_output out;
    s.enqueue(req(1, range(10, 5), 8), out);
    s.enqueue(req(2, range(30, 3), 8), out);
    std::vector<int32_t> got2;
    for (int i = 0; i < 40 && out.step; ++i) {
        out = run(s, out);
        for (const auto& d : out.deliveries) {
            if (d.id == 2) got2.insert(got2.end(), d.tokens.begin(), d.tokens.end());
        }
    }
    EXPECT_EQ(got2, range(33, 8));  // the fake continues +1 from the prompt's last token: 33..40, no gap, no repeat
    EXPECT_EQ(s.counters().n_preemptions, 1);
}

TEST(scheduler_core, swap_preemption_copies_blocks_out_and_back_where_the_runner_can) {
    scheduler_params c = config();
    c.kv = {4, 4};
    c.preemption = preemption_mode::swap;
    c.can_swap = true;
    scheduler_kv_loop s(c);
    scheduler_output out;
    s.enqueue(req(1, range(10, 5), 8), out);
    s.enqueue(req(2, range(30, 3), 8), out);
    int n_out = 0, n_in = 0;
    std::vector<int32_t> got2;
    for (int i = 0; i < 40 && out.step; ++i) {
        const size_t n_grants = s.grants().size();
        out = run(s, out);
        // The swaps are the grants' (the KV allocator's lane runs them): sequence 2 out, then back.
        for (size_t k = n_grants; k < s.grants().size(); ++k) {
            for (const kv_preempted& p : s.grants()[k].preempted) {
                EXPECT_EQ(p.seq_id, 2);
                EXPECT_TRUE(p.swapped);
                EXPECT_EQ(p.n_computed, 5);  // its computed rows at preemption
                n_out++;
            }
            for (const kv_admitted& a : s.grants()[k].admitted) {
                if (!a.swapped_in) continue;
                EXPECT_EQ(a.seq_id, 2);
                n_in++;
                ASSERT_TRUE(out.step);
                // Resumes where it was: one token at pos0 5, no recompute.
                EXPECT_EQ(shape(*out.step).front(), (planned{2, 5, 1, true}));
            }
        }
        for (const auto& d : out.deliveries) {
            if (d.id == 2) got2.insert(got2.end(), d.tokens.begin(), d.tokens.end());
        }
    }
    EXPECT_EQ(n_out, 1);
    EXPECT_EQ(n_in, 1);
    EXPECT_EQ(got2, range(33, 8));

    c.can_swap = false;  // the CPU: swap falls back to recompute
    scheduler_kv_loop cpu(c);
    out.clear();
    cpu.enqueue(req(1, range(10, 5), 8), out);
    cpu.enqueue(req(2, range(30, 3), 8), out);
    for (int i = 0; i < 40 && out.step; ++i) out = run(cpu, out);
    for (const kv_step_grant& g : cpu.grants()) {
        for (const kv_preempted& p : g.preempted) EXPECT_FALSE(p.swapped);
    }
    EXPECT_EQ(cpu.counters().n_preemptions, 1);
}

TEST(scheduler_core, identical_prompt_prefixes_share_blocks_and_start_after_the_cached_tokens) {
    scheduler_kv_loop s(config());
    scheduler_output out;
    const std::vector<int32_t> prompt = range(10, 9);  // blocks [10..13] [14..17] and a partial one
    s.enqueue(req(1, prompt, 4), out);
    ASSERT_TRUE(out.step);
    EXPECT_EQ(*out.step->seqs[0].block_table, (std::vector<int32_t>{0, 1, 2}));
    out = run(s, out);  // 1's prompt is computed: blocks 0 and 1 are cached
    s.enqueue(req(2, prompt, 4), out);
    out = run(s, out);
    ASSERT_TRUE(out.step);
    // 2 shares blocks 0, 1 and computes only the 9th token, at pos0 8, with the context given.
    const step_sequence& q = out.step->seqs.back();
    EXPECT_EQ(q.seq_id, 2);
    EXPECT_EQ(q.pos0, 8);
    EXPECT_EQ(q.tokens, std::vector<int32_t>{18});
    ASSERT_TRUE(q.context);
    EXPECT_EQ(*q.context, range(10, 8));
    EXPECT_EQ((*q.block_table)[0], 0);
    EXPECT_EQ((*q.block_table)[1], 1);
    EXPECT_EQ(s.pool().ref_count(0), 2);
    EXPECT_EQ(s.pool().stats().n_prefix_hits, 2);
    EXPECT_EQ(s.pool().stats().n_prefix_queries, 4);  // 2 whole blocks looked up per request
    // A prompt that differs in its second block shares only the first.
    std::vector<int32_t> other = prompt;
    other[5] = 99;
    s.enqueue(req(3, other, 4), out);
    out = run(s, out);
    EXPECT_EQ(out.step->seqs.back().seq_id, 3);
    EXPECT_EQ(out.step->seqs.back().pos0, 4);
}

TEST(scheduler_core, a_request_arriving_with_its_prefix_in_flight_waits_one_step_to_share_it) {
    scheduler_kv_loop s(config());
    scheduler_output out;
    const std::vector<int32_t> prompt = range(10, 9);
    // Both arrive before any plan can run (1's step is in flight when 2 and 3 arrive).
    s.enqueue(req(1, prompt, 4), out);
    step_plan first = *out.step;
    s.enqueue(req(2, prompt, 4), out);
    s.enqueue(req(3, range(50, 3), 4), out);
    out.clear();
    s.step_finished(done(first), out);
    ASSERT_TRUE(out.step);
    EXPECT_EQ(shape(*out.step), (std::vector<planned>{{1, 9, 1, true}, {2, 8, 1, true}, {3, 0, 3, true}}))
        << show(shape(*out.step));

    // Same arrival in one plan: 2 waits for 1's blocks to be computed (FCFS: 3 waits behind it).
    scheduler_kv_loop t(config());
    scheduler_output o2;
    t.enqueue(req(1, prompt, 4), o2);
    step_plan p1 = *o2.step;
    o2.clear();
    t.abandon_step(p1.step_id);  // (re-plan with 2 present: simulate both arriving before the first plan)
    t.enqueue(req(2, prompt, 4), o2);
    ASSERT_TRUE(o2.step);
    EXPECT_EQ(shape(*o2.step), (std::vector<planned>{{1, 0, 9, true}})) << show(shape(*o2.step));
    EXPECT_EQ(t.n_waiting(), 1u);
}

}  // namespace
}  // namespace troupe
