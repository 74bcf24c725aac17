// Helpers of the scheduler's step-by-step tables (test_scheduler_core.cpp, test_scheduler_kv_blocks.cpp): a small
// scheduler config, requests, and a fake executor whose sampled token is the step's last input + 1 unless a table
// says otherwise; a plan is compared by its shape (sequence, pos0, tokens, whether it samples).
#pragma once

#include <gtest/gtest.h>

#include <ostream>
#include <string>
#include <vector>

#include "actors/scheduler/scheduler_kv_loop.h"

namespace troupe::scheduler_tables {

inline constexpr int32_t k_eos = 2;

inline scheduler_params config(int32_t max_running = 4, int32_t max_draft = 0) {
    scheduler_params c;
    c.max_waiting = 3;
    c.max_running = max_running;
    c.n_ctx = 16;
    c.max_draft = max_draft;
    c.eog_ids = {k_eos};
    c.kv = {4, 16};  // 16 blocks of 4 tokens
    c.max_batched_tokens = 64;
    return c;
}

inline enqueue_request req(request_id id, std::vector<int32_t> prompt, int32_t max_tokens,
                           std::vector<int32_t> stop_tokens = {}) {
    sampling_params p;
    p.max_tokens = max_tokens;
    p.stop_tokens = std::move(stop_tokens);
    return {id, std::make_shared<const std::vector<int32_t>>(std::move(prompt)),
            std::make_shared<const sampling_params>(p), steady_clock::now()};
}

inline std::vector<int32_t> range(int32_t from, int32_t n) {
    std::vector<int32_t> v;
    for (int32_t i = 0; i < n; ++i) v.push_back(from + i);
    return v;
}

// The fake executor: sampled tokens per sequence given explicitly, or the last input + 1.
inline step_done done(const step_plan& plan, std::vector<std::vector<int32_t>> tokens = {},
                      std::vector<int32_t> accepted = {}) {
    step_done d;
    d.step_id = plan.step_id;
    for (size_t i = 0; i < plan.seqs.size(); ++i) {
        sequence_result r;
        r.seq_id = plan.seqs[i].seq_id;
        if (plan.seqs[i].sample)
            r.tokens = tokens.empty() ? std::vector<int32_t>{plan.seqs[i].tokens.back() + 1} : tokens[i];
        r.n_accepted = accepted.empty() ? 0 : accepted[i];
        r.n_drafted = plan.seqs[i].max_draft;
        d.results.push_back(r);
    }
    return d;
}

// One planned sequence as the tables write it.
struct planned {
    int64_t seq;
    int32_t pos0;
    int32_t n_tokens;
    bool sample;
    bool operator==(const planned&) const = default;
};

inline void PrintTo(const planned& p, std::ostream* os) {
    *os << "{" << p.seq << " @" << p.pos0 << " x" << p.n_tokens << (p.sample ? " s}" : "}");
}

inline std::vector<planned> shape(const step_plan& p) {
    std::vector<planned> v;
    for (const auto& s : p.seqs) v.push_back({s.seq_id, s.pos0, static_cast<int32_t>(s.tokens.size()), s.sample});
    return v;
}

inline std::string show(const std::vector<planned>& v) {
    std::string s;
    for (const auto& p : v)
        s += "{" + std::to_string(p.seq) + " @" + std::to_string(p.pos0) + " x" + std::to_string(p.n_tokens) +
             (p.sample ? " s" : "") + "} ";
    return s;
}

// Runs the plan in out.step through the fake executor and returns the output of step_finished.
inline scheduler_output run(scheduler_kv_loop& s, scheduler_output& out) {
    EXPECT_TRUE(out.step);
    step_plan plan = *out.step;
    scheduler_output next;
    s.step_finished(done(plan), next);
    return next;
}

}  // namespace troupe::scheduler_tables
