// executor_core: runs step plans on a model_runner and samples; the executor actor's pure core.
//
// Per sequence it keeps the sampler (seeded from the request alone, so a token never depends on what
// else is in the batch) and the token history by position (for penalties and for the draft proposer).
//
// Speculative decoding, when a proposer is set and the plan allows max_draft > 0: the step runs
// [inputs..., d1..dk] with logits for every row; row i predicts the token after input i. Verification
// walks the drafts in order:
//   greedy:   accept d_j while it equals the (penalized) argmax; the first mismatch emits the argmax.
//   sampling: exact rejection sampling for a deterministic draft: accept d_j with probability p(d_j);
//             on rejection draw from p with d_j removed and renormalized, and stop.
// If every draft is accepted, one bonus token is sampled from the last row. So greedy output is the
// same with and without drafting, and sampled output has the target distribution. Rejected drafts
// leave stale KV rows past the accepted ones; the next step overwrites them (its pos0 says where).
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "actors/executor/draft_proposer.h"
#include "actors/executor/executor_msgs.h"
#include "actors/scheduler/scheduler_msgs.h"
#include "core/model/model_runner.h"
#include "core/sampling/sampler.h"

namespace troupe {

class executor_core {
public:
    // piece gives a token's raw bytes for logprobs (optional: pieces stay empty without it).
    explicit executor_core(std::shared_ptr<model_runner> runner, draft_proposer_fn draft = {},
                           std::function<std::string(int32_t)> piece = {});

    // Runs one step. A failed forward (or a malformed plan) is reported in step_done::error.
    step_done run(const step_plan& plan);
    void retire(const std::vector<int64_t>& seq_ids);
    // Swap preemption: copies a sequence's rows to host memory or back. A failure fails the
    // sequence's next step (its rows are lost).
    void swap(const swap_blocks& m);

    size_t n_sequences() const { return seqs_.size(); }
    model_runner& runner() { return *runner_; }

private:
    struct sequence_state {
        sampler smp;
        std::vector<int32_t> history;  // [n_positions] token at each position known to the cache
    };

    // Samples the sequence's next token(s) from its rows; returns the tokens and fills accept counts.
    void sample_sequence(size_t index, sequence_state& s, std::span<const int32_t> drafts, int32_t n_inputs,
                         int32_t logprobs, sequence_result& r);

    // The log-softmax of the penalized row: the token's logprob and the top k alternatives.
    token_logprobs logprobs_of(std::span<const float> row, const sequence_state& s, int32_t token, int32_t k);

    std::shared_ptr<model_runner> runner_;
    draft_proposer_fn draft_;
    std::function<std::string(int32_t)> piece_;
    std::unordered_map<int64_t, std::string> lost_;  // sequences whose swap failed -> why
    std::unordered_map<int64_t, sequence_state> seqs_;
    forward_batch batch_;
    forward_output output_;
    std::vector<std::vector<int32_t>> drafts_;  // [n_seqs_in_step][n_drafted]
    std::vector<float> probs_;                  // [n_vocab]
    std::vector<float> logp_;                   // [n_vocab] log-softmax of the penalized logits
};

}  // namespace troupe
