// The naive path of MLA attention: keys and values are expanded from the latent cache per head, then attention runs
// as multi-head attention with q/k heads of qk_nope + rope_dim and v heads of v_dim:
//
//   per cache row j:        [k_nope_j,h ; v_j,h] for every head h = attn_kv_b · c_j     (one matrix-vector product)
//                           k_j,h = [k_nope_j,h ; k_pe_j]                               (k_pe shared by the heads)
//   per token t, head h:    out_h = Σ_j softmax(scale · q_h · k_j,h)_j v_j,h
//
// The cache keeps only the latent, so every step expands every row its tokens read: per sequence, its rows are taken
// in chunks (so the expanded keys and values stay a few MiB whatever the context), each chunk expanded over the
// host's workers (items: blocks of attn_kv_b's rows, each applied to all the chunk's rows), then attended to (items:
// (token, head), online softmax across chunks).
#pragma once

#include <cstdint>
#include <vector>

#include "mla_step.h"

namespace troupe::mla {

struct naive_scratch {
    std::vector<float> kv;      // [chunk rows, n_heads, qk_nope + v_dim] the expanded keys (no RoPE part) and values
    std::vector<float> latent;  // [chunk rows, kv_lora_rank + rope_dim] the chunk's cache rows as floats
    std::vector<float> state;   // [tokens of the sequence, n_heads, 2 + v_dim] per (token, head) m, l, o
    std::vector<int32_t> seq_tokens;
};

// Computes out rows of the call's tokens tokens[0..n) (their cache rows already written). Returns a status.
int32_t run_naive(const mla_step& s, const int32_t* tokens, int32_t n, naive_scratch& scratch,
                  const troupe_parallel* parallel);

}  // namespace troupe::mla
