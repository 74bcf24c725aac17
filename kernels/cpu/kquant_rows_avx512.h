// Internal: the AVX-512 decode kernels of Q4_K / Q6_K weights for one token (kquant_rows_avx512.cpp), called by
// matmul_avx512.cpp's rows_avx512. Include only from files compiled with the AVX-512 flags (kernels/CMakeLists.txt).
#pragma once

#include <cstddef>
#include <cstdint>

#include "kernels/cpu/matmul_kernels.h"

namespace troupe::cpu::detail {

// Rows up to this many bytes go through kquant_rows_one_token_avx512 (the 110M shape's 768 weights: Q4_K 432 B, Q6_K
// 630 B), longer ones through the one-row kernels of matmul_avx512.cpp. A group of four long rows is four streams
// several KiB apart for the memory: Q6_K rows of 5632 weights (4620 B) streamed 2.5x slower from DRAM on two Zen 5
// cores (15 against 37 GB/s), and 1B-shaped decode lost to the one-row kernels, while four short rows are one
// stream and the per-row work they share is what bounded the one-row kernels there.
constexpr size_t k_max_grouped_row_bytes = 1024;

// y[r] = row r of w (Q4_K or Q6_K) . x for r0 <= r < r1; x: [w.n_in / 256] Q8_K blocks of one token. ggml's x86
// arithmetic bit for bit (kernels/ref/kquant_dot.h), as q4_k_row / q6_k_row in matmul_avx512.cpp.
void kquant_rows_one_token_avx512(const matmul_weight& w, const block_q8_k* x, float* y, int64_t r0, int64_t r1);

}  // namespace troupe::cpu::detail
