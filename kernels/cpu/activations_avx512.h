// Internal: the AVX-512 level's activation quantizers and roundings (activations_avx512.cpp), in matmul_avx512.cpp's
// kernel table (matmul_kernels: quantize_q8_0, quantize_q8_k, q8_0_values, q8_k_values, round_f16, round_bf16).
#pragma once

#include <cstdint>

#include "kernels/cpu/matmul_kernels.h"

namespace troupe::cpu::detail {

void quantize_q8_0_avx512(const float* x, block_q8_0* y, int64_t n);
void quantize_q8_k_avx512(const float* x, block_q8_k* y, int64_t n);
void q8_0_values_avx512(const float* x, float* y, int64_t n);
void q8_k_values_avx512(const float* x, float* y, int64_t n);
void round_f16_avx512(const float* x, float* y, int64_t n);
void round_bf16_avx512(const float* x, float* y, int64_t n);

}  // namespace troupe::cpu::detail
