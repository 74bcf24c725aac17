// The mixture-of-experts FFN's kernels (cuda_moe.cu; the rule: cuda_backend_abi.h troupe_cuda_moe_layer, the CPU's
// core/model/moe_router.h and moe_ffn.h). A step's n_tokens * n_used (token, slot) pairs each run their expert: pair p
// is token p / n_used, slot p % n_used. Every launcher enqueues on `stream`; the caller checks cudaGetLastError.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "kernels/cuda/cuda_kernels.h"

namespace troupe::cuda {

struct moe_routing {
    int32_t n_experts;
    int32_t n_used;
    int32_t gating;  // 1 softmax, 2 sigmoid
    bool norm_weights;
    float weights_scale;
};

// experts, weights [n_tokens, n_used] from logits [n_tokens, n_experts] (+ bias [n_experts] or null for choosing
// only): one thread per token, route_tokens' arithmetic and order.
void launch_moe_route(const float* logits, const float* bias, int32_t n_tokens, const moe_routing& r, int32_t* experts,
                      float* weights, cudaStream_t stream);

// hidden[p, :] = act(x[token] . gate rows of e) * (x[token] . up rows of e), e = experts[p], the rows of expert e being
// [e ffn, (e + 1) ffn) of the stacked [n_experts * ffn, dim] matrices (w_type); launch_gemv_parts' GLU per pair.
// x [n_tokens, dim], hidden [n_pairs, ffn]
void launch_moe_glu(dtype w_type, const void* gate_exps, const void* up_exps, int64_t dim, int64_t ffn, const float* x,
                    const int32_t* experts, int32_t n_pairs, int32_t n_used, glu_kind glu, float* hidden,
                    cudaStream_t stream);

// out[p, :] = hidden[p, :] . rows [e dim, (e + 1) dim) of down_exps [n_experts * dim, ffn].   out [n_pairs, dim]
void launch_moe_down(dtype w_type, const void* down_exps, int64_t ffn, int64_t dim, const float* hidden,
                     const int32_t* experts, int32_t n_pairs, float* out, cudaStream_t stream);

// y[t, :] = sum over slots (in order) of weights[t, slot] * out[row of (t, slot), :]; the row is t n_used + slot where
// rows is null, else rows[t n_used + slot] (the grouped rows' order, cuda_moe_groups.h).   y [n_tokens, dim]
void launch_moe_combine(const float* out, const float* weights, int32_t n_tokens, int32_t n_used, int64_t dim,
                        const int32_t* rows, float* y, cudaStream_t stream);

// xg[r, :] = x[token_of[r], :] for rows r < n_rows (the pairs' inputs in their experts' order).   xg [n_rows, dim]
void launch_moe_gather(const float* x, const int32_t* token_of, int32_t n_rows, int64_t dim, float* xg,
                       cudaStream_t stream);

}  // namespace troupe::cuda
