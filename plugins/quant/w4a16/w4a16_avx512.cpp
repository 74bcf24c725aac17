// quant/w4a16's kernels at the AVX-512 level (F, BW, VL; built with its own flags and -ffp-contract=off, so a
// multiply and the add after it stay two roundings, as in the reference dequantization).
//
// A group's 16 possible weights d * q + m (q = 0..15) are built once per group as one register, `levels`; a
// vector of 16 weights is then one permute of it by their codes (vpermps reads only the low 4 bits of each
// index, so the codes need a shift but no mask), in the layout of w4a16_format.h (one aligned load per 128 codes).
#include "w4a16_kernels.h"

#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__)

#include <immintrin.h>

#include <algorithm>
#include <type_traits>

#include "plugins/common/prefetch.h"
#include "w4a16_prefill_blocks.h"

namespace troupe::w4a16 {
namespace {

// The 16 levels d * q + m (q = 0..15) of the group whose float32 (d, m) are at p (a multiply, then an add).
inline __m512 levels(const float* p) {
    const __m512 iota = _mm512_setr_ps(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    return _mm512_add_ps(_mm512_mul_ps(_mm512_set1_ps(p[0]), iota), _mm512_set1_ps(p[1]));
}

// The weights of slot K of a span (block slot_block(K): 16 weights) whose codes are v (vpermps reads the low 4 bits of
// each lane).
template <int K>
inline __m512 span_weights(__m512i v, __m512 lv) {
    if constexpr (K == 0) return _mm512_permutexvar_ps(v, lv);
    return _mm512_permutexvar_ps(_mm512_srli_epi32(v, 4 * K), lv);
}

// y[t * ldy] = row r . x[t] for T tokens (x rows xs floats apart): per full span one aligned load of 128 codes and,
// per 16 weights, one permute and T FMAs. Accumulator chains: 4 per token for one token, 2 for more.
template <int G, int T>
void row_dot(const matrix& w, int64_t r, const float* x, int64_t xs, float* y, int64_t ldy, int64_t s0, int64_t s1,
             bool add) {
    constexpr int nch = T == 1 ? 4 : 2;
    constexpr int groups_per_span = static_cast<int>(k_span) / G;
    const uint8_t* spans = w.spans(r);
    const float* scales = w.scales(r);
    __m512 acc[nch][T];
    for (int c = 0; c < nch; ++c) {
        for (int t = 0; t < T; ++t) acc[c][t] = _mm512_setzero_ps();
    }
    auto chunk = [&](__m512 wv, int c, const float* xk) {
#pragma GCC unroll 4
        for (int t = 0; t < T; ++t) acc[c][t] = _mm512_fmadd_ps(wv, _mm512_loadu_ps(xk + t * xs), acc[c][t]);
    };
    const int64_t n_full = std::min(s1, w.n_in / k_span);
    for (int64_t s = s0; s < n_full; ++s) {
        const uint8_t* sp = spans + s * k_span_bytes;
        plugin_support::prefetch_stream(sp);
        const __m512i v = _mm512_load_si512(sp);
        __m512 lv[groups_per_span];
        for (int gi = 0; gi < groups_per_span; ++gi) lv[gi] = levels(scales + 2 * (s * groups_per_span + gi));
        const float* xs0 = x + s * k_span;
        auto slot = [&](auto kc) {  // slot K holds block slot_block(K): weights 16 slot_block(K) ..
            constexpr int K = decltype(kc)::value, B = slot_block(K);
            chunk(span_weights<K>(v, lv[16 * B / G]), K % nch, xs0 + 16 * B);
        };
        slot(std::integral_constant<int, 0>{});
        slot(std::integral_constant<int, 1>{});
        slot(std::integral_constant<int, 2>{});
        slot(std::integral_constant<int, 3>{});
        slot(std::integral_constant<int, 4>{});
        slot(std::integral_constant<int, 5>{});
        slot(std::integral_constant<int, 6>{});
        slot(std::integral_constant<int, 7>{});
    }
    if (const int64_t rest = w.n_in - n_full * k_span; rest > 0 && n_full < s1) {  // a short last span (G < 128)
        const __m512i v = _mm512_load_si512(spans + n_full * k_span_bytes);
        for (int b = 0; b < rest / 16; ++b) {
            const int64_t j = n_full * k_span + 16 * b;
            const __m512 lv = levels(scales + 2 * (j / G));
            chunk(_mm512_permutexvar_ps(_mm512_srl_epi32(v, _mm_cvtsi64_si128(4 * block_slot(b))), lv), 0, x + j);
        }
    }
    for (int t = 0; t < T; ++t) {
        __m512 sum = acc[0][t];
        for (int c = 1; c < nch; ++c) sum = _mm512_add_ps(sum, acc[c][t]);
        y[t * ldy] = (add ? y[t * ldy] : 0.0f) + _mm512_reduce_add_ps(sum);
    }
}

// Rows [r0, r1) of every token. With several tokens whose activations overflow L1 (x of 4 tokens of 5632 floats is
// 90 KB), the rows are swept in chunks of 8 spans (1024 columns): the tokens' chunk (16 KB for 4) stays in L1 while
// the rows of the work item pass, partial sums added into y. One token keeps whole rows (its x stays in L1).
template <int G>
void decode_g(const matrix& w, const float* x, int64_t n_tokens, float* y, int64_t r0, int64_t r1) {
    const int64_t n_sp = n_spans(w.n_in);
    const bool chunked = n_tokens > 1 && w.n_in * std::min<int64_t>(n_tokens, 4) * 4 > 32768;
    const int64_t chunk_spans = chunked ? 8 : n_sp;
    for (int64_t s0 = 0; s0 < n_sp; s0 += chunk_spans) {
        const int64_t s1 = std::min(n_sp, s0 + chunk_spans);
        const bool add = s0 > 0;
        for (int64_t r = r0; r < r1; ++r) {
            int64_t t = 0;
            for (; t + 4 <= n_tokens; t += 4) {
                row_dot<G, 4>(w, r, x + t * w.n_in, w.n_in, y + t * w.n_out + r, w.n_out, s0, s1, add);
            }
            switch (n_tokens - t) {
                case 3:
                    row_dot<G, 3>(w, r, x + t * w.n_in, w.n_in, y + t * w.n_out + r, w.n_out, s0, s1, add);
                    break;
                case 2:
                    row_dot<G, 2>(w, r, x + t * w.n_in, w.n_in, y + t * w.n_out + r, w.n_out, s0, s1, add);
                    break;
                case 1:
                    row_dot<G, 1>(w, r, x + t * w.n_in, w.n_in, y + t * w.n_out + r, w.n_out, s0, s1, add);
                    break;
                default:
                    break;
            }
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

    // out[0..kc) = weights k0..k0 + kc of row r (k0 a multiple of 128, kc of g).
    static void dequant(const matrix& w, int64_t r, int64_t k0, int64_t kc, float* out) {
        const uint8_t* spans = w.spans(r);
        const float* scales = w.scales(r);
        for (int64_t j0 = k0; j0 < k0 + kc; j0 += k_span) {
            const __m512i v = _mm512_load_si512(spans + (j0 / k_span) * k_span_bytes);
            for (int b = 0; b < 8 && j0 + 16 * b < k0 + kc; ++b) {
                const int64_t j = j0 + 16 * b;
                const __m512 lv = levels(scales + 2 * (j / w.g));
                _mm512_storeu_ps(out + (j - k0),
                                 _mm512_permutexvar_ps(_mm512_srl_epi32(v, _mm_cvtsi64_si128(4 * block_slot(b))), lv));
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
