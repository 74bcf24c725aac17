// draft_length: how many tokens spec/draft drafts for a sequence, from its acceptance rate and measured costs.
//
// A chain of k drafts whose positions are each accepted with probability alpha (given the one before was) yields
//   E(k) = 1 + alpha + ... + alpha^k = (1 - alpha^(k+1)) / (1 - alpha)      tokens per target step
// (the target's own token included). Its cost, for one of B sequences in a step, is
//   cost(k) = fixed / B + (per_node + per_draft) * k
// where a decode step with N draft nodes in all takes fixed + per_node * N (the target's forward and verification,
// fitted over the steps: step_cost), and per_draft is the drafter's time per drafted token. The length is the k in
// 0..max_draft maximizing E(k) / cost(k): 0 (no draft) where drafting costs more than it saves. Until the fit has seen
// steps of different sizes, the rule is simpler: grow by one when every draft was accepted, shrink by one when fewer
// than half were.
#pragma once

#include <cstdint>

namespace spec_draft {

// T(N) = fixed + per_node * N by least squares over decode steps, older steps weighing less (each new one multiplies
// the weight of the others by `decay`).
class step_cost {
public:
    explicit step_cost(double decay = 0.99) : decay_(decay) {}
    void add(double n_nodes, double seconds);
    // Enough steps, of different sizes, for a fit: fixed() and per_node() are meaningful.
    bool ready() const;
    double fixed() const { return fixed_; }
    double per_node() const { return per_node_; }

private:
    double decay_;
    double w_ = 0, n_ = 0, nn_ = 0, t_ = 0, nt_ = 0;  // decayed sums of 1, N, N^2, T, N T
    int64_t count_ = 0;
    double fixed_ = 0, per_node_ = 0;
};

// Acceptance per draft position: accepted positions over positions tried, older steps weighing less; starts from a
// prior of `prior_alpha` worth `prior_weight` positions.
class acceptance {
public:
    acceptance(double prior_alpha, double prior_weight, double decay)
        : accepted_(prior_alpha * prior_weight), tried_(prior_weight), decay_(decay) {}
    // A chain of k drafts of which the first m were accepted: m successes, and a failure at m + 1 when m < k.
    void add(int32_t m, int32_t k);
    double alpha() const { return tried_ > 0 ? accepted_ / tried_ : 0.0; }

private:
    double accepted_, tried_, decay_;
};

// The k in [0, max_draft] maximizing E(k) / cost(k) (above); fixed_share = fixed / B (> 0).
int32_t best_length(double alpha, double fixed_share, double per_token, int32_t max_draft);

}  // namespace spec_draft
