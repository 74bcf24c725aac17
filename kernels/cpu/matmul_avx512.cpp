// The AVX-512 level (F + BW + VL + VNNI, FMA, F16C): compiled with those flags only (kernels/CMakeLists.txt)
// and called only where cpu_features says they exist.
//
// Dot-product kernels (decode): one weight row x up to 4 tokens per pass, the weight row streamed once.
//   F32/F16/BF16: 16 floats per FMA, the weight converted on load.
//   Q8_0: vpdpbusd on (w + 128) as unsigned bytes; the 128 * sum(x) it adds is removed by starting the
//         accumulator at -128 * sum(x).
//   Q4_0: nibbles are unsigned 0..15; the -8 offset is folded the same way.
//   Q4_K/Q6_K: ggml's x86 recipe bit for bit (kernels/ref/kquant_dot.h): 64 weights per vector in element
//         order, vpmaddubsw with the Q8_K bytes (Q6_K: minus 32 x, per pair), then vpdpwssd with the sub-block
//         scales broadcast per lane; lane sums folded to ggml's 8 lanes; Q4_K's mins from the Q8_K block sums.
//
#include "kernels/cpu/matmul_kernels.h"

#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__) && defined(__AVX512VNNI__)

#include <immintrin.h>

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdlib>
#include <utility>

#include "kernels/cpu/activations_avx512.h"
#include "kernels/cpu/aligned_buffer.h"
#include "kernels/cpu/float_tile_walk.h"
#include "kernels/cpu/gemm_avx512.h"
#include "kernels/cpu/kquant_panels.h"
#include "kernels/cpu/kquant_rows_avx512.h"
#include "kernels/cpu/matmul_avx512_blocks.h"
#include "kernels/cpu/q2_k_row.h"
#include "kernels/cpu/q3_k_row.h"
#include "kernels/cpu/q5_0_row_avx512.h"
#include "kernels/cpu/q5_k_row.h"
#include "kernels/fp16.h"

namespace troupe::cpu::detail {
namespace {

using namespace avx512;

inline float hsum256(__m256 v) {
    const __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    const __m128 s2 = _mm_add_ps(s, _mm_movehl_ps(s, s));
    return _mm_cvtss_f32(_mm_add_ss(s2, _mm_movehdup_ps(s2)));
}

// ---------------------------------------------------------------------------------------------------------
// Float weights

// y[t * ldy + r] for R rows at w (stride ws bytes) and T tokens at x (stride xs floats). Each output's arithmetic
// is the same at every R and T (two FMA chains, the even and the odd steps of 16, a masked tail into the first,
// then one reduction), so a token's outputs do not depend on the tokens beside it (a verified draft, a batch) and
// equal a one-token decode's (R = T = 1) bit for bit. Several tokens take 3 x 4 tiles: 24 accumulators, 3 weight
// vectors and one token's (28 of 32 registers), 3 weight and 4 activation loads per 12 FMAs. This replaced a packed
// float GEMM from 6 tokens whose sums were not these (see avx512_kernels).
struct float_kernel {  // float_tile_walk.h's Kernel
    using f32 = load_f32;
    using f16 = load_f16;
    using bf16 = load_bf16;

    template <class L, int R, int T>
    static void tile(const uint8_t* w, size_t ws, const float* x, int64_t xs, int64_t n, float* y, int64_t ldy) {
        __m512 acc0[R][T], acc1[R][T];  // even and odd steps of 16: two FMA chains per output
#pragma GCC unroll 12
        for (int i = 0; i < R * T; ++i) acc0[i / T][i % T] = acc1[i / T][i % T] = _mm512_setzero_ps();
        int64_t k = 0;
        for (; k + 32 <= n; k += 32) {
            __m512 wv[R];
#pragma GCC unroll 3
            for (int r = 0; r < R; ++r) {
                prefetch_ahead<T == 1>(w + r * ws + k * L::bytes, 32 * L::bytes);
                wv[r] = L::full(w + r * ws, k);
            }
#pragma GCC unroll 4
            for (int t = 0; t < T; ++t) {
                __m512 xv = _mm512_loadu_ps(x + t * xs + k);
                // One load of the token's 16 floats for the R rows: without the barrier GCC folds a load into each FMA,
                // 15 loads per 12 FMAs in a 3 x 4 tile, and the load ports, not the FMAs, bound it (Zen 4, 110M
                // pp64, alternated: F32 522-547 -> 749-853 tok/s, 49-51% -> 70-80% of the FMA peak; F16 764-783 ->
                // 953-1054). The same instructions otherwise, so the same floats.
                if constexpr (R > 1) asm("" : "+v"(xv));
#pragma GCC unroll 3
                for (int r = 0; r < R; ++r) acc0[r][t] = _mm512_fmadd_ps(wv[r], xv, acc0[r][t]);
            }
#pragma GCC unroll 3
            for (int r = 0; r < R; ++r) wv[r] = L::full(w + r * ws, k + 16);
#pragma GCC unroll 4
            for (int t = 0; t < T; ++t) {
                __m512 xv = _mm512_loadu_ps(x + t * xs + k + 16);
                if constexpr (R > 1) asm("" : "+v"(xv));
#pragma GCC unroll 3
                for (int r = 0; r < R; ++r) acc1[r][t] = _mm512_fmadd_ps(wv[r], xv, acc1[r][t]);
            }
        }
        for (; k < n; k += 16) {
            const __mmask16 m = static_cast<__mmask16>(n - k >= 16 ? 0xffff : (1u << (n - k)) - 1);
#pragma GCC unroll 3
            for (int r = 0; r < R; ++r) {
                const __m512 wv = L::part(w + r * ws, k, m);
#pragma GCC unroll 4
                for (int t = 0; t < T; ++t) {
                    acc0[r][t] = _mm512_fmadd_ps(wv, _mm512_maskz_loadu_ps(m, x + t * xs + k), acc0[r][t]);
                }
            }
        }
        // Unrolled: indexed at run time, the accumulators would live in memory.
#pragma GCC unroll 3
        for (int r = 0; r < R; ++r) {
#pragma GCC unroll 4
            for (int t = 0; t < T; ++t) y[t * ldy + r] = _mm512_reduce_add_ps(_mm512_add_ps(acc0[r][t], acc1[r][t]));
        }
    }
};

template <class L, int T>
void float_row(const uint8_t* w, const float* x, int64_t xs, int64_t n, float* y, int64_t ldy) {
    float_kernel::tile<L, 1, T>(w, 0, x, xs, n, y, ldy);
}

// ---------------------------------------------------------------------------------------------------------
// Q8_0 / Q4_0 weights against Q8_0 activations

inline __m256i q4_0_unpack(const block_q4_0& b) {
    const __m128i q = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b.qs));
    const __m256i both = _mm256_inserti128_si256(_mm256_castsi128_si256(q), _mm_srli_epi16(q, 4), 1);
    return _mm256_and_si256(both, _mm256_set1_epi8(0x0f));
}

// Weight blocks of type B (block_q8_0 or block_q4_0) are read as unsigned bytes u = q + offset, so the dot
// of the signed weights is dot(u, x) - offset * sum(x). Blocks go two at a time through one zmm.
//
// The activations of each token are rearranged once per work item (shared by its rows) into pairs of
// blocks: both blocks' bytes in one vector, the offset correction -offset * (sums of 4 activations) as
// vpdpbusd's starting accumulator, and the two scales as floats, lanes 0..7 and 8..15. An odd last block is
// paired with zeros.
struct q8_0_pair {
    __m512i corr;
    __m512i qs;
    __m512 d;
};

inline int64_t n_pairs(int64_t nb) {
    return (nb + 1) / 2;
}

// The offset a weight type's unsigned codes carry (corr = -dot(offset, x)): Q8_0 codes + 128, Q4_0's 0..15 for q + 8,
// Q5_0's 0..31 for q + 16.
inline char pair_offset(ggml_type type) {
    return type == ggml_type::q8_0 ? static_cast<char>(0x80) : type == ggml_type::q4_0 ? 8 : 16;
}

void make_q8_0_pairs(const uint8_t* x, size_t xs, int64_t n_tokens, int64_t nb, char code_offset, q8_0_pair* pairs) {
    const __m512i offset = _mm512_set1_epi8(code_offset);
    for (int64_t t = 0; t < n_tokens; ++t) {
        const auto* xb = reinterpret_cast<const block_q8_0*>(x + t * xs);
        for (int64_t p = 0; p < n_pairs(nb); ++p) {
            const int64_t b = 2 * p;
            const bool second = b + 1 < nb;
            const __m256i lo = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xb[b].qs));
            const __m256i hi =
                second ? _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xb[b + 1].qs)) : _mm256_setzero_si256();
            q8_0_pair& a = pairs[t * n_pairs(nb) + p];
            a.qs = _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1);
            a.corr =
                _mm512_sub_epi32(_mm512_setzero_si512(), _mm512_dpbusd_epi32(_mm512_setzero_si512(), offset, a.qs));
            const __m256 d_lo = _mm256_set1_ps(fp16(xb[b].d));
            const __m256 d_hi = _mm256_set1_ps(second ? fp16(xb[b + 1].d) : 0.0f);
            a.d = _mm512_castpd_ps(
                _mm512_insertf64x4(_mm512_castpd256_pd512(_mm256_castps_pd(d_lo)), _mm256_castps_pd(d_hi), 1));
        }
    }
}

template <class B>
inline __m256i unsigned_bytes(const B& wb) {
    if constexpr (std::is_same_v<B, block_q8_0>) {
        return _mm256_xor_si256(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(wb.qs)),
                                _mm256_set1_epi8(static_cast<char>(0x80)));
    } else {
        return q4_0_unpack(wb);
    }
}

inline __m256 scale_of(uint16_t d) {
    return _mm256_cvtph_ps(_mm_set1_epi16(static_cast<short>(d)));
}

template <class B, int T>
void q8_row(const B* w, const q8_0_pair* pairs, int64_t nb, float* y, int64_t ldy) {
    const int64_t np = n_pairs(nb);
    __m512 acc[T];
#pragma GCC unroll 4
    for (int t = 0; t < T; ++t) acc[t] = _mm512_setzero_ps();
    int64_t b = 0;
    for (; b + 2 <= nb; b += 2) {
        prefetch_ahead(&w[b], 2 * sizeof(B));
        const __m512i u = _mm512_inserti64x4(_mm512_castsi256_si512(unsigned_bytes(w[b])), unsigned_bytes(w[b + 1]), 1);
        const __m512 dw = _mm512_castpd_ps(_mm512_insertf64x4(
            _mm512_castpd256_pd512(_mm256_castps_pd(scale_of(w[b].d))), _mm256_castps_pd(scale_of(w[b + 1].d)), 1));
#pragma GCC unroll 4
        for (int t = 0; t < T; ++t) {
            const q8_0_pair& a = pairs[t * np + b / 2];
            const __m512i sum = _mm512_dpbusd_epi32(a.corr, u, a.qs);
            acc[t] = _mm512_fmadd_ps(_mm512_mul_ps(_mm512_cvtepi32_ps(sum), dw), a.d, acc[t]);
        }
    }
    if (b < nb) {  // the odd last block: the lower halves of its pair
        const __m256i u = unsigned_bytes(w[b]);
        const __m256 dw = scale_of(w[b].d);
        for (int t = 0; t < T; ++t) {
            const q8_0_pair& a = pairs[t * np + b / 2];
            const __m256i sum = _mm256_dpbusd_epi32(_mm512_castsi512_si256(a.corr), u, _mm512_castsi512_si256(a.qs));
            const __m256 v = _mm256_mul_ps(_mm256_mul_ps(_mm256_cvtepi32_ps(sum), dw), _mm512_castps512_ps256(a.d));
            acc[t] = _mm512_add_ps(acc[t], _mm512_castpd_ps(_mm512_zextpd256_pd512(_mm256_castps_pd(v))));
        }
    }
    for (int t = 0; t < T; ++t) y[t * ldy] = _mm512_reduce_add_ps(acc[t]);
}

// ---------------------------------------------------------------------------------------------------------
// Q4_K / Q6_K weights against Q8_K activations (one row, T tokens)

// Word indexes that repeat element a 16 times then element b 16 times.
inline __m512i repeat_words(int a, int b) {
    alignas(64) int16_t idx[32];
    for (int i = 0; i < 32; ++i) idx[i] = static_cast<int16_t>(i < 16 ? a : b);
    return _mm512_load_si512(idx);
}

struct index_vectors {
    __m512i v[4];
};

// ggml's reduction of 4 float lanes: (a0 + a2) + (a1 + a3).
inline float hsum128(__m128 v) {
    const __m128 s = _mm_add_ps(v, _mm_movehl_ps(v, v));
    return _mm_cvtss_f32(_mm_add_ss(s, _mm_movehdup_ps(s)));
}

// Q4_K and Q6_K compute ggml's x86 recipe bit for bit (kernels/ref/kquant_dot.h): exact integer lane sums per
// super-block, folded to ggml's 8 lanes, each converted and accumulated by FMA with d = d_x * d_w; Q4_K's mins in a
// 4-lane chain over pairs of sub-blocks. The row's block b is at w + b * step (kquant_panels.h's view: one block apart
// in the file's rows, four in the panels).
template <int T>
void q4_k_row(const uint8_t* w, size_t step, const uint8_t* x, size_t xs, int64_t nb, float* y, int64_t ldy) {
    // Scale words [sc(2c) x16, sc(2c+1) x16] for chunk c of 64 elements.
    static const index_vectors scale_idx = {
        {repeat_words(0, 1), repeat_words(2, 3), repeat_words(4, 5), repeat_words(6, 7)}};
    const __m512i low4 = _mm512_set1_epi8(0x0f);
    __m256 acc[T];    // [8 lanes] sum of d * lane sums
    __m128 acc_m[T];  // [4 lanes] sum of -d_x * dmin * (mins . bsums) per pair of sub-blocks
    for (int t = 0; t < T; ++t) {
        acc[t] = _mm256_setzero_ps();
        acc_m[t] = _mm_setzero_ps();
    }
    for (int64_t b = 0; b < nb; ++b) {
        const auto& wb = *reinterpret_cast<const block_q4_k*>(w + b * step);
        prefetch_ahead(&wb, sizeof wb);
        // The packed 6-bit scales and mins as 16 words sc0..sc7, m0..m7 (see q4_k_scale_words): dwords
        // [s0 & 3f, (s2 & 0f) | (s0 >> 2 & 30), s1 & 3f, (s2 >> 4 & 0f) | (s1 >> 2 & 30)]. The 16-byte load
        // reads 4 bytes of qs past the 12 scale bytes, inside the block.
        const __m128i s = _mm_loadu_si128(reinterpret_cast<const __m128i*>(wb.scales));
        const __m128i p = _mm_shuffle_epi32(s, _MM_SHUFFLE(2, 1, 2, 0));
        const __m128i q = _mm_shuffle_epi32(s, _MM_SHUFFLE(1, 1, 0, 0));
        const __m128i lo = _mm_and_si128(_mm_srlv_epi32(p, _mm_setr_epi32(0, 0, 0, 4)),
                                         _mm_setr_epi32(0x3f3f3f3f, 0x0f0f0f0f, 0x3f3f3f3f, 0x0f0f0f0f));
        const __m128i hi = _mm_and_si128(_mm_srli_epi32(q, 2), _mm_setr_epi32(0, 0x30303030, 0, 0x30303030));
        const __m256i words = _mm256_cvtepu8_epi16(_mm_or_si128(lo, hi));
        const __m512i words512 = _mm512_castsi256_si512(words);
        const __m128i mins = _mm256_extracti128_si256(words, 1);  // m0..m7
        const float dw = fp16(wb.d), dminw = fp16(wb.dmin);
        __m512i sum[T];
        for (int t = 0; t < T; ++t) sum[t] = _mm512_setzero_si512();
#pragma GCC unroll 4
        for (int c = 0; c < 4; ++c) {
            const __m512i z =
                _mm512_broadcast_i64x4(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(wb.qs + 32 * c)));
            const __m512i v = _mm512_mask_blend_epi64(0xf0, _mm512_and_si512(z, low4),
                                                      _mm512_and_si512(_mm512_srli_epi16(z, 4), low4));
            const __m512i sc = _mm512_permutexvar_epi16(scale_idx.v[c], words512);
#pragma GCC unroll 4
            for (int t = 0; t < T; ++t) {
                const block_q8_k& xb = reinterpret_cast<const block_q8_k*>(x + t * xs)[b];
                const __m512i prod = _mm512_maddubs_epi16(v, _mm512_loadu_si512(xb.qs + 64 * c));
                sum[t] = _mm512_dpwssd_epi32(sum[t], prod, sc);
            }
        }
#pragma GCC unroll 4
        for (int t = 0; t < T; ++t) {
            const block_q8_k& xb = reinterpret_cast<const block_q8_k*>(x + t * xs)[b];
            const float d = xb.d * dw, dmin = -xb.d * dminw;
            const __m256i bs = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xb.bsums));
            const __m128i bsum32 = _mm_hadd_epi16(_mm256_castsi256_si128(bs), _mm256_extracti128_si256(bs, 1));
            const __m128i msum = _mm_madd_epi16(mins, bsum32);
            acc_m[t] = _mm_fmadd_ps(_mm_set1_ps(dmin), _mm_cvtepi32_ps(msum), acc_m[t]);
            acc[t] = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(fold_lanes(sum[t])), acc[t]);
        }
    }
    for (int t = 0; t < T; ++t) y[t * ldy] = hsum256(acc[t]) + hsum128(acc_m[t]);
}

template <int T>
void q6_k_row(const uint8_t* w, size_t step, const uint8_t* x, size_t xs, int64_t nb, float* y, int64_t ldy) {
    // Scale words for 64 elements 64v..64v+63: sub-blocks 4v..4v+3, 8 words (16 elements) each.
    static const index_vectors scale_idx = [] {
        index_vectors idx;
        for (int v = 0; v < 4; ++v) {
            alignas(64) int16_t i16[32];
            for (int i = 0; i < 32; ++i) i16[i] = static_cast<int16_t>(4 * v + i / 8);
            idx.v[v] = _mm512_load_si512(i16);
        }
        return idx;
    }();
    const __m512i k32 = _mm512_set1_epi8(32);
    __m256 acc[T];  // [8 lanes] sum of d * lane sums
    for (int t = 0; t < T; ++t) acc[t] = _mm256_setzero_ps();
    for (int64_t b = 0; b < nb; ++b) {
        const auto& wb = *reinterpret_cast<const block_q6_k*>(w + b * step);
        prefetch_ahead(&wb, sizeof wb);
        const __m256i scales = _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(wb.scales)));
        const __m512i scales512 = _mm512_castsi256_si512(scales);
        const float dw = fp16(wb.d);
        __m512i sum[T];
        for (int t = 0; t < T; ++t) sum[t] = _mm512_setzero_si512();
#pragma GCC unroll 2
        for (int half = 0; half < 2; ++half) {
            __m512i qa, qb;  // elements 128 half + 0..63 and + 64..127, unsigned 0..63
            q6_k_values(wb, half, qa, qb);
            const __m512i sa = _mm512_permutexvar_epi16(scale_idx.v[2 * half], scales512);
            const __m512i sb = _mm512_permutexvar_epi16(scale_idx.v[2 * half + 1], scales512);
#pragma GCC unroll 4
            for (int t = 0; t < T; ++t) {
                // Pairs of (q - 32) * x as q * x - 32 * x in 16 bits (no overflow: |q x| <= 63 * 127 * 2).
                const block_q8_k& xb = reinterpret_cast<const block_q8_k*>(x + t * xs)[b];
                const __m512i xa = _mm512_loadu_si512(xb.qs + 128 * half);
                const __m512i xb2 = _mm512_loadu_si512(xb.qs + 128 * half + 64);
                const __m512i pa = _mm512_sub_epi16(_mm512_maddubs_epi16(qa, xa), _mm512_maddubs_epi16(k32, xa));
                const __m512i pb = _mm512_sub_epi16(_mm512_maddubs_epi16(qb, xb2), _mm512_maddubs_epi16(k32, xb2));
                sum[t] = _mm512_dpwssd_epi32(_mm512_dpwssd_epi32(sum[t], pa, sa), pb, sb);
            }
        }
#pragma GCC unroll 4
        for (int t = 0; t < T; ++t) {
            const float d = reinterpret_cast<const block_q8_k*>(x + t * xs)[b].d * dw;
            acc[t] = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(fold_lanes(sum[t])), acc[t]);
        }
    }
    for (int t = 0; t < T; ++t) y[t * ldy] = hsum256(acc[t]);
}

// ---------------------------------------------------------------------------------------------------------
// Dot-product driver

// kv: w's k-quant view (kquant_panels.h) for Q4_K / Q6_K, whose rows may lie in panels.
template <int T>
void row_tile(const matmul_weight& w, const kquant_rows_view& kv, prepared_x x, const q8_0_pair* pairs, float* y,
              int64_t ldy, int64_t r, int64_t t0) {
    const uint8_t* wr = w.type == ggml_type::q4_k || w.type == ggml_type::q6_k ? kv.row(r) : row_ptr(w, r);
    const auto* xt = static_cast<const uint8_t*>(x.data) + static_cast<size_t>(t0) * x.stride;
    const auto* xf = reinterpret_cast<const float*>(xt);
    float* yt = y + t0 * ldy + r;
    const int64_t n = w.n_in;
    switch (w.type) {
        case ggml_type::f32:
            float_row<load_f32, T>(wr, xf, x.stride / 4, n, yt, ldy);
            break;
        case ggml_type::f16:
            float_row<load_f16, T>(wr, xf, x.stride / 4, n, yt, ldy);
            break;
        case ggml_type::bf16:
            float_row<load_bf16, T>(wr, xf, x.stride / 4, n, yt, ldy);
            break;
        case ggml_type::q8_0:
            q8_row<block_q8_0, T>(reinterpret_cast<const block_q8_0*>(wr), pairs + t0 * n_pairs(n / qk8_0), n / qk8_0,
                                  yt, ldy);
            break;
        case ggml_type::q4_0:
            q8_row<block_q4_0, T>(reinterpret_cast<const block_q4_0*>(wr), pairs + t0 * n_pairs(n / qk4_0), n / qk4_0,
                                  yt, ldy);
            break;
        case ggml_type::q5_0:
            q5_0_row_vnni<T>(reinterpret_cast<const block_q5_0*>(wr), wr + w.row_stride,
                             pairs + t0 * n_pairs(n / qk5_0), n / qk5_0, yt, ldy);
            break;
        case ggml_type::q4_k:
            q4_k_row<T>(wr, kv.block_step, xt, x.stride, n / qk_k, yt, ldy);
            break;
        case ggml_type::q2_k:
            q2_k_row<T>(reinterpret_cast<const block_q2_k*>(wr), wr + w.row_stride, xt, x.stride, n / qk_k, yt, ldy);
            break;
        case ggml_type::q3_k:
            q3_k_row<T>(reinterpret_cast<const block_q3_k*>(wr), wr + w.row_stride, xt, x.stride, n / qk_k, yt, ldy);
            break;
        case ggml_type::q5_k:
            q5_k_row<T>(reinterpret_cast<const block_q5_k*>(wr), wr + w.row_stride, xt, x.stride, n / qk_k, yt, ldy);
            break;
        case ggml_type::q6_k:
            q6_k_row<T>(wr, kv.block_step, xt, x.stride, n / qk_k, yt, ldy);
            break;
        default:
            break;  // matmul() admits only the types above
    }
}

// Float weights over several tokens: float_tile_walk.h's 3-row x 4-token tiles of float_kernel::tile.
using float_tiles_here = float_tiles<float_kernel>;

// One weight row at a time (a single sequential stream per thread is what the memory system serves
// fastest here; interleaving 4 rows measured 3x slower from DRAM), every token of the step in tiles of
// up to 4 while the row (or, past 4 tokens, a block of rows) is in cache.
void rows_avx512(const matmul_weight& w, prepared_x x, float* y, int64_t ldy, int64_t n_tokens, int64_t r0,
                 int64_t r1) {
    static thread_local aligned_buffer pair_buf;
    // K-quants: rows or k-quant panels (only Q4_K / Q6_K reach row_tile below, beyond kquant_few_tokens_max tokens).
    const bool k_quant = kquant_groups_rows(w.type);
    const kquant_rows_view kv = k_quant ? kquant_view(w) : kquant_rows_view{};
    q8_0_pair* pairs = nullptr;
    if (w.type == ggml_type::q8_0 || w.type == ggml_type::q4_0 || w.type == ggml_type::q5_0) {
        const int64_t nb = w.n_in / qk8_0;
        pairs = pair_buf.as<q8_0_pair>(static_cast<size_t>(n_tokens * n_pairs(nb)));
        make_q8_0_pairs(static_cast<const uint8_t*>(x.data), x.stride, n_tokens, nb, pair_offset(w.type), pairs);
    }
    // The kernels prefetch k_prefetch_distance bytes ahead of their loads, which leaves the first that many
    // bytes of this range to demand misses; a work item is often ~100 KiB (decode), so ask for them now.
    {
        const int d = k_prefetch_distance;
        const auto* first = reinterpret_cast<const char*>(kv.panels() ? kv.row(r0) : row_ptr(w, r0));
        const int64_t span = std::min<int64_t>(d, static_cast<int64_t>(w.row_stride) * (r1 - r0));
        for (int64_t i = 0; i < span; i += 64) _mm_prefetch(first + i, _MM_HINT_T0);
    }
    const bool float_weights = w.type == ggml_type::f32 || w.type == ggml_type::f16 || w.type == ggml_type::bf16;
    if (float_weights && n_tokens >= 2) {
        float_rows_in_tiles<float_tiles_here>(w, x, y, ldy, n_tokens, r0, r1);
        return;
    }
    if (n_tokens == 1 && kquant_groups_rows(w.type)) {  // decode: rows in groups of four
        kquant_rows_one_token_avx512(w, static_cast<const block_q8_k*>(x.data), y, r0, r1);
        return;
    }
    if (n_tokens <= kquant_few_tokens_max(w.type)) {  // k-quants: the same groups for a few tokens (or all)
        kquant_rows_few_tokens_avx512(w, static_cast<const uint8_t*>(x.data), x.stride, n_tokens, y, ldy, r0, r1);
        return;
    }
    if (n_tokens == 1 && w.type == ggml_type::q5_0) {  // decode: rows in groups of four (q5_0_row_avx512.h)
        const int64_t nb = w.n_in / qk5_0;
        int64_t r = r0;
        for (; r + 4 <= r1; r += 4) q5_0_rows_vnni<4>(row_ptr(w, r), w.row_stride, pairs, nb, y + r);
        for (; r < r1; ++r) q5_0_rows_vnni<1>(row_ptr(w, r), w.row_stride, pairs, nb, y + r);
        return;
    }
    // More than one tile of tokens: a block of rows (about 16 KiB) is streamed from memory by the first
    // tile and served from L1/L2 to the next ones, so each tile's activations are reused across the
    // block's rows instead of being fetched again for every row.
    const int64_t block =
        n_tokens <= 4 ? 1 : std::max<int64_t>(1, (int64_t{16} << 10) / static_cast<int64_t>(w.row_stride));
    for (int64_t rb = r0; rb < r1; rb += block) {
        const int64_t re = std::min(r1, rb + block);
        for (int64_t t0 = 0; t0 < n_tokens; t0 += 4) {
            for (int64_t r = rb; r < re; ++r) {
                switch (std::min<int64_t>(4, n_tokens - t0)) {
                    case 1:
                        row_tile<1>(w, kv, x, pairs, y, ldy, r, t0);
                        break;
                    case 2:
                        row_tile<2>(w, kv, x, pairs, y, ldy, r, t0);
                        break;
                    case 3:
                        row_tile<3>(w, kv, x, pairs, y, ldy, r, t0);
                        break;
                    default:
                        row_tile<4>(w, kv, x, pairs, y, ldy, r, t0);
                        break;
                }
            }
        }
    }
}

}  // namespace

const matmul_kernels& avx512_kernels() {
    static const matmul_kernels k{
        .rows = rows_avx512,
        // No float GEMM and no Q8_0 GEMM on rows, as at the AVX2 level (see the comment there): their sums are not
        // the dot kernels', so a token's outputs depended on how many tokens shared its step. Float weights take
        // float_kernel's 3 x 4 tiles; Q8_0 / Q4_0 take the panels (kernels.weights: copy, the default) or q8_row
        // (mmap); the float-activation recipe the dot kernels. test_matmul's at_every_level test, run here with
        // AVX-512 emulated by SIMDe (kernels/emulation/README.md), failed for F32 from 7 tokens, Q8_0 rows from 24
        // and the float recipe's Q8_0 from 33 before. Measured on Zen 5 since: the tiles, once walked in chunks of
        // tokens (float_tile_walk.h), prefill F32 / F16 / BF16 at 48% / 68-73% / 67-71% of the FMA peak
        // (troupe_kernels_bench, 512 tokens; the GEMM reached 83.5% for F32); mmap'd Q8_0 / Q4_0 and the float
        // recipe are not measured there.
        .gemm = nullptr,
        .gemm_min_tokens_float = INT64_MAX,
        .gemm_min_tokens_q8 = INT64_MAX,
        .gemm_rows = k_avx512_gemm_rows,
        .gemm_mr = k_avx512_gemm_mr,
        .gemm_kc = k_avx512_gemm_kc,
        .gemm_unordered = gemm_avx512,  // core/train's products (matmul_for_training)
        .rows_float_act = rows_float_act_avx512,
        .gemm_min_tokens_float_act = INT64_MAX,
        .gemm_q8 = nullptr,
        .gemm_q8_rows = 0,
        .quantize_q8_0 = quantize_q8_0_avx512,
        .quantize_q8_k = quantize_q8_k_avx512,
        .round_f16 = round_f16_avx512,
        .round_bf16 = round_bf16_avx512,
        .q8_0_values = q8_0_values_avx512,
        .q8_k_values = q8_k_values_avx512,
        .gemm_kquant = gemm_kquant_avx512,
        // Up to kquant_few_tokens_max tokens the groups of four rows (kquant_rows_avx512.h), then the GEMM.
        .gemm_min_tokens_q4_k = kquant_few_tokens_max(ggml_type::q4_k) + 1,
        .gemm_min_tokens_q6_k = kquant_few_tokens_max(ggml_type::q6_k) + 1,
        .gemm_kquant_rows = k_avx512_gemm_kquant_rows,
    };
    return k;
}

}  // namespace troupe::cpu::detail

#else  // built without AVX-512 flags (another architecture): the level is never selected

namespace troupe::cpu::detail {
const matmul_kernels& avx512_kernels() {
    return scalar_kernels();
}
}  // namespace troupe::cpu::detail

#endif
