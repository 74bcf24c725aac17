// Reference (scalar) quantize / dequantize of the GGUF block formats troupe computes with.
//
// Dequantization follows GGUF's block semantics exactly (see the block structs in kernels/ggml_types.h),
// in ggml's order of float operations, so optimized kernels can be compared bit for bit where they
// keep that order. Quantizers: Q8_0 and Q8_K (activations) follow ggml's reference recipes exactly;
// Q4_0, Q4_K and Q6_K are good-quality quantizers whose round trip is tested against error bounds
// (not bit-exact with llama.cpp's).
#pragma once

#include <cstddef>
#include <cstdint>

#include "kernels/ggml_types.h"

namespace troupe::ref {

// Round half to even, as ggml's nearest_int (valid for |x| < 2^22).
int nearest_int(float x);

// dst[0..n) = the n values of a row of `type` at src; n is a multiple of the type's block size.
// Types: F32, F16, BF16, Q8_0, Q4_0, Q4_K, Q6_K, Q8_K (others assert).
void dequantize_row(ggml_type type, const void* src, float* dst, int64_t n);

void dequantize_row_q8_0(const block_q8_0* x, float* y, int64_t n);
void dequantize_row_q4_0(const block_q4_0* x, float* y, int64_t n);
void dequantize_row_q4_k(const block_q4_k* x, float* y, int64_t n);
void dequantize_row_q6_k(const block_q6_k* x, float* y, int64_t n);
void dequantize_row_q8_k(const block_q8_k* x, float* y, int64_t n);

// Q4_K's 6-bit scale and min of sub-block j (0..7) from the packed scales[12].
void q4_k_scale_min(int j, const uint8_t* scales, uint8_t* sc, uint8_t* m);

// Q8_0: d = amax / 127 (stored as fp16), q = round(x * (1 / d)) with d the unrounded float (ggml's recipe).
void quantize_row_q8_0(const float* x, block_q8_0* y, int64_t n);
// Q8_K: max = the element of largest |x| with its sign, iscale = -127 / max, q = min(127, nearest_int(iscale
// * x)), d = 1 / iscale, bsums = sums of 16 (ggml's recipe).
void quantize_row_q8_k(const float* x, block_q8_k* y, int64_t n);
// Q4_0: the element of largest |x| maps to -8: d = max / -8, q = min(15, trunc(x / d + 8.5)).
void quantize_row_q4_0(const float* x, block_q4_0* y, int64_t n);
// Q4_K: per sub-block of 32 a least-squares scale and min (min <= 0), then 6-bit scale/min codes.
void quantize_row_q4_k(const float* x, block_q4_k* y, int64_t n);
// Q6_K: per sub-block of 16 a scale mapping the largest |x| to -32, refined by least squares, then 8-bit
// signed scale codes.
void quantize_row_q6_k(const float* x, block_q6_k* y, int64_t n);

// Quantizes a row of n floats into dst in `type`'s layout; returns the bytes written
// (row_bytes(type, n)). Types: F32, F16, BF16, Q8_0, Q4_0, Q4_K, Q6_K, Q8_K (others assert).
size_t quantize_row(ggml_type type, const float* x, void* dst, int64_t n);

}  // namespace troupe::ref
