// Planning ahead (scheduler_core.h): the step after the one in flight is planned before its result
// comes, with the token that step samples left for the executor to put in. Driven here as the actors
// drive it (the scheduler and KV allocator cores joined, an executor queue that runs one step at a time
// while the next may already wait), with a fake executor whose token depends only on the sequence, the
// position and the input token, so the same requests must give the same tokens with and without it.
#include <gtest/gtest.h>

#include <deque>
#include <map>

#include "actors/scheduler/scheduler_kv_loop.h"

namespace troupe {
namespace {

constexpr int32_t k_eos = 2;

scheduler_params config(bool plan_ahead, int32_t n_blocks) {
    scheduler_params c;
    c.max_waiting = 16;
    c.max_running = 4;
    c.n_ctx = 48;
    c.eog_ids = {k_eos};
    c.kv = {4, n_blocks};
    c.max_batched_tokens = 12;  // long prompts take several chunks
    c.plan_ahead = plan_ahead;
    return c;
}

enqueue_request req(request_id id, int32_t n_prompt, int32_t max_tokens) {
    sampling_params p;
    p.max_tokens = max_tokens;
    std::vector<int32_t> prompt{1};
    for (int32_t i = 1; i < n_prompt; ++i) prompt.push_back(3 + (i * 5 + static_cast<int32_t>(id)) % 40);
    return {id, std::make_shared<const std::vector<int32_t>>(std::move(prompt)),
            std::make_shared<const sampling_params>(p), steady_clock::now()};
}

// The fake executor: the token after `input` at `pos` of `seq`; EOS now and then.
int32_t next_token(int64_t seq, int32_t pos, int32_t input) {
    if ((input + pos + seq) % 23 == 0) return k_eos;
    return 3 + static_cast<int32_t>((input * 31 + pos * 7 + seq) % 40);
}

struct run_result {
    std::map<request_id, std::vector<int32_t>> tokens;
    std::map<request_id, finish_reason> finish;
    int64_t n_steps_ahead = 0;
    int64_t n_placeholders = 0;  // inputs the executor had to put in
    int32_t n_free_at_end = 0;
};

// Runs every request to its end: the executor queue holds the step running and at most one planned ahead.
run_result run_all(const scheduler_params& c, const std::vector<enqueue_request>& requests) {
    scheduler_kv_loop s(c);
    std::deque<step_plan> executor;
    std::map<int64_t, int32_t> last_sampled;
    run_result res;
    auto take = [&](scheduler_output& out) {
        for (const auto& d : out.deliveries) {
            auto& t = res.tokens[d.id];
            t.insert(t.end(), d.tokens.begin(), d.tokens.end());
            if (d.finish) res.finish[d.id] = *d.finish;
        }
        for (const auto& f : out.failures) ADD_FAILURE() << "request " << f.id << " failed: " << f.message;
        if (out.step) executor.push_back(std::move(*out.step));
        out.clear();
    };
    scheduler_output out;
    for (const auto& r : requests) {
        s.enqueue(r, out);
        take(out);
    }
    for (int guard = 0; guard < 10000 && !executor.empty(); ++guard) {
        // While the step at the front runs, the scheduler may plan the next (the actor's plan_tick).
        if (executor.size() == 1 && s.scheduler().can_plan_ahead()) {
            s.plan(out);
            take(out);
        }
        const step_plan plan = std::move(executor.front());
        executor.pop_front();
        step_done d;
        d.step_id = plan.step_id;
        for (const auto& q : plan.seqs) {
            std::vector<int32_t> inputs = q.tokens;
            if (q.n_sampled_inputs > 0) {
                EXPECT_EQ(q.n_sampled_inputs, 1);
                EXPECT_EQ(inputs.back(), -1) << "a placeholder is -1";
                inputs.back() = last_sampled.at(q.seq_id);
                res.n_placeholders++;
            }
            for (int32_t t : inputs) EXPECT_GE(t, 0) << "an unknown input reached the executor";
            sequence_result r;
            r.seq_id = q.seq_id;
            if (q.sample) {
                const auto pos = q.pos0 + static_cast<int32_t>(inputs.size()) - 1;
                r.tokens = {next_token(q.seq_id, pos, inputs.back())};
                last_sampled[q.seq_id] = r.tokens.back();
            }
            d.results.push_back(r);
        }
        s.step_finished(d, out);
        take(out);
    }
    EXPECT_TRUE(executor.empty()) << "the run did not end";
    res.n_steps_ahead = s.counters().n_steps_ahead;
    res.n_free_at_end = s.pool().n_free();
    return res;
}

std::vector<enqueue_request> workload() {
    std::vector<enqueue_request> r;
    const int32_t prompts[] = {3, 17, 5, 30, 2, 9, 21, 4};
    const int32_t max_tokens[] = {12, 6, 20, 3, 1, 15, 8, 2};
    for (int i = 0; i < 8; ++i) r.push_back(req(i + 1, prompts[i], max_tokens[i]));
    return r;
}

TEST(scheduler_plan_ahead, requests_get_the_same_tokens_and_endings_with_and_without_planning_ahead) {
    struct case_t {
        const char* name;
        int32_t n_blocks;
    };
    for (const case_t& k : {case_t{"roomy pool", 64}, case_t{"tight pool (preemptions)", 14}}) {
        SCOPED_TRACE(k.name);
        const run_result plain = run_all(config(false, k.n_blocks), workload());
        const run_result ahead = run_all(config(true, k.n_blocks), workload());
        EXPECT_EQ(plain.n_steps_ahead, 0);
        EXPECT_EQ(plain.n_placeholders, 0);
        EXPECT_GT(ahead.n_steps_ahead, 0);
        EXPECT_GT(ahead.n_placeholders, 0);
        EXPECT_EQ(ahead.tokens, plain.tokens);
        EXPECT_EQ(ahead.finish, plain.finish);
        EXPECT_EQ(ahead.finish.size(), workload().size());
        EXPECT_EQ(plain.n_free_at_end, k.n_blocks);
        EXPECT_EQ(ahead.n_free_at_end, k.n_blocks);
    }
}

TEST(scheduler_plan_ahead, the_step_after_a_prefill_is_planned_with_the_sampled_token_left_to_the_executor) {
    scheduler_kv_loop s(config(true, 64));
    scheduler_output out;
    s.enqueue(req(1, 3, 5), out);
    ASSERT_TRUE(out.step);
    const step_plan first = *out.step;
    EXPECT_EQ(first.seqs[0].pos0, 0);
    EXPECT_EQ(first.seqs[0].n_sampled_inputs, 0);
    ASSERT_TRUE(s.scheduler().can_plan_ahead());
    out.clear();
    s.plan(out);
    ASSERT_TRUE(out.step) << "the decode is planned while the prefill runs";
    const step_plan second = *out.step;
    ASSERT_EQ(second.seqs.size(), 1u);
    EXPECT_EQ(second.seqs[0].pos0, 3);
    EXPECT_EQ(second.seqs[0].tokens, std::vector<int32_t>{-1});
    EXPECT_EQ(second.seqs[0].n_sampled_inputs, 1);
    EXPECT_TRUE(second.seqs[0].sample);
    EXPECT_FALSE(s.scheduler().can_plan_ahead()) << "at most one step ahead";
    EXPECT_EQ(s.counters().n_steps_ahead, 1);
}

TEST(scheduler_plan_ahead, nothing_is_planned_ahead_when_the_token_in_flight_ends_the_request_by_length) {
    scheduler_kv_loop s(config(true, 64));
    scheduler_output out;
    s.enqueue(req(1, 3, 1), out);  // max_tokens 1: the prefill's token is the last
    ASSERT_TRUE(out.step);
    EXPECT_FALSE(s.scheduler().can_plan_ahead());
}

TEST(scheduler_plan_ahead, a_request_that_ends_with_its_next_step_in_flight_drops_that_step_and_frees_its_blocks) {
    scheduler_kv_loop s(config(true, 64));
    scheduler_output out;
    s.enqueue(req(1, 3, 10), out);
    const step_plan first = *out.step;
    out.clear();
    s.plan(out);
    const step_plan second = *out.step;
    out.clear();
    // The prefill samples end-of-generation: the request ends; the decode planned ahead still runs.
    step_done d;
    d.step_id = first.step_id;
    sequence_result eos;
    eos.seq_id = 1;
    eos.tokens = {k_eos};
    d.results.push_back(eos);
    s.step_finished(d, out);
    ASSERT_EQ(out.deliveries.size(), 1u);
    EXPECT_EQ(out.deliveries[0].finish, finish_reason::stop);
    EXPECT_TRUE(out.deliveries[0].tokens.empty());
    EXPECT_EQ(out.retire, std::vector<int64_t>{1});
    EXPECT_FALSE(out.step);
    out.clear();
    step_done d2;
    d2.step_id = second.step_id;
    sequence_result wasted;
    wasted.seq_id = 1;
    wasted.tokens = {7};
    d2.results.push_back(wasted);
    s.step_finished(d2, out);
    EXPECT_TRUE(out.deliveries.empty()) << "the wasted step's token is not delivered";
    EXPECT_EQ(s.pool().n_free(), 64);
    EXPECT_FALSE(s.scheduler().step_in_flight());
}

}  // namespace
}  // namespace troupe
