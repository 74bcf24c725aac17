// Multi-head latent attention's kernels (declarations and the math: cuda_mla.h). Written for correctness first: one
// warp walks a (token, head)'s rows alone, and prefill re-reads each row once per query. The latent row is the whole
// of what a token keeps per layer, so decode reads R + rope_dim numbers per row where MHA would read 2 H head_dim.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include "kernels/cuda/cuda_device.cuh"
#include "kernels/cuda/cuda_gemv.cuh"
#include "kernels/cuda/cuda_mla.h"

namespace troupe::cuda {
namespace {

using namespace device;

constexpr int prepare_threads = 256;
constexpr int warps_per_block = 4;
constexpr int per_lane = mla_max_latent / warp_size;  // a row's elements per lane

// Pair i of x rotated by (sin, cos) as mla_block.cpp's rotate, its products and sums rounded one by one as the host's.
__device__ __forceinline__ void rotate_pair(float* x, int32_t i, float s, float c) {
    const float x0 = x[2 * i], x1 = x[2 * i + 1];
    x[2 * i] = __fsub_rn(__fmul_rn(x0, c), __fmul_rn(x1, s));
    x[2 * i + 1] = __fadd_rn(__fmul_rn(x0, s), __fmul_rn(x1, c));
}

// Block t: token t's latent normed, its RoPE key and each head's RoPE query dims rotated, the latent row stored.
template <class kv_t>
__global__ void mla_prepare_kernel(float* q, float* latent, mla_dims d, const float* norm_w, float eps, mla_rope rope,
                                   kv_tables tb, kv_t* pool) {
    __shared__ float partial[prepare_threads / warp_size];
    __shared__ float sin_sh[mla_max_latent / 2], cos_sh[mla_max_latent / 2];
    const int32_t t = blockIdx.x;
    const int32_t rank = d.kv_lora_rank, width = (d.kv_lora_rank + d.rope_dim), half = d.rope_dim / 2;
    float* row = latent + static_cast<size_t>(t) * width;
    float sum = 0.0f;
    for (int32_t i = threadIdx.x; i < rank; i += blockDim.x) sum += row[i] * row[i];
    sum = warp_sum(sum);
    if (threadIdx.x % warp_size == 0) partial[threadIdx.x / warp_size] = sum;
    const int32_t position = tb.positions[t];
    for (int32_t i = threadIdx.x; i < half; i += blockDim.x) {
        float theta = __fmul_rn(static_cast<float>(position), rope.freq[i]);
        if (rope.yarn_factor != 1.0f) {
            const float ramp = rope.ramp[i];
            theta =
                __fadd_rn(__fmul_rn(__fdiv_rn(theta, rope.yarn_factor), __fsub_rn(1.0f, ramp)), __fmul_rn(theta, ramp));
        }
        sincosf(theta, &sin_sh[i], &cos_sh[i]);
    }
    __syncthreads();
    float total = 0.0f;
    for (int i = 0; i < prepare_threads / warp_size; ++i) total += partial[i];
    const float inv = rsqrtf(total / rank + eps);
    for (int32_t i = threadIdx.x; i < rank; i += blockDim.x) row[i] = row[i] * inv * norm_w[i];
    for (int32_t i = threadIdx.x; i < half; i += blockDim.x) rotate_pair(row + rank, i, sin_sh[i], cos_sh[i]);
    const int32_t head_dim = d.qk_nope + d.rope_dim;
    for (int32_t p = threadIdx.x; p < d.n_heads * half; p += blockDim.x) {
        const int32_t h = p / half, i = p % half;
        rotate_pair(q + (static_cast<size_t>(t) * d.n_heads + h) * head_dim + d.qk_nope, i, sin_sh[i], cos_sh[i]);
    }
    __syncthreads();  // the row's normed and rotated elements are written before they are stored
    const int32_t at = tb.rows != nullptr ? tb.rows[t] : position;
    const size_t dst = cache_row(tb, tb.seq_of[t], at, width);
    for (int32_t i = threadIdx.x; i < width; i += blockDim.x) store_kv(pool, dst + i, row[i]);
}

// Block (item = token * H + head, chunk): element r of q_lat[item] = W_UK_h^T q_nope (r < R) or q_pe (r >= R).
template <class w_t>
__global__ void mla_absorb_kernel(const float* q, const w_t* wkv_b, mla_dims d, float* q_lat) {
    const int32_t item = blockIdx.x;
    const int32_t h = item % d.n_heads;
    const int32_t r = blockIdx.y * blockDim.x + threadIdx.x;
    const int32_t rank = d.kv_lora_rank, width = (d.kv_lora_rank + d.rope_dim), head_dim = d.qk_nope + d.rope_dim;
    if (r >= width) return;
    const float* qh = q + static_cast<size_t>(item) * head_dim;
    float out;
    if (r < rank) {
        const w_t* w_uk = wkv_b + static_cast<size_t>(h) * (d.qk_nope + d.v_dim) * rank + r;  // column r of W_UK_h
        float s = 0.0f;
        for (int32_t i = 0; i < d.qk_nope; ++i)
            s += qh[i] * gemv_traits<w_t>::weight(w_uk, static_cast<int64_t>(i) * rank);
        out = s;
    } else {
        out = qh[d.qk_nope + r - rank];
    }
    q_lat[static_cast<size_t>(item) * width + r] = out;
}

// A warp per (token, head): the online softmax over the rows the token sees (warp-uniform loop), each lane holding
// elements lane, lane + 32, ... of the query and of the accumulated c.
template <class kv_t>
__global__ void mla_attend_kernel(const float* q_lat, float* o_lat, mla_dims d, float scale, kv_tables tb,
                                  const kv_t* pool, int32_t n_items) {
    const int32_t lane = threadIdx.x % warp_size;
    const int32_t item = blockIdx.x * warps_per_block + threadIdx.x / warp_size;
    if (item >= n_items) return;
    const int32_t t = item / d.n_heads;
    const int32_t rank = d.kv_lora_rank, width = (d.kv_lora_rank + d.rope_dim);
    float qv[per_lane], acc[per_lane];
    const float* qr = q_lat + static_cast<size_t>(item) * width;
#pragma unroll
    for (int k = 0; k < per_lane; ++k) {
        const int32_t e = lane + warp_size * k;
        qv[k] = e < width ? qr[e] : 0.0f;
        acc[k] = 0.0f;
    }
    float m = -INFINITY, l = 0.0f;
    const int32_t seq = tb.seq_of[t];
    const int32_t last = last_row(tb, t);
    for (int32_t j = 0; j <= last; ++j) {
        if (!sees(tb, t, j, 0)) continue;
        const kv_t* row = pool + cache_row(tb, seq, j, width);
        float dot = 0.0f;
#pragma unroll
        for (int k = 0; k < per_lane; ++k) {
            const int32_t e = lane + warp_size * k;
            if (e < width) dot += qv[k] * load_kv(row, e);
        }
        const float s = warp_sum(dot) * scale;
        const float m_new = fmaxf(m, s);
        const float correction = expf(m - m_new);  // 0 at the first row (m = -inf)
        const float p = expf(s - m_new);
        l = l * correction + p;
#pragma unroll
        for (int k = 0; k < per_lane; ++k) {
            const int32_t e = lane + warp_size * k;
            if (e < rank) acc[k] = acc[k] * correction + p * load_kv(row, e);
        }
        m = m_new;
    }
    float* out = o_lat + static_cast<size_t>(item) * rank;
    const float inv = 1.0f / l;
#pragma unroll
    for (int k = 0; k < per_lane; ++k) {
        const int32_t e = lane + warp_size * k;
        if (e < rank) out[e] = acc[k] * inv;
    }
}

// A warp per output (token, head, v): row v of W_UV_h . o_lat[token, head].
template <class w_t>
__global__ void mla_expand_kernel(const float* o_lat, const w_t* wkv_b, mla_dims d, float* out, int64_t n_items) {
    const int32_t lane = threadIdx.x % warp_size;
    const int64_t item = static_cast<int64_t>(blockIdx.x) * warps_per_block + threadIdx.x / warp_size;
    if (item >= n_items) return;
    const int32_t v = static_cast<int32_t>(item % d.v_dim);
    const int64_t th = item / d.v_dim;  // token * H + head
    const int32_t h = static_cast<int32_t>(th % d.n_heads);
    const int32_t rank = d.kv_lora_rank;
    const w_t* w_uv = wkv_b + (static_cast<size_t>(h) * (d.qk_nope + d.v_dim) + d.qk_nope + v) * rank;
    const float* o = o_lat + static_cast<size_t>(th) * rank;
    float s = 0.0f;
    for (int32_t r = lane; r < rank; r += warp_size) s += gemv_traits<w_t>::weight(w_uv, r) * o[r];
    s = warp_sum(s);
    if (lane == 0) out[static_cast<size_t>(th) * d.v_dim + v] = s;
}

template <template <class> class launch, class... args_t>
void by_weight_type(dtype type, args_t&&... args) {
    switch (type) {
        case dtype::f32:
            launch<float>::run(args...);
            return;
        case dtype::f16:
            launch<__half>::run(args...);
            return;
        case dtype::bf16:
            launch<__nv_bfloat16>::run(args...);
            return;
    }
}

template <class w_t>
struct absorb_launch {
    static void run(const float* q, const void* wkv_b, int32_t n_tokens, const mla_dims& d, float* q_lat,
                    cudaStream_t stream) {
        const dim3 grid(static_cast<unsigned>(n_tokens) * d.n_heads, blocks_for((d.kv_lora_rank + d.rope_dim), 128));
        mla_absorb_kernel<w_t><<<grid, 128, 0, stream>>>(q, static_cast<const w_t*>(wkv_b), d, q_lat);
    }
};

template <class w_t>
struct expand_launch {
    static void run(const float* o_lat, const void* wkv_b, int32_t n_tokens, const mla_dims& d, float* out,
                    cudaStream_t stream) {
        const int64_t n_items = static_cast<int64_t>(n_tokens) * d.n_heads * d.v_dim;
        mla_expand_kernel<w_t><<<blocks_for(n_items, warps_per_block), warps_per_block * warp_size, 0, stream>>>(
            o_lat, static_cast<const w_t*>(wkv_b), d, out, n_items);
    }
};

}  // namespace

void launch_mla_prepare(float* q, float* latent, int32_t n_tokens, const mla_dims& d, const float* kv_a_norm, float eps,
                        const mla_rope& rope, const kv_tables& tables, bool kv_f16, void* pool, cudaStream_t stream) {
    if (n_tokens == 0) return;
    if (kv_f16) {
        mla_prepare_kernel<__half><<<n_tokens, prepare_threads, 0, stream>>>(q, latent, d, kv_a_norm, eps, rope, tables,
                                                                             static_cast<__half*>(pool));
    } else {
        mla_prepare_kernel<float><<<n_tokens, prepare_threads, 0, stream>>>(q, latent, d, kv_a_norm, eps, rope, tables,
                                                                            static_cast<float*>(pool));
    }
}

void launch_mla_absorb(const float* q, dtype wkv_b_type, const void* wkv_b, int32_t n_tokens, const mla_dims& d,
                       float* q_lat, cudaStream_t stream) {
    if (n_tokens == 0) return;
    by_weight_type<absorb_launch>(wkv_b_type, q, wkv_b, n_tokens, d, q_lat, stream);
}

void launch_mla_attend(const float* q_lat, float* o_lat, int32_t n_tokens, const mla_dims& d, float scale,
                       const kv_tables& tables, bool kv_f16, const void* pool, cudaStream_t stream) {
    const int32_t n_items = n_tokens * d.n_heads;
    if (n_items == 0) return;
    const int32_t blocks = blocks_for(n_items, warps_per_block);
    if (kv_f16) {
        mla_attend_kernel<__half><<<blocks, warps_per_block * warp_size, 0, stream>>>(
            q_lat, o_lat, d, scale, tables, static_cast<const __half*>(pool), n_items);
    } else {
        mla_attend_kernel<float><<<blocks, warps_per_block * warp_size, 0, stream>>>(
            q_lat, o_lat, d, scale, tables, static_cast<const float*>(pool), n_items);
    }
}

void launch_mla_expand(const float* o_lat, dtype wkv_b_type, const void* wkv_b, int32_t n_tokens, const mla_dims& d,
                       float* out, cudaStream_t stream) {
    if (n_tokens == 0) return;
    by_weight_type<expand_launch>(wkv_b_type, o_lat, wkv_b, n_tokens, d, out, stream);
}

}  // namespace troupe::cuda
