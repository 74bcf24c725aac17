// Internal, for the AVX2 and AVX-512 matmul files only (matmul_avx2.cpp, matmul_avx512.cpp): Q3_K weights against
// Q8_K activation rows, one weight row x T tokens, in 256-bit operations that both levels run. Everything here is
// internal to the including file, so each level compiles its own copy with its own ISA flags.
//
// ggml's recipe bit for bit (ref::dot_q3_k_q8_k, ggml_vec_dot_q3_K_q8_K's AVX2 form): per chunk of 32 elements the
// low 2 bits and, apart, 4 where the high bit is clear, each multiplied with the activation bytes (vpmaddubsw) and
// subtracted, then vpmaddwd with the two sub-blocks' scales (sc - 32): 8 int32 lanes per super-block,
// acc = fma(d_x * d_w, lanes, acc), then hsum_float_8.
#pragma once

#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "kernels/cpu/q5_0_row.h"
#include "kernels/fp16.h"
#include "kernels/ggml_types.h"

namespace troupe::cpu::detail {
namespace {

// The 16 6-bit scales of a block as bytes sc - 32, byte j = sub-block j (ggml's unpacking of scales[12]).
inline __m128i q3_k_scale_bytes(const block_q3_k& wb) {
    uint32_t aux[3];
    std::memcpy(aux, wb.scales, 12);
    return _mm_sub_epi8(
        _mm_set_epi32(static_cast<int>(((aux[1] >> 4) & 0x0f0f0f0fu) | (((aux[2] >> 6) & 0x03030303u) << 4)),
                      static_cast<int>(((aux[0] >> 4) & 0x0f0f0f0fu) | (((aux[2] >> 4) & 0x03030303u) << 4)),
                      static_cast<int>((aux[1] & 0x0f0f0f0fu) | (((aux[2] >> 2) & 0x03030303u) << 4)),
                      static_cast<int>((aux[0] & 0x0f0f0f0fu) | (((aux[2] >> 0) & 0x03030303u) << 4))),
        _mm_set1_epi8(32));
}

// vpshufb pattern: word 2c of a 128-bit lane of scale words in the low lane's 8 words, word 2c + 1 in the high one's.
inline __m256i q3_k_scale_shuffle(int c) {
    const auto word = [](int w) {
        const int64_t v = (2 * w + 1) << 8 | (2 * w);
        return v | v << 16 | v << 32 | v << 48;
    };
    return _mm256_set_epi64x(word(2 * c + 1), word(2 * c + 1), word(2 * c), word(2 * c));
}

// y[t * ldy] for t < T: row w (nb super-blocks) times token t's Q8_K blocks at x + t * xs. `ahead`: a row further
// on, prefetched as this one runs.
template <int T>
void q3_k_row(const block_q3_k* w, const uint8_t* ahead, const uint8_t* x, size_t xs, int64_t nb, float* y,
              int64_t ldy) {
    const __m256i m3 = _mm256_set1_epi8(3);
    const __m256i one = _mm256_set1_epi8(1);
    __m256 acc[T];
    for (int t = 0; t < T; ++t) acc[t] = _mm256_setzero_ps();
    for (int64_t b = 0; b < nb; ++b) {
        prefetch_row_block<block_q3_k>(ahead, b);
        const block_q3_k& wb = w[b];
        // The 16 scales as words: scales 0..7 and 8..15 each in both 128-bit lanes.
        const __m256i words = _mm256_cvtepi8_epi16(q3_k_scale_bytes(wb));
        const __m256i scales[2] = {_mm256_permute2x128_si256(words, words, 0x00),
                                   _mm256_permute2x128_si256(words, words, 0x11)};
        const __m256i hbits = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(wb.hmask));
        const float dw = fp16_to_fp32(wb.d);
        __m256i sum[T];
        for (int t = 0; t < T; ++t) sum[t] = _mm256_setzero_si256();
        for (int j = 0; j < 2; ++j) {  // halves of 128 elements
            const __m256i q3bits = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(wb.qs + 32 * j));
#pragma GCC unroll 4
            for (int c = 0; c < 4; ++c) {
                const int bit = 4 * j + c;
                const __m256i low = _mm256_and_si256(_mm256_srli_epi16(q3bits, 2 * c), m3);
                const __m256i four = _mm256_slli_epi16(
                    _mm256_srli_epi16(_mm256_andnot_si256(hbits, _mm256_slli_epi16(one, bit)), bit), 2);
                const __m256i sc = _mm256_shuffle_epi8(scales[j], q3_k_scale_shuffle(c));
#pragma GCC unroll 4
                for (int t = 0; t < T; ++t) {
                    const __m256i xq = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(
                        reinterpret_cast<const block_q8_k*>(x + t * xs)[b].qs + 128 * j + 32 * c));
                    const __m256i p = _mm256_sub_epi16(_mm256_maddubs_epi16(low, xq), _mm256_maddubs_epi16(four, xq));
                    sum[t] = _mm256_add_epi32(sum[t], _mm256_madd_epi16(sc, p));
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
