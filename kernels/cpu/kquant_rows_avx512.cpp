// Q4_K / Q6_K decode for one token at the AVX-512 level: rows in groups of four, each row's arithmetic ggml's x86
// recipe bit for bit (kernels/ref/kquant_dot.h), as q4_k_row / q6_k_row in matmul_avx512.cpp compute it for
// 1-4 tokens.
//
// Why groups: a decode row of the 110M shape is three super-blocks (768 weights), so a kernel that finishes one
// row before the next pays its per-row work (constants, the horizontal sums, a dependent chain at its end) for
// every 432 bytes, and measured ~23 GB/s from L2 on one Zen 5 core, below the ~20-30 GB/s one core's share of
// the memory bandwidth needs with room to spare. Four consecutive rows walk super-block by super-block together:
// each Q8_K block (its bytes, Q4_K's pair sums of bsums, Q6_K's 32 * x products) is loaded and prepared once for
// the four rows, the four rows' chains run side by side, and their horizontal sums are done at once on the
// transposed lanes (the same additions in the same order per row: ggml's hsum_float_8 and the 4-lane sum of the
// mins). The four rows are adjacent in memory, so the weights are still read as one forward stream.
//
// Q4_K's four rows also decode their packed scales and mins together (a 128-bit lane per row) and keep their mins
// in one 16-lane chain; its nibbles are split 64 bytes at a time (sub-blocks 2c, 2c + 2 in one vector, 2c + 1,
// 2c + 3 in the next) with the activations rearranged once to match. One Zen 5 core from L2, [512, 768]: one row at
// a time 23 GB/s, four-row groups 33, with the joint decode and split 40-46 (Q6_K: 33 -> 52).
#include "kernels/cpu/kquant_rows_avx512.h"

#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__) && defined(__AVX512VNNI__)

#include <immintrin.h>

#include <algorithm>
#include <cstring>
#include <type_traits>

#include "core/result.h"
#include "kernels/cpu/kquant_panels.h"
#include "kernels/cpu/matmul_avx512_blocks.h"
#include "kernels/cpu/q3_k_row.h"
#include "kernels/cpu/q5_k_row.h"

namespace troupe::cpu::detail {
namespace {

using namespace avx512;

constexpr int k_group = 4;  // rows per pass

// Byte shuffles (vpshufb, within each 128-bit lane) of 8 scale words repeated in every lane: Q4_K chunk c (64
// elements) takes scale 2c in its first two lanes (16 words) and 2c + 1 in the last two.
constexpr int64_t q4_k_scale_shuffle(int c, int lane_pair) {
    const int64_t sc = 2 * c + lane_pair;
    const int64_t word = (2 * sc + 1) << 8 | (2 * sc);  // bytes of word sc, little endian
    return word | word << 16 | word << 32 | word << 48;
}
// Q6_K's 64 elements 64v..64v+63: sub-blocks 4v..4v+3, 8 words (16 elements) each.
alignas(64) constexpr int16_t k_q6_k_scale_idx[4][32] = {
    {0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3},
    {4, 4, 4, 4, 4, 4, 4, 4, 5, 5, 5, 5, 5, 5, 5, 5, 6, 6, 6, 6, 6, 6, 6, 6, 7, 7, 7, 7, 7, 7, 7, 7},
    {8, 8, 8, 8, 8, 8, 8, 8, 9, 9, 9, 9, 9, 9, 9, 9, 10, 10, 10, 10, 10, 10, 10, 10, 11, 11, 11, 11, 11, 11, 11, 11},
    {12, 12, 12, 12, 12, 12, 12, 12, 13, 13, 13, 13, 13, 13, 13, 13,
     14, 14, 14, 14, 14, 14, 14, 14, 15, 15, 15, 15, 15, 15, 15, 15}};

inline __m512i load_idx(const int16_t* idx) {
    return _mm512_load_si512(idx);
}

// ggml's hsum_float_8 of each row's 8 lanes, (l0 + h0 + l2 + h2) + (l1 + h1 + l3 + h3) with pairs added first:
// per row, s = lo + hi, then (s0 + s2) + (s1 + s3). R == 4: the four rows' s transposed into lanes, so the same
// additions run once for all of them.
template <int R>
inline __m128 hsum8_rows(const __m256* acc) {
    if constexpr (R == 4) {
        __m128 s[4];
        for (int r = 0; r < 4; ++r) s[r] = _mm_add_ps(_mm256_castps256_ps128(acc[r]), _mm256_extractf128_ps(acc[r], 1));
        _MM_TRANSPOSE4_PS(s[0], s[1], s[2], s[3]);  // s[j] lane r = row r's s_j
        return _mm_add_ps(_mm_add_ps(s[0], s[2]), _mm_add_ps(s[1], s[3]));
    } else {
        const __m128 s = _mm_add_ps(_mm256_castps256_ps128(acc[0]), _mm256_extractf128_ps(acc[0], 1));
        const __m128 s2 = _mm_add_ps(s, _mm_movehl_ps(s, s));
        return _mm_add_ss(s2, _mm_movehdup_ps(s2));
    }
}

// (a0 + a2) + (a1 + a3) of each row's 4 lanes (lane r of the result for row r; R == 1: lane 0).
template <int R>
inline __m128 hsum4_rows(const __m128* acc) {
    if constexpr (R == 4) {
        __m128 s[4] = {acc[0], acc[1], acc[2], acc[3]};
        _MM_TRANSPOSE4_PS(s[0], s[1], s[2], s[3]);
        return _mm_add_ps(_mm_add_ps(s[0], s[2]), _mm_add_ps(s[1], s[3]));
    } else {
        const __m128 s = _mm_add_ps(acc[0], _mm_movehl_ps(acc[0], acc[0]));
        return _mm_add_ss(s, _mm_movehdup_ps(s));
    }
}

template <int R>
inline void store_rows(__m128 v, float* y) {
    if constexpr (R == 4) {
        _mm_storeu_ps(y, v);
    } else {
        *y = _mm_cvtss_f32(v);
    }
}

// R rows of Q4_K (row r's block b at w + r * stride + b * step: kquant_panels.h's view) against one token's Q8_K blocks
// x[0..nb); R = 1 for the rows outside whole groups of four (k_rows4).
template <int R>
void q4_k_rows(const uint8_t* w, size_t stride, size_t step, const uint8_t* x_bytes, size_t, int64_t nb, float* y,
               int64_t) {
    const auto* x = reinterpret_cast<const block_q8_k*>(x_bytes);
    const __m512i low4 = _mm512_set1_epi8(0x0f);
    const auto shuffle = [](int c) {
        const int64_t a = q4_k_scale_shuffle(c, 0), b = q4_k_scale_shuffle(c, 1);
        return _mm512_set_epi64(b, b, b, b, a, a, a, a);
    };
    const __m512i idx0 = shuffle(0), idx1 = shuffle(1), idx2 = shuffle(2), idx3 = shuffle(3);
    __m256 acc[R];    // [8 lanes] sum of d * lane sums
    __m128 acc_m[R];  // [4 lanes] sum of -d_x * dmin * (mins . bsums) per pair of sub-blocks
    for (int r = 0; r < R; ++r) {
        acc[r] = _mm256_setzero_ps();
        acc_m[r] = _mm_setzero_ps();
    }
    for (int64_t b = 0; b < nb; ++b) {
        const block_q8_k& xb = x[b];
        const __m512i x0 = _mm512_loadu_si512(xb.qs), x1 = _mm512_loadu_si512(xb.qs + 64);
        const __m512i x2 = _mm512_loadu_si512(xb.qs + 128), x3 = _mm512_loadu_si512(xb.qs + 192);
        const __m256i bs = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xb.bsums));
        const __m128i bsum32 = _mm_hadd_epi16(_mm256_castsi256_si128(bs), _mm256_extracti128_si256(bs, 1));
#pragma GCC unroll 4
        for (int r = 0; r < R; ++r) {
            const auto& wb = *reinterpret_cast<const block_q4_k*>(w + r * stride + b * step);
            prefetch_ahead(&wb, sizeof wb);
            // The packed 6-bit scales and mins as 16 words sc0..sc7, m0..m7 (q4_k_scale_words). The 16-byte load
            // reads 4 bytes of qs past the 12 scale bytes, inside the block.
            const __m128i s = _mm_loadu_si128(reinterpret_cast<const __m128i*>(wb.scales));
            const __m128i p = _mm_shuffle_epi32(s, _MM_SHUFFLE(2, 1, 2, 0));
            const __m128i q = _mm_shuffle_epi32(s, _MM_SHUFFLE(1, 1, 0, 0));
            const __m128i lo = _mm_and_si128(_mm_srlv_epi32(p, _mm_setr_epi32(0, 0, 0, 4)),
                                             _mm_setr_epi32(0x3f3f3f3f, 0x0f0f0f0f, 0x3f3f3f3f, 0x0f0f0f0f));
            const __m128i hi = _mm_and_si128(_mm_srli_epi32(q, 2), _mm_setr_epi32(0, 0x30303030, 0, 0x30303030));
            const __m256i words = _mm256_cvtepu8_epi16(_mm_or_si128(lo, hi));
            const __m512i words512 = _mm512_broadcast_i32x4(_mm256_castsi256_si128(words));  // sc0..sc7 per lane
            const __m128i mins = _mm256_extracti128_si256(words, 1);                         // m0..m7
            // 64 weights per step in element order: the low nibbles of 32 bytes, then their high nibbles.
            const auto values = [&](int c) {
                const __m512i z =
                    _mm512_broadcast_i64x4(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(wb.qs + 32 * c)));
                return _mm512_and_si512(_mm512_mask_srli_epi16(z, 0xffff0000u, z, 4), low4);
            };
            __m512i sum = _mm512_dpwssd_epi32(_mm512_setzero_si512(), _mm512_maddubs_epi16(values(0), x0),
                                              _mm512_shuffle_epi8(words512, idx0));
            sum = _mm512_dpwssd_epi32(sum, _mm512_maddubs_epi16(values(1), x1), _mm512_shuffle_epi8(words512, idx1));
            sum = _mm512_dpwssd_epi32(sum, _mm512_maddubs_epi16(values(2), x2), _mm512_shuffle_epi8(words512, idx2));
            sum = _mm512_dpwssd_epi32(sum, _mm512_maddubs_epi16(values(3), x3), _mm512_shuffle_epi8(words512, idx3));
            const float d = xb.d * fp16(wb.d), dmin = -xb.d * fp16(wb.dmin);
            const __m128i msum = _mm_madd_epi16(mins, bsum32);
            acc_m[r] = _mm_fmadd_ps(_mm_set1_ps(dmin), _mm_cvtepi32_ps(msum), acc_m[r]);
            acc[r] = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(fold_lanes(sum)), acc[r]);
        }
    }
    store_rows<R>(_mm_add_ps(hsum8_rows<R>(acc), hsum4_rows<R>(acc_m)), y);
}

// Byte shuffles (vpshufb) of a lane of decoded Q4_K scale bytes [sc0..sc7, m0..m7]: to 8 words of one sub-block's
// scale, and to the mins as words m0..m7.
constexpr int64_t q4_k_byte_scale(int sub_block) {
    const int64_t word = int64_t{0x80} << 8 | sub_block;
    return word | word << 16 | word << 32 | word << 48;
}

constexpr int64_t q4_k_mins_shuffle(int half) {
    int64_t v = 0;
    for (int k = 0; k < 4; ++k) v |= (int64_t{0x80} << 8 | (8 + 4 * half + k)) << (16 * k);
    return v;
}

// Four consecutive rows of Q4_K or Q5_K (row r's block b at w + r * stride + b * step; Block the format) against one
// token's Q8_K blocks
// x[0..nb): what the one-row kernels compute for each row, with the 16 leading bytes of the four rows' blocks (d, dmin,
// the packed scales: the same layout in both formats) decoded together in one zmm (a 128-bit lane per row).
// Q4_K: the mins of the four rows in one chain of 16 lanes (row r's 4 lanes in lane r), ggml's acc_m.
// Q5_K: bit 4 of every code from qh (a per-half variable shift, merged by ternary logic), and the mins as ggml's Q5_K
// sums them: one integer per row and super-block (the four products' sum, exact in any order), summs = fma(-d_x *
// dmin, it, summs) per row (lane 4r of a 16-lane chain).
template <class Block, int T>
void k_rows4(const uint8_t* w, size_t stride, size_t step, const uint8_t* x, size_t xs, int64_t nb, float* y,
             int64_t ldy) {
    constexpr bool q5 = std::is_same_v<Block, block_q5_k>;
    const __m512i low4 = _mm512_set1_epi8(0x0f);
    const __m512i bit4 = _mm512_set1_epi8(0x10);
    // Scales of the four vectors of values below: sub-blocks (0, 2), (1, 3), (4, 6), (5, 7).
    const auto shuffle = [](int a, int b) {
        const int64_t lo = q4_k_byte_scale(a), hi = q4_k_byte_scale(b);
        return _mm512_set_epi64(hi, hi, hi, hi, lo, lo, lo, lo);
    };
    const __m512i idx0 = shuffle(0, 2), idx1 = shuffle(1, 3), idx2 = shuffle(4, 6), idx3 = shuffle(5, 7);
    // Q5_K: bit j of qh (sub-block j's fifth bits) moved to bit 4, per 256-bit half: v0 holds sub-blocks (0, 2), v1
    // (1, 3), v2 (4, 6), v3 (5, 7).
    const auto halves = [](int64_t lo, int64_t hi) { return _mm512_set_epi64(hi, hi, hi, hi, lo, lo, lo, lo); };
    const __m512i left0 = halves(0x0004000400040004, 0x0002000200020002);   // bits 0, 2 left by 4, 2
    const __m512i left1 = halves(0x0003000300030003, 0x0001000100010001);   // bits 1, 3 left by 3, 1
    const __m512i right2 = halves(0, 0x0002000200020002);                   // bits 4, 6 right by 0, 2
    const __m512i right3 = halves(0x0001000100010001, 0x0003000300030003);  // bits 5, 7 right by 1, 3
    const __m512i mins_idx =
        _mm512_set_epi64(q4_k_mins_shuffle(1), q4_k_mins_shuffle(0), q4_k_mins_shuffle(1), q4_k_mins_shuffle(0),
                         q4_k_mins_shuffle(1), q4_k_mins_shuffle(0), q4_k_mins_shuffle(1), q4_k_mins_shuffle(0));
    // Per lane of 16 bytes [d dmin | s0 | s1 | s2] (dwords; s the 12 scale bytes), as q4_k_rows<1> decodes s.
    const __m512i lo_shift = _mm512_set_epi32(4, 0, 0, 0, 4, 0, 0, 0, 4, 0, 0, 0, 4, 0, 0, 0);
    const __m512i lo_mask = _mm512_set_epi32(0x0f0f0f0f, 0x3f3f3f3f, 0x0f0f0f0f, 0x3f3f3f3f, 0x0f0f0f0f, 0x3f3f3f3f,
                                             0x0f0f0f0f, 0x3f3f3f3f, 0x0f0f0f0f, 0x3f3f3f3f, 0x0f0f0f0f, 0x3f3f3f3f,
                                             0x0f0f0f0f, 0x3f3f3f3f, 0x0f0f0f0f, 0x3f3f3f3f);
    const __m512i hi_mask = _mm512_set_epi32(0x30303030, 0, 0x30303030, 0, 0x30303030, 0, 0x30303030, 0, 0x30303030, 0,
                                             0x30303030, 0, 0x30303030, 0, 0x30303030, 0);
    const __m512i dword0 = _mm512_set_epi32(0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 12, 8, 4, 0);
    const __m512i dmin_idx = _mm512_set_epi32(7, 7, 7, 7, 5, 5, 5, 5, 3, 3, 3, 3, 1, 1, 1, 1);
    __m256 acc[T][4];  // [8 lanes] per token and row: sum of d * lane sums
    __m512 acc_m[T];   // Q4_K: [4 rows][4 lanes] sum of -d_x * dmin * (mins . bsums); Q5_K: summs
    for (int t = 0; t < T; ++t) {
        acc_m[t] = _mm512_setzero_ps();
        for (int r = 0; r < 4; ++r) acc[t][r] = _mm256_setzero_ps();
    }
    for (int64_t b = 0; b < nb; ++b) {
        // Per token, the activations in the order of the weights' nibbles: 32 bytes of qs hold elements 64c..64c+31
        // (low nibbles) and 64c+32..64c+63 (high), so 64 bytes of qs give two vectors, [sub-blocks 2c, 2c + 2] and
        // [2c + 1, 2c + 3] (c = 0, 2). Integer lane sums are exact, so lane k still gathers ggml's lane k % 8.
        __m512i xv[T][4], bsum32[T];
        float xd[T];
#pragma GCC unroll 4
        for (int t = 0; t < T; ++t) {
            const block_q8_k& xb = reinterpret_cast<const block_q8_k*>(x + t * xs)[b];
            const __m512i xa = _mm512_loadu_si512(xb.qs), xb1 = _mm512_loadu_si512(xb.qs + 64);
            const __m512i xc = _mm512_loadu_si512(xb.qs + 128), xd4 = _mm512_loadu_si512(xb.qs + 192);
            xv[t][0] = _mm512_shuffle_i64x2(xa, xb1, 0x44);
            xv[t][1] = _mm512_shuffle_i64x2(xa, xb1, 0xee);
            xv[t][2] = _mm512_shuffle_i64x2(xc, xd4, 0x44);
            xv[t][3] = _mm512_shuffle_i64x2(xc, xd4, 0xee);
            const __m256i bs = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xb.bsums));
            bsum32[t] =
                _mm512_broadcast_i32x4(_mm_hadd_epi16(_mm256_castsi256_si128(bs), _mm256_extracti128_si256(bs, 1)));
            xd[t] = xb.d;
        }
        const Block* wb[4];
        for (int r = 0; r < 4; ++r) {
            wb[r] = reinterpret_cast<const Block*>(w + r * stride + b * step);
            prefetch_ahead(wb[r], sizeof(Block));
        }
        const auto head = [&](int r) { return _mm_loadu_si128(reinterpret_cast<const __m128i*>(wb[r])); };
        __m512i t4 = _mm512_castsi128_si512(head(0));
        t4 = _mm512_inserti32x4(t4, head(1), 1);
        t4 = _mm512_inserti32x4(t4, head(2), 2);
        t4 = _mm512_inserti32x4(t4, head(3), 3);
        // Per lane: bytes sc0..sc7, m0..m7 (q4_k_rows<1>'s decode with s shifted by one dword).
        const __m512i p = _mm512_shuffle_epi32(t4, static_cast<_MM_PERM_ENUM>(_MM_SHUFFLE(3, 2, 3, 1)));
        const __m512i q = _mm512_shuffle_epi32(t4, static_cast<_MM_PERM_ENUM>(_MM_SHUFFLE(2, 2, 1, 1)));
        const __m512i scales = _mm512_or_si512(_mm512_and_si512(_mm512_srlv_epi32(p, lo_shift), lo_mask),
                                               _mm512_and_si512(_mm512_srli_epi32(q, 2), hi_mask));
        // [d_0, dmin_0, ..., d_3, dmin_3] times [d_x, -d_x, ...]: each row's d and dmin, per token.
        const __m256 dw = _mm256_cvtph_ps(_mm512_castsi512_si128(_mm512_permutexvar_epi32(dword0, t4)));
        const __m512i mins = _mm512_shuffle_epi8(scales, mins_idx);
        __m256 dd[T];
#pragma GCC unroll 4
        for (int t = 0; t < T; ++t) {
            dd[t] = _mm256_mul_ps(_mm256_setr_ps(xd[t], -xd[t], xd[t], -xd[t], xd[t], -xd[t], xd[t], -xd[t]), dw);
            __m512i msum = _mm512_madd_epi16(mins, bsum32[t]);
            if constexpr (q5) {
                msum = _mm512_add_epi32(
                    msum, _mm512_shuffle_epi32(msum, static_cast<_MM_PERM_ENUM>(_MM_SHUFFLE(1, 0, 3, 2))));
                msum = _mm512_add_epi32(
                    msum, _mm512_shuffle_epi32(msum, static_cast<_MM_PERM_ENUM>(_MM_SHUFFLE(2, 3, 0, 1))));
            }
            acc_m[t] = _mm512_fmadd_ps(_mm512_permutexvar_ps(dmin_idx, _mm512_castps256_ps512(dd[t])),
                                       _mm512_cvtepi32_ps(msum), acc_m[t]);
        }
#pragma GCC unroll 4
        for (int r = 0; r < 4; ++r) {
            const __m512i sc = _mm512_shuffle_i32x4(scales, scales, r * 0x55);  // row r's bytes in every lane
            const __m512i q01 = _mm512_loadu_si512(wb[r]->qs), q23 = _mm512_loadu_si512(wb[r]->qs + 64);
            __m512i v0, v1, v2, v3;
            if constexpr (q5) {
                const __m512i h =
                    _mm512_broadcast_i64x4(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(wb[r]->qh)));
                const auto fifth = [&](__m512i bits) { return _mm512_and_si512(bits, bit4); };
                // (nibbles & low4) | fifth bits, by ternary logic.
                v0 = _mm512_ternarylogic_epi32(q01, low4, fifth(_mm512_sllv_epi16(h, left0)), 0xea);
                v1 = _mm512_ternarylogic_epi32(_mm512_srli_epi16(q01, 4), low4, fifth(_mm512_sllv_epi16(h, left1)),
                                               0xea);
                v2 = _mm512_ternarylogic_epi32(q23, low4, fifth(_mm512_srlv_epi16(h, right2)), 0xea);
                v3 = _mm512_ternarylogic_epi32(_mm512_srli_epi16(q23, 4), low4, fifth(_mm512_srlv_epi16(h, right3)),
                                               0xea);
            } else {
                v0 = _mm512_and_si512(q01, low4);
                v1 = _mm512_and_si512(_mm512_srli_epi16(q01, 4), low4);
                v2 = _mm512_and_si512(q23, low4);
                v3 = _mm512_and_si512(_mm512_srli_epi16(q23, 4), low4);
            }
            const __m512i s0 = _mm512_shuffle_epi8(sc, idx0), s1 = _mm512_shuffle_epi8(sc, idx1);
            const __m512i s2 = _mm512_shuffle_epi8(sc, idx2), s3 = _mm512_shuffle_epi8(sc, idx3);
#pragma GCC unroll 4
            for (int t = 0; t < T; ++t) {
                __m512i sum = _mm512_dpwssd_epi32(_mm512_setzero_si512(), _mm512_maddubs_epi16(v0, xv[t][0]), s0);
                sum = _mm512_dpwssd_epi32(sum, _mm512_maddubs_epi16(v1, xv[t][1]), s1);
                sum = _mm512_dpwssd_epi32(sum, _mm512_maddubs_epi16(v2, xv[t][2]), s2);
                sum = _mm512_dpwssd_epi32(sum, _mm512_maddubs_epi16(v3, xv[t][3]), s3);
                const __m256 d = _mm256_permutexvar_ps(_mm256_set1_epi32(2 * r), dd[t]);
                acc[t][r] = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(fold_lanes(sum)), acc[t][r]);
            }
        }
    }
    for (int t = 0; t < T; ++t) {
        if constexpr (q5) {
            const __m128 row_summs = _mm512_castps512_ps128(
                _mm512_permutexvar_ps(_mm512_set_epi32(0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 12, 8, 4, 0), acc_m[t]));
            store_rows<4>(_mm_add_ps(hsum8_rows<4>(acc[t]), row_summs), y + t * ldy);
        } else {
            const __m128 acc_m4[4] = {_mm512_castps512_ps128(acc_m[t]), _mm512_extractf32x4_ps(acc_m[t], 1),
                                      _mm512_extractf32x4_ps(acc_m[t], 2), _mm512_extractf32x4_ps(acc_m[t], 3)};
            store_rows<4>(_mm_add_ps(hsum8_rows<4>(acc[t]), hsum4_rows<4>(acc_m4)), y + t * ldy);
        }
    }
}

// The rows outside whole groups of four: in rows, the one-row kernel of the matmul files (kernels/cpu/q5_k_row.h),
// which reads a row's blocks back to back; in k-quant panels (blocks `step` apart), the group kernel with its four rows
// all this row (stride 0), the same arithmetic per row, one output kept.
void q5_k_one_row(const uint8_t* w, size_t stride, size_t step, const uint8_t* x, size_t, int64_t nb, float* y,
                  int64_t) {
    if (step == sizeof(block_q5_k)) {
        q5_k_row<1>(reinterpret_cast<const block_q5_k*>(w), w + stride, x, 0, nb, y, 0);
        return;
    }
    float four[4];
    k_rows4<block_q5_k, 1>(w, 0, step, x, 0, nb, four, 0);
    *y = four[0];
}

// The formats with a scale per 16 elements (Q2_K, Q3_K, Q6_K) share one walk: per block the token's 64-byte steps
// (and offset * x in pairs where the format's codes are value + offset, as ggml subtracts it: code * x - offset * x in
// 16 bits), per row its codes in element order, vpmaddubsw, vpdpwssd with the scale words (sub-blocks 4i .. 4i + 3
// of step i, a 128-bit lane each), the lanes folded to ggml's 8 and accumulated by FMA with d_x * d_w.
// Format: block, offset, scale_words(b) (16 words), codes(b, q[4]), before(b, x, acc) (Q2_K's mins, first).

struct q6_k_format {  // codes 0..63 = value + 32
    using block = block_q6_k;
    static constexpr int offset = 32;
    static __m256i scale_words(const block& b) {
        return _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b.scales)));
    }
    static void codes(const block& b, __m512i (&q)[4]) {
        q6_k_values(b, 0, q[0], q[1]);
        q6_k_values(b, 1, q[2], q[3]);
    }
    static void before(const block&, const block_q8_k&, __m256&) {}
};

// Elements 64 i .. 64 i + 63 of Q2_K / Q3_K: quarters 2 (i % 2) and 2 (i % 2) + 1 of half i / 2, so their low 2 bits
// sit at bits 4 (i % 2) and 4 (i % 2) + 2 of qs[32 (i / 2) + l] (a per-half variable shift brings them down).
inline __m512i low_two_bits(const uint8_t* qs, int i) {
    const auto halves = [](int64_t lo, int64_t hi) { return _mm512_set_epi64(hi, hi, hi, hi, lo, lo, lo, lo); };
    const __m512i shift = i % 2 == 0 ? halves(0, 0x0002000200020002) : halves(0x0004000400040004, 0x0006000600060006);
    const __m512i q = _mm512_broadcast_i64x4(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(qs + 32 * (i / 2))));
    return _mm512_and_si512(_mm512_srlv_epi16(q, shift), _mm512_set1_epi8(3));
}

struct q3_k_format {  // codes 0..7 = value + 4: the low 2 bits, bit 2 the high bit from hmask (ggml's "4 where clear")
    using block = block_q3_k;
    static constexpr int offset = 4;
    static __m256i scale_words(const block& b) { return _mm256_cvtepi8_epi16(q3_k_scale_bytes(b)); }
    static void codes(const block& b, __m512i (&q)[4]) {
        const auto halves = [](int64_t lo, int64_t hi) { return _mm512_set_epi64(hi, hi, hi, hi, lo, lo, lo, lo); };
        const auto words = [](int n) { return int64_t{n} * 0x0001000100010001; };
        // The high bits of step i at bits 2 i and 2 i + 1 of hmask[l], moved to bit 2.
        const __m512i h = _mm512_broadcast_i64x4(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(b.hmask)));
        const __m512i k4 = _mm512_set1_epi8(4);
        const __m512i high[4] = {
            _mm512_sllv_epi16(h, halves(words(2), words(1))), _mm512_srlv_epi16(h, halves(words(0), words(1))),
            _mm512_srlv_epi16(h, halves(words(2), words(3))), _mm512_srlv_epi16(h, halves(words(4), words(5)))};
        for (int i = 0; i < 4; ++i) q[i] = _mm512_ternarylogic_epi32(low_two_bits(b.qs, i), k4, high[i], 0xf8);
    }
    static void before(const block&, const block_q8_k&, __m256&) {}
};

struct q2_k_format {  // codes 0..3; a min per 16 elements
    using block = block_q2_k;
    static constexpr int offset = 0;
    static __m256i scale_words(const block& b) {
        return _mm256_cvtepi8_epi16(
            _mm_and_si128(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b.scales)), _mm_set1_epi8(0x0f)));
    }
    static void codes(const block& b, __m512i (&q)[4]) {
        for (int i = 0; i < 4; ++i) q[i] = low_two_bits(b.qs, i);
    }
    // The row's 16 mins times the activations' sums of 16, 8 lanes, into its float lanes before the codes' (ggml).
    static void before(const block& b, const block_q8_k& xb, __m256& acc) {
        const __m128i scales = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b.scales));
        const __m256i mins = _mm256_cvtepi8_epi16(_mm_and_si128(_mm_srli_epi16(scales, 4), _mm_set1_epi8(0x0f)));
        const __m256i bsums = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xb.bsums));
        acc = _mm256_fmadd_ps(_mm256_set1_ps(-xb.d * fp16(b.dmin)), _mm256_cvtepi32_ps(_mm256_madd_epi16(mins, bsums)),
                              acc);
    }
};

// R rows of Format against T tokens' Q8_K blocks (token t's at x + t * xs; its outputs at y + t * ldy): ggml's lanes
// (ref::dot_q2_k_q8_k, dot_q3_k_q8_k, dot_q6_k_q8_k). Each row's codes and scale words are unpacked once for the T
// tokens.
template <class Format, int R, int T>
void sixteens_rows(const uint8_t* w, size_t stride, size_t step, const uint8_t* x, size_t xs, int64_t nb, float* y,
                   int64_t ldy) {
    using block = typename Format::block;
    const __m512i idx[4] = {load_idx(k_q6_k_scale_idx[0]), load_idx(k_q6_k_scale_idx[1]), load_idx(k_q6_k_scale_idx[2]),
                            load_idx(k_q6_k_scale_idx[3])};
    __m256 acc[T][R];  // [8 lanes] sum of d * lane sums (Q2_K: the mins' products first)
    for (int t = 0; t < T; ++t)
        for (int r = 0; r < R; ++r) acc[t][r] = _mm256_setzero_ps();
    for (int64_t b = 0; b < nb; ++b) {
        const block_q8_k* xb[T];
        __m512i xv[T][4], x_offset[T][4];  // elements 64 i .. 64 i + 63; offset * x in pairs (|code x| small)
#pragma GCC unroll 4
        for (int t = 0; t < T; ++t) {
            xb[t] = reinterpret_cast<const block_q8_k*>(x + t * xs) + b;
            for (int i = 0; i < 4; ++i) {
                xv[t][i] = _mm512_loadu_si512(xb[t]->qs + 64 * i);
                if constexpr (Format::offset != 0)
                    x_offset[t][i] = _mm512_maddubs_epi16(_mm512_set1_epi8(Format::offset), xv[t][i]);
            }
        }
#pragma GCC unroll 4
        for (int r = 0; r < R; ++r) {
            const block& wb = *reinterpret_cast<const block*>(w + r * stride + b * step);
            prefetch_ahead(&wb, sizeof wb);
            for (int t = 0; t < T; ++t) Format::before(wb, *xb[t], acc[t][r]);
            const __m512i scales512 = _mm512_castsi256_si512(Format::scale_words(wb));
            __m512i q[4], sw[4];
            Format::codes(wb, q);
            for (int i = 0; i < 4; ++i) sw[i] = _mm512_permutexvar_epi16(idx[i], scales512);
            const float dw = fp16(wb.d);
#pragma GCC unroll 4
            for (int t = 0; t < T; ++t) {
                __m512i sum = _mm512_setzero_si512();
                for (int i = 0; i < 4; ++i) {
                    __m512i p = _mm512_maddubs_epi16(q[i], xv[t][i]);
                    if constexpr (Format::offset != 0) p = _mm512_sub_epi16(p, x_offset[t][i]);
                    sum = _mm512_dpwssd_epi32(sum, p, sw[i]);
                }
                const float d = xb[t]->d * dw;
                acc[t][r] = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(fold_lanes(sum)), acc[t][r]);
            }
        }
    }
    for (int t = 0; t < T; ++t) store_rows<R>(hsum8_rows<R>(acc[t]), y + t * ldy);
}

// Kernels over rows of a weight (row r's block b at w + r * stride + b * step) against T tokens' Q8_K blocks (token t's
// at x + t * xs, its outputs at y + t * ldy): Group takes four rows, One one row of one token.
using rows_kernel = void (*)(const uint8_t*, size_t, size_t, const uint8_t*, size_t, int64_t, float*, int64_t);

// Group kernels of one format for 1, 2, 3 and 4 tokens (group[c - 1] takes c), and its one-row, one-token kernel.
struct group_kernels {
    rows_kernel group[k_group];
    rows_kernel one;
};

template <class Block>
constexpr group_kernels k_rows4_kernels(rows_kernel one) {
    return {{k_rows4<Block, 1>, k_rows4<Block, 2>, k_rows4<Block, 3>, k_rows4<Block, 4>}, one};
}

template <class Format>
constexpr group_kernels sixteens_kernels() {
    return {{sixteens_rows<Format, k_group, 1>, sixteens_rows<Format, k_group, 2>, sixteens_rows<Format, k_group, 3>,
             sixteens_rows<Format, k_group, 4>},
            sixteens_rows<Format, 1, 1>};
}

// Rows [r0, r1) of w for n_tokens tokens, in its rows or its k-quant panels (kquant_panels.h): groups of four rows
// where the form has them (panels: groups start at multiples of four), each for the tokens in chunks of up to four (the
// group's blocks come from memory for the first chunk, from L1 for the others); one row and token at a time around.
void by_groups(const matmul_weight& w, const group_kernels& k, const uint8_t* x, size_t xs, int64_t n_tokens, float* y,
               int64_t ldy, int64_t r0, int64_t r1) {
    static_assert(k_group == kquant_group_rows);
    const int64_t nb = w.n_in / qk_k;
    const kquant_rows_view v = kquant_view(w);
    const auto one = [&](int64_t r) {
        for (int64_t t = 0; t < n_tokens; ++t)
            k.one(v.row(r), v.row_stride, v.block_step, x + t * xs, 0, nb, y + t * ldy + r, 0);
    };
    int64_t r = r0;
    if (v.panels()) {
        for (; r < r1 && r % k_group != 0; ++r) one(r);
    }
    for (; r + k_group <= r1; r += k_group) {
        for (int64_t t0 = 0; t0 < n_tokens; t0 += k_group) {
            const int64_t c = std::min<int64_t>(k_group, n_tokens - t0);
            k.group[c - 1](v.row(r), v.row_stride, v.block_step, x + t0 * xs, xs, nb, y + t0 * ldy + r, ldy);
        }
    }
    for (; r < r1; ++r) one(r);
}

constexpr group_kernels k_q4_k_kernels = k_rows4_kernels<block_q4_k>(q4_k_rows<1>);
constexpr group_kernels k_q5_k_kernels = k_rows4_kernels<block_q5_k>(q5_k_one_row);
constexpr group_kernels k_q2_k_kernels = sixteens_kernels<q2_k_format>();
constexpr group_kernels k_q3_k_kernels = sixteens_kernels<q3_k_format>();
constexpr group_kernels k_q6_k_kernels = sixteens_kernels<q6_k_format>();

const group_kernels& kernels_of(ggml_type type) {
    switch (type) {
        case ggml_type::q4_k:
            return k_q4_k_kernels;
        case ggml_type::q5_k:
            return k_q5_k_kernels;
        case ggml_type::q2_k:
            return k_q2_k_kernels;
        case ggml_type::q3_k:
            return k_q3_k_kernels;
        default:
            return k_q6_k_kernels;
    }
}

}  // namespace

void kquant_rows_one_token_avx512(const matmul_weight& w, const block_q8_k* x, float* y, int64_t r0, int64_t r1) {
    by_groups(w, kernels_of(w.type), reinterpret_cast<const uint8_t*>(x), 0, 1, y, 0, r0, r1);
}

void kquant_rows_few_tokens_avx512(const matmul_weight& w, const uint8_t* x, size_t xs, int64_t n_tokens, float* y,
                                   int64_t ldy, int64_t r0, int64_t r1) {
    TROUPE_ASSERT(n_tokens >= 1 && n_tokens <= kquant_few_tokens_max(w.type),
                  "kquant_rows_few_tokens_avx512: a k-quant, at most kquant_few_tokens_max tokens");
    by_groups(w, kernels_of(w.type), x, xs, n_tokens, y, ldy, r0, r1);
}

}  // namespace troupe::cpu::detail

#endif
