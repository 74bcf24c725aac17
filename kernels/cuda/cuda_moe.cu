// The mixture-of-experts FFN's kernels (declarations: cuda_moe.h). In decode-sized steps the experts' products are
// GEMVs per (token, slot) pair: a warp per weight row of the pair's expert (cuda_gemv.cuh row_dot), so a step reads
// only the selected experts' rows; pairs of the same expert re-read them from L2. Prefill steps group the pairs by
// expert instead (cuda_model_forward.cpp: gather, one product per expert, combine through the rows' order).
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>

#include "kernels/cuda/cuda_backend_abi.h"
#include "kernels/cuda/cuda_device.cuh"
#include "kernels/cuda/cuda_gemv.cuh"
#include "kernels/cuda/cuda_moe.h"

namespace troupe::cuda {
namespace {

using namespace device;

constexpr int moe_warps = 4;
constexpr int moe_in_flight = 4;
constexpr int moe_glu_rows = moe_warps / 2;  // a block's warps 0, 1 make gate rows, 2, 3 the same up rows
constexpr int32_t max_grid_y = 65535;        // pairs per launch (the grid's y limit)

__global__ void route_kernel(const float* logits, const float* bias, int32_t n_tokens, moe_routing r, int32_t* experts,
                             float* weights) {
    const int32_t t = static_cast<int32_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    if (t >= n_tokens) return;
    const float* l = logits + static_cast<size_t>(t) * r.n_experts;
    float probs[TROUPE_CUDA_MAX_EXPERTS];
    if (r.gating == 1) {
        float max = l[0];
        for (int32_t e = 1; e < r.n_experts; ++e) max = fmaxf(max, l[e]);
        float sum = 0.0f;
        for (int32_t e = 0; e < r.n_experts; ++e) sum += probs[e] = expf(l[e] - max);
        for (int32_t e = 0; e < r.n_experts; ++e) probs[e] /= sum;
    } else {
        for (int32_t e = 0; e < r.n_experts; ++e) probs[e] = 1.0f / (1.0f + expf(-l[e]));
    }
    int32_t* chosen = experts + static_cast<size_t>(t) * r.n_used;
    float* w = weights + static_cast<size_t>(t) * r.n_used;
    // The n_used largest scores, largest first, ties to the lower id (route_tokens' passes).
    for (int32_t s = 0; s < r.n_used; ++s) {
        int32_t best = -1;
        float best_score = 0.0f;
        for (int32_t e = 0; e < r.n_experts; ++e) {
            bool taken = false;
            for (int32_t j = 0; j < s; ++j) taken = taken || chosen[j] == e;
            if (taken) continue;
            const float score = bias ? probs[e] + bias[e] : probs[e];
            if (best < 0 || score > best_score) best = e, best_score = score;
        }
        chosen[s] = best;
        w[s] = probs[best];
    }
    if (r.norm_weights) {
        float sum = 0.0f;
        for (int32_t s = 0; s < r.n_used; ++s) sum += w[s];
        for (int32_t s = 0; s < r.n_used; ++s) w[s] /= sum;
    }
    if (r.weights_scale != 1.0f) {
        for (int32_t s = 0; s < r.n_used; ++s) w[s] *= r.weights_scale;
    }
}

// grid (ceil(ffn / moe_glu_rows), n_pairs), block moe_warps warps.
template <class w_t>
__global__ void __launch_bounds__(moe_warps* warp_size)
    moe_glu_kernel(const w_t* gate_exps, const w_t* up_exps, int64_t dim, int64_t ffn, const float* x,
                   const int32_t* experts, int32_t n_used, glu_kind glu, float* hidden, int32_t pair_base) {
    __shared__ float up_sh[moe_glu_rows];
    const int warp = threadIdx.x / warp_size;
    const int lane = threadIdx.x % warp_size;
    const int32_t pair = pair_base + static_cast<int32_t>(blockIdx.y);
    const int64_t e = experts[pair];
    const int is_up = warp / moe_glu_rows;
    const int64_t o = static_cast<int64_t>(blockIdx.x) * moe_glu_rows + warp % moe_glu_rows;
    const bool has_row = o < ffn;
    float sum[1] = {0.0f};
    if (has_row) {
        const w_t* row = (is_up ? up_exps : gate_exps) + (e * ffn + o) * dim;
        row_dot<w_t, 1, moe_in_flight>(row, dim, x + static_cast<int64_t>(pair / n_used) * dim, lane, sum);
    }
    const float total = warp_sum(sum[0]);
    if (is_up && lane == 0) up_sh[warp % moe_glu_rows] = total;
    __syncthreads();
    if (is_up || !has_row || lane != 0) return;
    const float u = up_sh[warp];
    hidden[static_cast<int64_t>(pair) * ffn + o] = glu == glu_kind::silu ? silu_times(total, u) : gelu_times(total, u);
}

// grid (ceil(dim / moe_warps), n_pairs), block moe_warps warps: warp w makes output o of its pair.
template <class w_t>
__global__ void __launch_bounds__(moe_warps* warp_size)
    moe_down_kernel(const w_t* down_exps, int64_t ffn, int64_t dim, const float* hidden, const int32_t* experts,
                    float* out, int32_t pair_base) {
    const int lane = threadIdx.x % warp_size;
    const int32_t pair = pair_base + static_cast<int32_t>(blockIdx.y);
    const int64_t o = static_cast<int64_t>(blockIdx.x) * moe_warps + threadIdx.x / warp_size;
    if (o >= dim) return;  // whole warp
    const int64_t e = experts[pair];
    float sum[1] = {0.0f};
    row_dot<w_t, 1, moe_in_flight>(down_exps + (e * dim + o) * ffn, ffn, hidden + static_cast<int64_t>(pair) * ffn,
                                   lane, sum);
    const float total = warp_sum(sum[0]);
    if (lane == 0) out[static_cast<int64_t>(pair) * dim + o] = total;
}

__global__ void combine_kernel(const float* out, const float* weights, int32_t n_used, int64_t dim, const int32_t* rows,
                               float* y, int64_t n) {
    const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    if (i >= n) return;
    const int64_t t = i / dim, d = i % dim;
    float acc = 0.0f;
    for (int32_t s = 0; s < n_used; ++s) {
        const int64_t pair = t * n_used + s;
        const float w = weights[pair];
        const float v = out[(rows ? rows[pair] : pair) * dim + d];
        acc = s == 0 ? w * v : acc + w * v;
    }
    y[i] = acc;
}

__global__ void gather_kernel(const float* x, const int32_t* token_of, int64_t dim, float* xg, int64_t n) {
    const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    if (i >= n) return;
    const int64_t r = i / dim, d = i % dim;
    xg[i] = x[static_cast<int64_t>(token_of[r]) * dim + d];
}

template <class w_t>
void moe_glu_of(const void* gate_exps, const void* up_exps, int64_t dim, int64_t ffn, const float* x,
                const int32_t* experts, int32_t n_pairs, int32_t n_used, glu_kind glu, float* hidden,
                cudaStream_t stream) {
    for (int32_t base = 0; base < n_pairs; base += max_grid_y) {
        const dim3 grid(blocks_for(ffn, moe_glu_rows), std::min(max_grid_y, n_pairs - base));
        moe_glu_kernel<w_t><<<grid, moe_warps * warp_size, 0, stream>>>(static_cast<const w_t*>(gate_exps),
                                                                        static_cast<const w_t*>(up_exps), dim, ffn, x,
                                                                        experts, n_used, glu, hidden, base);
    }
}

template <class w_t>
void moe_down_of(const void* down_exps, int64_t ffn, int64_t dim, const float* hidden, const int32_t* experts,
                 int32_t n_pairs, float* out, cudaStream_t stream) {
    for (int32_t base = 0; base < n_pairs; base += max_grid_y) {
        const dim3 grid(blocks_for(dim, moe_warps), std::min(max_grid_y, n_pairs - base));
        moe_down_kernel<w_t><<<grid, moe_warps * warp_size, 0, stream>>>(static_cast<const w_t*>(down_exps), ffn, dim,
                                                                         hidden, experts, out, base);
    }
}

}  // namespace

void launch_moe_route(const float* logits, const float* bias, int32_t n_tokens, const moe_routing& r, int32_t* experts,
                      float* weights, cudaStream_t stream) {
    if (n_tokens == 0) return;
    route_kernel<<<blocks_for(n_tokens, 64), 64, 0, stream>>>(logits, bias, n_tokens, r, experts, weights);
}

void launch_moe_glu(dtype w_type, const void* gate_exps, const void* up_exps, int64_t dim, int64_t ffn, const float* x,
                    const int32_t* experts, int32_t n_pairs, int32_t n_used, glu_kind glu, float* hidden,
                    cudaStream_t stream) {
    if (n_pairs == 0) return;
    switch (w_type) {
        case dtype::f32:
            moe_glu_of<float>(gate_exps, up_exps, dim, ffn, x, experts, n_pairs, n_used, glu, hidden, stream);
            break;
        case dtype::f16:
            moe_glu_of<__half>(gate_exps, up_exps, dim, ffn, x, experts, n_pairs, n_used, glu, hidden, stream);
            break;
        case dtype::bf16:
            moe_glu_of<__nv_bfloat16>(gate_exps, up_exps, dim, ffn, x, experts, n_pairs, n_used, glu, hidden, stream);
            break;
    }
}

void launch_moe_down(dtype w_type, const void* down_exps, int64_t ffn, int64_t dim, const float* hidden,
                     const int32_t* experts, int32_t n_pairs, float* out, cudaStream_t stream) {
    if (n_pairs == 0) return;
    switch (w_type) {
        case dtype::f32:
            moe_down_of<float>(down_exps, ffn, dim, hidden, experts, n_pairs, out, stream);
            break;
        case dtype::f16:
            moe_down_of<__half>(down_exps, ffn, dim, hidden, experts, n_pairs, out, stream);
            break;
        case dtype::bf16:
            moe_down_of<__nv_bfloat16>(down_exps, ffn, dim, hidden, experts, n_pairs, out, stream);
            break;
    }
}

void launch_moe_combine(const float* out, const float* weights, int32_t n_tokens, int32_t n_used, int64_t dim,
                        const int32_t* rows, float* y, cudaStream_t stream) {
    const int64_t n = static_cast<int64_t>(n_tokens) * dim;
    if (n == 0) return;
    combine_kernel<<<blocks_for(n, 256), 256, 0, stream>>>(out, weights, n_used, dim, rows, y, n);
}

void launch_moe_gather(const float* x, const int32_t* token_of, int32_t n_rows, int64_t dim, float* xg,
                       cudaStream_t stream) {
    const int64_t n = static_cast<int64_t>(n_rows) * dim;
    if (n == 0) return;
    gather_kernel<<<blocks_for(n, 256), 256, 0, stream>>>(x, token_of, dim, xg, n);
}

}  // namespace troupe::cuda
