// quant/w4a16's decode with bf16 activations (params.activations: bf16, the default): the activations of a product
// are rounded to bf16 once (round to nearest even, denormals to zero: what vcvtne2ps2bf16 does), and every kernel
// computes y = sum_k (d q_k + m) bf16(x_k). The scalar and AVX2 kernels round x into floats and run their float
// decode (the scalar one is the twin); the AVX-512 BF16 kernel multiplies pairs of bf16 by vdpbf16ps (32 products
// per instruction), with the codes turned into bf16 by one shift and one and-or per 32 of them:
//
//   bf16 bits 0x4300 | q  ==  128 + q  (q = 0..15, exactly),  so per group
//   sum_k (d q_k + m) x_k  ==  d * S'  +  (m - 128 d) * S,   S' = sum_k (128 + q_k) x_k,  S = sum_k x_k
//
// S' comes from the dot products, d * S' is one FMA per group, and the second term is a dot product of the row's
// (d, m) pairs with the tokens' (-128 S, S) pairs (bf16_activations::u, made once per product).
#pragma once

#include <cstdint>
#include <cstring>

#include "w4a16_format.h"

namespace troupe::w4a16 {

// x rounded to bf16 (to nearest even; zero for denormals, as the AVX-512 BF16 conversions do), as a float.
inline float bf16_round(float x) {
    uint32_t u;
    std::memcpy(&u, &x, 4);
    if ((u & 0x7f800000u) == 0) {
        u &= 0x80000000u;
    } else if ((u & 0x7f800000u) != 0x7f800000u) {
        u = (u + 0x7fffu + ((u >> 16) & 1u)) & 0xffff0000u;
    } else {
        u = (u & 0xffff0000u) | ((u & 0xffffu) != 0 ? 0x400000u : 0u);  // inf stays inf, NaN stays NaN
    }
    float r;
    std::memcpy(&r, &u, 4);
    return r;
}

// The activations of a bf16 decode product.
//   x: [n_tokens, n_in] bf16 bits, each 32 of a token interleaved: word 32c + 2i = x[32c + i],
//      word 32c + 2i + 1 = x[32c + 16 + i] (the pair order of w4a16_format.h's 16-bit words)
//   u: [n_tokens, u_stride] floats: (-128 S_g, S_g) for each group g (S_g = the sum of the group's rounded x,
//      in float), then zeros to u_stride (a multiple of 16)
struct bf16_activations {
    const uint16_t* x;
    const float* u;
    int64_t n_tokens;
    int64_t n_in;
    int64_t u_stride;
};

constexpr int64_t bf16_u_stride(int64_t n_in, int g) {
    return (2 * (n_in / g) + 15) / 16 * 16;
}

struct bf16_kernel_set {
    const char* name;
    // x: [n_tokens, n_in] floats -> xb [n_tokens, n_in], u [n_tokens, bf16_u_stride] (64-byte aligned, written whole)
    void (*make_activations)(const float* x, int64_t n_tokens, int64_t n_in, int g, uint16_t* xb, float* u);
    // y rows [r0, r1) of every token: y[t, r] = row r . bf16(x[t]) (the recipe above).   y: [n_tokens, n_out]
    void (*decode)(const matrix& w, const bf16_activations& a, float* y, int64_t r0, int64_t r1);
};

// Null where the plugin was built without AVX-512 BF16; whether the CPU runs it is the caller's check.
const bf16_kernel_set* avx512_bf16_kernels();

}  // namespace troupe::w4a16
