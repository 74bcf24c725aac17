// Internal, for the AVX2 and AVX-512 matmul files only (matmul_avx2.cpp, matmul_avx512.cpp): Q2_K weights against
// Q8_K activation rows, one weight row x T tokens, in 256-bit operations that both levels run. Everything here is
// internal to the including file, so each level compiles its own copy with its own ISA flags.
//
// ggml's recipe bit for bit (ref::dot_q2_k_q8_k, ggml_vec_dot_q2_K_q8_K's AVX2 form): per super-block the 16 mins
// times the activations' sums of 16 (vpmaddwd: 8 int32 lanes) into acc = fma(-d_x * dmin, lanes, acc) first; then
// per chunk of 32 the 2-bit codes (vpmaddubsw with the activation bytes, vpmaddwd with the two sub-blocks' scales),
// 8 int32 lanes, acc = fma(d_x * d_w, lanes, acc); then hsum_float_8.
#pragma once

#include <immintrin.h>

#include <cstdint>

#include "kernels/cpu/q3_k_row.h"
#include "kernels/fp16.h"
#include "kernels/ggml_types.h"

namespace troupe::cpu::detail {
namespace {

// y[t * ldy] for t < T: row w (nb super-blocks) times token t's Q8_K blocks at x + t * xs. `ahead`: a row further
// on, prefetched as this one runs.
template <int T>
void q2_k_row(const block_q2_k* w, const uint8_t* ahead, const uint8_t* x, size_t xs, int64_t nb, float* y,
              int64_t ldy) {
    const __m256i m3 = _mm256_set1_epi8(3);
    const __m128i m4 = _mm_set1_epi8(0x0f);
    __m256 acc[T];
    for (int t = 0; t < T; ++t) acc[t] = _mm256_setzero_ps();
    for (int64_t b = 0; b < nb; ++b) {
        prefetch_row_block<block_q2_k>(ahead, b);
        const block_q2_k& wb = w[b];
        const float dw = fp16_to_fp32(wb.d), dminw = fp16_to_fp32(wb.dmin);
        const __m128i mins_and_scales = _mm_loadu_si128(reinterpret_cast<const __m128i*>(wb.scales));
        const __m256i mins = _mm256_cvtepi8_epi16(_mm_and_si128(_mm_srli_epi16(mins_and_scales, 4), m4));
#pragma GCC unroll 4
        for (int t = 0; t < T; ++t) {
            const block_q8_k& xb = reinterpret_cast<const block_q8_k*>(x + t * xs)[b];
            const __m256i prod =
                _mm256_madd_epi16(mins, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xb.bsums)));
            acc[t] = _mm256_fmadd_ps(_mm256_set1_ps(-xb.d * dminw), _mm256_cvtepi32_ps(prod), acc[t]);
        }
        const __m256i words = _mm256_cvtepi8_epi16(_mm_and_si128(mins_and_scales, m4));
        const __m256i scales[2] = {_mm256_permute2x128_si256(words, words, 0x00),
                                   _mm256_permute2x128_si256(words, words, 0x11)};
        __m256i sum[T];
        for (int t = 0; t < T; ++t) sum[t] = _mm256_setzero_si256();
        for (int j = 0; j < 2; ++j) {  // halves of 128 elements
            const __m256i q2bits = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(wb.qs + 32 * j));
#pragma GCC unroll 4
            for (int c = 0; c < 4; ++c) {
                const __m256i q = _mm256_and_si256(_mm256_srli_epi16(q2bits, 2 * c), m3);
                const __m256i sc = _mm256_shuffle_epi8(scales[j], q3_k_scale_shuffle(c));
#pragma GCC unroll 4
                for (int t = 0; t < T; ++t) {
                    const __m256i xq = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(
                        reinterpret_cast<const block_q8_k*>(x + t * xs)[b].qs + 128 * j + 32 * c));
                    sum[t] = _mm256_add_epi32(sum[t], _mm256_madd_epi16(sc, _mm256_maddubs_epi16(q, xq)));
                }
            }
        }
#pragma GCC unroll 4
        for (int t = 0; t < T; ++t) {
            const float dx = reinterpret_cast<const block_q8_k*>(x + t * xs)[b].d;
            acc[t] = _mm256_fmadd_ps(_mm256_set1_ps(dx * dw), _mm256_cvtepi32_ps(sum[t]), acc[t]);
        }
    }
    for (int t = 0; t < T; ++t) y[t * ldy] = ggml_hsum_float_8(acc[t]);
}

}  // namespace
}  // namespace troupe::cpu::detail
