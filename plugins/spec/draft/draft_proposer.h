// draft_proposer: spec/draft's drafting, over a second model the host runs (troupe_model_services version 2).
//
// Per sequence it keeps how many of the context's positions the drafter has in its cache (`cached`: its KV rows live
// in the target sequence's blocks, pools parallel to the target's) and its draft length k. One propose_batch:
//
//   forward 1:    every sequence's unseen context tokens [cached, n) at positions cached..   -> draft token 1
//   forward j:    every sequence still drafting (k >= j): draft token j-1 at position n+j-2  -> draft token j
//
// so one model_forward per draft position carries every sequence. After the step, `accepted` says how many drafts
// the target kept (m): the drafter's rows [n, n + min(m, k-1)) hold those drafts, so cached = n + min(m, k-1); rows
// past it are stale and simply overwritten by the next catch-up.
//
// With branch > 1 the first draft also gets branch - 1 sibling roots (a tree; leaves after the chain): the next best
// tokens (greedy) or independent draws from the same q row (sampled: exact for siblings). A path through a sibling
// keeps none of the chain's drafter rows.
//
// Greedy requests (temperature 0) get the drafter's argmax chain, without q rows (deterministic drafts). Sampled
// requests get drafts drawn from softmax(drafter logits / T) at the request's temperature, with those rows as q, so
// verification is exact speculative sampling.
//
// Adaptive draft length (params.adaptive, draft_length.h): the k maximizing expected tokens per unit of cost, from the
// sequence's acceptance rate and the costs measured here: the wall time from the end of one propose_batch to the
// start of the next (the target's decode step with its draft nodes) fitted as fixed + per_node * nodes, and the
// drafter's own time per drafted token; 0 (no drafts) where drafting costs more than it saves. Until the fit is ready,
// k grows by one when every draft was accepted and shrinks by one when fewer than half were (at least 1, at most
// max_draft), from ceil(max_draft / 2). Either way every eighth proposal of a sequence tries one more or one fewer
// (alternately), so the fit sees steps of different sizes. Without adaptive, k is max_draft.
#pragma once

#include <troupe/plugin.h>

#include <chrono>
#include <cstdint>
#include <random>
#include <string>
#include <unordered_map>
#include <vector>

#include "plugins/spec/draft/draft_length.h"

namespace spec_draft {

struct draft_options {
    int32_t max_draft = 6;
    bool adaptive = true;
    int32_t branch = 1;  // candidates for the first draft: the chain's root and branch - 1 sibling roots
    uint64_t seed = 0;
};

class draft_proposer {
public:
    // `services` and `model`: the loaded drafter (model_info already checked).
    draft_proposer(const troupe_model_services* services, troupe_model* model, const troupe_model_info& info,
                   draft_options options);

    int32_t max_nodes() const { return options_.max_draft + options_.branch - 1; }
    void begin(int64_t seq_id);
    // Returns TROUPE_OK or a status with error() set.
    int32_t propose(const troupe_spec_request* requests, int32_t n, troupe_spec_proposal* out);
    void accepted(int64_t seq_id, const int32_t* nodes, int32_t n);
    void end(int64_t seq_id) { seqs_.erase(seq_id); }
    const std::string& error() const { return error_; }

    // Figures for logs and tests.
    int64_t n_drafted() const { return n_drafted_; }
    int64_t n_accepted() const { return n_accepted_; }
    // "step 31.2 ms + 7.9 ms per node (fitted), drafter 0.21 ms per token, acceptance 0.63 per position"
    std::string figures() const;

private:
    struct sequence {
        int64_t cached = 0;         // drafter KV rows [0, cached) hold the context's positions
        int32_t k = 1;              // draft length
        int64_t n_at_propose = -1;  // the context length the last proposal followed (-1: none pending)
        int32_t n_proposed = 0;     // drafts proposed then
        std::mt19937_64 rng;
        acceptance acc{0.5, 1.0, 0.9};  // this sequence's acceptance per position (prior: the instance's)
        int64_t n_proposals = 0;
    };
    using clock = std::chrono::steady_clock;
    // The draft length for sequence s, one of n_requests this step (draft_length.h), before the request's limits.
    int32_t length_for(sequence& s, int32_t n_requests);
    sequence& state_of(int64_t seq_id);
    // Picks the token after `logits` for request r: argmax, or a draw at `temperature` with its q row.
    int32_t pick(const float* logits, float temperature, sequence& s, float* q_row);
    // A draw from a filled q row whose entries sum to `total`.
    int32_t draw(const float* q_row, double total, sequence& s);
    // Request r's sibling roots of its first draft `first` into siblings_ (extra_of_[r] of them, or fewer).
    void pick_siblings(int32_t r, const float* logits, int32_t first, const float* q_row, sequence& s);
    int32_t forward(int32_t n_steps);  // runs steps_[0, n_steps) into logits_
    int32_t propose_chains(const troupe_spec_request* requests, int32_t n, troupe_spec_proposal* out);

    const troupe_model_services* services_;
    troupe_model* model_;
    troupe_model_info info_;
    draft_options options_;
    std::unordered_map<int64_t, sequence> seqs_;
    std::string error_;
    int64_t n_drafted_ = 0, n_accepted_ = 0;
    // Measured costs (draft_length.h).
    step_cost cost_;
    acceptance all_acc_{0.7, 4.0, 0.99};  // every sequence's: the prior of a new one
    double draft_seconds_per_token_ = 0;  // the drafter's time per drafted token (running mean)
    clock::time_point last_end_{};        // when the last propose_batch returned
    int64_t last_nodes_ = 0;              // nodes it proposed in all
    std::vector<int64_t> last_seqs_;      // its requests' sequences
    bool last_was_decode_ = false;        // every request of it ran one token: its step measures the decode cost
    // Scratch for one propose.
    std::vector<troupe_model_step> steps_;
    std::vector<int32_t> step_req_;    // [steps] the request of each step
    std::vector<int32_t> step_token_;  // [steps] one-token steps' token
    std::vector<int32_t> k_of_;        // [requests] drafts wanted
    std::vector<int32_t> extra_of_;    // [requests] sibling roots of the first draft
    std::vector<int32_t> siblings_;    // [requests, branch] their tokens
    std::vector<int32_t> order_;       // [n_vocab] greedy siblings
    std::vector<float> logits_;        // [steps, n_vocab]
    std::vector<double> weights_;      // [n_vocab] sampling
};

}  // namespace spec_draft
