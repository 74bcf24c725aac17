// Reference (scalar) quantize / dequantize of the GGUF block formats troupe computes with.
//
// Dequantization follows GGUF's block semantics exactly (see the block structs in kernels/ggml_types.h),
// in ggml's order of float operations, so optimized kernels can be compared bit for bit where they
// keep that order. Quantizers: Q8_0 and Q8_K (activations) follow ggml's reference recipes exactly;
// Q4_0, Q2_K, Q3_K, Q4_K, Q5_K and Q6_K are good-quality quantizers whose round trip is tested against error bounds
// (not bit-exact with llama.cpp's).
#pragma once

#include <cstddef>
#include <cstdint>

#include "kernels/ggml_types.h"

namespace troupe::ref {

// Round half to even, as ggml's nearest_int (valid for |x| < 2^22).
int nearest_int(float x);

// dst[0..n) = the n values of a row of `type` at src; n is a multiple of the type's block size.
// Types: F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, Q8_K, W4_G64, W4_G128 (others
// assert).
void dequantize_row(ggml_type type, const void* src, float* dst, int64_t n);

void dequantize_row_q8_0(const block_q8_0* x, float* y, int64_t n);
void dequantize_row_q4_0(const block_q4_0* x, float* y, int64_t n);
void dequantize_row_q5_0(const block_q5_0* x, float* y, int64_t n);
// Element j (0..31) of a Q5_0 block as its 5-bit code q (x = d * (q - 16)).
int q5_0_code(const block_q5_0& b, int j);
void dequantize_row_q2_k(const block_q2_k* x, float* y, int64_t n);
// Q2_K's code of element e (0..255), 0..3 (x = d * sc * q - dmin * m of its sub-block of 16).
int q2_k_value(const block_q2_k& b, int e);
void dequantize_row_q3_k(const block_q3_k* x, float* y, int64_t n);
// Q3_K's scale of sub-block j (0..15), -32..31, and the value of element e (0..255), -4..3 (x = d * scale * value).
int q3_k_scale(const block_q3_k& b, int j);
int q3_k_value(const block_q3_k& b, int e);
void dequantize_row_q4_k(const block_q4_k* x, float* y, int64_t n);
void dequantize_row_q5_k(const block_q5_k* x, float* y, int64_t n);
// Element e (0..255) of a Q5_K block as its 5-bit code q (x = d * sc * q - dmin * m of its sub-block).
int q5_k_code(const block_q5_k& b, int e);
void dequantize_row_q6_k(const block_q6_k* x, float* y, int64_t n);
void dequantize_row_q8_k(const block_q8_k* x, float* y, int64_t n);

// Q4_K's 6-bit scale and min of sub-block j (0..7) from the packed scales[12].
void q4_k_scale_min(int j, const uint8_t* scales, uint8_t* sc, uint8_t* m);

// Q8_0: d = amax / 127 (stored as fp16), q = round(x * (1 / d)) with d the unrounded float (ggml's recipe).
void quantize_row_q8_0(const float* x, block_q8_0* y, int64_t n);
// Q8_0 activation blocks as llama.cpp's CPU backend makes them on x86 (ggml-cpu's quantize_row_q8_0, AVX/AVX2/AVX-512
// builds), which its products with Q8_0 / Q4_0 weights use: d = amax / 127 (stored as fp16), but q = x * (127 / amax)
// rounded half to even (_mm256_round_ps, _MM_ROUND_NEAREST), where quantize_row_q8_0 (ggml's _ref, which makes
// weights) multiplies by 1 / d and rounds halves away from zero. The two differ in about one value in a few hundred.
void quantize_activations_q8_0(const float* x, block_q8_0* y, int64_t n);
// Q8_K: max = the element of largest |x| with its sign, iscale = -127 / max, q = min(127, nearest_int(iscale
// * x)), d = 1 / iscale, bsums = sums of 16 (ggml's recipe).
void quantize_row_q8_k(const float* x, block_q8_k* y, int64_t n);
// Q4_0: the element of largest |x| maps to -8: d = max / -8, q = min(15, trunc(x / d + 8.5)).
void quantize_row_q4_0(const float* x, block_q4_0* y, int64_t n);
// Q5_0: the element of largest |x| maps to -16: d = max / -16, q = min(31, trunc(x / d + 16.5)) (ggml's recipe).
void quantize_row_q5_0(const float* x, block_q5_0* y, int64_t n);
// Q2_K: per sub-block of 16 a least-squares scale and min (min <= 0), then 4-bit scale / min codes; codes 0..3.
void quantize_row_q2_k(const float* x, block_q2_k* y, int64_t n);
// Q3_K: per sub-block of 16 a scale mapping the largest |x| to -4, refined by least squares, then 6-bit signed scale
// codes (ggml's packing); values -4..3.
void quantize_row_q3_k(const float* x, block_q3_k* y, int64_t n);
// Q4_K: per sub-block of 32 a least-squares scale and min (min <= 0), then 6-bit scale/min codes.
void quantize_row_q4_k(const float* x, block_q4_k* y, int64_t n);
// Q5_K: as Q4_K with codes 0..31 (the fifth bit in qh).
void quantize_row_q5_k(const float* x, block_q5_k* y, int64_t n);
// Q6_K: per sub-block of 16 a scale mapping the largest |x| to -32, refined by least squares, then 8-bit
// signed scale codes.
void quantize_row_q6_k(const float* x, block_q6_k* y, int64_t n);

// ---- the 4-bit group formats with a scale and a min: Q4_1 (G = 32), W4_G64, W4_G128 (kernels/ggml_types.h) ----
// A row of n elements (a multiple of G) is n / G blocks {fp16 d, fp16 m, qs[G / 2]}; element i of a group is
// d * q_i + m (a float multiply, then a float add: every kernel's dequantized weight equals this one exactly).

// The group size G of a 4-bit group type (32, 64, 128), or 0 for any other type.
int w4_group_size(ggml_type type);

// The scale and min of one group, as stored (each exactly representable in fp16).
struct w4_scale_min {
    float d;
    float m;
};

// Round to nearest with the group's range: m = min(x), d = (max(x) - min(x)) / 15, both rounded to fp16
// (llama.cpp's quantize_row_q4_1 recipe, except that codes are taken against the rounded d and m).
w4_scale_min w4_fit_min_max(const float* x, int g);
// The code of x in a group of scale d and min m: nearest_int((x - m) / d) clamped to 0..15 (0 when d == 0).
int w4_code(float x, float d, float m);

// dst = the blocks of `type` (Q4_1, W4_G64, W4_G128) for x[0..n), each group with the scale and min given in
// groups[n / G] (rounded to fp16 when stored; codes taken against the rounded values). For quantizers that choose
// their own ranges (clipping search, GPTQ, AWQ).
void quantize_row_w4_with(ggml_type type, const float* x, const w4_scale_min* groups, void* dst, int64_t n);
// Round to nearest: w4_fit_min_max per group, then quantize_row_w4_with.
void quantize_row_w4(ggml_type type, const float* x, void* dst, int64_t n);
// y[0..n) = the dequantized row of `type` (Q4_1, W4_G64, W4_G128) at src.
void dequantize_row_w4(ggml_type type, const void* src, float* y, int64_t n);

// Quantizes a row of n floats into dst in `type`'s layout; returns the bytes written
// (row_bytes(type, n)). Types: F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, Q8_K, W4_G64,
// W4_G128 (others assert).
size_t quantize_row(ggml_type type, const float* x, void* dst, int64_t n);

}  // namespace troupe::ref
