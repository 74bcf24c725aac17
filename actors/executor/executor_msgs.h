// Messages to the executor actor, all from the scheduler: one step plan at a time, and the ids of
// sequences that ended (the executor drops their samplers). The reply to a plan is step_done
// (scheduler_msgs.h).
//
// A plan says, per sequence, which new tokens to run at which positions; that is all a continuous
// batching policy (token budget, chunked prefill, preemption and recompute) needs to say too.
#pragma once

#include <cstdint>
#include <memory>
#include <variant>
#include <vector>

#include "core/runtime/device_stream.h"
#include "core/sampling/sampler.h"

namespace troupe {

// A choice of a parallel-sampling request that forks from a sequence at its first sample: it draws its own first token
// from the same logits with its own sampler (its seed), and runs from then on as a sequence of its own whose history is
// the parent's prompt.
struct step_fork {
    int64_t seq_id = 0;
    std::shared_ptr<const sampling_params> params;
    int32_t logprobs = -1;
};

struct step_sequence {
    int64_t seq_id = 0;
    std::vector<int32_t> tokens;                              // new tokens: a prompt (chunk) or the last sampled token
    int32_t pos0 = 0;                                         // position of tokens[0]
    std::shared_ptr<const std::vector<int32_t>> block_table;  // covers [0, pos0 + tokens.size() + max_draft)
    std::shared_ptr<const sampling_params> params;
    bool sample = true;     // false for a prefill chunk that is not the prompt's last
    int32_t max_draft = 0;  // speculative tokens the executor may add after tokens (0: none)
    // The tokens at positions [0, pos0) on the first step after (re)admission: a prefix-cache hit
    // starts at pos0 > 0, and the executor's history (penalties, drafts) must know what is there.
    std::shared_ptr<const std::vector<int32_t>> context;
    int32_t logprobs = -1;  // -1: none; 0: the sampled token's; k: also the top k alternatives
    // Set when the request asks for its prompt's logprobs (until they are delivered): the prompt, with BOS. The
    // executor asks for every row's logits and gives each prompt token's logprob after the tokens before it.
    std::shared_ptr<const std::vector<int32_t>> prompt;
    // Planned while the previous step runs: the last n_sampled_inputs (0 or 1) of tokens are placeholders
    // for the token that step samples for this sequence, which the executor puts in.
    int32_t n_sampled_inputs = 0;
    // The block tables of KV groups 1.. (sequence_step::more_tables); null with one group.
    std::shared_ptr<const std::vector<std::vector<int32_t>>> more_tables = {};
    // With sample, on the prompt's last chunk: the choices that fork from this sequence here (sequence_result::forks).
    std::vector<step_fork> forks;
};

struct step_plan {
    static constexpr const char* name = "step_plan";
    int64_t step_id = 0;
    std::vector<step_sequence> seqs;
    // The KV copies this step follows (kv_step_grant::copies_done): the executor's lane waits for it on its device
    // stream before the step's kernels touch KV blocks. Null: none pending on a device.
    std::shared_ptr<const device_event> after_copies{};
};

struct retire_sequences {
    static constexpr const char* name = "retire_sequences";
    std::vector<int64_t> seq_ids;
};

using executor_msg = std::variant<step_plan, retire_sequences>;

}  // namespace troupe
