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
    std::vector<float> probs;      // per segment [n_heads, T, T] (row i: columns 0..i used, the rest zero)
};

void attention_forward(const float* q, const float* k, const float* v, float* o, std::span<const int64_t> bounds,
                       const attention_shape& s, attention_cache& cache, cpu::thread_pool& pool);
void attention_backward(const float* q, const float* k, const float* v, const float* d_o,
                        std::span<const int64_t> bounds, const attention_shape& s, const attention_cache& cache,
                        float* dq, float* dk, float* dv, cpu::thread_pool& pool);

}  // namespace troupe::train
