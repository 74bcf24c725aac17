// draft_controller against a fake cost model: a target whose step time grows with the rows it runs, a drafter
// with a cost per node, and an acceptance that the cases set. The controller sees only what the scheduler
// gives it (tokens produced, the executor's step time, the cap the step was planned with), and must end up
// within 5% of the better of always drafting and never drafting, per batch size.
#include <gtest/gtest.h>

#include <random>

#include "actors/scheduler/draft_controller.h"

namespace troupe {
namespace {

constexpr int32_t k_max_draft = 8;

// Step time: fixed + per_row * rows (rows = each sequence's token plus its draft nodes) + draft cost per node;
// tokens per sequence: 1 + accepted, where accepted = accept_per_node * nodes (rounded down, at most nodes).
struct fake_target {
    double fixed_s = 1e-3;
    double per_row_s = 1e-5;
    double draft_per_node_s = 1e-5;
    double accept_per_node = 0.3;
    uint32_t seed = 7;
    int32_t drift_period = 0;  // > 0: the machine runs at half speed every other drift_period steps (other jobs)
    std::mt19937 rng{seed};
    int64_t n_steps = 0;

    draft_step_observation step(int32_t n_seqs, int32_t cap) {
        std::uniform_real_distribution<double> noise(0.97, 1.03);  // a shared machine's jitter
        const int32_t nodes = cap;
        draft_step_observation o;
        o.n_seqs = n_seqs;
        o.draft_cap = cap;
        const int32_t accepted = std::min(nodes, static_cast<int32_t>(accept_per_node * nodes));
        o.n_tokens = static_cast<int64_t>(n_seqs) * (1 + accepted);
        o.step_s = (fixed_s + per_row_s * n_seqs * (1 + nodes) + draft_per_node_s * n_seqs * nodes) * noise(rng);
        if (drift_period > 0 && (n_steps / drift_period) % 2 == 1) o.step_s *= 2;
        n_steps++;
        return o;
    }
};

struct throughput {
    int64_t tokens = 0;
    double seconds = 0;
    int64_t steps_with_drafts = 0;
    double per_s() const { return static_cast<double>(tokens) / seconds; }
};

// n_steps decode steps at batch n_seqs; the cap comes from the controller (or is fixed when cap >= 0).
throughput run(draft_controller& c, fake_target& t, int32_t n_seqs, int32_t n_steps, int32_t cap = -1) {
    throughput r;
    for (int32_t i = 0; i < n_steps; ++i) {
        const int32_t planned = cap >= 0 ? cap : c.cap_for(n_seqs);
        const draft_step_observation o = t.step(n_seqs, planned);
        if (cap < 0) c.observe(o);
        r.tokens += o.n_tokens;
        r.seconds += o.step_s;
        r.steps_with_drafts += planned > 0 ? 1 : 0;
    }
    return r;
}

// Windows of 8 steps whatever their length (the fake steps are short; the time floor has its own test).
draft_controller make(bool adaptive = true) {
    draft_controller_params p;
    p.max_draft = k_max_draft;
    p.adaptive = adaptive;
    p.min_window_s = 0;
    return draft_controller(p);
}

struct cost_case {
    const char* name;
    fake_target target;
    int32_t n_seqs;
    bool drafting_pays;
};

TEST(draft_controller, ends_within_five_percent_of_the_better_mode_and_picks_it_per_cost_model) {
    const cost_case cases[] = {
        // Rejected drafts on a small target: every node costs and nothing is accepted (spec/ngram on stories260K).
        {"useless drafts",
         {.fixed_s = 1e-4, .per_row_s = 2e-5, .draft_per_node_s = 1e-5, .accept_per_node = 0.0},
         1,
         false},
        // A memory-bound target at batch 1: extra rows are nearly free and half the drafts are accepted.
        {"good drafts at batch 1",
         {.fixed_s = 1e-2, .per_row_s = 1e-5, .draft_per_node_s = 2e-5, .accept_per_node = 0.5},
         1,
         true},
        // The same drafts at batch 16 on a compute-bound target: the rows cost more than the accepted tokens give.
        {"good drafts, compute-bound batch 16",
         {.fixed_s = 1e-3, .per_row_s = 1e-3, .draft_per_node_s = 2e-5, .accept_per_node = 0.5},
         16,
         false},
        // Marginal: drafting loses ~7% (the controller must not keep it on).
        {"slightly losing drafts",
         {.fixed_s = 1e-3, .per_row_s = 4.2e-5, .draft_per_node_s = 0, .accept_per_node = 0.125},
         4,
         false},
    };
    for (const cost_case& k : cases) {
        SCOPED_TRACE(k.name);
        fake_target t_on = k.target, t_off = k.target, t_ctl = k.target;
        draft_controller unused = make();
        const double on = run(unused, t_on, k.n_seqs, 4000, k_max_draft).per_s();
        const double off = run(unused, t_off, k.n_seqs, 4000, 0).per_s();
        ASSERT_EQ(on > off, k.drafting_pays) << "the case's cost model: on " << on << ", off " << off;
        draft_controller c = make();
        const double controlled = run(c, t_ctl, k.n_seqs, 4000).per_s();
        EXPECT_EQ(c.drafting(k.n_seqs), k.drafting_pays);
        EXPECT_GE(controlled, 0.95 * std::max(on, off)) << "on " << on << ", off " << off;
    }
}

TEST(draft_controller, a_machine_whose_speed_drifts_does_not_make_it_switch_to_the_slower_mode) {
    // Drafting loses ~20%; the machine halves its speed every other 300 steps, which moves both modes' rates far
    // more than drafting does.
    fake_target t{
        .fixed_s = 1e-3, .per_row_s = 2.3e-4, .draft_per_node_s = 0, .accept_per_node = 0.125, .drift_period = 300};
    fake_target t_off = t;
    draft_controller unused = make();
    const double off = run(unused, t_off, 1, 6000, 0).per_s();
    draft_controller c = make();
    const throughput r = run(c, t, 1, 6000);
    EXPECT_FALSE(c.drafting(1));
    EXPECT_LE(c.counters().n_switches, 2);
    EXPECT_GE(r.per_s(), 0.95 * off);
}

TEST(draft_controller, keeps_each_batch_size_bucket_apart) {
    // Drafting pays at batch 1 (memory-bound) and loses at batch 16 (compute-bound rows).
    fake_target t{.fixed_s = 1e-2, .per_row_s = 1e-3, .draft_per_node_s = 1e-5, .accept_per_node = 0.5};
    draft_controller c = make();
    for (int32_t round = 0; round < 20; ++round) {
        run(c, t, 1, 50);
        run(c, t, 16, 50);
    }
    EXPECT_TRUE(c.drafting(1));
    EXPECT_FALSE(c.drafting(16));
    EXPECT_FALSE(c.drafting(20));  // the same bucket as 16
    EXPECT_EQ(c.cap_for(1), k_max_draft);
    EXPECT_EQ(c.cap_for(16), 0);
    EXPECT_GT(c.rate_with_drafts(1), c.rate_without_drafts(1));
    EXPECT_LT(c.rate_with_drafts(16), c.rate_without_drafts(16));
}

TEST(draft_controller, turns_drafting_back_on_when_acceptance_recovers_and_off_when_it_drops) {
    fake_target t{.fixed_s = 1e-2, .per_row_s = 1e-5, .draft_per_node_s = 1e-4, .accept_per_node = 0.5};
    draft_controller c = make();
    run(c, t, 1, 500);
    ASSERT_TRUE(c.drafting(1));
    t.accept_per_node = 0;  // the text stopped repeating
    run(c, t, 1, 500);
    EXPECT_FALSE(c.drafting(1));
    t.accept_per_node = 0.5;
    // Probes back off to every 64 windows of 8 steps at most: within ~600 steps one sees the change.
    run(c, t, 1, 1200);
    EXPECT_TRUE(c.drafting(1));
    EXPECT_GE(c.counters().n_switches, 2);
}

TEST(draft_controller, probes_of_a_settled_off_decision_back_off_to_a_few_percent_of_the_steps) {
    fake_target t{.fixed_s = 1e-4, .per_row_s = 2e-5, .draft_per_node_s = 1e-5, .accept_per_node = 0.0};
    draft_controller c = make();
    run(c, t, 1, 1000);  // settles, probes back off
    const throughput late = run(c, t, 1, 10000);
    EXPECT_FALSE(c.drafting(1));
    EXPECT_GT(late.steps_with_drafts, 0) << "it must keep probing, or it would never notice a change";
    EXPECT_LT(late.steps_with_drafts, 10000 / 50);
}

// Where drafting runs far slower (a compute-bound batch: here 0.44x), probing it at the minimum interval, doubling
// from there, costs a few percent of a run's first seconds. From the first decision on, the interval starts where the
// probes' loss is probe_loss_budget (1%): (1 - 0.44) / 0.01 - 1 = 55 windows of drafting's duration (8 steps of
// 8.2 ms), ~2000 plain steps of 1.8 ms, where the old schedule's 16 gave ~590.
TEST(draft_controller, probes_of_a_much_slower_mode_cost_about_the_loss_budget_from_the_first_decision) {
    const fake_target base{.fixed_s = 1e-3, .per_row_s = 2e-4, .draft_per_node_s = 0, .accept_per_node = 0.125};
    fake_target t_on = base, t_off = base, t_ctl = base;
    draft_controller unused = make();
    const double on = run(unused, t_on, 4, 3000, k_max_draft).per_s();
    const double off = run(unused, t_off, 4, 3000, 0).per_s();
    ASSERT_LT(on, 0.5 * off) << "the case's cost model: drafting far slower";
    draft_controller c = make();
    run(c, t_ctl, 4, 24);  // the first drafting window, the plain probe, the decision
    ASSERT_FALSE(c.drafting(4));
    int32_t plain_before_probe = 0;
    while (c.cap_for(4) == 0 && plain_before_probe < 10000) {
        run(c, t_ctl, 4, 1);
        ++plain_before_probe;
    }
    EXPECT_GE(plain_before_probe, 1500);
    const double controlled = run(c, t_ctl, 4, 6000).per_s();
    EXPECT_FALSE(c.drafting(4));
    EXPECT_GE(controlled, 0.99 * off) << "on " << on << ", off " << off;
}

TEST(draft_controller, ignores_prefill_steps_and_steps_planned_in_another_mode) {
    draft_controller c = make();
    draft_step_observation prefill{
        .n_seqs = 1, .draft_cap = k_max_draft, .decode_only = false, .n_tokens = 1, .step_s = 1.0};
    for (int32_t i = 0; i < 100; ++i) c.observe(prefill);
    EXPECT_EQ(c.counters().n_windows, 0);
    // The fresh bucket measures drafting first: steps planned without drafts do not count toward that window.
    draft_step_observation plain{.n_seqs = 1, .draft_cap = 0, .decode_only = true, .n_tokens = 1, .step_s = 1e-3};
    for (int32_t i = 0; i < 100; ++i) c.observe(plain);
    EXPECT_EQ(c.counters().n_windows, 0);
    EXPECT_EQ(c.counters().n_steps_off, 100);
}

TEST(draft_controller, a_window_closes_after_both_its_steps_and_its_seconds) {
    draft_controller_params p;
    p.max_draft = k_max_draft;
    p.window_steps = 8;
    p.min_window_s = 0.025;
    draft_controller c(p);
    const draft_step_observation step{
        .n_seqs = 1, .draft_cap = k_max_draft, .decode_only = true, .n_tokens = 2, .step_s = 2e-3};
    for (int32_t i = 0; i < 12; ++i) c.observe(step);
    EXPECT_EQ(c.counters().n_windows, 0);  // 12 steps, 24 ms
    c.observe(step);
    EXPECT_EQ(c.counters().n_windows, 1);  // 13 steps, 26 ms
    EXPECT_DOUBLE_EQ(c.rate_with_drafts(1), 1000);
}

TEST(draft_controller, without_adaptation_always_answers_the_configured_cap) {
    fake_target t{.fixed_s = 1e-4, .per_row_s = 2e-5, .draft_per_node_s = 1e-5, .accept_per_node = 0.0};
    draft_controller c = make(false);
    const throughput r = run(c, t, 1, 500);
    EXPECT_EQ(r.steps_with_drafts, 500);
    EXPECT_EQ(c.cap_for(1), k_max_draft);
    EXPECT_EQ(c.counters().n_windows, 0);
}

TEST(draft_controller, with_no_configured_drafts_answers_zero_and_counts_nothing) {
    draft_controller c{draft_controller_params{}};
    EXPECT_EQ(c.cap_for(1), 0);
    c.observe({.n_seqs = 1, .draft_cap = 0, .decode_only = true, .n_tokens = 1, .step_s = 1e-3});
    EXPECT_EQ(c.counters().n_steps_off, 0);
}

TEST(draft_controller, buckets_hold_each_power_of_two_with_its_neighbours) {
    const std::pair<int32_t, int32_t> cases[] = {{0, 0},  {1, 0},  {2, 1},  {3, 2},  {4, 2},  {5, 2},  {6, 3},
                                                 {11, 3}, {12, 4}, {15, 4}, {16, 4}, {23, 4}, {24, 5}, {64, 6}};
    for (const auto& [n, bucket] : cases) EXPECT_EQ(draft_controller::bucket_of(n), bucket) << n;
}

}  // namespace
}  // namespace troupe
