// Matrix products with quantized weights on CUDA, shared by the quant plugins' .cu files (header-only templates,
// instantiated once per plugin): y[n_tokens, n_out] = x[n_tokens, n_in] * W^T, float32 activations and outputs in
// device memory, float32 accumulation, enqueued on the caller's stream. A plugin describes its device layout with a
// `weights` policy:
//
//   struct weights {
//       static constexpr int chunk = 16 or 32;  // consecutive weights one decode covers (32 % chunk == 0)
//       int64_t n_in, n_out;
//       // Chunk c of `row` as stored (one 128-bit load, and its group's scales where it has them), then its weights
//       // k = c * chunk + i (i < chunk) dequantized, without any per-row scale. Split so that the decode path can
//       // have several chunks loading at once before it decodes the first. Rows hold whole chunks: codes past n_in
//       // decode to 0 (the plugin pads), none is read past the row.
//       struct raw;
//       __device__ raw load(int64_t row, int64_t c) const;
//       __device__ void decode(const raw& r, float (&w)[chunk]) const;
//       __device__ float finish(int64_t row, float acc) const;  // the row's dot product from acc (e.g. * scale)
//   };
//
// Two paths, split by token count:
//   - decode (1 .. k_gemv_max_tokens tokens, bandwidth bound): one warp per weight row; lane l loads chunks l,
//     l + 32, ..., l + 32 (k_gemv_in_flight - 1) at once, then decodes them in registers and multiplies them with every
//     token's activations (float4 loads where x is 16-byte aligned and n_in a multiple of 4); a shuffle reduction per
//     token. Each weight byte is read once.
//   - prefill (more tokens): 64 rows x 64 tokens per block of 4 warps; each 32-wide step of k decodes the rows'
//     weights into f16 in shared memory (exact for fp8; d * q + m rounded to f16 for 4-bit), converts the tokens'
//     activations to f16 beside them, and runs 16x16x16 wmma (f16 in, f32 accumulate): each warp a 32 x 32 tile.
//
//   prefill block (blockIdx.x: rows, blockIdx.y: tokens)      shared memory per k step
//           rows 0..63 ->                                         xs [64 tokens][32 k] f16  (padded rows of 40)
//   tok  +---------+---------+                                    ws [64 rows][32 k]   f16  (padded rows of 40)
//   0..  | warp 0  | warp 1  |                                    cs [64 tokens][64 rows] f32, at the end
//   63   +---------+---------+
//        | warp 2  | warp 3  |
//        +---------+---------+
#pragma once

#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <mma.h>

#include <cstdint>

namespace troupe::cuda_quant {

constexpr int k_gemv_max_tokens = 8;
constexpr int k_gemv_warps = 4;      // rows per gemv block
constexpr int k_gemv_in_flight = 4;  // chunks each lane has loading at once (2 before: 12% of the H200's copy rate)
constexpr int k_mma_rows = 64, k_mma_tokens = 64, k_mma_k = 32, k_mma_ld = k_mma_k + 8;

__device__ inline void load_x16(const float* __restrict__ x, int64_t n_in, int64_t k0, bool vector_loads,
                                float (&xv)[16]) {
    // x[k0 .. k0 + 16) of one token; zeros past n_in.
    if (vector_loads && k0 + 16 <= n_in) {
        const float4* p = reinterpret_cast<const float4*>(x + k0);
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            const float4 v = __ldg(p + i);
            xv[4 * i] = v.x;
            xv[4 * i + 1] = v.y;
            xv[4 * i + 2] = v.z;
            xv[4 * i + 3] = v.w;
        }
    } else {
#pragma unroll
        for (int i = 0; i < 16; ++i) xv[i] = k0 + i < n_in ? __ldg(x + k0 + i) : 0.0f;
    }
}

// Decode path: T tokens, warp w of the block takes row blockIdx.x * k_gemv_warps + w.
template <class W, int T>
__global__ void __launch_bounds__(32 * k_gemv_warps)
    gemv_kernel(W w, const float* __restrict__ x, float* __restrict__ y, bool vector_loads) {
    const int64_t row = static_cast<int64_t>(blockIdx.x) * k_gemv_warps + threadIdx.x / 32;
    if (row >= w.n_out) return;
    const int lane = threadIdx.x % 32;
    const int64_t n_chunks = (w.n_in + W::chunk - 1) / W::chunk;
    float acc[T];
#pragma unroll
    for (int t = 0; t < T; ++t) acc[t] = 0.0f;
    for (int64_t c0 = lane; c0 < n_chunks; c0 += 32 * k_gemv_in_flight) {
        typename W::raw raw[k_gemv_in_flight];
#pragma unroll
        for (int u = 0; u < k_gemv_in_flight; ++u) {
            if (c0 + 32 * u < n_chunks) raw[u] = w.load(row, c0 + 32 * u);
        }
#pragma unroll
        for (int u = 0; u < k_gemv_in_flight; ++u) {
            const int64_t c = c0 + 32 * u;
            if (c >= n_chunks) break;
            float wv[W::chunk];
            w.decode(raw[u], wv);
#pragma unroll
            for (int t = 0; t < T; ++t) {
#pragma unroll
                for (int h = 0; h < W::chunk / 16; ++h) {
                    float xv[16];
                    load_x16(x + t * w.n_in, w.n_in, c * W::chunk + 16 * h, vector_loads, xv);
#pragma unroll
                    for (int i = 0; i < 16; ++i) acc[t] = fmaf(wv[16 * h + i], xv[i], acc[t]);
                }
            }
        }
    }
#pragma unroll
    for (int t = 0; t < T; ++t) {
        float s = acc[t];
#pragma unroll
        for (int off = 16; off > 0; off /= 2) s += __shfl_xor_sync(0xffffffffu, s, off);
        if (lane == 0) y[t * w.n_out + row] = w.finish(row, s);
    }
}

// Prefill path (see the top of the file).
template <class W>
__global__ void __launch_bounds__(128)
    mma_kernel(W w, const float* __restrict__ x, float* __restrict__ y, int64_t n_tokens) {
    using namespace nvcuda;
    __shared__ __align__(32) __half xs[k_mma_tokens * k_mma_ld];   // [token][k]
    __shared__ __align__(32) __half ws[k_mma_rows * k_mma_ld];     // [row][k]
    __shared__ __align__(32) float cs[k_mma_tokens * k_mma_rows];  // [token][row]
    const int64_t row0 = static_cast<int64_t>(blockIdx.x) * k_mma_rows;
    const int64_t tok0 = static_cast<int64_t>(blockIdx.y) * k_mma_tokens;
    const int warp = threadIdx.x / 32, wm = warp / 2, wn = warp % 2;  // wm: tokens half, wn: rows half
    constexpr int per_step = k_mma_k / W::chunk;                      // chunks per row per k step

    wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc[2][2];
#pragma unroll
    for (int i = 0; i < 2; ++i) {
#pragma unroll
        for (int j = 0; j < 2; ++j) wmma::fill_fragment(acc[i][j], 0.0f);
    }
    for (int64_t k0 = 0; k0 < w.n_in; k0 += k_mma_k) {
        for (int e = threadIdx.x; e < k_mma_tokens * k_mma_k; e += blockDim.x) {
            const int t = e / k_mma_k, k = e % k_mma_k;
            const int64_t tok = tok0 + t, kk = k0 + k;
            xs[t * k_mma_ld + k] = __float2half_rn(tok < n_tokens && kk < w.n_in ? __ldg(x + tok * w.n_in + kk) : 0.0f);
        }
        for (int e = threadIdx.x; e < k_mma_rows * per_step; e += blockDim.x) {
            const int r = e / per_step, p = e % per_step;
            float wv[W::chunk];
            if (row0 + r < w.n_out) {
                w.decode(w.load(row0 + r, k0 / W::chunk + p), wv);
            } else {
#pragma unroll
                for (int i = 0; i < W::chunk; ++i) wv[i] = 0.0f;
            }
#pragma unroll
            for (int i = 0; i < W::chunk; ++i) ws[r * k_mma_ld + p * W::chunk + i] = __float2half_rn(wv[i]);
        }
        __syncthreads();
#pragma unroll
        for (int kk = 0; kk < k_mma_k; kk += 16) {
            wmma::fragment<wmma::matrix_a, 16, 16, 16, __half, wmma::row_major> a[2];
            wmma::fragment<wmma::matrix_b, 16, 16, 16, __half, wmma::col_major> b[2];
#pragma unroll
            for (int i = 0; i < 2; ++i) wmma::load_matrix_sync(a[i], xs + (wm * 32 + i * 16) * k_mma_ld + kk, k_mma_ld);
#pragma unroll
            for (int j = 0; j < 2; ++j) wmma::load_matrix_sync(b[j], ws + (wn * 32 + j * 16) * k_mma_ld + kk, k_mma_ld);
#pragma unroll
            for (int i = 0; i < 2; ++i) {
#pragma unroll
                for (int j = 0; j < 2; ++j) wmma::mma_sync(acc[i][j], a[i], b[j], acc[i][j]);
            }
        }
        __syncthreads();
    }
#pragma unroll
    for (int i = 0; i < 2; ++i) {
#pragma unroll
        for (int j = 0; j < 2; ++j) {
            wmma::store_matrix_sync(cs + (wm * 32 + i * 16) * k_mma_rows + wn * 32 + j * 16, acc[i][j], k_mma_rows,
                                    wmma::mem_row_major);
        }
    }
    __syncthreads();
    for (int e = threadIdx.x; e < k_mma_tokens * k_mma_rows; e += blockDim.x) {
        const int t = e / k_mma_rows, r = e % k_mma_rows;
        const int64_t tok = tok0 + t, row = row0 + r;
        if (tok < n_tokens && row < w.n_out) y[tok * w.n_out + row] = w.finish(row, cs[e]);
    }
}

template <class W, int T>
void launch_gemv(const W& w, const float* x, float* y, bool vector_loads, cudaStream_t stream) {
    const unsigned blocks = static_cast<unsigned>((w.n_out + k_gemv_warps - 1) / k_gemv_warps);
    gemv_kernel<W, T><<<blocks, 32 * k_gemv_warps, 0, stream>>>(w, x, y, vector_loads);
}

// Enqueues y = x * W^T on `stream` (n_tokens >= 1); returns the launch's error (cudaSuccess when enqueued).
template <class W>
cudaError_t launch_matmul(const W& w, const float* x, float* y, int64_t n_tokens, cudaStream_t stream) {
    const bool vector_loads = reinterpret_cast<uintptr_t>(x) % 16 == 0 && w.n_in % 4 == 0;
    switch (n_tokens) {
        case 1:
            launch_gemv<W, 1>(w, x, y, vector_loads, stream);
            break;
        case 2:
            launch_gemv<W, 2>(w, x, y, vector_loads, stream);
            break;
        case 3:
            launch_gemv<W, 3>(w, x, y, vector_loads, stream);
            break;
        case 4:
            launch_gemv<W, 4>(w, x, y, vector_loads, stream);
            break;
        case 5:
            launch_gemv<W, 5>(w, x, y, vector_loads, stream);
            break;
        case 6:
            launch_gemv<W, 6>(w, x, y, vector_loads, stream);
            break;
        case 7:
            launch_gemv<W, 7>(w, x, y, vector_loads, stream);
            break;
        case 8:
            launch_gemv<W, 8>(w, x, y, vector_loads, stream);
            break;
        default: {
            const dim3 grid(static_cast<unsigned>((w.n_out + k_mma_rows - 1) / k_mma_rows),
                            static_cast<unsigned>((n_tokens + k_mma_tokens - 1) / k_mma_tokens));
            mma_kernel<W><<<grid, 128, 0, stream>>>(w, x, y, n_tokens);
        }
    }
    return cudaGetLastError();
}

}  // namespace troupe::cuda_quant
