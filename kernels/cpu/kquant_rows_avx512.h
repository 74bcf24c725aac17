// Internal: the AVX-512 decode kernels of Q2_K / Q3_K / Q4_K / Q5_K / Q6_K weights for one token
// (kquant_rows_avx512.cpp), called by matmul_avx512.cpp's rows_avx512. Include only from files compiled with the
// AVX-512 flags (kernels/CMakeLists.txt).
#pragma once

#include <cstddef>
#include <cstdint>

#include "kernels/cpu/matmul_kernels.h"

namespace troupe::cpu::detail {

// Whether a one-token decode of w goes through kquant_rows_one_token_avx512 (rows in groups of four) rather than the
// one-row kernels of matmul_avx512.cpp: every k-quant. The one-row kernels are bound by their own work (Q4_K ~21 GB/s
// per core from L2 against the groups' 33-46), so long rows gain from groups too: grown 1B Q4_K 57-90 against 46-58
// tokens/s, 110M Q4_K (ffn_down rows of 1728 B) 608-635 against 449-549, alternated in the same minutes. Q6_K's long
// rows were once kept out (four streams a row apart measured slower from DRAM on a Zen 5 then); with the rows' near
// and far prefetches (prefetch_ahead) the 1B Q6_K (rows of 1680 and 4620 B) decodes at 50.6-63.8 tokens/s grouped
// against 40.7-51.2 one row at a time (`troupe bench --n-prompt 16 --n-gen 64|128 --reps 2`, six rounds alternated
// on two Zen 5 cores, 2026-12-04; 78-82% of a plain read between the steps against 63-66%).
inline bool kquant_groups_rows(ggml_type type) {
    return is_k_quant(type);
}

// Steps of up to this many tokens multiply k-quant weights with kquant_rows_few_tokens_avx512 (Q4_K / Q6_K: from there
// on the integer GEMM, gemm_kquant_avx512.cpp): the same groups of four rows as one token, each row's blocks unpacked
// once for up to four tokens and each token's activations shuffled once for the four rows; more tokens in chunks of
// four, the group's blocks then read from L1. troupe_kernels_bench's 1B shape (two Zen 5 threads, all matmuls of a
// step, ms; rows / k-quant panels): Q4_K 2 tokens 23.2 / 28.9 with the one-row kernels -> 19.0-22.0 / 16.6-18.5; 4
// tokens (the GEMM) 41.7 / 37.6 -> 26.6-28.0 / 24.8-26.0; 8 tokens (GEMM 54-57) 52.2-52.6 / 48.9-51.1; 16: 103 against
// the GEMM's 87-89. Q6_K 2 tokens 29.7 / 40.4 -> 21.8-24.8 / 19.5-22.2; 4 tokens (GEMM 55.5 / 40.3) 41.5-43.2
// / 36.0-40.5; 8 tokens 62.8-68.4 against the GEMM's 54.8-59.8 (its four-token kernel holds 32 vectors of activations).
//
// Q2_K, Q3_K and Q5_K have no GEMM: every token count takes the groups (a prefill in chunks of four tokens). Before,
// two tokens on took the one-row kernels in tiles of four tokens; 1B shape, 128 tokens (`troupe_kernels_bench 2 128 2
// Q2_K,Q3_K,Q5_K 1B`): Q2_K 101.6 -> 165.7 tokens/s, Q3_K 61.3 -> 112.7, Q5_K 82.4 -> 144.1.
constexpr int64_t kquant_few_tokens_max(ggml_type type) {
    switch (type) {
        case ggml_type::q4_k:
            return 8;
        case ggml_type::q6_k:
            return 4;
        case ggml_type::q2_k:
        case ggml_type::q3_k:
        case ggml_type::q5_k:
            return INT64_MAX;
        default:
            return 0;
    }
}

// y[r] = row r of w (Q2_K, Q3_K, Q4_K, Q5_K or Q6_K) . x for r0 <= r < r1; x: [w.n_in / 256] Q8_K blocks of one token.
// ggml's x86 arithmetic bit for bit (kernels/ref/kquant_dot.h), as q4_k_row / q6_k_row in matmul_avx512.cpp.
void kquant_rows_one_token_avx512(const matmul_weight& w, const block_q8_k* x, float* y, int64_t r0, int64_t r1);

// y[t * ldy + r] = row r of w (a k-quant) . token t for r0 <= r < r1, t < n_tokens (1..kquant_few_tokens_max); token
// t's Q8_K blocks at x + t * xs. Bit for bit what the one-token kernels give each token.
void kquant_rows_few_tokens_avx512(const matmul_weight& w, const uint8_t* x, size_t xs, int64_t n_tokens, float* y,
                                   int64_t ldy, int64_t r0, int64_t r1);

}  // namespace troupe::cpu::detail
