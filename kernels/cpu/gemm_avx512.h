// Internal: the AVX-512 GEMMs (prefill) in matmul_avx512.cpp's kernel table: float panels (gemm_avx512.cpp)
// and the integer GEMMs for Q8_0 / Q4_0 weights (gemm_q8_avx512.cpp) and Q4_K / Q6_K weights (gemm_kquant_avx512.cpp).
#pragma once

#include <cstdint>

#include "kernels/cpu/matmul_kernels.h"

namespace troupe::cpu::detail {

constexpr int k_avx512_gemm_rows = 32;         // weight rows per float panel (2 zmm)
constexpr int k_avx512_gemm_mr = 14;           // tokens per float micro-tile (28 accumulators)
constexpr int k_avx512_gemm_kc = 256;          // k block (a multiple of every block size)
constexpr int k_avx512_gemm_q8_rows = 16;      // rows per integer panel (one zmm of int32 lanes)
constexpr int k_avx512_gemm_kquant_rows = 16;  // rows per work item of the k-quant GEMM (4 groups of 4)

void gemm_avx512(const matmul_weight& w, const float* xp, float* y, int64_t ldy, int64_t n_tokens, int64_t r0,
                 int64_t r1);
void gemm_q8_avx512(const matmul_weight& w, prepared_x x, float* y, int64_t ldy, int64_t n_tokens, int64_t r0,
                    int64_t r1);
void gemm_kquant_avx512(const matmul_weight& w, prepared_x x, float* y, int64_t ldy, int64_t n_tokens, int64_t r0,
                        int64_t r1);

}  // namespace troupe::cpu::detail
