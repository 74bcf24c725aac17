// quant/w4a16's kernels at the AVX2 level (+FMA, F16C; built with its own flags and -ffp-contract=off, so a
// multiply and the add after it stay two roundings, as in the reference dequantization).
//
// The layout of w4a16_format.h: a span's 64 bytes of codes are two registers of 8 lanes; shifting by 4k and masking
// gives the codes of weights 16b.. (lanes 0..7) and 16b + 8.. (lanes 8..15) of block b = slot_block(k) as int32, then
// floats, then weights d * q + m (a multiply, then an add: the reference's values exactly), then FMAs with the tokens.
#include "w4a16_i16.h"
#include "w4a16_kernels.h"

#if defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)

#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <type_traits>

#include "w4a16_prefill_blocks.h"

namespace troupe::w4a16 {
namespace {

constexpr int k_prefetch_distance =
    8192;  // bytes ahead in the row stream (best of 0, 2, 4, 8, 16 KiB measured on Zen 5)

// The scale and min at p (float32 d, m), broadcast.
inline void scale_min(const float* p, __m256* d, __m256* m) {
    *d = _mm256_broadcast_ss(p);
    *m = _mm256_broadcast_ss(p + 1);
}

// Weights 16 slot_block(k) + 8h .. + 7 of a span from its codes vh (lanes 8h..8h+7): d * q + m.
inline __m256 weights8(__m256i vh, int k, __m256 d, __m256 m) {
    const __m256i q = _mm256_and_si256(_mm256_srl_epi32(vh, _mm_cvtsi32_si128(4 * k)), _mm256_set1_epi32(15));
    return _mm256_add_ps(_mm256_mul_ps(d, _mm256_cvtepi32_ps(q)), m);
}

// The same with the shift known at compile time.
template <int K>
inline __m256 weights8(__m256i vh, __m256 d, __m256 m) {
    const __m256i q = _mm256_and_si256(_mm256_srli_epi32(vh, 4 * K), _mm256_set1_epi32(15));
    return _mm256_add_ps(_mm256_mul_ps(d, _mm256_cvtepi32_ps(q)), m);
}

inline float hsum(__m256 v) {
    const __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    const __m128 s2 = _mm_add_ps(s, _mm_movehl_ps(s, s));
    return _mm_cvtss_f32(_mm_add_ss(s2, _mm_movehdup_ps(s2)));
}

// y[t * ldy] = row r . x[t] for T tokens; two chains per token (the two halves of each 16 weights), four for one
// token. Full spans are unrolled (shifts and group changes known at compile time); a short last span is looped.
template <int G, int T>
void row_dot(const matrix& w, int64_t r, const float* x, int64_t xs, float* y, int64_t ldy) {
    constexpr int nch = T == 1 ? 4 : 2;
    const uint8_t* spans = w.spans(r);
    const float* scales = w.scales(r);
    __m256 acc[nch][T];
    for (int c = 0; c < nch; ++c) {
        for (int t = 0; t < T; ++t) acc[c][t] = _mm256_setzero_ps();
    }
    __m256 d = _mm256_setzero_ps(), m = d;
    auto step = [&](__m256 w0, __m256 w1, int c, const float* xj) {
#pragma GCC unroll 4
        for (int t = 0; t < T; ++t) {
            acc[c][t] = _mm256_fmadd_ps(w0, _mm256_loadu_ps(xj + t * xs), acc[c][t]);
            acc[c + 1][t] = _mm256_fmadd_ps(w1, _mm256_loadu_ps(xj + t * xs + 8), acc[c + 1][t]);
        }
    };
    const int64_t n_full = w.n_in / k_span;
    for (int64_t s = 0; s < n_full; ++s) {
        const uint8_t* sp = spans + s * k_span_bytes;
        _mm_prefetch(reinterpret_cast<const char*>(sp) + k_prefetch_distance, _MM_HINT_T0);
        const __m256i v0 = _mm256_load_si256(reinterpret_cast<const __m256i*>(sp));
        const __m256i v1 = _mm256_load_si256(reinterpret_cast<const __m256i*>(sp + 32));
        const float* sc = scales + 2 * (s * k_span / G);
        const float* xj = x + s * k_span;
        auto k_step = [&](auto kc) {
            constexpr int K = decltype(kc)::value, B = slot_block(K);  // slot K holds block B (w4a16_format.h)
            if constexpr (K == 0 || G < k_span) scale_min(sc + 2 * (16 * B / G), &d, &m);
            step(weights8<K>(v0, d, m), weights8<K>(v1, d, m), (2 * K) % nch, xj + 16 * B);
        };
        k_step(std::integral_constant<int, 0>{});
        k_step(std::integral_constant<int, 1>{});
        k_step(std::integral_constant<int, 2>{});
        k_step(std::integral_constant<int, 3>{});
        k_step(std::integral_constant<int, 4>{});
        k_step(std::integral_constant<int, 5>{});
        k_step(std::integral_constant<int, 6>{});
        k_step(std::integral_constant<int, 7>{});
    }
    if (const int64_t rest = w.n_in - n_full * k_span; rest > 0) {  // a short last span (G < 128)
        const uint8_t* sp = spans + n_full * k_span_bytes;
        const __m256i v0 = _mm256_load_si256(reinterpret_cast<const __m256i*>(sp));
        const __m256i v1 = _mm256_load_si256(reinterpret_cast<const __m256i*>(sp + 32));
        for (int b = 0; b < rest / 16; ++b) {
            const int64_t j = n_full * k_span + 16 * b;
            scale_min(scales + 2 * (j / G), &d, &m);
            step(weights8(v0, block_slot(b), d, m), weights8(v1, block_slot(b), d, m), 0, x + j);
        }
    }
    for (int t = 0; t < T; ++t) {
        __m256 sum = acc[0][t];
        for (int c = 1; c < nch; ++c) sum = _mm256_add_ps(sum, acc[c][t]);
        y[t * ldy] = hsum(sum);
    }
}

template <int G>
void decode_g(const matrix& w, const float* x, int64_t n_tokens, float* y, int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
        int64_t t = 0;
        for (; t + 4 <= n_tokens; t += 4) row_dot<G, 4>(w, r, x + t * w.n_in, w.n_in, y + t * w.n_out + r, w.n_out);
        switch (n_tokens - t) {
            case 3:
                row_dot<G, 3>(w, r, x + t * w.n_in, w.n_in, y + t * w.n_out + r, w.n_out);
                break;
            case 2:
                row_dot<G, 2>(w, r, x + t * w.n_in, w.n_in, y + t * w.n_out + r, w.n_out);
                break;
            case 1:
                row_dot<G, 1>(w, r, x + t * w.n_in, w.n_in, y + t * w.n_out + r, w.n_out);
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

// ---- decode with int16 activations (w4a16_i16.h) ----------------------------------------------------------------

// Block C (0..3) of a span's codes as 16-bit pairs: lane i of v0 (v1) = (q[32C + i], q[32C + 16 + i]) for i = 0..7
// (8..15), the pairs the activations' words hold.
template <int C>
inline __m256i pair_codes(__m256i v) {
    if constexpr (C == 3) return _mm256_srli_epi16(v, 12);
    if constexpr (C == 0) return _mm256_and_si256(v, _mm256_set1_epi16(15));
    return _mm256_and_si256(_mm256_srli_epi16(v, 4 * C), _mm256_set1_epi16(15));
}
inline __m256i pair_codes(__m256i v, int c) {
    return _mm256_and_si256(_mm256_srl_epi16(v, _mm_cvtsi32_si128(4 * c)), _mm256_set1_epi16(15));
}

// y[t * ldy] = row r . x of tokens t0 .. t0 + T - 1 by the int16 recipe (w4a16_i16.h): each 32-block's codes
// extracted once and multiplied with each token's words (vpmaddwd), the int32 lanes summed over the group, then
// converted and added into the row's 8 float lanes with the group's d s (one FMA). Every 4 groups, one vector of
// their (d, m) scales makes the 4 d s (a multiply) and adds the 4 m s xsum into the m lanes (an FMA).
template <int G, int T>
void row_dot_i16(const matrix& w, int64_t r, const i16_activations& a, int64_t t0, float* y, int64_t ldy) {
    constexpr int64_t blocks_per_group = G / 32;
    const uint8_t* spans = w.spans(r);
    const float* sc = w.scales(r);
    const int16_t* x[T];
    const float* u[T];
    __m256 acc[T], macc[T];
    __m256i isum[T];
    alignas(32) float sd[T][8];  // the current 4 groups' d s at 0, 2, 4, 6
    for (int t = 0; t < T; ++t) {
        x[t] = a.x + (t0 + t) * a.n_in;
        u[t] = a.u + (t0 + t) * 2 * a.u_stride;
        acc[t] = macc[t] = _mm256_setzero_ps();
        isum[t] = _mm256_setzero_si256();
    }
    auto block = [&](__m256i c0, __m256i c1, int64_t j) {  // j: the 32-block's index in the row
        if (j % (4 * blocks_per_group) == 0) {             // the first of 4 groups: their scales' terms
            const int64_t i = 2 * (j / blocks_per_group);
            const __m256 dm = _mm256_load_ps(sc + i);
            for (int t = 0; t < T; ++t) {
                _mm256_store_ps(sd[t], _mm256_mul_ps(dm, _mm256_load_ps(u[t] + i)));
                macc[t] = _mm256_fmadd_ps(dm, _mm256_load_ps(u[t] + a.u_stride + i), macc[t]);
            }
        }
        for (int t = 0; t < T; ++t) {
            const int16_t* xj = x[t] + 32 * j;
            const __m256i p0 = _mm256_madd_epi16(c0, _mm256_load_si256(reinterpret_cast<const __m256i*>(xj)));
            const __m256i p1 = _mm256_madd_epi16(c1, _mm256_load_si256(reinterpret_cast<const __m256i*>(xj + 16)));
            isum[t] = _mm256_add_epi32(isum[t], _mm256_add_epi32(p0, p1));
        }
        if ((j + 1) % blocks_per_group == 0) {
            const int64_t lane = 2 * ((j / blocks_per_group) % 4);
            for (int t = 0; t < T; ++t) {
                acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum[t]), _mm256_broadcast_ss(&sd[t][lane]), acc[t]);
                isum[t] = _mm256_setzero_si256();
            }
        }
    };
    const int64_t n_full = w.n_in / k_span;
    for (int64_t sp_i = 0; sp_i < n_full; ++sp_i) {
        const uint8_t* sp = spans + sp_i * k_span_bytes;
        _mm_prefetch(reinterpret_cast<const char*>(sp) + k_prefetch_distance, _MM_HINT_T0);
        const __m256i v0 = _mm256_load_si256(reinterpret_cast<const __m256i*>(sp));
        const __m256i v1 = _mm256_load_si256(reinterpret_cast<const __m256i*>(sp + 32));
        block(pair_codes<0>(v0), pair_codes<0>(v1), 4 * sp_i);
        block(pair_codes<1>(v0), pair_codes<1>(v1), 4 * sp_i + 1);
        block(pair_codes<2>(v0), pair_codes<2>(v1), 4 * sp_i + 2);
        block(pair_codes<3>(v0), pair_codes<3>(v1), 4 * sp_i + 3);
    }
    if (const int64_t rest = w.n_in - n_full * k_span; rest > 0) {  // a short last span: 1 .. 3 blocks of 32
        const uint8_t* sp = spans + n_full * k_span_bytes;
        const __m256i v0 = _mm256_load_si256(reinterpret_cast<const __m256i*>(sp));
        const __m256i v1 = _mm256_load_si256(reinterpret_cast<const __m256i*>(sp + 32));
        for (int c = 0; c < rest / 32; ++c) block(pair_codes(v0, c), pair_codes(v1, c), 4 * n_full + c);
    }
    for (int t = 0; t < T; ++t) y[t * ldy] = hsum(_mm256_add_ps(acc[t], macc[t]));
}

template <int G>
void decode_i16_g(const matrix& w, const i16_activations& a, float* y, int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
        int64_t t = 0;
        for (; t + 4 <= a.n_tokens; t += 4) row_dot_i16<G, 4>(w, r, a, t, y + t * w.n_out + r, w.n_out);
        switch (a.n_tokens - t) {
            case 3:
                row_dot_i16<G, 3>(w, r, a, t, y + t * w.n_out + r, w.n_out);
                break;
            case 2:
                row_dot_i16<G, 2>(w, r, a, t, y + t * w.n_out + r, w.n_out);
                break;
            case 1:
                row_dot_i16<G, 1>(w, r, a, t, y + t * w.n_out + r, w.n_out);
                break;
            default:
                break;
        }
    }
}

void decode_i16_avx2(const matrix& w, const i16_activations& a, float* y, int64_t r0, int64_t r1) {
    switch (w.g) {
        case 32:
            return decode_i16_g<32>(w, a, y, r0, r1);
        case 64:
            return decode_i16_g<64>(w, a, y, r0, r1);
        default:
            return decode_i16_g<128>(w, a, y, r0, r1);
    }
}

// Prefill: 6 rows x 16 tokens per register tile (12 accumulators).
struct tiles_avx2 {
    static constexpr int64_t nr = 6;
    static constexpr int64_t nt = 16;

    // out[0..kc) = weights k0..k0 + kc of row r (k0 a multiple of 128, kc of g).
    static void dequant(const matrix& w, int64_t r, int64_t k0, int64_t kc, float* out) {
        const uint8_t* spans = w.spans(r);
        const float* scales = w.scales(r);
        for (int64_t j0 = k0; j0 < k0 + kc; j0 += k_span) {
            const uint8_t* sp = spans + (j0 / k_span) * k_span_bytes;
            const __m256i v0 = _mm256_load_si256(reinterpret_cast<const __m256i*>(sp));
            const __m256i v1 = _mm256_load_si256(reinterpret_cast<const __m256i*>(sp + 32));
            for (int b = 0; b < 8 && j0 + 16 * b < k0 + kc; ++b) {
                const int64_t j = j0 + 16 * b;
                __m256 d, m;
                scale_min(scales + 2 * (j / w.g), &d, &m);
                _mm256_storeu_ps(out + (j - k0), weights8(v0, block_slot(b), d, m));
                _mm256_storeu_ps(out + (j - k0) + 8, weights8(v1, block_slot(b), d, m));
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

i16_decode_fn i16_decode_avx2() {
    return decode_i16_avx2;
}

}  // namespace troupe::w4a16

#else

namespace troupe::w4a16 {
const kernel_set* avx2_kernels() {
    return nullptr;
}
i16_decode_fn i16_decode_avx2() {
    return nullptr;
}
}  // namespace troupe::w4a16

#endif
