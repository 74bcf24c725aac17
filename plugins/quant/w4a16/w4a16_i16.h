// quant/w4a16's decode with 16-bit integer activations (params.activations: int16, the default where the kernels are
// AVX2's): the activations of a product are quantized once per group of g (the weights' group) to int16 with a
// float scale, s_g = max |x| / 32767 and x_k = s_g xi_k (xi_k = x_k / s_g rounded to nearest), and every kernel
// computes, in 8 lanes (lane L takes the weights k with k % 8 == L: the AVX2 kernel's int32 lanes), group by group
//
//   lane_L = fma(float(isum_gL), d_g * s_g, lane_L),   isum_gL = sum_{k in g, k % 8 == L} q_k xi_k
//
// and over the row's scales as stored (d_0, m_0, d_1, m_1, ...: index i = 2g, 2g + 1), in the same 8 lanes,
//
//   mlane_{i % 8} = fma(scale_i, u_i, mlane_{i % 8}),   u_{2g} = 0, u_{2g + 1} = s_g * float(xsum_g)
//
// (so the odd lanes sum m_g s_g xsum_g, xsum_g = sum_{k in g} xi_k), then with t_L = lane_L + mlane_L
//
//   y = ((t_0 + t_4) + (t_2 + t_6)) + ((t_1 + t_5) + (t_3 + t_7))
//
// (the isums exact in int32): the exact product of the dequantized weights (d q + m) with the quantized activations,
// to float rounding. Why: on AVX2 a weight in the float recipe costs a shift, a mask, a conversion, a multiply, an
// add and an FMA, so decode is compute bound far below the memory's speed (W4_G128 on a 2-thread Zen 1: 17% of the
// bandwidth bound); here the codes, as 16-bit pairs (w4a16_format.h's words shifted and masked), meet the activations
// in vpmaddwd: 32 weights in a shift, a mask, two multiply-adds and two adds, and a group costs one conversion and
// one FMA (a horizontal sum and scalar terms per group measured 25% slower). 16-bit activations keep 15 bits of each
// group's range (bf16 keeps 8 of each value).
#pragma once

#include <cstdint>

#include "w4a16_format.h"

namespace troupe::w4a16 {

// The activations of an int16 decode product.
//   x: [n_tokens, n_in] int16 in pair order: word 32c + 2i = xi[32c + i], word 32c + 2i + 1 = xi[32c + 16 + i]
//   u: [n_tokens, 2, u_stride] floats: row 0 (s_g, 0) and row 1 (0, s_g * float(xsum_g)) for each group g, pairs
//      laid out as the row's (d, m) scales, zeros to u_stride (s_g is NaN where the group holds a NaN or an infinity)
struct i16_activations {
    const int16_t* x;
    const float* u;
    int64_t n_tokens;
    int64_t n_in;
    int64_t n_groups;
    int64_t u_stride;
};

constexpr int64_t i16_u_stride(int64_t n_in, int g) {
    return (2 * (n_in / g) + 7) / 8 * 8;
}

// Quantizes x [n_tokens, n_in] (n_in a multiple of g) into xi and u (the layouts above, u whole); the one
// implementation every kernel's activations come from.
void make_i16_activations(const float* x, int64_t n_tokens, int64_t n_in, int g, int16_t* xi, float* u);

// y rows [r0, r1) of every token: y[t, r] = the recipe above.   y: [n_tokens, n_out]
using i16_decode_fn = void (*)(const matrix& w, const i16_activations& a, float* y, int64_t r0, int64_t r1);

// The scalar twin, and the AVX2 kernel (null where the plugin was built without AVX2; whether the CPU runs it is the
// caller's check).
i16_decode_fn i16_decode_scalar();
i16_decode_fn i16_decode_avx2();

}  // namespace troupe::w4a16
