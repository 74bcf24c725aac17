// Internal, for matmul_avx512.cpp only (AVX-512 F, BW, VL and VNNI flags): Q5_0 weights against Q8_0 activation rows,
// one weight row x T tokens, two blocks per 512-bit step. The same floats as q5_0_row.h (ggml's AVX2 recipe,
// ref::dot_q5_0): a block's 8 int32 lanes (lane k the dot of elements 4k .. 4k + 3, as q - 16 against x) are exact
// integers however they are formed, and each is added as acc = fma(d_w * d_x, float(lanes), acc) block after block,
// then ggml's hsum_float_8.
//
// What differs is how the lanes are formed. q5_0_row.h makes them in 256-bit steps with ggml's sign trick (vpsignb
// has no 512-bit form): about twenty operations per block, so a decode thread ran at ~10 GB/s, a third of what the
// memory delivers (troupe_kernels_bench: Q5_0 rows 19.6 GB/s = 33% of the read bandwidth on two Zen 5 cores). Here a
// pair of blocks' 64 codes come out as unsigned bytes q (0..31) with the fifth bits set through a mask register, and
// one vpdpbusd multiplies them with the activations, starting from -dot(16, x) (made once per token and call):
// lanes = dot(q, x) - dot(16, x), exactly ggml's integers.
#pragma once

#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "kernels/cpu/matmul_avx512_blocks.h"
#include "kernels/cpu/q5_0_row.h"
#include "kernels/ggml_types.h"

namespace troupe::cpu::detail {
namespace {

// Blocks a and b's codes as unsigned bytes q (0..31): bytes 0..31 elements 0..31 of a, bytes 32..63 those of b. Each
// block's 16 bytes of nibbles go to two 128-bit lanes at once (a broadcast load), one variable shift takes the high
// nibbles down in the second, and the two qh words join into one 64-bit mask of fifth bits.
inline __m512i q5_0_codes_pair(const block_q5_0& a, const block_q5_0& b) {
    const __m256i pa = _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(a.qs)));
    const __m256i pb = _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b.qs)));
    alignas(64) static constexpr uint16_t shifts[32] = {0, 0, 0, 0, 0, 0, 0, 0, 4, 4, 4, 4, 4, 4, 4, 4,
                                                        0, 0, 0, 0, 0, 0, 0, 0, 4, 4, 4, 4, 4, 4, 4, 4};
    const __m512i v = _mm512_and_si512(
        _mm512_srlv_epi16(_mm512_inserti64x4(_mm512_castsi256_si512(pa), pb, 1), _mm512_load_si512(shifts)),
        _mm512_set1_epi8(0x0f));
    uint32_t ha, hb;
    std::memcpy(&ha, a.qh, sizeof ha);
    std::memcpy(&hb, b.qh, sizeof hb);
    const __mmask64 fifth = _mm512_kunpackd(_cvtu32_mask32(hb), _cvtu32_mask32(ha));  // bit j: element j's
    return _mm512_mask_add_epi8(v, fifth, v, _mm512_set1_epi8(16));
}

// The same for one block, in 256 bits.
inline __m256i q5_0_codes_one(const block_q5_0& a) {
    const __m128i pa = _mm_loadu_si128(reinterpret_cast<const __m128i*>(a.qs));
    const __m256i v = _mm256_and_si256(_mm256_inserti128_si256(_mm256_castsi128_si256(pa), _mm_srli_epi16(pa, 4), 1),
                                       _mm256_set1_epi8(0x0f));
    uint32_t ha;
    std::memcpy(&ha, a.qh, sizeof ha);
    return _mm256_mask_add_epi8(v, static_cast<__mmask32>(ha), v, _mm256_set1_epi8(16));
}

// The two blocks' scales d_w as floats, lanes 0..7 and 8..15.
inline __m512 q5_0_scales_pair(const block_q5_0& a, const block_q5_0& b) {
    return _mm512_castpd_ps(_mm512_insertf64x4(_mm512_castpd256_pd512(_mm256_castps_pd(_mm256_set1_ps(_cvtsh_ss(a.d)))),
                                               _mm256_castps_pd(_mm256_set1_ps(_cvtsh_ss(b.d))), 1));
}

// acc += a pair of blocks' lanes (codes q, scales dw) against one token's pair `x`, block after block as ggml adds
// them.
template <class Pair>
inline __m256 add_pair(__m256 acc, __m512i q, __m512 dw, const Pair& x) {
    const __m512 f = _mm512_cvtepi32_ps(_mm512_dpbusd_epi32(x.corr, q, x.qs));  // ggml's lanes, both blocks
    const __m512 d = _mm512_mul_ps(dw, x.d);                                    // d_w * d_x per block
    acc = _mm256_fmadd_ps(_mm512_castps512_ps256(d), _mm512_castps512_ps256(f), acc);
    return _mm256_fmadd_ps(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(d), 1)),
                           _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(f), 1)), acc);
}

// acc += an odd last block (codes q) against the lower half of the token's pair.
template <class Pair>
inline __m256 add_last(__m256 acc, __m256i q, const block_q5_0& w, const Pair& x) {
    const __m256i lanes = _mm256_dpbusd_epi32(_mm512_castsi512_si256(x.corr), q, _mm512_castsi512_si256(x.qs));
    return _mm256_fmadd_ps(_mm256_mul_ps(_mm256_set1_ps(_cvtsh_ss(w.d)), _mm512_castps512_ps256(x.d)),
                           _mm256_cvtepi32_ps(lanes), acc);
}

// y[t * ldy] for t < T: row w (nb blocks) times token t's activations as pairs of Q8_0 blocks (pairs + t * n_pairs:
// matmul_avx512.cpp's q8_0_pair, made once per call with the offset 16: qs, corr = -dot(16, qs) as vpdpbusd's
// starting lanes, d as floats in lanes 0..7 and 8..15; an odd last block paired with zeros). `ahead`: a row further
// on, prefetched as this one runs (as q5_0_row).
template <int T, class Pair>
void q5_0_row_vnni(const block_q5_0* w, const uint8_t* ahead, const Pair* pairs, int64_t nb, float* y, int64_t ldy) {
    const int64_t np = (nb + 1) / 2;
    __m256 acc[T];
    for (int t = 0; t < T; ++t) acc[t] = _mm256_setzero_ps();
    int64_t b = 0;
    for (; b + 2 <= nb; b += 2) {
        _mm_prefetch(reinterpret_cast<const char*>(ahead + b * sizeof(block_q5_0)), _MM_HINT_T0);
        const __m512i q = q5_0_codes_pair(w[b], w[b + 1]);
        const __m512 dw = q5_0_scales_pair(w[b], w[b + 1]);
#pragma GCC unroll 4
        for (int t = 0; t < T; ++t) acc[t] = add_pair(acc[t], q, dw, pairs[t * np + b / 2]);
    }
    if (b < nb) {  // the odd last block: the lower halves of its pair
        const __m256i q = q5_0_codes_one(w[b]);
#pragma GCC unroll 4
        for (int t = 0; t < T; ++t) acc[t] = add_last(acc[t], q, w[b], pairs[t * np + b / 2]);
    }
    for (int t = 0; t < T; ++t) y[t * ldy] = ggml_hsum_float_8(acc[t]);
}

// Decode (one token): rows r .. r + R - 1 of w (R <= 4, row_stride apart) at once, each row's blocks added into its
// own accumulator as q5_0_row_vnni adds them (the same floats), so the rows' dependent FMA chains run side by side and
// each pair of activation blocks is read once for the R rows. A row alone waits on two FMAs per pair (ggml adds every
// block into one 8-lane accumulator in order).
template <int R, class Pair>
void q5_0_rows_vnni(const uint8_t* w, size_t row_stride, const Pair* pairs, int64_t nb, float* y) {
    __m256 acc[R];
    for (int r = 0; r < R; ++r) acc[r] = _mm256_setzero_ps();
    const auto row = [&](int r) { return reinterpret_cast<const block_q5_0*>(w + r * row_stride); };
    int64_t b = 0;
    for (; b + 2 <= nb; b += 2) {
#pragma GCC unroll 4
        for (int r = 0; r < R; ++r) {
            const block_q5_0* wr = row(r);
            avx512::prefetch_ahead(wr + b, 2 * sizeof(block_q5_0));
            acc[r] =
                add_pair(acc[r], q5_0_codes_pair(wr[b], wr[b + 1]), q5_0_scales_pair(wr[b], wr[b + 1]), pairs[b / 2]);
        }
    }
    if (b < nb) {  // the odd last block: the lower halves of its pair
        for (int r = 0; r < R; ++r) acc[r] = add_last(acc[r], q5_0_codes_one(row(r)[b]), row(r)[b], pairs[b / 2]);
    }
    for (int r = 0; r < R; ++r) y[r] = ggml_hsum_float_8(acc[r]);
}

}  // namespace
}  // namespace troupe::cpu::detail
