// attention: causal multi-head attention with grouped KV heads (GQA) over segments of rows, and its backward.
//
// Rows are split into segments (one sequence each: bounds[s] .. bounds[s + 1]); a row attends to the rows of its
// segment up to itself. Query head h reads KV head h / (n_heads / n_kv_heads), as the inference graph does.
//
//   q: [N, n_heads, head_dim] (after RoPE), k, v: [N, n_kv_heads, head_dim], o: [N, n_heads, head_dim]
//   forward:  p_ij = softmax_j≤i(q_i·k_j / √head_dim),  o_i = Σ_j p_ij v_j        (p kept for backward)
//   backward: dv_j += Σ_i p_ij do_i,  dp_ij = do_i·v_j,  ds_ij = p_ij (dp_ij − Σ_j' p_ij' dp_ij'),
//             dq_i += Σ_j ds_ij k_j / √head_dim,  dk_j += Σ_i ds_ij q_i / √head_dim
// Work is split over (segment, KV head) pairs: the query heads that share a KV head run on one thread, so the
// KV gradients have one writer.
//
// Passes (EAGLE's training-time test): with passes = P > 1 each segment is P blocks of T rows, block u the u-th
// pass over the same T positions (block 1: rows fed the target's features; block u > 1: rows fed the output of
// block u - 1 at the position before, as drafting feeds the layer's own output back). A row of block s at position
// i sees what the drafter's row at that depth sees: block 1 rows at positions 0 .. i - s + 1 (the verified
// context) and, for u = 2 .. s, the block-u row at position i - s + u (its ancestors in the draft chain, and
// itself). P = 1 is the causal rule above.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "kernels/cpu/thread_pool.h"

namespace troupe::train {

struct attention_shape {
    int64_t n_heads;
    int64_t n_kv_heads;
    int64_t head_dim;
};

struct attention_cache {
    std::vector<int64_t> offsets;  // [n_segments] where each segment's probabilities begin in probs
    std::vector<float> probs;      // per segment [n_heads, R, R], R its rows (row i: its visible columns used)
};

// The rows of a segment of `rows` rows in `passes` blocks that row i sees (attention.h, "Passes"), ascending.
void visible_rows(int64_t rows, int32_t passes, int64_t i, std::vector<int64_t>& out);

void attention_forward(const float* q, const float* k, const float* v, float* o, std::span<const int64_t> bounds,
                       const attention_shape& s, attention_cache& cache, cpu::thread_pool& pool, int32_t passes = 1);
void attention_backward(const float* q, const float* k, const float* v, const float* d_o,
                        std::span<const int64_t> bounds, const attention_shape& s, const attention_cache& cache,
                        float* dq, float* dk, float* dv, cpu::thread_pool& pool, int32_t passes = 1);

}  // namespace troupe::train
