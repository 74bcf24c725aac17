// Internal: the AVX-512 decode kernels of Q4_K / Q6_K weights for one token (kquant_rows_avx512.cpp), called by
// matmul_avx512.cpp's rows_avx512. Include only from files compiled with the AVX-512 flags (kernels/CMakeLists.txt).
#pragma once

#include <cstdint>

#include "kernels/cpu/matmul_kernels.h"

namespace troupe::cpu::detail {

// y[r] = row r of w (Q4_K or Q6_K) . x for r0 <= r < r1; x: [w.n_in / 256] Q8_K blocks of one token. ggml's x86
// arithmetic bit for bit (kernels/ref/kquant_dot.h), as q4_k_row / q6_k_row in matmul_avx512.cpp.
void kquant_rows_one_token_avx512(const matmul_weight& w, const block_q8_k* x, float* y, int64_t r0, int64_t r1);

}  // namespace troupe::cpu::detail
