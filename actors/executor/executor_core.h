// executor_core: runs step plans on a model_runner and samples; the executor actor's pure core.
//
// Parallel sampling (step_sequence::forks): the choices that fork from a sequence at its first sample get their own
// sampler and the parent's history, and draw their first token from the parent's row (the copy-on-write copies of
// the blocks they share are the KV allocator's lane's, kv_copy_lane.h).
//
// Per sequence it keeps the sampler (seeded from the request alone, so a token never depends on what
// else is in the batch) and the token history by position (for penalties and for the draft proposer).
//
// Speculative decoding, when a speculator is set and the plan allows max_draft > 0 for a sequence: before the
// forward the speculator proposes a tree of draft tokens for every such sequence in one call (at most max_draft
// nodes each); the step runs [inputs..., nodes...] with logits for every row (nodes attend to their ancestors only,
// runner permitting; otherwise the proposal is cut to its first path). draft_verifier walks the tree (greedy: the
// longest path the target agrees with; sampling: exact multi-candidate speculative sampling), the accepted path's
// KV rows are moved in place (model_runner::keep_tree_path), and the rows past it are left for the next step to
// overwrite. So greedy output is the same with and without drafting and sampled output has the target's
// distribution. The speculator hears of each sequence's start, each step's outcome and its end; a speculator that
// fails is logged and the step runs without drafts.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "actors/executor/executor_msgs.h"
#include "actors/scheduler/scheduler_msgs.h"
#include "core/model/model_runner.h"
#include "core/plugin_host/speculator.h"
#include "core/sampling/draft_verify.h"
#include "core/sampling/sampler.h"

namespace troupe {

class executor_core {
public:
    // piece gives a token's raw bytes for logprobs (optional: pieces stay empty without it).
    explicit executor_core(std::shared_ptr<model_runner> runner, std::shared_ptr<speculator> spec = {},
                           std::function<std::string(int32_t)> piece = {});

    // Runs one step. A failed forward (or a malformed plan) is reported in step_done::error.
    step_done run(const step_plan& plan);
    void retire(const std::vector<int64_t>& seq_ids);

    size_t n_sequences() const { return seqs_.size(); }
    model_runner& runner() { return *runner_; }

private:
    struct sequence_state {
        sampler smp;
        std::vector<int32_t> history;  // [n_positions] token at each position known to the cache
        bool speculating = false;      // the speculator heard begin() and not yet end()
        int32_t last_sampled = -1;     // the last token sampled for it (a plan made ahead takes it as input)
        std::vector<token_logprobs> prompt_logprobs;  // [n_prompt] filled chunk by chunk (the first: no logprob)
    };

    // Asks the speculator for this step's proposals (drafts_) and puts them into the batch.
    void propose(const step_plan& plan);
    // The grammar masks of the step's constrained samplers, looked up (or computed) in one batch per constraint.
    void fetch_masks(const step_plan& plan);
    // Samples the sequence's next token(s) from its rows (verifying its drafts); fills r.
    // The logprobs of the prompt tokens that the rows of a chunk of the prompt predict (all_logits rows).
    void prompt_logprobs_of(size_t index, sequence_state& s, const step_sequence& q);
    status sample_sequence(size_t index, sequence_state& s, const step_sequence& q, sequence_result& r);
    // A choice forking from sequence q at its first sample: its own first token from the same row.
    sequence_result sample_fork(size_t index, const step_sequence& q, const step_fork& f,
                                const sequence_result& parent);
    void end_speculation(int64_t seq_id, sequence_state& s, sequence_end why);

    // The log-softmax of the penalized row: the token's logprob and the top k alternatives.
    token_logprobs logprobs_of(std::span<const float> row, const sequence_state& s, int32_t token, int32_t k);
    // The logprob of token (and the top k) of the logits in logp_, which it normalizes in place.
    token_logprobs normalized_logprobs(int32_t token, int32_t k);

    std::shared_ptr<model_runner> runner_;
    std::shared_ptr<speculator> spec_;
    std::function<std::string(int32_t)> piece_;
    std::unordered_map<int64_t, sequence_state> seqs_;
    forward_batch batch_;
    forward_output output_;
    std::vector<draft_tree> drafts_;  // [n_seqs_in_step] this step's proposals
    std::vector<draft_request> requests_;
    std::vector<draft_tree> proposals_;  // [n_requests] the speculator's answers before they move to drafts_
    int64_t n_spec_failures_ = 0;
    std::vector<size_t> request_seq_;  // [n_requests] index of each request's sequence in the plan
    draft_verifier verifier_;
    std::vector<int32_t> nodes_;  // accepted() scratch
    std::vector<float> logp_;     // [n_vocab] log-softmax of the penalized logits
};

}  // namespace troupe
