// Multi-head latent attention's kernels (declarations and the math: cuda_mla.h). Decode shares a (token, head)'s rows
// among up to mla_max_splits warps, merged afterwards; prefill re-reads each row once per query (no tiles yet). The
// latent row is the whole of what a token keeps per layer, so decode reads R + rope_dim numbers per row where MHA
// would read 2 H head_dim.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>

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

// A warp per (token, head, split): the online softmax over the split's share of the rows the token sees (rows
// [split * n / n_splits, (split + 1) * n / n_splits) of its n = last row + 1; a warp-uniform loop), each lane holding
// elements lane, lane + 32, ... of the query and of the accumulated c. One split writes the normalized output; several
// write their records {m, l, unnormalized acc[R]} for mla_merge_kernel.
template <class kv_t>
__global__ void mla_attend_kernel(const float* q_lat, float* o_lat, mla_dims d, float scale, kv_tables tb,
                                  const kv_t* pool, int32_t n_items, int32_t n_splits, float* records) {
    const int32_t lane = threadIdx.x % warp_size;
    const int32_t w = blockIdx.x * warps_per_block + threadIdx.x / warp_size;
    if (w >= n_items * n_splits) return;
    const int32_t item = w / n_splits, split = w % n_splits;
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
    const int64_t n_rows = last_row(tb, t) + 1;
    const auto j0 = static_cast<int32_t>(n_rows * split / n_splits);
    const auto j1 = static_cast<int32_t>(n_rows * (split + 1) / n_splits);
    for (int32_t j = j0; j < j1; ++j) {
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
    if (n_splits == 1) {
        float* out = o_lat + static_cast<size_t>(item) * rank;
        const float inv = 1.0f / l;
#pragma unroll
        for (int k = 0; k < per_lane; ++k) {
            const int32_t e = lane + warp_size * k;
            if (e < rank) out[e] = acc[k] * inv;
        }
        return;
    }
    float* rec = records + static_cast<size_t>(w) * (rank + 2);
    if (lane == 0) rec[0] = m, rec[1] = l;
#pragma unroll
    for (int k = 0; k < per_lane; ++k) {
        const int32_t e = lane + warp_size * k;
        if (e < rank) rec[2 + e] = acc[k];
    }
}

// A warp per (token, head): its splits' records merged exactly, M = max m_s, out = sum_s e^(m_s - M) acc_s /
// sum_s e^(m_s - M) l_s, the splits in order (a split that saw no row has m = -inf and weighs 0).
__global__ void mla_merge_kernel(const float* records, float* o_lat, int32_t rank, int32_t n_items, int32_t n_splits) {
    const int32_t lane = threadIdx.x % warp_size;
    const int32_t item = blockIdx.x * warps_per_block + threadIdx.x / warp_size;
    if (item >= n_items) return;
    const float* rec = records + static_cast<size_t>(item) * n_splits * (rank + 2);
    const float m_s = lane < n_splits ? rec[static_cast<size_t>(lane) * (rank + 2)] : -INFINITY;
    const float l_s = lane < n_splits ? rec[static_cast<size_t>(lane) * (rank + 2) + 1] : 0.0f;
    const float big = warp_max(m_s);
    const float weight = lane < n_splits && m_s != -INFINITY ? expf(m_s - big) : 0.0f;
    const float inv = 1.0f / warp_sum(weight * l_s);
    float* out = o_lat + static_cast<size_t>(item) * rank;
    for (int32_t e = lane; e < rank; e += warp_size) {
        float sum = 0.0f;
        for (int32_t s = 0; s < n_splits; ++s) {
            const float w_s = __shfl_sync(full_mask, weight, s);
            if (w_s != 0.0f) sum += w_s * rec[static_cast<size_t>(s) * (rank + 2) + 2 + e];
        }
        out[e] = sum * inv;
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

int32_t mla_attend_splits(int32_t n_tokens, int32_t n_heads) {
    const int64_t items = static_cast<int64_t>(n_tokens) * n_heads;
    if (items == 0 || items > mla_max_split_records / 2) return 1;
    return static_cast<int32_t>(std::min<int64_t>(mla_max_splits, mla_max_split_records / items));
}

void launch_mla_attend(const float* q_lat, float* o_lat, int32_t n_tokens, const mla_dims& d, float scale,
                       const kv_tables& tables, bool kv_f16, const void* pool, float* split_scratch,
                       cudaStream_t stream) {
    const int32_t n_items = n_tokens * d.n_heads;
    if (n_items == 0) return;
    const int32_t n_splits = split_scratch ? mla_attend_splits(n_tokens, d.n_heads) : 1;
    const int32_t blocks = blocks_for(static_cast<int64_t>(n_items) * n_splits, warps_per_block);
    if (kv_f16) {
        mla_attend_kernel<__half><<<blocks, warps_per_block * warp_size, 0, stream>>>(
            q_lat, o_lat, d, scale, tables, static_cast<const __half*>(pool), n_items, n_splits, split_scratch);
    } else {
        mla_attend_kernel<float><<<blocks, warps_per_block * warp_size, 0, stream>>>(
            q_lat, o_lat, d, scale, tables, static_cast<const float*>(pool), n_items, n_splits, split_scratch);
    }
    if (n_splits > 1) {
        mla_merge_kernel<<<blocks_for(n_items, warps_per_block), warps_per_block * warp_size, 0, stream>>>(
            split_scratch, o_lat, d.kv_lora_rank, n_items, n_splits);
    }
}

void launch_mla_expand(const float* o_lat, dtype wkv_b_type, const void* wkv_b, int32_t n_tokens, const mla_dims& d,
                       float* out, cudaStream_t stream) {
    if (n_tokens == 0) return;
    by_weight_type<expand_launch>(wkv_b_type, o_lat, wkv_b, n_tokens, d, out, stream);
}

}  // namespace troupe::cuda
