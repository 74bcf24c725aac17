// The CUDA kernels of the Llama forward (declarations and shapes: cuda_kernels.h).
//
// Written for obvious correctness first: one thread per element for elementwise work, one block per
// row for reductions, one warp per (token, head) for attention with an online softmax (so any context
// length works without shared memory limits). Where that was measured far from the H200's limits, a kernel
// shaped for the job: decode's products read each weight row once for all tokens (gemv_kernel), prefill's
// attention shares each key among 32 queries (attention_tiled_kernel). Every kernel has a CPU twin in tests/cuda/.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include "kernels/cuda/cuda_kernels.h"

namespace troupe::cuda {
namespace {

constexpr unsigned full_mask = 0xffffffffu;
constexpr int warp_size = 32;

__device__ __forceinline__ float load_as_float(dtype type, const void* p, int64_t i) {
    switch (type) {
        case dtype::f32:
            return static_cast<const float*>(p)[i];
        case dtype::f16:
            return __half2float(static_cast<const __half*>(p)[i]);
        case dtype::bf16:
            return __bfloat162float(static_cast<const __nv_bfloat16*>(p)[i]);
    }
    return 0.0f;
}

__device__ __forceinline__ float warp_sum(float v) {
    for (int o = warp_size / 2; o > 0; o /= 2) v += __shfl_xor_sync(full_mask, v, o);
    return v;
}

__device__ __forceinline__ float warp_max(float v) {
    for (int o = warp_size / 2; o > 0; o /= 2) v = fmaxf(v, __shfl_xor_sync(full_mask, v, o));
    return v;
}

__device__ __forceinline__ float load_kv(const float* pool, size_t i) {
    return pool[i];
}
__device__ __forceinline__ float load_kv(const __half* pool, size_t i) {
    return __half2float(pool[i]);
}
__device__ __forceinline__ void store_kv(float* pool, size_t i, float v) {
    pool[i] = v;
}
__device__ __forceinline__ void store_kv(__half* pool, size_t i, float v) {
    pool[i] = __float2half_rn(v);
}

// First element of the cache row of (sequence s, position p).
__device__ __forceinline__ size_t cache_row(const kv_tables& tb, int32_t seq, int32_t pos, int32_t kv_width) {
    const int32_t block = tb.block_tables[tb.block_table_offsets[seq] + pos / tb.block_size];
    return (static_cast<size_t>(block) * tb.block_size + pos % tb.block_size) * kv_width;
}

// Whether token t sees cache row j, for j <= its last row. `first` is the oldest position inside its window (0
// without one). Causal calls: rows are positions, so row j is seen from `first` on. Tree calls: the prefix rows
// (j < mask_base) are positions too; the rows its mask names are its ancestors and itself by depth, the k-th of
// them (ascending) at position mask_base + k (core/model/ops.h), seen when that position is inside the window.
__device__ __forceinline__ bool sees(const kv_tables& tb, int32_t t, int32_t j, int32_t first) {
    if (tb.rows == nullptr) return j >= first;
    const int32_t base = tb.mask_base[t];
    if (j < base) return j >= first;
    const int32_t bit = j - base;
    if (bit >= 64 * tb.mask_words) return false;
    const uint64_t* words = tb.mask + static_cast<size_t>(t) * tb.mask_words;
    if (((words[bit / 64] >> (bit % 64)) & 1u) == 0) return false;
    if (first <= base) return true;  // every masked row's position (>= mask_base) is inside the window
    int32_t rank = 0;                // masked rows below j
    for (int32_t w = 0; w < bit / 64; ++w) rank += __popcll(words[w]);
    if (bit % 64 != 0) rank += __popcll(words[bit / 64] & ((uint64_t{1} << (bit % 64)) - 1));
    return base + rank >= first;
}

// The highest cache row token t sees: its position, or in a tree call the last of its prefix and mask.
__device__ __forceinline__ int32_t last_row(const kv_tables& tb, int32_t t) {
    if (tb.rows == nullptr) return tb.positions[t];
    for (int32_t w = tb.mask_words - 1; w >= 0; --w) {
        const uint64_t bits = tb.mask[static_cast<size_t>(t) * tb.mask_words + w];
        if (bits != 0) return tb.mask_base[t] + 64 * w + 63 - __clzll(static_cast<long long>(bits));
    }
    return tb.mask_base[t] - 1;
}

int32_t blocks_for(int64_t n, int32_t per_block) {
    return static_cast<int32_t>((n + per_block - 1) / per_block);
}

// grid: n_tokens, block: 256
__global__ void embed_kernel(dtype type, const void* table, int64_t dim, const int32_t* tokens, float* out) {
    const int32_t t = blockIdx.x;
    const int64_t base = static_cast<int64_t>(tokens[t]) * dim;
    for (int64_t d = threadIdx.x; d < dim; d += blockDim.x) out[t * dim + d] = load_as_float(type, table, base + d);
}

// grid: n_rows, block: rms_norm_threads. A row of a few thousand in two or three loads per thread: with 256 threads the
// loop's loads, one after another, made this the slowest of decode's small kernels on the H200 (8 us for 2048).
constexpr int rms_norm_threads = 1024;
__global__ void rms_norm_kernel(const float* x, const float* w, float* y, int32_t dim, float eps) {
    __shared__ float partial[rms_norm_threads / warp_size];
    const float* xr = x + static_cast<size_t>(blockIdx.x) * dim;
    float* yr = y + static_cast<size_t>(blockIdx.x) * dim;
    float sum = 0.0f;
    for (int32_t d = threadIdx.x; d < dim; d += blockDim.x) sum += xr[d] * xr[d];
    sum = warp_sum(sum);
    if (threadIdx.x % warp_size == 0) partial[threadIdx.x / warp_size] = sum;
    __syncthreads();
    float total = 0.0f;
    for (int i = 0; i < rms_norm_threads / warp_size; ++i) total += partial[i];
    const float inv = rsqrtf(total / dim + eps);
    for (int32_t d = threadIdx.x; d < dim; d += blockDim.x) yr[d] = xr[d] * inv * w[d];
}

// one thread per rotated pair: [n_tokens, n_heads, n_rot / 2]
__global__ void rope_kernel(float* x, const int32_t* positions, int64_t n_pairs, int32_t n_heads, rope_settings r) {
    const int64_t idx = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    if (idx >= n_pairs) return;
    const int32_t half = r.n_rot / 2;
    const int32_t i = static_cast<int32_t>(idx % half);
    const int64_t head = idx / half;  // token * n_heads + h
    const int64_t token = head / n_heads;
    const double theta = positions[token] * static_cast<double>(r.freq_scale) *
                         pow(static_cast<double>(r.base), -2.0 * i / static_cast<double>(r.n_rot));
    double s, c;
    sincos(theta, &s, &c);
    const float sf = static_cast<float>(s), cf = static_cast<float>(c);
    float* xh = x + head * r.head_dim;
    const int32_t a = r.neox ? i : 2 * i;
    const int32_t b = r.neox ? i + half : 2 * i + 1;
    const float x0 = xh[a], x1 = xh[b];
    xh[a] = x0 * cf - x1 * sf;
    xh[b] = x0 * sf + x1 * cf;
}

// grid: n_tokens, block: 256
template <class kv_t>
__global__ void store_kv_kernel(const float* k, const float* v, int32_t kv_width, kv_tables tb, kv_t* k_pool,
                                kv_t* v_pool) {
    const int32_t t = blockIdx.x;
    const size_t row = cache_row(tb, tb.seq_of[t], tb.rows ? tb.rows[t] : tb.positions[t], kv_width);
    for (int32_t i = threadIdx.x; i < kv_width; i += blockDim.x) {
        store_kv(k_pool, row + i, k[static_cast<size_t>(t) * kv_width + i]);
        store_kv(v_pool, row + i, v[static_cast<size_t>(t) * kv_width + i]);
    }
}

constexpr int attention_warps = 4;
constexpr int dims_per_lane = max_head_dim / warp_size;

// One warp per (token, head); lane l scores key position j0 + l of each chunk of 32, then every lane
// accumulates its head dimensions d = l + 32 i over the chunk's probabilities (online softmax: the
// running max m and sum l rescale the accumulator when a larger score arrives). In a tree call the keys
// are rows 0..last_row and those the token does not see score -inf (a chunk may have none it sees).
// With a window the rows start at the oldest position inside it (a tree call: that, or mask_base if lower);
// with softcap c each scaled score s becomes c tanh(s / c) before the softmax.
template <class kv_t>
__global__ void attention_kernel(const float* q, float* out, int32_t n_tokens, int32_t n_heads, int32_t n_kv_heads,
                                 int32_t head_dim, float scale, float softcap, int32_t window, kv_tables tb,
                                 const kv_t* k_pool, const kv_t* v_pool) {
    __shared__ float q_sh[attention_warps][max_head_dim];
    const int warp = threadIdx.x / warp_size;
    const int lane = threadIdx.x % warp_size;
    const int64_t item = static_cast<int64_t>(blockIdx.x) * attention_warps + warp;
    if (item >= static_cast<int64_t>(n_tokens) * n_heads) return;  // whole warp leaves together
    const int32_t t = static_cast<int32_t>(item / n_heads);
    const int32_t h = static_cast<int32_t>(item % n_heads);
    const int32_t kv_head = h / (n_heads / n_kv_heads);
    const int32_t kv_width = n_kv_heads * head_dim;
    const float* qh = q + item * head_dim;
    for (int32_t d = lane; d < head_dim; d += warp_size) q_sh[warp][d] = qh[d] * scale;
    __syncwarp();

    const int32_t seq = tb.seq_of[t];
    const int32_t pos = last_row(tb, t);
    const int32_t first = window > 0 ? max(0, tb.positions[t] - window + 1) : 0;
    const int32_t start = tb.rows == nullptr ? first : min(first, tb.mask_base[t]);
    float m = -INFINITY;
    float l = 0.0f;
    float acc[dims_per_lane];
#pragma unroll
    for (int i = 0; i < dims_per_lane; ++i) acc[i] = 0.0f;

    for (int32_t j0 = start; j0 <= pos; j0 += warp_size) {
        const int32_t j = j0 + lane;
        const bool seen = j <= pos && sees(tb, t, j, first);
        float score = -INFINITY;
        if (seen) {
            const kv_t* kr = k_pool + cache_row(tb, seq, j, kv_width) + static_cast<size_t>(kv_head) * head_dim;
            float dot = 0.0f;
            for (int32_t d = 0; d < head_dim; ++d) dot += q_sh[warp][d] * load_kv(kr, d);
            score = softcap > 0.0f ? softcap * tanhf(dot / softcap) : dot;
        }
        const unsigned seen_lanes = __ballot_sync(full_mask, seen);
        if (seen_lanes == 0) continue;                  // a tree call's chunk of rows the token does not see
        const float m_new = fmaxf(m, warp_max(score));  // finite: some lane sees its row
        const float correction = expf(m - m_new);       // 0 on the first chunk seen (m = -inf)
        const float p = seen ? expf(score - m_new) : 0.0f;
        l = l * correction + warp_sum(p);
#pragma unroll
        for (int i = 0; i < dims_per_lane; ++i) acc[i] *= correction;
        for (unsigned left = seen_lanes; left != 0; left &= left - 1) {
            const int32_t jj = __ffs(left) - 1;
            const float pj = __shfl_sync(full_mask, p, jj);
            const kv_t* vr = v_pool + cache_row(tb, seq, j0 + jj, kv_width) + static_cast<size_t>(kv_head) * head_dim;
#pragma unroll
            for (int i = 0; i < dims_per_lane; ++i) {
                const int32_t d = lane + warp_size * i;
                if (d < head_dim) acc[i] += pj * load_kv(vr, d);
            }
        }
        m = m_new;
    }
    float* oh = out + item * head_dim;
#pragma unroll
    for (int i = 0; i < dims_per_lane; ++i) {
        const int32_t d = lane + warp_size * i;
        if (d < head_dim) oh[d] = acc[i] / l;
    }
}

// Prefill attention, one block of 4 warps per (tile, head): a tile is up to 32 tokens of one sequence at consecutive
// positions (attention_tiles), warp w owning rows 8w..8w+7. Per chunk of 32 keys (from the first row's window start to
// the last row's position), the chunk's keys, then its values, are staged in shared memory as floats; lane l scores
// key l against each of the warp's rows (4 dims a read: q rows in shared memory, broadcast; head_dim % 4 == 0), and
// each row's online softmax runs as
// in attention_kernel, its accumulator over dims l + 32 i. Keys past a row's position or before its window score
// -inf; a row that sees none of a chunk skips it.
constexpr int tile_warps = 4;
constexpr int tile_rows_per_warp = attention_tile_rows / tile_warps;
constexpr int tile_dims_per_lane = attention_tiled_max_head_dim / warp_size;

template <class kv_t>
__global__ void attention_tiled_kernel(const float* q, float* out, int32_t n_heads, int32_t n_kv_heads,
                                       int32_t head_dim, float scale, float softcap, int32_t window, kv_tables tb,
                                       const int32_t* tiles, const kv_t* k_pool, const kv_t* v_pool) {
    // Rows of 4-float vectors; the staged keys' stride of 132 floats keeps a quarter-warp's 16-byte reads of 8 rows
    // on distinct banks.
    __shared__ __align__(16) float q_sh[attention_tile_rows][attention_tiled_max_head_dim];
    __shared__ __align__(16) float kv_sh[warp_size][attention_tiled_max_head_dim + 4];
    const int32_t t0 = tiles[2 * blockIdx.x];
    const int32_t n_rows = tiles[2 * blockIdx.x + 1];
    if (n_rows == 0) return;  // padding (the whole block leaves together)
    const int32_t h = blockIdx.y;
    const int32_t kv_head = h / (n_heads / n_kv_heads);
    const int32_t kv_width = n_kv_heads * head_dim;
    const int32_t seq = tb.seq_of[t0];
    const int warp = threadIdx.x / warp_size;
    const int lane = threadIdx.x % warp_size;

    for (int32_t r = warp; r < attention_tile_rows; r += tile_warps) {
        const float* qr = q + (static_cast<size_t>(t0 + r) * n_heads + h) * head_dim;
        for (int32_t d = lane; d < head_dim; d += warp_size) q_sh[r][d] = r < n_rows ? qr[d] * scale : 0.0f;
    }
    int32_t pos[tile_rows_per_warp], first[tile_rows_per_warp];
    float m[tile_rows_per_warp], l[tile_rows_per_warp], acc[tile_rows_per_warp][tile_dims_per_lane];
#pragma unroll
    for (int i = 0; i < tile_rows_per_warp; ++i) {
        const int32_t r = warp * tile_rows_per_warp + i;
        pos[i] = r < n_rows ? tb.positions[t0 + r] : -1;  // -1: a row past the tile sees nothing
        first[i] = window > 0 ? max(0, pos[i] - window + 1) : 0;
        m[i] = -INFINITY;
        l[i] = 0.0f;
#pragma unroll
        for (int c = 0; c < tile_dims_per_lane; ++c) acc[i][c] = 0.0f;
    }
    const int32_t lo = window > 0 ? max(0, tb.positions[t0] - window + 1) : 0;
    const int32_t hi = tb.positions[t0 + n_rows - 1];
    // Rows j0..j0+31 of one pool's kv_head (zeros past hi) go through registers into shared memory: all of a
    // thread's loads are issued together, and each chunk's loads are in flight while the chunk before computes (its
    // values during its scores, the next chunk's keys during its values), so the memory's latency is paid once.
    constexpr int stage_rows = warp_size / tile_warps;  // rows of a chunk each warp stages
    using stage_regs = float[stage_rows][tile_dims_per_lane];
    const auto fetch = [&](const kv_t* pool, int32_t j0, stage_regs& buf) {
#pragma unroll
        for (int r = 0; r < stage_rows; ++r) {
            const int32_t j = j0 + warp + tile_warps * r;
            const kv_t* row =
                j <= hi ? pool + cache_row(tb, seq, j, kv_width) + static_cast<size_t>(kv_head) * head_dim : nullptr;
#pragma unroll
            for (int c = 0; c < tile_dims_per_lane; ++c) {
                const int32_t d = lane + warp_size * c;
                buf[r][c] = row != nullptr && d < head_dim ? load_kv(row, d) : 0.0f;
            }
        }
    };
    const auto store = [&](const stage_regs& buf) {
#pragma unroll
        for (int r = 0; r < stage_rows; ++r) {
#pragma unroll
            for (int c = 0; c < tile_dims_per_lane; ++c) {
                const int32_t d = lane + warp_size * c;
                if (d < head_dim) kv_sh[warp + tile_warps * r][d] = buf[r][c];
            }
        }
    };
    stage_regs keys, values;
    fetch(k_pool, lo, keys);
    __syncthreads();

    for (int32_t j0 = lo; j0 <= hi; j0 += warp_size) {
        store(keys);
        fetch(v_pool, j0, values);
        __syncthreads();
        const int32_t j = j0 + lane;
        float dot[tile_rows_per_warp];
#pragma unroll
        for (int i = 0; i < tile_rows_per_warp; ++i) dot[i] = 0.0f;
        const float4* k4 = reinterpret_cast<const float4*>(kv_sh[lane]);
        for (int32_t d4 = 0; d4 < head_dim / 4; ++d4) {
            const float4 kd = k4[d4];
#pragma unroll
            for (int i = 0; i < tile_rows_per_warp; ++i) {
                const float4 qd = reinterpret_cast<const float4*>(q_sh[warp * tile_rows_per_warp + i])[d4];
                dot[i] += qd.x * kd.x + qd.y * kd.y + qd.z * kd.z + qd.w * kd.w;
            }
        }
        float p[tile_rows_per_warp];
#pragma unroll
        for (int i = 0; i < tile_rows_per_warp; ++i) {
            const bool seen = j <= pos[i] && j >= first[i];
            const float score = seen ? (softcap > 0.0f ? softcap * tanhf(dot[i] / softcap) : dot[i]) : -INFINITY;
            const float chunk_max = warp_max(score);
            p[i] = 0.0f;
            if (chunk_max == -INFINITY) continue;  // the row sees none of these keys (warp-uniform)
            const float m_new = fmaxf(m[i], chunk_max);
            const float correction = expf(m[i] - m_new);  // 0 on the row's first chunk (m = -inf)
            p[i] = seen ? expf(score - m_new) : 0.0f;
            l[i] = l[i] * correction + warp_sum(p[i]);
#pragma unroll
            for (int c = 0; c < tile_dims_per_lane; ++c) acc[i][c] *= correction;
            m[i] = m_new;
        }
        if (j0 + warp_size <= hi) fetch(k_pool, j0 + warp_size, keys);
        __syncthreads();
        store(values);
        __syncthreads();
        for (int32_t jj = 0; jj < warp_size; ++jj) {
            float pj[tile_rows_per_warp];
#pragma unroll
            for (int i = 0; i < tile_rows_per_warp; ++i) pj[i] = __shfl_sync(full_mask, p[i], jj);
#pragma unroll
            for (int c = 0; c < tile_dims_per_lane; ++c) {
                const int32_t d = lane + warp_size * c;
                const float vd = d < head_dim ? kv_sh[jj][d] : 0.0f;
#pragma unroll
                for (int i = 0; i < tile_rows_per_warp; ++i) acc[i][c] += pj[i] * vd;
            }
        }
        __syncthreads();
    }
#pragma unroll
    for (int i = 0; i < tile_rows_per_warp; ++i) {
        const int32_t r = warp * tile_rows_per_warp + i;
        if (r >= n_rows) continue;
        float* orow = out + (static_cast<size_t>(t0 + r) * n_heads + h) * head_dim;
#pragma unroll
        for (int c = 0; c < tile_dims_per_lane; ++c) {
            const int32_t d = lane + warp_size * c;
            if (d < head_dim) orow[d] = acc[i][c] / l[i];
        }
    }
}

// Decode's products (launch_gemv): one warp per output row, the row read once in 16-byte loads (4 in flight per lane)
// for all n_tokens (<= gemv_max_tokens) activation rows, each rounded to the weight's type as it is read; a warp sum
// per token. Rows whose length is not a multiple of a 16-byte vector (or whose start is not aligned to one) take the
// element-by-element loop.
template <class w_t>
struct gemv_traits;
template <>
struct gemv_traits<float> {
    static constexpr int per_vector = 4;
    __device__ static float weight(const float* w, int64_t i) { return w[i]; }
    __device__ static float act(float x) { return x; }
    __device__ static void unpack(const uint4& v, float* out) {
        out[0] = __uint_as_float(v.x), out[1] = __uint_as_float(v.y), out[2] = __uint_as_float(v.z),
        out[3] = __uint_as_float(v.w);
    }
};
template <>
struct gemv_traits<__half> {
    static constexpr int per_vector = 8;
    __device__ static float weight(const __half* w, int64_t i) { return __half2float(w[i]); }
    __device__ static float act(float x) { return __half2float(__float2half_rn(x)); }
    __device__ static void unpack(const uint4& v, float* out) {
        const __half2* h = reinterpret_cast<const __half2*>(&v);
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            const float2 f = __half22float2(h[i]);
            out[2 * i] = f.x, out[2 * i + 1] = f.y;
        }
    }
};
template <>
struct gemv_traits<__nv_bfloat16> {
    static constexpr int per_vector = 8;
    __device__ static float weight(const __nv_bfloat16* w, int64_t i) { return __bfloat162float(w[i]); }
    __device__ static float act(float x) { return __bfloat162float(__float2bfloat16_rn(x)); }
    __device__ static void unpack(const uint4& v, float* out) {
        const __nv_bfloat162* h = reinterpret_cast<const __nv_bfloat162*>(&v);
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            const float2 f = __bfloat1622float2(h[i]);
            out[2 * i] = f.x, out[2 * i + 1] = f.y;
        }
    }
};

constexpr int gemv_warps = 4;
constexpr int gemv_in_flight = 4;  // 16-byte weight vectors each lane has loading at once

// Activation elements e..e+pv-1 of token row xt, rounded to the weight type.
template <class tr, int pv>
__device__ __forceinline__ void load_acts(const float* xt, float* out) {
#pragma unroll
    for (int e = 0; e < pv; e += 4) {
        const float4 a = *reinterpret_cast<const float4*>(xt + e);
        out[e] = tr::act(a.x), out[e + 1] = tr::act(a.y), out[e + 2] = tr::act(a.z), out[e + 3] = tr::act(a.w);
    }
}

template <class w_t, int n_tok>
__global__ void __launch_bounds__(gemv_warps* warp_size)
    gemv_kernel(const w_t* w, int64_t n_in, int64_t n_out, const float* x, float* y, bool accumulate) {
    using tr = gemv_traits<w_t>;
    constexpr int pv = tr::per_vector;
    const int64_t o = static_cast<int64_t>(blockIdx.x) * gemv_warps + threadIdx.x / warp_size;
    const int lane = threadIdx.x % warp_size;
    if (o >= n_out) return;  // whole warp
    const w_t* row = w + o * n_in;
    float sum[n_tok];
#pragma unroll
    for (int t = 0; t < n_tok; ++t) sum[t] = 0.0f;
    const bool vectors =
        n_in % pv == 0 && (reinterpret_cast<uintptr_t>(w) % 16) == 0 && (reinterpret_cast<uintptr_t>(x) % 16) == 0;
    if (vectors) {
        const uint4* rv = reinterpret_cast<const uint4*>(row);
        const int64_t n_vec = n_in / pv;
        int64_t v = lane;
        for (; v + (gemv_in_flight - 1) * warp_size < n_vec; v += gemv_in_flight * warp_size) {
            uint4 raw[gemv_in_flight];
#pragma unroll
            for (int k = 0; k < gemv_in_flight; ++k) raw[k] = rv[v + k * warp_size];
#pragma unroll
            for (int k = 0; k < gemv_in_flight; ++k) {
                float wk[pv];
                tr::unpack(raw[k], wk);
#pragma unroll
                for (int t = 0; t < n_tok; ++t) {
                    float a[pv];
                    load_acts<tr, pv>(x + t * n_in + (v + k * warp_size) * pv, a);
#pragma unroll
                    for (int e = 0; e < pv; ++e) sum[t] += wk[e] * a[e];
                }
            }
        }
        for (; v < n_vec; v += warp_size) {
            float wk[pv];
            tr::unpack(rv[v], wk);
#pragma unroll
            for (int t = 0; t < n_tok; ++t) {
                float a[pv];
                load_acts<tr, pv>(x + t * n_in + v * pv, a);
#pragma unroll
                for (int e = 0; e < pv; ++e) sum[t] += wk[e] * a[e];
            }
        }
    } else {
        for (int64_t i = lane; i < n_in; i += warp_size) {
            const float wi = tr::weight(row, i);
#pragma unroll
            for (int t = 0; t < n_tok; ++t) sum[t] += wi * tr::act(x[t * n_in + i]);
        }
    }
#pragma unroll
    for (int t = 0; t < n_tok; ++t) {
        const float total = warp_sum(sum[t]);
        if (lane == 0) {
            float& out = y[t * n_out + o];
            out = accumulate ? out + total : total;
        }
    }
}

template <class w_t>
void launch_gemv_of(const void* w, int64_t n_in, int64_t n_out, const float* x, float* y, int32_t n_tokens,
                    bool accumulate, cudaStream_t stream) {
    const int32_t grid = blocks_for(n_out, gemv_warps);
    const int32_t threads = gemv_warps * warp_size;
    const auto* wt = static_cast<const w_t*>(w);
    if (n_tokens == 1) {
        gemv_kernel<w_t, 1><<<grid, threads, 0, stream>>>(wt, n_in, n_out, x, y, accumulate);
    } else {
        gemv_kernel<w_t, 2><<<grid, threads, 0, stream>>>(wt, n_in, n_out, x, y, accumulate);
    }
}

__global__ void swiglu_kernel(const float* gate, const float* up, float* out, int64_t n) {
    const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    if (i >= n) return;
    const float g = gate[i];
    out[i] = g / (1.0f + expf(-g)) * up[i];
}

// GELU (tanh approximation) of the gate rounded to f16 first, as ggml's table (core/model/cpu_ops.cpp geglu_rows).
__global__ void geglu_kernel(const float* gate, const float* up, float* out, int64_t n) {
    const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    if (i >= n) return;
    constexpr float sqrt_2_over_pi = 0.7978845608028654f;
    const float x = __half2float(__float2half_rn(gate[i]));
    const float g = 0.5f * x * (1.0f + tanhf(sqrt_2_over_pi * x * (1.0f + 0.044715f * x * x)));
    out[i] = g * up[i];
}

// x [n_rows, width] += bias [width], one thread per element.
__global__ void add_bias_kernel(float* x, const float* bias, int64_t n, int32_t width) {
    const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    if (i >= n) return;
    x[i] += bias[i % width];
}

__global__ void add_kernel(float* x, const float* y, int64_t n) {
    const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    if (i >= n) return;
    x[i] += y[i];
}

__global__ void scale_kernel(float* x, float s, int64_t n) {
    const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    if (i >= n) return;
    x[i] *= s;
}

__global__ void softcap_kernel(float* x, float cap, int64_t n) {
    const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    if (i >= n) return;
    x[i] = cap * tanhf(x[i] / cap);
}

__global__ void convert_kernel(const float* x, dtype to, void* y, int64_t n) {
    const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    if (i >= n) return;
    if (to == dtype::f16) {
        static_cast<__half*>(y)[i] = __float2half_rn(x[i]);
    } else {
        static_cast<__nv_bfloat16*>(y)[i] = __float2bfloat16_rn(x[i]);
    }
}

// One warp per output element (t, o): lanes stride over k, then a warp sum.
__global__ void matmul_simple_kernel(dtype w_type, const void* w, int64_t n_in, int64_t n_out, const float* x, float* y,
                                     int32_t n_tokens, bool accumulate) {
    const int64_t item = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / warp_size;
    const int lane = threadIdx.x % warp_size;
    if (item >= n_tokens * n_out) return;
    const int64_t t = item / n_out;
    const int64_t o = item % n_out;
    float sum = 0.0f;
    for (int64_t k = lane; k < n_in; k += warp_size) sum += x[t * n_in + k] * load_as_float(w_type, w, o * n_in + k);
    sum = warp_sum(sum);
    if (lane == 0) y[item] = accumulate ? y[item] + sum : sum;
}

__global__ void gather_rows_kernel(const float* x, const int32_t* rows, int32_t dim, float* y) {
    const int32_t r = blockIdx.x;
    const float* src = x + static_cast<size_t>(rows[r]) * dim;
    for (int32_t d = threadIdx.x; d < dim; d += blockDim.x) y[static_cast<size_t>(r) * dim + d] = src[d];
}

}  // namespace

void launch_embed(dtype table_type, const void* table, int64_t dim, const int32_t* tokens, int32_t n_tokens, float* out,
                  cudaStream_t stream) {
    if (n_tokens == 0) return;
    embed_kernel<<<n_tokens, 256, 0, stream>>>(table_type, table, dim, tokens, out);
}

void launch_rms_norm(const float* x, const float* w, float* y, int32_t n_rows, int32_t dim, float eps,
                     cudaStream_t stream) {
    if (n_rows == 0) return;
    rms_norm_kernel<<<n_rows, rms_norm_threads, 0, stream>>>(x, w, y, dim, eps);
}

void launch_rope(float* x, const int32_t* positions, int32_t n_tokens, int32_t n_heads, const rope_settings& rope,
                 cudaStream_t stream) {
    const int64_t n_pairs = static_cast<int64_t>(n_tokens) * n_heads * (rope.n_rot / 2);
    if (n_pairs == 0) return;
    rope_kernel<<<blocks_for(n_pairs, 256), 256, 0, stream>>>(x, positions, n_pairs, n_heads, rope);
}

void launch_store_kv(const float* k, const float* v, int32_t n_tokens, int32_t kv_width, const kv_tables& tables,
                     bool kv_f16, void* k_pool, void* v_pool, cudaStream_t stream) {
    if (n_tokens == 0) return;
    if (kv_f16) {
        store_kv_kernel<__half><<<n_tokens, 256, 0, stream>>>(k, v, kv_width, tables, static_cast<__half*>(k_pool),
                                                              static_cast<__half*>(v_pool));
    } else {
        store_kv_kernel<float><<<n_tokens, 256, 0, stream>>>(k, v, kv_width, tables, static_cast<float*>(k_pool),
                                                             static_cast<float*>(v_pool));
    }
}

void launch_attention(const float* q, float* out, int32_t n_tokens, int32_t n_heads, int32_t n_kv_heads,
                      int32_t head_dim, float scale, const attention_features& f, const kv_tables& tables, bool kv_f16,
                      const void* k_pool, const void* v_pool, cudaStream_t stream, const int32_t* tiles,
                      int32_t n_tiles) {
    const int64_t n_items = static_cast<int64_t>(n_tokens) * n_heads;
    if (n_items == 0) return;
    if (tiles != nullptr && n_tiles > 0) {
        const dim3 grid(n_tiles, n_heads);
        const int32_t threads = tile_warps * warp_size;
        if (kv_f16) {
            attention_tiled_kernel<__half><<<grid, threads, 0, stream>>>(
                q, out, n_heads, n_kv_heads, head_dim, scale, f.softcap, f.window, tables, tiles,
                static_cast<const __half*>(k_pool), static_cast<const __half*>(v_pool));
        } else {
            attention_tiled_kernel<float><<<grid, threads, 0, stream>>>(
                q, out, n_heads, n_kv_heads, head_dim, scale, f.softcap, f.window, tables, tiles,
                static_cast<const float*>(k_pool), static_cast<const float*>(v_pool));
        }
        return;
    }
    const int32_t grid = blocks_for(n_items, attention_warps);
    const int32_t threads = attention_warps * warp_size;
    if (kv_f16) {
        attention_kernel<__half><<<grid, threads, 0, stream>>>(
            q, out, n_tokens, n_heads, n_kv_heads, head_dim, scale, f.softcap, f.window, tables,
            static_cast<const __half*>(k_pool), static_cast<const __half*>(v_pool));
    } else {
        attention_kernel<float><<<grid, threads, 0, stream>>>(
            q, out, n_tokens, n_heads, n_kv_heads, head_dim, scale, f.softcap, f.window, tables,
            static_cast<const float*>(k_pool), static_cast<const float*>(v_pool));
    }
}

void launch_swiglu(const float* gate, const float* up, float* out, int64_t n, cudaStream_t stream) {
    if (n == 0) return;
    swiglu_kernel<<<blocks_for(n, 256), 256, 0, stream>>>(gate, up, out, n);
}

void launch_geglu(const float* gate, const float* up, float* out, int64_t n, cudaStream_t stream) {
    if (n == 0) return;
    geglu_kernel<<<blocks_for(n, 256), 256, 0, stream>>>(gate, up, out, n);
}

void launch_add_bias(float* x, const float* bias, int32_t n_rows, int32_t width, cudaStream_t stream) {
    const int64_t n = static_cast<int64_t>(n_rows) * width;
    if (n == 0) return;
    add_bias_kernel<<<blocks_for(n, 256), 256, 0, stream>>>(x, bias, n, width);
}

void launch_add(float* x, const float* y, int64_t n, cudaStream_t stream) {
    if (n == 0) return;
    add_kernel<<<blocks_for(n, 256), 256, 0, stream>>>(x, y, n);
}

void launch_scale(float* x, float s, int64_t n, cudaStream_t stream) {
    if (n == 0) return;
    scale_kernel<<<blocks_for(n, 256), 256, 0, stream>>>(x, s, n);
}

void launch_softcap(float* x, float cap, int64_t n, cudaStream_t stream) {
    if (n == 0) return;
    softcap_kernel<<<blocks_for(n, 256), 256, 0, stream>>>(x, cap, n);
}

void launch_convert(const float* x, dtype to, void* y, int64_t n, cudaStream_t stream) {
    if (n == 0) return;
    convert_kernel<<<blocks_for(n, 256), 256, 0, stream>>>(x, to, y, n);
}

void launch_gemv(dtype w_type, const void* w, int64_t n_in, int64_t n_out, const float* x, float* y, int32_t n_tokens,
                 bool accumulate, cudaStream_t stream) {
    if (n_tokens == 0 || n_out == 0) return;
    switch (w_type) {
        case dtype::f32:
            launch_gemv_of<float>(w, n_in, n_out, x, y, n_tokens, accumulate, stream);
            break;
        case dtype::f16:
            launch_gemv_of<__half>(w, n_in, n_out, x, y, n_tokens, accumulate, stream);
            break;
        case dtype::bf16:
            launch_gemv_of<__nv_bfloat16>(w, n_in, n_out, x, y, n_tokens, accumulate, stream);
            break;
    }
}

int32_t attention_max_tiles(int32_t n_tokens, int32_t n_seqs) {
    return n_seqs + n_tokens / attention_tile_rows;
}

bool attention_tiles(const int32_t* seq_of, const int32_t* positions, int32_t n_tokens, int32_t n_seqs,
                     int32_t head_dim, bool tree, std::vector<int32_t>& tiles) {
    tiles.clear();
    if (tree || head_dim > attention_tiled_max_head_dim || head_dim % 4 != 0 || n_tokens <= n_seqs) return false;
    const int32_t max_tiles = attention_max_tiles(n_tokens, n_seqs);
    int32_t start = 0;
    for (int32_t t = 1; t <= n_tokens; ++t) {
        const bool ends = t == n_tokens || seq_of[t] != seq_of[t - 1] || positions[t] != positions[t - 1] + 1 ||
                          t - start == attention_tile_rows;
        if (!ends) continue;
        if (static_cast<int32_t>(tiles.size()) / 2 == max_tiles) return false;
        tiles.push_back(start);
        tiles.push_back(t - start);
        start = t;
    }
    tiles.resize(static_cast<size_t>(2) * max_tiles, 0);
    return true;
}

void launch_matmul_simple(dtype w_type, const void* w, int64_t n_in, int64_t n_out, const float* x, float* y,
                          int32_t n_tokens, bool accumulate, cudaStream_t stream) {
    const int64_t n_threads = static_cast<int64_t>(n_tokens) * n_out * warp_size;
    if (n_threads == 0) return;
    matmul_simple_kernel<<<blocks_for(n_threads, 256), 256, 0, stream>>>(w_type, w, n_in, n_out, x, y, n_tokens,
                                                                         accumulate);
}

void launch_gather_rows(const float* x, const int32_t* rows, int32_t n_rows, int32_t dim, float* y,
                        cudaStream_t stream) {
    if (n_rows == 0) return;
    gather_rows_kernel<<<n_rows, 256, 0, stream>>>(x, rows, dim, y);
}

}  // namespace troupe::cuda
