// quant/w4a16's decode with bf16 activations at the AVX-512 BF16 level (F, BW, BF16; its own flags): the recipe of
// w4a16_bf16.h. Per span of 128 codes (one aligned 64-byte load), 4 x 32 codes become bf16 128 + q by one shift and
// one and-or (vpternlogd) each, in the pair order of w4a16_format.h's 16-bit words, and vdpbf16ps multiplies them
// with the tokens' rounded activations, 32 products per instruction, into one float accumulator per group; one FMA
// per group and token scales it by d. The (m - 128 d) S terms are a short dot product per row at the end.
#include "w4a16_bf16.h"

#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512BF16__)

#include <immintrin.h>

#include <algorithm>
#include <type_traits>

#include "plugins/common/prefetch.h"

namespace troupe::w4a16 {
namespace {

// Word 2i <- word i, word 2i + 1 <- word 16 + i: the pairs (x[i], x[16 + i]) of 32 activations.
alignas(64) constexpr uint16_t k_pair_order[32] = {0, 16, 1, 17, 2,  18, 3,  19, 4,  20, 5,  21, 6,  22, 7,  23,
                                                   8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31};

// 16 bf16 words as floats (bf16 bits << 16: exactly the rounded values).
inline __m512 widen(__m256i h) {
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

void make_activations_avx512(const float* x, int64_t n_tokens, int64_t n_in, int g, uint16_t* xb, float* u) {
    const __m512i pairs = _mm512_load_si512(k_pair_order);
    const int64_t u_stride = bf16_u_stride(n_in, g);
    for (int64_t t = 0; t < n_tokens; ++t) {
        const float* xt = x + t * n_in;
        uint16_t* bt = xb + t * n_in;
        float* ut = u + t * u_stride;
        std::fill(ut, ut + u_stride, 0.0f);
        __m512 sum = _mm512_setzero_ps();
        for (int64_t c = 0; c < n_in / 32; ++c) {
            // words 0..15: x[32c..32c + 16) rounded, words 16..31: x[32c + 16..32c + 32)
            const __m512i h = reinterpret_cast<__m512i>(
                _mm512_cvtne2ps_pbh(_mm512_loadu_ps(xt + 32 * c + 16), _mm512_loadu_ps(xt + 32 * c)));
            _mm512_store_si512(bt + 32 * c, _mm512_permutexvar_epi16(pairs, h));
            sum = _mm512_add_ps(
                sum, _mm512_add_ps(widen(_mm512_castsi512_si256(h)), widen(_mm512_extracti64x4_epi64(h, 1))));
            if ((32 * (c + 1)) % g == 0) {
                const float s = _mm512_reduce_add_ps(sum);
                const int64_t gi = 32 * c / g;
                ut[2 * gi] = -128.0f * s;
                ut[2 * gi + 1] = s;
                sum = _mm512_setzero_ps();
            }
        }
    }
}

// Codes 32C..32C + 31 of a span whose codes are v, as bf16 128 + q in the pair order (w4a16_format.h).
template <int C>
inline __m512bh words(__m512i v) {
    const __m512i bias = _mm512_set1_epi16(0x4300);
    if constexpr (C == 3) return reinterpret_cast<__m512bh>(_mm512_or_si512(_mm512_srli_epi16(v, 12), bias));
    const __m512i s = C == 0 ? v : _mm512_srli_epi16(v, 4 * C);
    return reinterpret_cast<__m512bh>(_mm512_ternarylogic_epi32(s, _mm512_set1_epi16(0x000f), bias, 0xea));  // a&b|c
}

// y[t * ldy + i] (+)= row r + i . bf16(x[t0 + t]) for R rows (1 or 2) and T tokens over spans [s0, s1); the
// (m - 128 d) S terms on the first sweep (s0 == 0). Two rows share each load of the activations (several tokens:
// the loads, not the dot products, would bound the loop). The sums of d S' run in n_chains accumulators per row and
// token (an FMA's latency per group would otherwise bound a one-row one-token loop).
template <int G, int R, int T>
void rows_dot(const matrix& w, int64_t r, const bf16_activations& a, int64_t t0, float* y, int64_t ldy, int64_t s0,
              int64_t s1) {
    constexpr int per_group = G / 32;  // word vectors per group
    constexpr int groups_per_span = static_cast<int>(k_span) / G;
    constexpr int n_chains = R * T == 1 ? 4 : R * T <= 4 ? 2 : 1;
    const uint16_t* x0 = a.x + t0 * a.n_in;
    __m512 chains[n_chains][R][T];
    for (int c = 0; c < n_chains; ++c) {
        for (int i = 0; i < R; ++i) {
            for (int t = 0; t < T; ++t) chains[c][i][t] = _mm512_setzero_ps();
        }
    }
    // S' of one group (word vectors wv[i][0..per_group) of row r + i, activations from word xk) for every row and
    // token, times the rows' d (d[i]) into tot.
    auto group = [&](__m512(*tot)[T], const __m512bh(*wv)[4], int v0, const uint16_t* xk, const float* const* d) {
        __m512 acc[R][T];
#pragma GCC unroll 4
        for (int c = 0; c < per_group; ++c) {
#pragma GCC unroll 4
            for (int t = 0; t < T; ++t) {
                const __m512bh xv = reinterpret_cast<__m512bh>(_mm512_load_si512(xk + t * a.n_in + 32 * c));
#pragma GCC unroll 2
                for (int i = 0; i < R; ++i) {
                    acc[i][t] = _mm512_dpbf16_ps(c == 0 ? _mm512_setzero_ps() : acc[i][t], wv[i][v0 + c], xv);
                }
            }
        }
#pragma GCC unroll 2
        for (int i = 0; i < R; ++i) {
            const __m512 dv = _mm512_set1_ps(*d[i]);
#pragma GCC unroll 4
            for (int t = 0; t < T; ++t) tot[i][t] = _mm512_fmadd_ps(dv, acc[i][t], tot[i][t]);
        }
    };
    // Span s; the parity of s (P) and the group pick the accumulators.
    auto span = [&](auto parity, int64_t s, int n_groups) {
        constexpr int P = decltype(parity)::value;
        __m512bh wv[R][4];
#pragma GCC unroll 2
        for (int i = 0; i < R; ++i) {
            const uint8_t* sp = w.spans(r + i) + s * k_span_bytes;
            plugin_support::prefetch_stream(sp);
            __m512i v = _mm512_load_si512(sp);
            asm("" : "+v"(v));  // one load of the codes: else gcc folds a load into each shift (the load ports limit)
            wv[i][0] = words<0>(v);
            wv[i][1] = words<1>(v);
            wv[i][2] = words<2>(v);
            wv[i][3] = words<3>(v);
        }
#pragma GCC unroll 4
        for (int gi = 0; gi < groups_per_span; ++gi) {
            if (gi < n_groups) {
                const float* d[R];
                for (int i = 0; i < R; ++i) d[i] = w.scales(r + i) + 2 * (s * k_span / G + gi);
                group(chains[(P * groups_per_span + gi) % n_chains], wv, gi * per_group, x0 + s * k_span + gi * G, d);
            }
        }
    };
    const int64_t n_full = std::min(s1, w.n_in / k_span);
    int64_t s = s0;
    for (; s + 2 <= n_full; s += 2) {
        span(std::integral_constant<int, 0>{}, s, groups_per_span);
        span(std::integral_constant<int, 1>{}, s + 1, groups_per_span);
    }
    if (s < n_full) span(std::integral_constant<int, 0>{}, s, groups_per_span);
    if (const int64_t rest = w.n_in - n_full * k_span; rest > 0 && n_full < s1) {  // a short last span (G < 128)
        span(std::integral_constant<int, 1>{}, n_full, static_cast<int>(rest / G));
    }
    __m512 tot[R][T];
    for (int i = 0; i < R; ++i) {
        for (int t = 0; t < T; ++t) {
            tot[i][t] = chains[0][i][t];
            for (int c = 1; c < n_chains; ++c) tot[i][t] = _mm512_add_ps(tot[i][t], chains[c][i][t]);
        }
    }
    if (s0 == 0) {  // sum_g (d_g, m_g) . (-128 S_g, S_g): the rows' scales against the tokens' u
        const int64_t n_scales = 2 * (w.n_in / G);
        for (int64_t c = 0; c < n_scales; c += 16) {
            const __mmask16 k = n_scales - c >= 16 ? 0xffff : static_cast<__mmask16>((1u << (n_scales - c)) - 1);
            for (int i = 0; i < R; ++i) {
                const __m512 sc = _mm512_maskz_loadu_ps(k, w.scales(r + i) + c);
#pragma GCC unroll 4
                for (int t = 0; t < T; ++t) {
                    tot[i][t] = _mm512_fmadd_ps(sc, _mm512_load_ps(a.u + (t0 + t) * a.u_stride + c), tot[i][t]);
                }
            }
        }
    }
    for (int i = 0; i < R; ++i) {
        for (int t = 0; t < T; ++t) {
            y[t * ldy + i] = (s0 > 0 ? y[t * ldy + i] : 0.0f) + _mm512_reduce_add_ps(tot[i][t]);
        }
    }
}

// Rows r, r + R - 1 for every token, 4 tokens at a time.
template <int G, int R>
void token_passes(const matrix& w, const bf16_activations& a, float* y, int64_t r, int64_t s0, int64_t s1) {
    int64_t t = 0;
    for (; t + 4 <= a.n_tokens; t += 4) rows_dot<G, R, 4>(w, r, a, t, y + t * w.n_out + r, w.n_out, s0, s1);
    switch (a.n_tokens - t) {
        case 3:
            return rows_dot<G, R, 3>(w, r, a, t, y + t * w.n_out + r, w.n_out, s0, s1);
        case 2:
            return rows_dot<G, R, 2>(w, r, a, t, y + t * w.n_out + r, w.n_out, s0, s1);
        case 1:
            return rows_dot<G, R, 1>(w, r, a, t, y + t * w.n_out + r, w.n_out, s0, s1);
        default:
            return;
    }
}

// Rows [r0, r1) of every token, 4 tokens and (for several tokens) 2 rows per pass. Several tokens whose activations
// overflow L1 (4 tokens of 5632 bf16 are 45 KB) sweep the rows in chunks of 8 spans (1024 columns), partial sums added
// into y.
template <int G>
void decode_g(const matrix& w, const bf16_activations& a, float* y, int64_t r0, int64_t r1) {
    const int64_t n_tokens = a.n_tokens;
    const int64_t n_sp = n_spans(w.n_in);
    const bool chunked = n_tokens > 1 && w.n_in * std::min<int64_t>(n_tokens, 4) * 2 > 32768;
    const int64_t chunk_spans = chunked ? 8 : n_sp;
    for (int64_t s0 = 0; s0 < n_sp; s0 += chunk_spans) {
        const int64_t s1 = std::min(n_sp, s0 + chunk_spans);
        int64_t r = r0;
        if (n_tokens > 1) {  // pairs of rows
            for (; r + 2 <= r1; r += 2) token_passes<G, 2>(w, a, y, r, s0, s1);
        }
        for (; r < r1; ++r) token_passes<G, 1>(w, a, y, r, s0, s1);
    }
}

void decode_avx512_bf16(const matrix& w, const bf16_activations& a, float* y, int64_t r0, int64_t r1) {
    switch (w.g) {
        case 32:
            return decode_g<32>(w, a, y, r0, r1);
        case 64:
            return decode_g<64>(w, a, y, r0, r1);
        default:
            return decode_g<128>(w, a, y, r0, r1);
    }
}

const bf16_kernel_set k_avx512_bf16 = {"avx512_bf16", make_activations_avx512, decode_avx512_bf16};

}  // namespace

const bf16_kernel_set* avx512_bf16_kernels() {
    return &k_avx512_bf16;
}

}  // namespace troupe::w4a16

#else

namespace troupe::w4a16 {
const bf16_kernel_set* avx512_bf16_kernels() {
    return nullptr;
}
}  // namespace troupe::w4a16

#endif
