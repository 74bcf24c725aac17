// Internal, for the AVX2 and AVX-512 matmul files only (matmul_avx2.cpp, matmul_avx512.cpp): Q5_K weights against
// Q8_K activation rows, one weight row x T tokens, in 256-bit operations that both levels run. Everything here is
// internal to the including file, so each level compiles its own copy with its own ISA flags.
//
// ggml's recipe bit for bit (ref::dot_q5_k_q8_k, ggml_vec_dot_q5_K_q8_K's AVX2 form): per chunk of 64 elements the
// 5-bit codes of two sub-blocks (Q4_K's nibbles with bit 4 from qh), vpmaddubsw with the activation bytes, vpmaddwd
// with the sub-block's scale, 8 int32 lanes per super-block, acc = fma(d_x * d_w, lanes, acc); the mins dotted with
// the activations' pair sums into one integer per super-block, summs = fma(-d_x * dmin, it, summs); then
// hsum_float_8(acc) + summs.
#pragma once

#include <immintrin.h>

#include <cmath>
#include <cstdint>
#include <cstring>

#include "kernels/cpu/q5_0_row.h"
#include "kernels/fp16.h"
#include "kernels/ggml_types.h"

namespace troupe::cpu::detail {
namespace {

// Bit `bit` (0..7) of every byte of qh moved to bit 4 (0x10), the rest cleared.
inline __m256i q5_k_fifth_bit(__m256i qh, int bit) {
    const __m256i b4 = _mm256_set1_epi8(0x10);
    if (bit <= 4) return _mm256_and_si256(_mm256_sll_epi16(qh, _mm_cvtsi32_si128(4 - bit)), b4);
    return _mm256_and_si256(_mm256_srl_epi16(qh, _mm_cvtsi32_si128(bit - 4)), b4);
}

// y[t * ldy] for t < T: row w (nb super-blocks) times token t's Q8_K blocks at x + t * xs. `ahead`: a row further
// on, prefetched as this one runs.
template <int T>
void q5_k_row(const block_q5_k* w, const uint8_t* ahead, const uint8_t* x, size_t xs, int64_t nb, float* y,
              int64_t ldy) {
    const __m256i low4 = _mm256_set1_epi8(0x0f);
    __m256 acc[T];
    float summs[T];
    for (int t = 0; t < T; ++t) {
        acc[t] = _mm256_setzero_ps();
        summs[t] = 0.0f;
    }
    for (int64_t b = 0; b < nb; ++b) {
        prefetch_row_block<block_q5_k>(ahead, b);
        const block_q5_k& wb = w[b];
        // The packed 6-bit scales and mins (Q4_K's packing) as bytes sc0..sc7, m0..m7.
        uint32_t s[3];
        std::memcpy(s, wb.scales, 12);
        const uint32_t words[4] = {s[0] & 0x3f3f3f3fu, (s[2] & 0x0f0f0f0fu) | ((s[0] >> 2) & 0x30303030u),
                                   s[1] & 0x3f3f3f3fu, ((s[2] >> 4) & 0x0f0f0f0fu) | ((s[1] >> 2) & 0x30303030u)};
        uint8_t sm[16];
        std::memcpy(sm, words, 16);
        const float dw = fp16_to_fp32(wb.d), dminw = fp16_to_fp32(wb.dmin);
        const __m128i mins = _mm_cvtepu8_epi16(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(sm + 8)));
        const __m256i qh = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(wb.qh));
        __m256i sum[T];
        for (int t = 0; t < T; ++t) sum[t] = _mm256_setzero_si256();
#pragma GCC unroll 4
        for (int c = 0; c < 4; ++c) {
            const __m256i q = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(wb.qs + 32 * c));
            const __m256i lo = _mm256_or_si256(_mm256_and_si256(q, low4), q5_k_fifth_bit(qh, 2 * c));
            const __m256i hi =
                _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(q, 4), low4), q5_k_fifth_bit(qh, 2 * c + 1));
            const __m256i s_lo = _mm256_set1_epi16(sm[2 * c]), s_hi = _mm256_set1_epi16(sm[2 * c + 1]);
#pragma GCC unroll 4
            for (int t = 0; t < T; ++t) {
                const int8_t* xq = reinterpret_cast<const block_q8_k*>(x + t * xs)[b].qs + 64 * c;
                const __m256i p_lo = _mm256_maddubs_epi16(lo, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xq)));
                const __m256i p_hi =
                    _mm256_maddubs_epi16(hi, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xq + 32)));
                sum[t] = _mm256_add_epi32(
                    sum[t], _mm256_add_epi32(_mm256_madd_epi16(p_lo, s_lo), _mm256_madd_epi16(p_hi, s_hi)));
            }
        }
#pragma GCC unroll 4
        for (int t = 0; t < T; ++t) {
            const block_q8_k& xb = reinterpret_cast<const block_q8_k*>(x + t * xs)[b];
            const __m256i bs = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xb.bsums));
            const __m128i bsum32 = _mm_hadd_epi16(_mm256_castsi256_si128(bs), _mm256_extracti128_si256(bs, 1));
            __m128i m = _mm_madd_epi16(mins, bsum32);  // 4 int32: an exact integer sum in any order
            m = _mm_add_epi32(m, _mm_shuffle_epi32(m, _MM_SHUFFLE(1, 0, 3, 2)));
            m = _mm_add_epi32(m, _mm_shuffle_epi32(m, _MM_SHUFFLE(2, 3, 0, 1)));
            summs[t] = std::fma(-xb.d * dminw, static_cast<float>(_mm_cvtsi128_si32(m)), summs[t]);
            acc[t] = _mm256_fmadd_ps(_mm256_set1_ps(xb.d * dw), _mm256_cvtepi32_ps(sum[t]), acc[t]);
        }
    }
    for (int t = 0; t < T; ++t) y[t * ldy] = ggml_hsum_float_8(acc[t]) + summs[t];
}

}  // namespace
}  // namespace troupe::cpu::detail
