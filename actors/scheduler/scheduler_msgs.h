// Messages to the scheduler actor: requests (from the tokenizer), KV grants (from the KV allocator), step results
// (from the executor), stop-string finishes (from the streamer), stop (from the engine).
#pragma once

#include <memory>
#include <string>
#include <variant>
#include <vector>

#include "actors/common/request_types.h"
#include "actors/kv_allocator/kv_allocator_msgs.h"
#include "core/sampling/sampler.h"

namespace troupe {

struct enqueue_request {
    static constexpr const char* name = "enqueue_request";
    request_id id = 0;
    std::shared_ptr<const std::vector<int32_t>> prompt;  // ids, with BOS
    std::shared_ptr<const sampling_params> params;
    time_point t_submit;
    int32_t logprobs = -1;         // -1: none; 0: the sampled token's; k: also the top k
    bool prompt_logprobs = false;  // also the prompt tokens' (with logprobs >= 0)
    // Parallel sampling (n > 1, best_of): the first choice says how many more choices of the same prompt follow
    // (n_forks); each of those names it (fork_of). The first is held until they have arrived, computes the prompt once,
    // and they fork from its sequence at its first sample. Where the scheduler cannot fork (the runner cannot copy
    // blocks, the group would never fit), each choice runs on its own.
    int32_t n_forks = 0;
    request_id fork_of = 0;
};

// Cancellation is a message. Sent through the tokenizer so that it arrives behind the request itself.
struct cancel_request {
    static constexpr const char* name = "cancel_request";
    request_id id = 0;
};

// The streamer ended the request (a stop string): stop generating, free its blocks, tell nobody.
struct finish_request {
    static constexpr const char* name = "finish_request";
    request_id id = 0;
    finish_reason reason = finish_reason::stop;
};

// Fail every request, waiting or running, and refuse new ones (engine stop after the drain timeout).
struct abort_all {
    static constexpr const char* name = "abort_all";
    std::string reason;
};

struct sequence_result {
    int64_t seq_id = 0;
    std::vector<int32_t> tokens;  // accepted draft tokens, then one sampled token (empty if not sampled)
    int32_t n_drafted = 0;        // draft positions verified: the proposal's depth
    int32_t n_draft_nodes = 0;    // draft tokens verified (a tree has more than its depth)
    int32_t n_accepted = 0;       // accepted draft tokens (the accepted path's length)
    time_point t_sampled;
    std::vector<token_logprobs> logprobs;  // per token in tokens, when the plan asked for logprobs
    // Per prompt token (the first without a logprob), on the first sampled result, when the plan asked for them.
    std::vector<token_logprobs> prompt_logprobs;
    // The choices that forked from it in this step (step_sequence::forks), in that order: each one's first token.
    std::vector<sequence_result> forks;
};

struct step_done {
    static constexpr const char* name = "step_done";
    int64_t step_id = 0;
    std::vector<sequence_result> results;  // in plan order
    std::string error;                     // non-empty: the step failed and every sequence in it with it
    // Where the executor's time went (seconds): the speculator's propose call (0 without a speculator), the target's
    // forward, and the whole step (propose, forward, sampling and verification). The draft controller and
    // `troupe bench` read them.
    double propose_s = 0;
    double forward_s = 0;
    double step_s = 0;
    time_point t_end{};  // when the step ended (the draft controller measures from one step's end to the next's)
};

// The scheduler to itself: plan the next step now. Posted after an input that may allow one, so the
// inputs already queued (arrivals, cancels) are handled first and join or leave that plan.
struct plan_tick {
    static constexpr const char* name = "plan_tick";
};

using scheduler_msg =
    std::variant<enqueue_request, cancel_request, finish_request, abort_all, step_done, plan_tick, kv_step_grant>;

}  // namespace troupe
