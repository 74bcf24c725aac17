// spec_figures: what `troupe bench --spec` reports about speculative decoding at batch 1, computed from the
// executor's per-step records of two runs over the same prompts: one with the speculator, one without.
//
//   tau        = E[tokens per target step] in the speculative run (accepted draft tokens + the target's own)
//   accept(k)  = P(accepted path reaches depth k | the proposal reached depth k), k = 1..max depth
//   T_plain    = mean executor step time of the plain run (forward + sampling)
//   c_draft    = mean propose time per speculative step / T_plain
//   c_verify   = (mean forward time of a speculative step - mean forward time of a plain step) / T_plain:
//                what running the draft nodes through the target costs beyond one token
//   predicted  = tau / (1 + c_draft + c_verify)    the speed-up if nothing else differed between the runs
//   ideal      = tau / (1 + c_draft)               ... and if verifying the nodes cost one plain step (the
//                                                   usual analysis: Leviathan et al. 2023, with measured tau)
//   measured   = (tokens/s speculative) / (tokens/s plain)
//   efficiency = measured / predicted: what the prediction leaves out (verification and sampling on the host,
//                moving the accepted path's KV rows, the speculator's bookkeeping after each step)
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace troupe::bench {

// One decode step of one sequence at batch 1.
struct spec_step_record {
    int32_t n_tokens = 0;    // tokens the step produced (accepted drafts + 1)
    int32_t depth = 0;       // the proposal's depth (0: nothing drafted)
    int32_t n_nodes = 0;     // the proposal's nodes
    int32_t n_accepted = 0;  // accepted path length
    double propose_s = 0;    // the speculator's propose call
    double forward_s = 0;    // the target's forward
    double step_s = 0;       // the executor's whole step
};

// One run: its steps and its wall-clock decode time (steps and what the loop does between them).
struct spec_run {
    std::vector<spec_step_record> steps;
    double wall_s = 0;
    int64_t n_tokens() const;
    double tokens_per_s() const;
};

struct spec_figures {
    double tokens_per_s_plain = 0;
    double tokens_per_s_spec = 0;
    double speedup = 0;             // measured
    double tau = 0;                 // mean tokens per target step (speculative run)
    double mean_depth = 0;          // mean proposal depth over steps
    double mean_nodes = 0;          // mean proposal nodes over steps
    std::vector<double> accept_at;  // [max depth] accept(k) for k = 1.. (index k - 1)
    std::vector<int64_t> n_at;      // [max depth] proposals that reached depth k
    double step_plain_s = 0;        // T_plain
    double forward_plain_s = 0;     // mean forward of the plain run
    double step_spec_s = 0;         // mean executor step of the speculative run
    double forward_spec_s = 0;      // mean forward of the speculative run
    double propose_s = 0;           // mean propose per speculative step
    double c_draft = 0;
    double c_verify = 0;
    double predicted = 0;
    double ideal = 0;
    double efficiency = 0;  // speedup / predicted
};

spec_figures compute_spec_figures(const spec_run& plain, const spec_run& spec);

}  // namespace troupe::bench
