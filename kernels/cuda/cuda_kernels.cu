// The CUDA kernels of the Llama forward (declarations and shapes: cuda_kernels.h).
//
// Written for obvious correctness first: one thread per element for elementwise work, one block per row for
// reductions. Where that was measured far from the H200's limits, a kernel shaped for the job: decode's products read
// each weight row once for all tokens (gemv_kernel). Attention is in cuda_attention.cu. Every kernel has a CPU twin in
// tests/cuda/.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include "kernels/cuda/cuda_device.cuh"
#include "kernels/cuda/cuda_gemv.cuh"
#include "kernels/cuda/cuda_kernels.h"

namespace troupe::cuda {
namespace {

using namespace device;

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

// The sine and cosine of pair i's angle at `position` (computed in double, as kernels/ref does).
__device__ __forceinline__ void rope_angle(int32_t position, int32_t i, const rope_settings& r, float& sf, float& cf) {
    const double theta = position * static_cast<double>(r.freq_scale) *
                         pow(static_cast<double>(r.base), -2.0 * i / static_cast<double>(r.n_rot));
    double s, c;
    sincos(theta, &s, &c);
    sf = static_cast<float>(s);
    cf = static_cast<float>(c);
}

// Rotates pair i of the head at xh: (2i, 2i+1) (normal) or (i, i + n_rot / 2) (neox).
__device__ __forceinline__ void rotate_pair(float* xh, int32_t i, const rope_settings& r, float sf, float cf) {
    const int32_t a = r.neox ? i : 2 * i;
    const int32_t b = r.neox ? i + r.n_rot / 2 : 2 * i + 1;
    const float x0 = xh[a], x1 = xh[b];
    xh[a] = x0 * cf - x1 * sf;
    xh[b] = x0 * sf + x1 * cf;
}

// one thread per rotated pair: [n_tokens, n_heads, n_rot / 2]
__global__ void rope_kernel(float* x, const int32_t* positions, int64_t n_pairs, int32_t n_heads, rope_settings r) {
    const int64_t idx = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    if (idx >= n_pairs) return;
    const int32_t half = r.n_rot / 2;
    const int64_t head = idx / half;  // token * n_heads + h
    const int32_t i = static_cast<int32_t>(idx % half);
    float sf, cf;
    rope_angle(positions[head / n_heads], i, r, sf, cf);
    rotate_pair(x + head * r.head_dim, i, r, sf, cf);
}

// Writes token t's k, v rows into the pools at its position (its row in a tree call).
template <class kv_t>
__device__ __forceinline__ void store_token_kv(const float* k, const float* v, int32_t t, int32_t kv_width,
                                               const kv_tables& tb, kv_t* k_pool, kv_t* v_pool) {
    const size_t row = cache_row(tb, tb.seq_of[t], tb.rows ? tb.rows[t] : tb.positions[t], kv_width);
    for (int32_t i = threadIdx.x; i < kv_width; i += blockDim.x) {
        store_kv(k_pool, row + i, k[static_cast<size_t>(t) * kv_width + i]);
        store_kv(v_pool, row + i, v[static_cast<size_t>(t) * kv_width + i]);
    }
}

// grid: n_tokens, block: 256
template <class kv_t>
__global__ void store_kv_kernel(const float* k, const float* v, int32_t kv_width, kv_tables tb, kv_t* k_pool,
                                kv_t* v_pool) {
    store_token_kv(k, v, blockIdx.x, kv_width, tb, k_pool, v_pool);
}

// launch_rope_store_kv: block t rotates token t's q and k heads, then stores its k and v. The angles depend on the
// pair index alone, so each pair's sine and cosine (rope_kernel's double-precision arithmetic, same bits) is computed
// once per token into shared memory rather than once per head.
template <class kv_t>
__global__ void rope_store_kv_kernel(float* q, float* k, const float* v, int32_t n_heads, int32_t n_kv_heads,
                                     rope_settings r, kv_tables tb, kv_t* k_pool, kv_t* v_pool) {
    __shared__ float sin_sh[max_head_dim / 2], cos_sh[max_head_dim / 2];
    const int32_t t = blockIdx.x;
    const int32_t half = r.n_rot / 2;
    const int32_t position = tb.positions[t];
    for (int32_t i = threadIdx.x; i < half; i += blockDim.x) rope_angle(position, i, r, sin_sh[i], cos_sh[i]);
    __syncthreads();
    for (int32_t p = threadIdx.x; p < (n_heads + n_kv_heads) * half; p += blockDim.x) {
        const int32_t head = p / half;
        float* xh = head < n_heads ? q + (static_cast<size_t>(t) * n_heads + head) * r.head_dim
                                   : k + (static_cast<size_t>(t) * n_kv_heads + head - n_heads) * r.head_dim;
        rotate_pair(xh, p % half, r, sin_sh[p % half], cos_sh[p % half]);
    }
    __syncthreads();  // k's rotated pairs are written before they are stored
    store_token_kv(k, v, t, n_kv_heads * r.head_dim, tb, k_pool, v_pool);
}

// Decode's products (launch_gemv_parts): one warp per output row, the row read once in 16-byte loads (4 in flight per
// lane, cuda_gemv.cuh row_dot) for all n_tokens (<= gemv_max_tokens) activation rows, each rounded to the weight's
// type as it is read; a warp sum per token.
constexpr int gemv_warps = 4;

// The parts of one launch (launch_gemv_parts): blocks [first_block[i], first_block[i + 1]) make part i's rows. With a
// GLU, parts 0 (gate) and 1 (up) are made together: a block's warps 0 and 1 make gate rows 2b and 2b + 1, its warps 2
// and 3 the same up rows, and the gate warps write act(gate) * up into part 0's output. (One warp reading both rows
// halves the warps in flight; 8 loads in flight per lane instead of 4 made every product slower on the H200.)
struct gemv_launch {
    gemv_part parts[gemv_max_parts];
    int32_t first_block[gemv_max_parts + 1];
    int32_t n_parts;
    glu_kind glu;
    bool accumulate;
};
constexpr int gemv_in_flight = 4;  // 16-byte weight vectors each lane has loading at once
constexpr int glu_rows_per_block = gemv_warps / 2;

// Part i of the launch by constant indices only: an index computed at run time into a kernel parameter makes the
// compiler copy the whole parameter struct to every thread's local memory (104 bytes, twice the output matrix's time).
__device__ __forceinline__ gemv_part part_of(const gemv_launch& L, int part) {
    return part == 0 ? L.parts[0] : part == 1 ? L.parts[1] : L.parts[2];
}

template <class w_t, int n_tok>
__global__ void __launch_bounds__(gemv_warps* warp_size)
    gemv_kernel(const gemv_launch L, int64_t n_in, const float* x) {
    const int warp = threadIdx.x / warp_size;
    const int lane = threadIdx.x % warp_size;
    float sum[n_tok];
#pragma unroll
    for (int t = 0; t < n_tok; ++t) sum[t] = 0.0f;
    if (L.glu == glu_kind::none) {
        const int32_t block = blockIdx.x;
        const int part = (L.n_parts > 1 && block >= L.first_block[1]) + (L.n_parts > 2 && block >= L.first_block[2]);
        const gemv_part P = part_of(L, part);
        const int32_t first = part == 0 ? 0 : part == 1 ? L.first_block[1] : L.first_block[2];
        const int64_t o = static_cast<int64_t>(block - first) * gemv_warps + warp;
        if (o >= P.n_out) return;  // whole warp
        row_dot<w_t, n_tok, gemv_in_flight>(static_cast<const w_t*>(P.w) + o * n_in, n_in, x, lane, sum);
#pragma unroll
        for (int t = 0; t < n_tok; ++t) {
            const float total = warp_sum(sum[t]);
            if (lane == 0) {
                float& out = P.y[t * P.n_out + o];
                out = L.accumulate ? out + total : total;
            }
        }
        return;
    }
    __shared__ float up_sh[glu_rows_per_block][n_tok];
    const int is_up = warp / glu_rows_per_block;
    const int64_t o = static_cast<int64_t>(blockIdx.x) * glu_rows_per_block + warp % glu_rows_per_block;
    const gemv_part P = part_of(L, is_up);
    const bool has_row = o < P.n_out;
    if (has_row) row_dot<w_t, n_tok, gemv_in_flight>(static_cast<const w_t*>(P.w) + o * n_in, n_in, x, lane, sum);
#pragma unroll
    for (int t = 0; t < n_tok; ++t) sum[t] = warp_sum(sum[t]);
    if (is_up && lane == 0) {
#pragma unroll
        for (int t = 0; t < n_tok; ++t) up_sh[warp % glu_rows_per_block][t] = sum[t];
    }
    __syncthreads();
    if (is_up || !has_row || lane != 0) return;
    float* y = L.parts[0].y;
#pragma unroll
    for (int t = 0; t < n_tok; ++t) {
        const float u = up_sh[warp][t];
        y[t * P.n_out + o] = L.glu == glu_kind::silu ? silu_times(sum[t], u) : gelu_times(sum[t], u);
    }
}

template <class w_t>
void launch_gemv_of(const gemv_launch& L, int32_t n_blocks, int64_t n_in, const float* x, int32_t n_tokens,
                    cudaStream_t stream) {
    const int32_t threads = gemv_warps * warp_size;
    if (n_tokens == 1) {
        gemv_kernel<w_t, 1><<<n_blocks, threads, 0, stream>>>(L, n_in, x);
    } else {
        gemv_kernel<w_t, 2><<<n_blocks, threads, 0, stream>>>(L, n_in, x);
    }
}

__global__ void swiglu_kernel(const float* gate, const float* up, float* out, int64_t n) {
    const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    if (i >= n) return;
    out[i] = silu_times(gate[i], up[i]);
}

__global__ void geglu_kernel(const float* gate, const float* up, float* out, int64_t n) {
    const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    if (i >= n) return;
    out[i] = gelu_times(gate[i], up[i]);
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

void launch_rope_store_kv(float* q, float* k, const float* v, int32_t n_tokens, int32_t n_heads, int32_t n_kv_heads,
                          const rope_settings& rope, const kv_tables& tables, bool kv_f16, void* k_pool, void* v_pool,
                          cudaStream_t stream) {
    if (n_tokens == 0) return;
    if (kv_f16) {
        rope_store_kv_kernel<__half><<<n_tokens, 256, 0, stream>>>(
            q, k, v, n_heads, n_kv_heads, rope, tables, static_cast<__half*>(k_pool), static_cast<__half*>(v_pool));
    } else {
        rope_store_kv_kernel<float><<<n_tokens, 256, 0, stream>>>(
            q, k, v, n_heads, n_kv_heads, rope, tables, static_cast<float*>(k_pool), static_cast<float*>(v_pool));
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

void launch_gemv_parts(dtype w_type, int64_t n_in, const float* x, int32_t n_tokens, const gemv_part* parts,
                       int32_t n_parts, glu_kind glu, bool accumulate, cudaStream_t stream) {
    if (n_tokens == 0 || n_parts == 0) return;
    gemv_launch L{};
    L.n_parts = glu == glu_kind::none ? n_parts : 1;  // a GLU's up part is read beside its gate
    L.glu = glu;
    L.accumulate = accumulate && glu == glu_kind::none;
    int32_t n_blocks = 0;
    for (int32_t i = 0; i < n_parts; ++i) {
        L.parts[i] = parts[i];
        L.first_block[i] = n_blocks;
        if (i < L.n_parts)
            n_blocks += blocks_for(parts[i].n_out, glu == glu_kind::none ? gemv_warps : glu_rows_per_block);
    }
    L.first_block[L.n_parts] = n_blocks;
    if (n_blocks == 0) return;
    switch (w_type) {
        case dtype::f32:
            launch_gemv_of<float>(L, n_blocks, n_in, x, n_tokens, stream);
            break;
        case dtype::f16:
            launch_gemv_of<__half>(L, n_blocks, n_in, x, n_tokens, stream);
            break;
        case dtype::bf16:
            launch_gemv_of<__nv_bfloat16>(L, n_blocks, n_in, x, n_tokens, stream);
            break;
    }
}

void launch_gemv(dtype w_type, const void* w, int64_t n_in, int64_t n_out, const float* x, float* y, int32_t n_tokens,
                 bool accumulate, cudaStream_t stream) {
    const gemv_part part{w, y, n_out};
    launch_gemv_parts(w_type, n_in, x, n_tokens, &part, 1, glu_kind::none, accumulate, stream);
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
