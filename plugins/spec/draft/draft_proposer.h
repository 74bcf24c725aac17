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
// Greedy requests (temperature 0) get the drafter's argmax chain, without q rows (deterministic drafts). Sampled
// requests get drafts drawn from softmax(drafter logits / T) at the request's temperature, with those rows as q, so
// verification is exact speculative sampling.
//
// Adaptive draft length (params.adaptive): after each step, k grows by one when every draft was accepted, shrinks by
// one when fewer than half were (at least 1, at most max_draft); a sequence starts at ceil(max_draft / 2).
#pragma once

#include <troupe/plugin.h>

#include <cstdint>
#include <random>
#include <string>
#include <unordered_map>
#include <vector>

namespace spec_draft {

struct draft_options {
    int32_t max_draft = 6;
    bool adaptive = true;
    uint64_t seed = 0;
};

class draft_proposer {
public:
    // `services` and `model`: the loaded drafter (model_info already checked).
    draft_proposer(const troupe_model_services* services, troupe_model* model, const troupe_model_info& info,
                   draft_options options);

    int32_t max_nodes() const { return options_.max_draft; }
    void begin(int64_t seq_id);
    // Returns TROUPE_OK or a status with error() set.
    int32_t propose(const troupe_spec_request* requests, int32_t n, troupe_spec_proposal* out);
    void accepted(int64_t seq_id, const int32_t* nodes, int32_t n);
    void end(int64_t seq_id) { seqs_.erase(seq_id); }
    const std::string& error() const { return error_; }

    // Figures for logs and tests.
    int64_t n_drafted() const { return n_drafted_; }
    int64_t n_accepted() const { return n_accepted_; }

private:
    struct sequence {
        int64_t cached = 0;         // drafter KV rows [0, cached) hold the context's positions
        int32_t k = 1;              // draft length
        int64_t n_at_propose = -1;  // the context length the last proposal followed (-1: none pending)
        int32_t n_proposed = 0;     // drafts proposed then
        std::mt19937_64 rng;
    };
    sequence& state_of(int64_t seq_id);
    // Picks the token after `logits` for request r: argmax, or a draw at `temperature` with its q row.
    int32_t pick(const float* logits, float temperature, sequence& s, float* q_row);
    int32_t forward(int32_t n_steps);  // runs steps_[0, n_steps) into logits_

    const troupe_model_services* services_;
    troupe_model* model_;
    troupe_model_info info_;
    draft_options options_;
    std::unordered_map<int64_t, sequence> seqs_;
    std::string error_;
    int64_t n_drafted_ = 0, n_accepted_ = 0;
    // Scratch for one propose.
    std::vector<troupe_model_step> steps_;
    std::vector<int32_t> step_req_;    // [steps] the request of each step
    std::vector<int32_t> step_token_;  // [steps] one-token steps' token
    std::vector<int32_t> k_of_;        // [requests] drafts wanted
    std::vector<float> logits_;        // [steps, n_vocab]
    std::vector<double> weights_;      // [n_vocab] sampling
};

}  // namespace spec_draft
