// Internal: the AVX-512 decode kernels of Q2_K / Q3_K / Q4_K / Q5_K / Q6_K weights for one token
// (kquant_rows_avx512.cpp), called by matmul_avx512.cpp's rows_avx512. Include only from files compiled with the
// AVX-512 flags (kernels/CMakeLists.txt).
#pragma once

#include <cstddef>
#include <cstdint>

#include "kernels/cpu/matmul_kernels.h"

namespace troupe::cpu::detail {

// Whether a one-token decode of w goes through kquant_rows_one_token_avx512 (rows in groups of four) rather than the
// one-row kernels of matmul_avx512.cpp. A group of four long rows is four streams a row apart for the memory, which
// costs Q6_K more than the shared per-row work saves: Q6_K rows of 5632 weights (4620 B) streamed 2.5x slower from DRAM
// on two Zen 5 cores (15 against 37 GB/s), and the grown 1B Q6_K decoded at 43-47 tokens/s grouped against 48-63 in
// rows (alternated, quiet machine), so Q6_K groups only short rows (the 110M shape's 768 weights: 630 B). Q4_K's
// one-row kernel is bound by its own work (~21 GB/s per core from L2 against the groups' 33-46), so its long rows gain
// from groups too: grown 1B Q4_K 57-90 against 46-58 tokens/s, 110M Q4_K (ffn_down rows of 1728 B) 608-635 against
// 449-549, alternated in the same minutes.
constexpr size_t k_max_grouped_q6_k_row_bytes = 1024;

inline bool kquant_groups_rows(ggml_type type, size_t row_bytes) {
    return type == ggml_type::q2_k || type == ggml_type::q3_k || type == ggml_type::q4_k || type == ggml_type::q5_k ||
           (type == ggml_type::q6_k && row_bytes <= k_max_grouped_q6_k_row_bytes);
}

// y[r] = row r of w (Q2_K, Q3_K, Q4_K, Q5_K or Q6_K) . x for r0 <= r < r1; x: [w.n_in / 256] Q8_K blocks of one token.
// ggml's x86 arithmetic bit for bit (kernels/ref/kquant_dot.h), as q4_k_row / q6_k_row in matmul_avx512.cpp.
void kquant_rows_one_token_avx512(const matmul_weight& w, const block_q8_k* x, float* y, int64_t r0, int64_t r1);

}  // namespace troupe::cpu::detail
