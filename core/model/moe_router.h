// moe_router: which experts each token runs, and with what weight, from the router's logits.
//
//   probs  = softmax(logits) over the experts, or sigmoid(logits) each        (moe_params::gating)
//   chosen = the n_used largest of probs + bias (bias: exp_probs_b, or none), largest first, ties to the lower id
//   w      = probs[chosen]; w /= sum(w) where norm_weights; w *= weights_scale
//
// llama.cpp's build_moe_ffn order, so the slots (and the float sums over them) come in the same order.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "core/model/moe_params.h"

namespace troupe {

// Routes n tokens. logits: [n, n_experts]; bias: [n_experts] or null; experts, weights: [n, n_used].
void route_tokens(const float* logits, size_t n, const moe_params& p, const float* bias, int32_t* experts,
                  float* weights);

// Tokens grouped by expert: the rows of a step's n * n_used (token, slot) pairs in expert order.
//   rows [offsets[e], offsets[e + 1]) go to expert e; row r is token token_of[r]; pair (t, slot) is row row_of[t k +
//   slot]. Within an expert, rows keep token order.
struct expert_groups {
    std::vector<int32_t> offsets;   // [n_experts + 1]
    std::vector<int32_t> token_of;  // [n * n_used]
    std::vector<int32_t> row_of;    // [n * n_used]

    void build(const int32_t* experts, size_t n, int32_t n_used, int32_t n_experts);
    int32_t count(int32_t e) const { return offsets[e + 1] - offsets[e]; }
};

}  // namespace troupe
