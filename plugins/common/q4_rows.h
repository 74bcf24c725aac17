// q4_rows: the 4-bit group rows of packed_matrix (layout in packed_matrix.h): fitting a group's scale and codes, and
// the dot product of a row with quantized activations in three builds of one recipe (the scalar twin, AVX2, AVX-512
// VNNI), chosen by the caller at run time.
//
//   Σ_g d_g · xs_g · Σ_{i in g} (code_i - 8) · xq_i      d_g: the row's group scales, xs_g: the activations' block
//   scales
//
// The vector kernels take the codes as they are (0..15, unsigned for the byte products) and subtract
// 8 · Σ_g d_g · (xs_g · Σ xq over g) once per row (q8_activations::block_sums).
#pragma once

#include <cstdint>

namespace troupe::spec_common::q4_rows {

// The code (0..15) of weight i of a q4 row of n.
int code(const uint8_t* codes, int64_t n, int64_t i);

// The scale d and steps q (-8..7) of a group of 32 weights, w ~ d · q.
float fit_group(const float* w, int8_t* q);

// The row's product with one activation row: xq [n] codes, xs [n / 32] block scales, lane_scales [n / 4] (each block's
// scale over its 8 lanes of four), bs [n / 32] block sums (q8_activations).
float dot_scalar(const uint8_t* codes, const float* ds, int64_t n, const int8_t* xq, const float* xs);
float dot_avx2(const uint8_t* codes, const float* ds, int64_t n, const int8_t* xq, const float* xs, const float* bs);
float dot_vnni(const uint8_t* codes, const float* ds, int64_t n, const int8_t* xq, const float* xs,
               const float* lane_scales, const float* bs);

}  // namespace troupe::spec_common::q4_rows
