// quant/w4a16's kernels at the AVX2 level (+FMA, F16C; built with its own flags and -ffp-contract=off, so a
// multiply and the add after it stay two roundings, as in the reference dequantization).
//
// 8 bytes of qs widen to 8 int32 lanes; their low nibbles (masked) and high nibbles (shifted) become floats,
// then weights d * q + m (a multiply, then an add: the reference's values exactly), then FMAs with the tokens.
#include "w4a16_kernels.h"

#if defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)

#include <immintrin.h>

#include "w4a16_prefill_blocks.h"

namespace troupe::w4a16 {
namespace {

constexpr int k_prefetch_distance = 4096;

inline void scale_min(const uint8_t* blk, __m256* d, __m256* m) {
    uint32_t dm;
    std::memcpy(&dm, blk, 4);
    const __m128 f = _mm_cvtph_ps(_mm_cvtsi32_si128(static_cast<int>(dm)));
    *d = _mm256_broadcastss_ps(f);
    *m = _mm256_broadcastss_ps(_mm_movehdup_ps(f));
}

// The 8 bytes at qs: the weights of their low nibbles and of their high nibbles.
inline void weights8(const uint8_t* qs, __m256 d, __m256 m, __m256* lo, __m256* hi) {
    int64_t bytes;
    std::memcpy(&bytes, qs, 8);
    const __m256i v = _mm256_cvtepu8_epi32(_mm_cvtsi64_si128(bytes));
    const __m256 ql = _mm256_cvtepi32_ps(_mm256_and_si256(v, _mm256_set1_epi32(15)));
    const __m256 qh = _mm256_cvtepi32_ps(_mm256_srli_epi32(v, 4));
    *lo = _mm256_add_ps(_mm256_mul_ps(d, ql), m);
    *hi = _mm256_add_ps(_mm256_mul_ps(d, qh), m);
}

template <int T>
inline void fma8(const uint8_t* qs, __m256 d, __m256 m, const float* xlo, const float* xhi, int64_t xs,
                 __m256 (&acc_lo)[T], __m256 (&acc_hi)[T]) {
    __m256 lo, hi;
    weights8(qs, d, m, &lo, &hi);
#pragma GCC unroll 4
    for (int t = 0; t < T; ++t) {
        acc_lo[t] = _mm256_fmadd_ps(lo, _mm256_loadu_ps(xlo + t * xs), acc_lo[t]);
        acc_hi[t] = _mm256_fmadd_ps(hi, _mm256_loadu_ps(xhi + t * xs), acc_hi[t]);
    }
}

inline float hsum(__m256 v) {
    const __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    const __m128 s2 = _mm_add_ps(s, _mm_movehl_ps(s, s));
    return _mm_cvtss_f32(_mm_add_ss(s2, _mm_movehdup_ps(s2)));
}

// y[t * ldy] = row . x[t] for T tokens; four chains per token (low/high nibbles of each 8-byte half).
template <int G, int T>
void row_dot(const uint8_t* row, int64_t n_in, const float* x, int64_t xs, float* y, int64_t ldy) {
    constexpr size_t bb = block_bytes(G);
    __m256 a0[T], a1[T], a2[T], a3[T];
    for (int t = 0; t < T; ++t) a0[t] = a1[t] = a2[t] = a3[t] = _mm256_setzero_ps();
    for (int64_t b = 0; b < n_in / G; ++b) {
        const uint8_t* blk = row + b * bb;
        _mm_prefetch(reinterpret_cast<const char*>(blk) + k_prefetch_distance, _MM_HINT_T0);
        __m256 d, m;
        scale_min(blk, &d, &m);
        const uint8_t* qs = blk + k_block_header;
        const float* xb = x + b * G;
#pragma GCC unroll 8
        for (int c = 0; c < G / 2; c += 16) {
            fma8<T>(qs + c, d, m, xb + c, xb + G / 2 + c, xs, a0, a1);
            fma8<T>(qs + c + 8, d, m, xb + c + 8, xb + G / 2 + c + 8, xs, a2, a3);
        }
    }
    for (int t = 0; t < T; ++t) {
        y[t * ldy] = hsum(_mm256_add_ps(_mm256_add_ps(a0[t], a1[t]), _mm256_add_ps(a2[t], a3[t])));
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

void decode_avx2(const matrix& w, const float* x, int64_t n_tokens, float* y, int64_t r0, int64_t r1) {
    switch (w.g) {
        case 32:
            return decode_g<32>(w, x, n_tokens, y, r0, r1);
        case 64:
            return decode_g<64>(w, x, n_tokens, y, r0, r1);
        default:
            return decode_g<128>(w, x, n_tokens, y, r0, r1);
    }
}

// Prefill: 6 rows x 16 tokens per register tile (12 accumulators).
struct tiles_avx2 {
    static constexpr int64_t nr = 6;
    static constexpr int64_t nt = 16;

    static void dequant(const uint8_t* row, int g, int64_t k0, int64_t kc, float* out) {
        const size_t bb = block_bytes(g);
        for (int64_t b = k0 / g; b < (k0 + kc) / g; ++b) {
            const uint8_t* blk = row + b * bb;
            __m256 d, m;
            scale_min(blk, &d, &m);
            float* o = out + (b * g - k0);
            for (int c = 0; c < g / 2; c += 8) {
                __m256 lo, hi;
                weights8(blk + k_block_header + c, d, m, &lo, &hi);
                _mm256_storeu_ps(o + c, lo);
                _mm256_storeu_ps(o + g / 2 + c, hi);
            }
        }
    }

    // acc [nr, nt] (ld lda) (+)= w [nr, kc = ldw] * xt [kc, nt] (ld ldx), in k order.
    static void tile(const float* w, int64_t ldw, const float* xt, int64_t ldx, float* acc, int64_t lda, bool first) {
        __m256 c0[nr], c1[nr];
        for (int i = 0; i < nr; ++i) {
            c0[i] = first ? _mm256_setzero_ps() : _mm256_loadu_ps(acc + i * lda);
            c1[i] = first ? _mm256_setzero_ps() : _mm256_loadu_ps(acc + i * lda + 8);
        }
        for (int64_t k = 0; k < ldw; ++k) {
            const __m256 x0 = _mm256_loadu_ps(xt + k * ldx), x1 = _mm256_loadu_ps(xt + k * ldx + 8);
#pragma GCC unroll 6
            for (int i = 0; i < nr; ++i) {
                const __m256 wv = _mm256_broadcast_ss(w + i * ldw + k);
                c0[i] = _mm256_fmadd_ps(wv, x0, c0[i]);
                c1[i] = _mm256_fmadd_ps(wv, x1, c1[i]);
            }
        }
        for (int i = 0; i < nr; ++i) {
            _mm256_storeu_ps(acc + i * lda, c0[i]);
            _mm256_storeu_ps(acc + i * lda + 8, c1[i]);
        }
    }
};

void prefill_avx2(const matrix& w, const float* xt, int64_t n_pad, int64_t n_tokens, float* y, int64_t r0, int64_t r1) {
    prefill_blocks<tiles_avx2>(w, xt, n_pad, n_tokens, y, r0, r1);
}

const kernel_set k_avx2 = {"avx2", decode_avx2, prefill_avx2, 4 * tiles_avx2::nr};

}  // namespace

const kernel_set* avx2_kernels() {
    return &k_avx2;
}

}  // namespace troupe::w4a16

#else

namespace troupe::w4a16 {
const kernel_set* avx2_kernels() {
    return nullptr;
}
}  // namespace troupe::w4a16

#endif
