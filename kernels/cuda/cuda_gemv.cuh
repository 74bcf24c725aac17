// Device helpers of the products that read a weight row per warp (cuda_kernels.cu's GEMV, cuda_moe.cu's experts):
// the weight types' 16-byte vectors, a lane's share of one row's dot products with activations rounded to the
// weight's type as they are read (cuBLASLt's recipe), and the GLU activations.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "kernels/cuda/cuda_device.cuh"

namespace troupe::cuda::device {

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

// Activation elements e..e+pv-1 of token row xt, rounded to the weight type.
template <class tr, int pv>
__device__ __forceinline__ void load_acts(const float* xt, float* out) {
#pragma unroll
    for (int e = 0; e < pv; e += 4) {
        const float4 a = *reinterpret_cast<const float4*>(xt + e);
        out[e] = tr::act(a.x), out[e + 1] = tr::act(a.y), out[e + 2] = tr::act(a.z), out[e + 3] = tr::act(a.w);
    }
}

// This lane's share of row . x[t] for each token (a warp sum finishes it): 16-byte weight vectors, `in_flight` of
// them loading at once per lane, or element by element where the row or x is not 16-byte aligned.
template <class w_t, int n_tok, int in_flight>
__device__ __forceinline__ void row_dot(const w_t* row, int64_t n_in, const float* x, int lane, float* sum) {
    using tr = gemv_traits<w_t>;
    constexpr int pv = tr::per_vector;
    const bool vectors =
        n_in % pv == 0 && (reinterpret_cast<uintptr_t>(row) % 16) == 0 && (reinterpret_cast<uintptr_t>(x) % 16) == 0;
    if (vectors) {
        const uint4* rv = reinterpret_cast<const uint4*>(row);
        const int64_t n_vec = n_in / pv;
        int64_t v = lane;
        for (; v + (in_flight - 1) * warp_size < n_vec; v += in_flight * warp_size) {
            uint4 raw[in_flight];
#pragma unroll
            for (int k = 0; k < in_flight; ++k) raw[k] = rv[v + k * warp_size];
#pragma unroll
            for (int k = 0; k < in_flight; ++k) {
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
}

__device__ __forceinline__ float silu_times(float g, float u) {
    return g / (1.0f + expf(-g)) * u;
}
// GELU (tanh approximation) of the gate rounded to f16 first, as ggml's table (core/model/cpu_ops.cpp geglu_rows).
__device__ __forceinline__ float gelu_times(float g, float u) {
    constexpr float sqrt_2_over_pi = 0.7978845608028654f;
    const float x = __half2float(__float2half_rn(g));
    return 0.5f * x * (1.0f + tanhf(sqrt_2_over_pi * x * (1.0f + 0.044715f * x * x))) * u;
}

}  // namespace troupe::cuda::device
