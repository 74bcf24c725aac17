// The absorbed path of MLA attention: W_UK is folded into the query and W_UV into the output, so attention runs in
// the latent space as multi-query attention over the cache rows themselves (no key or value is ever expanded):
//
//   per token t, head h:   q'_h = scale · [W_UK_hᵀ q_nope_h ; q_pe_h]                 [kv_lora_rank + rope_dim]
//                          s_j  = q'_h · row_j          (row_j = [c_j ; k_pe_j], the cache row: the one shared key)
//                          o_h  = Σ_j softmax(s)_j c_j   (the value is the key's first kv_lora_rank entries)
//                          out_h = W_UV_h o_h                                            [v_dim]
//
// since q_nope_h · (W_UK_h c_j) = (W_UK_hᵀ q_nope_h) · c_j and Σ p_j W_UV_h c_j = W_UV_h Σ p_j c_j. A step runs in
// three phases over the host's workers:
//   1. absorb: items (token, head): q'
//   2. attend: items (token, group of up to heads_per_group heads, split of its keys): each cache row is loaded once
//      per group, and a long context is split over several items (flash-decoding), so one decoding token keeps every
//      worker busy; each item leaves a partial softmax (max m, sum l, unnormalised o) per head;
//   3. combine: items (token, head): the partials merged (exp(m_i - m) weights), o / l, then W_UV_h.
#pragma once

#include <cstdint>
#include <vector>

#include "mla_step.h"

namespace troupe::mla {

struct absorbed_scratch {
    std::vector<float> q;        // [n_tokens, n_heads, kv_lora_rank + rope_dim] the absorbed queries
    std::vector<float> partial;  // [n_items, group heads, 2 + kv_lora_rank] per head m, l, o
    struct item {
        int32_t token;   // index into the path's token list
        int32_t group;   // heads [group * heads_per_group, ...)
        int32_t k0, k1;  // keys [k0, k1) of the token
    };
    std::vector<item> items;
    std::vector<int32_t> first_item;  // [n_tokens * n_groups + 1] items of (token, group) are consecutive
};

constexpr int32_t heads_per_group = 8;

// Computes out rows of the call's tokens tokens[0..n) (their cache rows already written). Returns a status.
int32_t run_absorbed(const mla_step& s, const int32_t* tokens, int32_t n, absorbed_scratch& scratch,
                     const troupe_parallel* parallel);

}  // namespace troupe::mla
