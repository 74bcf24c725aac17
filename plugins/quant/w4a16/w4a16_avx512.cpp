// quant/w4a16's kernels at the AVX-512 level (F, BW, VL; built with its own flags and -ffp-contract=off, so a
// multiply and the add after it stay two roundings, as in the reference dequantization).
//
// A group's 16 possible weights d * q + m (q = 0..15) are built once per group as one register, `levels`; a
// vector of 16 weights is then one permute of it by their nibbles (vpermps reads only the low 4 bits of each
// index, so the high nibbles need a shift but no mask). 16 bytes of qs hold elements 16c.. (low nibbles) and
// G/2 + 16c.. (high nibbles) of a group.
#include "w4a16_kernels.h"

#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__)

#include <immintrin.h>

#include "w4a16_prefill_blocks.h"

namespace troupe::w4a16 {
namespace {

constexpr int k_prefetch_distance = 4096;  // bytes ahead in the row stream

inline __m512 levels(const uint8_t* blk) {
    uint32_t dm;
    std::memcpy(&dm, blk, 4);
    const __m128 f = _mm_cvtph_ps(_mm_cvtsi32_si128(static_cast<int>(dm)));  // d, m
    const __m512 iota = _mm512_setr_ps(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    const __m512 d = _mm512_broadcastss_ps(f);
    const __m512 m = _mm512_broadcastss_ps(_mm_movehdup_ps(f));
    return _mm512_add_ps(_mm512_mul_ps(d, iota), m);
}

// The 16-byte chunk at qs: its low nibbles' and high nibbles' weights.
inline void chunk_weights(const uint8_t* qs, __m512 lv, __m512* lo, __m512* hi) {
    const __m512i v = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(qs)));
    *lo = _mm512_permutexvar_ps(v, lv);
    *hi = _mm512_permutexvar_ps(_mm512_srli_epi32(v, 4), lv);
}

// acc_lo[t] += lo * x[t, klo..], acc_hi[t] += hi * x[t, khi..]
template <int T>
inline void chunk_fma(const uint8_t* qs, __m512 lv, const float* xlo, const float* xhi, int64_t xs, __m512 (&acc_lo)[T],
                      __m512 (&acc_hi)[T]) {
    __m512 lo, hi;
    chunk_weights(qs, lv, &lo, &hi);
#pragma GCC unroll 4
    for (int t = 0; t < T; ++t) {
        acc_lo[t] = _mm512_fmadd_ps(lo, _mm512_loadu_ps(xlo + t * xs), acc_lo[t]);
        acc_hi[t] = _mm512_fmadd_ps(hi, _mm512_loadu_ps(xhi + t * xs), acc_hi[t]);
    }
}

// y[t * ldy] = row . x[t] for T tokens (x rows xs floats apart). Four accumulator chains per token: the low and
// high nibbles of two chunks (of one group, or for G = 32 of two groups) per step.
template <int G, int T>
void row_dot(const uint8_t* row, int64_t n_in, const float* x, int64_t xs, float* y, int64_t ldy) {
    constexpr int C = G / 32;  // 16-byte chunks per group
    constexpr size_t bb = block_bytes(G);
    __m512 a0[T], a1[T], a2[T], a3[T];
    for (int t = 0; t < T; ++t) a0[t] = a1[t] = a2[t] = a3[t] = _mm512_setzero_ps();
    const int64_t nb = n_in / G;
    if constexpr (C == 1) {
        int64_t b = 0;
        for (; b + 2 <= nb; b += 2) {
            const uint8_t* b0 = row + b * bb;
            _mm_prefetch(reinterpret_cast<const char*>(b0) + k_prefetch_distance, _MM_HINT_T0);
            const float* xb = x + b * G;
            chunk_fma<T>(b0 + k_block_header, levels(b0), xb, xb + 16, xs, a0, a1);
            chunk_fma<T>(b0 + bb + k_block_header, levels(b0 + bb), xb + 32, xb + 48, xs, a2, a3);
        }
        if (b < nb)
            chunk_fma<T>(row + b * bb + k_block_header, levels(row + b * bb), x + b * G, x + b * G + 16, xs, a0, a1);
    } else {
        for (int64_t b = 0; b < nb; ++b) {
            const uint8_t* blk = row + b * bb;
            _mm_prefetch(reinterpret_cast<const char*>(blk) + k_prefetch_distance, _MM_HINT_T0);
            if constexpr (bb > 64)
                _mm_prefetch(reinterpret_cast<const char*>(blk) + k_prefetch_distance + 64, _MM_HINT_T0);
            const __m512 lv = levels(blk);
            const uint8_t* qs = blk + k_block_header;
            const float* xb = x + b * G;
#pragma GCC unroll 2
            for (int c = 0; c < C; c += 2) {
                chunk_fma<T>(qs + 16 * c, lv, xb + 16 * c, xb + G / 2 + 16 * c, xs, a0, a1);
                chunk_fma<T>(qs + 16 * (c + 1), lv, xb + 16 * (c + 1), xb + G / 2 + 16 * (c + 1), xs, a2, a3);
            }
        }
    }
    for (int t = 0; t < T; ++t) {
        y[t * ldy] = _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(a0[t], a1[t]), _mm512_add_ps(a2[t], a3[t])));
    }
}

template <int G>
void decode_g(const matrix& w, const float* x, int64_t n_tokens, float* y, int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
        const uint8_t* row = w.row(r);
        int64_t t = 0;
        for (; t + 4 <= n_tokens; t += 4)
            row_dot<G, 4>(row, w.n_in, x + t * w.n_in, w.n_in, y + t * w.n_out + r, w.n_out);
        switch (n_tokens - t) {
            case 3:
                row_dot<G, 3>(row, w.n_in, x + t * w.n_in, w.n_in, y + t * w.n_out + r, w.n_out);
                break;
            case 2:
                row_dot<G, 2>(row, w.n_in, x + t * w.n_in, w.n_in, y + t * w.n_out + r, w.n_out);
                break;
            case 1:
                row_dot<G, 1>(row, w.n_in, x + t * w.n_in, w.n_in, y + t * w.n_out + r, w.n_out);
                break;
            default:
                break;
        }
    }
}

void decode_avx512(const matrix& w, const float* x, int64_t n_tokens, float* y, int64_t r0, int64_t r1) {
    switch (w.g) {
        case 32:
            return decode_g<32>(w, x, n_tokens, y, r0, r1);
        case 64:
            return decode_g<64>(w, x, n_tokens, y, r0, r1);
        default:
            return decode_g<128>(w, x, n_tokens, y, r0, r1);
    }
}

// Prefill: 12 rows x 32 tokens per register tile (24 accumulators).
struct tiles_avx512 {
    static constexpr int64_t nr = 12;
    static constexpr int64_t nt = 32;

    // out[0..kc) = the row's weights k0..k0 + kc (kc, k0 multiples of g).
    static void dequant(const uint8_t* row, int g, int64_t k0, int64_t kc, float* out) {
        const size_t bb = block_bytes(g);
        for (int64_t b = k0 / g; b < (k0 + kc) / g; ++b) {
            const uint8_t* blk = row + b * bb;
            const __m512 lv = levels(blk);
            float* o = out + (b * g - k0);
            for (int c = 0; c < g / 32; ++c) {
                __m512 lo, hi;
                chunk_weights(blk + k_block_header + 16 * c, lv, &lo, &hi);
                _mm512_storeu_ps(o + 16 * c, lo);
                _mm512_storeu_ps(o + g / 2 + 16 * c, hi);
            }
        }
    }

    // acc [nr, nt] (ld lda) (+)= w [nr, kc] (ld ldw) * xt [kc, nt] (ld ldx), in k order.
    static void tile(const float* w, int64_t ldw, const float* xt, int64_t ldx, float* acc, int64_t lda, bool first) {
        __m512 c0[nr], c1[nr];
        for (int i = 0; i < nr; ++i) {
            c0[i] = first ? _mm512_setzero_ps() : _mm512_loadu_ps(acc + i * lda);
            c1[i] = first ? _mm512_setzero_ps() : _mm512_loadu_ps(acc + i * lda + 16);
        }
        for (int64_t k = 0; k < ldw; ++k) {
            const __m512 x0 = _mm512_loadu_ps(xt + k * ldx), x1 = _mm512_loadu_ps(xt + k * ldx + 16);
#pragma GCC unroll 12
            for (int i = 0; i < nr; ++i) {
                const __m512 wv = _mm512_set1_ps(w[i * ldw + k]);
                c0[i] = _mm512_fmadd_ps(wv, x0, c0[i]);
                c1[i] = _mm512_fmadd_ps(wv, x1, c1[i]);
            }
        }
        for (int i = 0; i < nr; ++i) {
            _mm512_storeu_ps(acc + i * lda, c0[i]);
            _mm512_storeu_ps(acc + i * lda + 16, c1[i]);
        }
    }
};

void prefill_avx512(const matrix& w, const float* xt, int64_t n_pad, int64_t n_tokens, float* y, int64_t r0,
                    int64_t r1) {
    prefill_blocks<tiles_avx512>(w, xt, n_pad, n_tokens, y, r0, r1);
}

const kernel_set k_avx512 = {"avx512", decode_avx512, prefill_avx512, 4 * tiles_avx512::nr};

}  // namespace

const kernel_set* avx512_kernels() {
    return &k_avx512;
}

}  // namespace troupe::w4a16

#else

namespace troupe::w4a16 {
const kernel_set* avx512_kernels() {
    return nullptr;
}
}  // namespace troupe::w4a16

#endif
