// Internal, for the AVX2 and AVX-512 matmul files only (matmul_avx2.cpp, matmul_avx512.cpp): Q5_0 weights against
// Q8_0 activation rows, one weight row x T tokens, in 256-bit operations that both levels run. Everything here is
// internal to the including file, so each level compiles its own copy with its own ISA flags.
//
// ggml's recipe bit for bit (ref::dot_q5_0, ggml_vec_dot_q5_0_q8_0's AVX2 form): the 32 codes of a block as bytes
// q - 16 (the nibbles, with 0xF0 or-ed in where bit 4 is clear), multiplied as |q - 16| with the activations' signs
// moved over (vpmaddubsw), widened to 8 int32 lanes of 4 elements (vpmaddwd), acc = fma(d_w * d_x, lanes, acc) per
// block, then ggml's hsum_float_8.
#pragma once

#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "kernels/ggml_types.h"

namespace troupe::cpu::detail {
namespace {

inline float ggml_hsum_float_8(__m256 v) {  // ggml's hsum_float_8
    const __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    const __m128 s2 = _mm_add_ps(s, _mm_movehl_ps(s, s));
    return _mm_cvtss_f32(_mm_add_ss(s2, _mm_movehdup_ps(s2)));
}

// Prefetches block b of the row at `ahead` (a row further on than the one being multiplied), every cache line of it.
template <class Block>
inline void prefetch_row_block(const uint8_t* ahead, int64_t b) {
    for (size_t i = 0; i < sizeof(Block); i += 64)
        _mm_prefetch(reinterpret_cast<const char*>(ahead + b * sizeof(Block) + i), _MM_HINT_T0);
}

// The block's codes as signed bytes q - 16, byte j = element j.
inline __m256i q5_0_codes(const block_q5_0& b) {
    const __m128i packed = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b.qs));
    const __m256i nibbles = _mm256_and_si256(
        _mm256_inserti128_si256(_mm256_castsi128_si256(packed), _mm_srli_epi16(packed, 4), 1), _mm256_set1_epi8(0x0f));
    uint32_t qh;
    std::memcpy(&qh, b.qh, sizeof qh);
    // Byte j = 0xff where bit j of qh is set: bytes 8i .. 8i + 7 take byte i of qh, each lane tests its own bit.
    const __m256i spread = _mm256_shuffle_epi8(
        _mm256_set1_epi32(static_cast<int32_t>(qh)),
        _mm256_set_epi64x(0x0303030303030303, 0x0202020202020202, 0x0101010101010101, 0x0000000000000000));
    const __m256i bit_set =
        _mm256_cmpeq_epi8(_mm256_or_si256(spread, _mm256_set1_epi64x(0x7fbfdfeff7fbfdfe)), _mm256_set1_epi64x(-1));
    return _mm256_or_si256(nibbles, _mm256_andnot_si256(bit_set, _mm256_set1_epi8(static_cast<char>(0xf0))));
}

// y[t * ldy] for t < T: row w (nb blocks) times token t's Q8_0 blocks at x + t * xs. `ahead`: a row further on,
// prefetched as this one runs.
template <int T>
void q5_0_row(const block_q5_0* w, const uint8_t* ahead, const uint8_t* x, size_t xs, int64_t nb, float* y,
              int64_t ldy) {
    const __m256i ones16 = _mm256_set1_epi16(1);
    __m256 acc[T];
    for (int t = 0; t < T; ++t) acc[t] = _mm256_setzero_ps();
    for (int64_t b = 0; b < nb; ++b) {
        if (b % 3 == 0) _mm_prefetch(reinterpret_cast<const char*>(ahead + b * sizeof(block_q5_0)), _MM_HINT_T0);
        const __m256i q = q5_0_codes(w[b]);
        const __m256i magnitude = _mm256_sign_epi8(q, q);
        const float dw = _cvtsh_ss(w[b].d);
#pragma GCC unroll 4
        for (int t = 0; t < T; ++t) {
            const block_q8_0& xb = reinterpret_cast<const block_q8_0*>(x + t * xs)[b];
            const __m256i xq = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xb.qs));
            const __m256i lanes = _mm256_madd_epi16(_mm256_maddubs_epi16(magnitude, _mm256_sign_epi8(xq, q)), ones16);
            acc[t] = _mm256_fmadd_ps(_mm256_set1_ps(dw * _cvtsh_ss(xb.d)), _mm256_cvtepi32_ps(lanes), acc[t]);
        }
    }
    for (int t = 0; t < T; ++t) y[t * ldy] = ggml_hsum_float_8(acc[t]);
}

// Decode (one token): R rows of w (row_stride apart) at once, each row's blocks added into its own accumulator as
// q5_0_row adds them (the same floats). A row alone waits on one FMA per block (ggml adds every block into one 8-lane
// accumulator in order); R rows run R such chains side by side and load each activation block once. `ahead`: the
// rows after these, prefetched as they run.
template <int R>
void q5_0_rows(const uint8_t* w, size_t row_stride, const uint8_t* ahead, const uint8_t* x, int64_t nb, float* y) {
    const __m256i ones16 = _mm256_set1_epi16(1);
    __m256 acc[R];
    for (int r = 0; r < R; ++r) acc[r] = _mm256_setzero_ps();
    for (int64_t b = 0; b < nb; ++b) {
        if (b % 3 == 0) {
            for (int r = 0; r < R; ++r)
                _mm_prefetch(reinterpret_cast<const char*>(ahead + r * row_stride + b * sizeof(block_q5_0)),
                             _MM_HINT_T0);
        }
        const block_q8_0& xb = reinterpret_cast<const block_q8_0*>(x)[b];
        const __m256i xq = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xb.qs));
        const float dx = _cvtsh_ss(xb.d);
#pragma GCC unroll 4
        for (int r = 0; r < R; ++r) {
            const block_q5_0& wb = reinterpret_cast<const block_q5_0*>(w + r * row_stride)[b];
            const __m256i q = q5_0_codes(wb);
            const __m256i lanes =
                _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_sign_epi8(q, q), _mm256_sign_epi8(xq, q)), ones16);
            acc[r] = _mm256_fmadd_ps(_mm256_set1_ps(_cvtsh_ss(wb.d) * dx), _mm256_cvtepi32_ps(lanes), acc[r]);
        }
    }
    for (int r = 0; r < R; ++r) y[r] = ggml_hsum_float_8(acc[r]);
}

}  // namespace
}  // namespace troupe::cpu::detail
