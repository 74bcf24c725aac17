// The AVX2 level (AVX2, FMA, F16C), for x86-64 CPUs without AVX-512: compiled with those flags only.
//
// Dot-product kernels: F32/F16/BF16 4 rows x 1 token (decode) or 3 rows x up to 4 tokens (8 floats per FMA, the same
// sums in the same order either way); Q8_0/Q4_0 4 rows x up to 4 tokens (vpmaddubsw on |w| and sign(w) * x for Q8_0;
// unsigned nibbles minus 8 * sum(x) for Q4_0); Q4_K and Q6_K one row x up to 4 tokens, vpmaddubsw + vpmaddwd with the
// scales. No float GEMM: every output's arithmetic is independent of the tile, so of the tokens beside it.
#include "kernels/cpu/matmul_kernels.h"

#if defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)

#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "kernels/cpu/float_tile_walk.h"
#include "kernels/cpu/q2_k_row.h"
#include "kernels/cpu/q3_k_row.h"
#include "kernels/cpu/q5_0_row.h"
#include "kernels/cpu/q5_k_row.h"
#include "kernels/fp16.h"
#include "kernels/ref/quants.h"

namespace troupe::cpu::detail {
namespace {

inline const uint8_t* row_ptr(const matmul_weight& w, int64_t r) {
    return static_cast<const uint8_t*>(w.data) + static_cast<size_t>(r) * w.row_stride;
}

inline float hsum(__m256 v) {
    const __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    const __m128 s2 = _mm_add_ps(s, _mm_movehl_ps(s, s));
    return _mm_cvtss_f32(_mm_add_ss(s2, _mm_movehdup_ps(s2)));
}

inline int32_t hsum_i32(__m256i v) {
    const __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    const __m128i s2 = _mm_add_epi32(s, _mm_unpackhi_epi64(s, s));
    return _mm_cvtsi128_si32(_mm_add_epi32(s2, _mm_shuffle_epi32(s2, 1)));
}

inline float fp16(uint16_t h) {
    return _cvtsh_ss(h);
}

// Requests the bytes [at, at + n) (n <= 256) into L1.
inline void prefetch_bytes(const uint8_t* at, size_t n) {
    _mm_prefetch(reinterpret_cast<const char*>(at), _MM_HINT_T0);
    if (n > 64) _mm_prefetch(reinterpret_cast<const char*>(at + 64), _MM_HINT_T0);
    if (n > 128) _mm_prefetch(reinterpret_cast<const char*>(at + 128), _MM_HINT_T0);
    if (n > 192) _mm_prefetch(reinterpret_cast<const char*>(at + 192), _MM_HINT_T0);
}

struct load_f32 {
    static constexpr size_t bytes = 4;
    static __m256 full(const uint8_t* p, int64_t k) { return _mm256_loadu_ps(reinterpret_cast<const float*>(p) + k); }
    static float one(const uint8_t* p, int64_t k) { return reinterpret_cast<const float*>(p)[k]; }
};

struct load_f16 {
    static constexpr size_t bytes = 2;
    static __m256 full(const uint8_t* p, int64_t k) {
        return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 2 * k)));
    }
    static float one(const uint8_t* p, int64_t k) { return fp16_to_fp32(reinterpret_cast<const uint16_t*>(p)[k]); }
};

struct load_bf16 {
    static constexpr size_t bytes = 2;
    static __m256 full(const uint8_t* p, int64_t k) {
        const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 2 * k));
        return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
    }
    static float one(const uint8_t* p, int64_t k) { return bf16_to_fp32(reinterpret_cast<const uint16_t*>(p)[k]); }
};

struct float_kernel {  // float_tile_walk.h's Kernel
    using f32 = load_f32;
    using f16 = load_f16;
    using bf16 = load_bf16;

    template <class L, int R, int T>
    static void tile(const uint8_t* w, size_t ws, const float* x, int64_t xs, int64_t n, float* y, int64_t ldy) {
        __m256 acc[R][T];
#pragma GCC unroll 16
        for (int i = 0; i < R * T; ++i) acc[i / T][i % T] = _mm256_setzero_ps();
        // F16 / BF16: the next tile's rows prefetched as this one runs (see q8_tile), R rows x 8 elements per step
        // walked linearly (on a Zen 1 EPYC, 2 threads, 110M shape: decode 17.5 -> 11.8 ms). F32 rows, read twice as
        // fast, keep the hardware prefetcher alone (85-99% of the read bandwidth without).
        const uint8_t* ahead = w + R * ws;
        constexpr size_t step_bytes = R * 8 * L::bytes;
        int64_t k = 0;
        for (; k + 8 <= n; k += 8) {
            if constexpr (L::bytes < 4) prefetch_bytes(ahead + (k / 8) * step_bytes, step_bytes);
            // R weight vectors, then one token's vector at a time: R x T accumulators + R + 1 registers (3 x 4: 16).
            __m256 wv[R];
#pragma GCC unroll 4
            for (int r = 0; r < R; ++r) wv[r] = L::full(w + r * ws, k);
#pragma GCC unroll 4
            for (int t = 0; t < T; ++t) {
                const __m256 xv = _mm256_loadu_ps(x + t * xs + k);
#pragma GCC unroll 4
                for (int r = 0; r < R; ++r) acc[r][t] = _mm256_fmadd_ps(wv[r], xv, acc[r][t]);
            }
        }
        // Unrolled: indexed at run time, the accumulators would live in memory (a store each per k step).
#pragma GCC unroll 4
        for (int r = 0; r < R; ++r) {
#pragma GCC unroll 4
            for (int t = 0; t < T; ++t) {
                float v = hsum(acc[r][t]);
                for (int64_t i = k; i < n; ++i) v += L::one(w + r * ws, i) * x[t * xs + i];
                y[t * ldy + r] = v;
            }
        }
    }
};

// A Q4_0 block's 32 weights as unsigned nibbles 0..15 in element order (low nibbles, then high).
inline __m256i q4_0_nibbles(const block_q4_0& b) {
    const __m128i q = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b.qs));
    return _mm256_and_si256(_mm256_inserti128_si256(_mm256_castsi128_si256(q), _mm_srli_epi16(q, 4), 1),
                            _mm256_set1_epi8(0x0f));
}

// Q8_0 (signed bytes, sign trick) or Q4_0 (nibbles 0..15, minus 8 * sum(x)) against Q8_0 activations.
// The rows after the tile's (the next tile's, R rows further) are prefetched as the tile runs, a block's worth of all
// R rows per block: the hardware prefetcher alone, following R interleaved streams that advance 34 bytes per block,
// left one Zen 1 core at 6.8 ns per block and row from DRAM against 3.4 from cache; with these requests 3.7.
template <class B, int R, int T>
void q8_tile(const uint8_t* w, size_t ws, const uint8_t* x, size_t xs, int64_t nb, float* y, int64_t ldy) {
    constexpr bool is_q8 = std::is_same_v<B, block_q8_0>;
    const uint8_t* ahead = w + R * ws;  // the next R rows (past the weight's end: a prefetch never faults)
    const __m256i ones16 = _mm256_set1_epi16(1);
    __m256 acc[R][T];  // Q8_0: 8 lanes of 4-element sums per output, as ggml's vec_dot
    float sum[R][T];   // Q4_0: one sum per output, as ggml's repacked Q4_0 kernels
#pragma GCC unroll 16
    for (int i = 0; i < R * T; ++i) {
        acc[i / T][i % T] = _mm256_setzero_ps();
        sum[i / T][i % T] = 0.0f;
    }
    for (int64_t b = 0; b < nb; ++b) {
        prefetch_bytes(ahead + b * R * sizeof(B), R * sizeof(B));
        __m256i xq[T], corr[T];
        float dx[T];
#pragma GCC unroll 4
        for (int t = 0; t < T; ++t) {
            const block_q8_0& xb = reinterpret_cast<const block_q8_0*>(x + t * xs)[b];
            xq[t] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xb.qs));
            dx[t] = fp16(xb.d);
            if constexpr (!is_q8) {
                corr[t] = _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_set1_epi8(8), xq[t]), ones16);
            }
        }
#pragma GCC unroll 4
        for (int r = 0; r < R; ++r) {
            const B& wb = reinterpret_cast<const B*>(w + r * ws)[b];
            const float dw = fp16(wb.d);
            if constexpr (is_q8) {
                const __m256i q = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(wb.qs));
                const __m256i u = _mm256_sign_epi8(q, q);
#pragma GCC unroll 4
                for (int t = 0; t < T; ++t) {
                    const __m256i s = _mm256_madd_epi16(_mm256_maddubs_epi16(u, _mm256_sign_epi8(xq[t], q)), ones16);
                    acc[r][t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s), _mm256_set1_ps(dw * dx[t]), acc[r][t]);
                }
            } else {
                const __m256i u = q4_0_nibbles(wb);
#pragma GCC unroll 4
                for (int t = 0; t < T; ++t) {
                    const __m256i s =
                        _mm256_sub_epi32(_mm256_madd_epi16(_mm256_maddubs_epi16(u, xq[t]), ones16), corr[t]);
                    sum[r][t] = std::fma(static_cast<float>(hsum_i32(s)), dw * dx[t], sum[r][t]);
                }
            }
        }
    }
    for (int r = 0; r < R; ++r) {
        for (int t = 0; t < T; ++t) y[t * ldy + r] = is_q8 ? hsum(acc[r][t]) : sum[r][t];
    }
}

// q8_tile's Q4_0 arithmetic for 4 rows at once: each row's block sum is an exact integer, so the four rows' 8-lane
// sums are reduced together (three hadds instead of four horizontal sums) and the block's four FMAs run as lanes of
// one: lane r computes fma(float(sumi_r), d_w,r * d_x, sum_r) exactly as q8_tile's scalar std::fma does. The 110M
// shape's Q4_0 matmuls on a Zen 1 EPYC (troupe_kernels_bench 2 128 2): prefill of 128 tokens 139 -> 176 tokens/s,
// decode 7.8 -> 7.6 ms (as many operations per block and row as Q8_0 now; both bound by them there).
template <int T>
void q4_0_tile4(const uint8_t* w, size_t ws, const uint8_t* x, size_t xs, int64_t nb, float* y, int64_t ldy) {
    constexpr int R = 4;
    const uint8_t* ahead = w + R * ws;
    const __m256i ones16 = _mm256_set1_epi16(1);
    __m128 sum[T];  // lane r: row r's sum
#pragma GCC unroll 4
    for (int t = 0; t < T; ++t) sum[t] = _mm_setzero_ps();
    for (int64_t b = 0; b < nb; ++b) {
        prefetch_bytes(ahead + b * R * sizeof(block_q4_0), R * sizeof(block_q4_0));
        __m256i u[R];
        alignas(16) float dw[R];
#pragma GCC unroll 4
        for (int r = 0; r < R; ++r) {
            const block_q4_0& wb = reinterpret_cast<const block_q4_0*>(w + r * ws)[b];
            dw[r] = fp16(wb.d);
            u[r] = q4_0_nibbles(wb);
        }
        const __m128 dw4 = _mm_load_ps(dw);
#pragma GCC unroll 4
        for (int t = 0; t < T; ++t) {
            const block_q8_0& xb = reinterpret_cast<const block_q8_0*>(x + t * xs)[b];
            const __m256i xq = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xb.qs));
            const __m256i corr = _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_set1_epi8(8), xq), ones16);
            __m256i s[R];
#pragma GCC unroll 4
            for (int r = 0; r < R; ++r) {
                s[r] = _mm256_sub_epi32(_mm256_madd_epi16(_mm256_maddubs_epi16(u[r], xq), ones16), corr);
            }
            // Per 128-bit half: [row 0, row 1, row 2, row 3] partial sums; the halves added give the totals.
            const __m256i h = _mm256_hadd_epi32(_mm256_hadd_epi32(s[0], s[1]), _mm256_hadd_epi32(s[2], s[3]));
            const __m128i totals = _mm_add_epi32(_mm256_castsi256_si128(h), _mm256_extracti128_si256(h, 1));
            sum[t] = _mm_fmadd_ps(_mm_cvtepi32_ps(totals), _mm_mul_ps(dw4, _mm_set1_ps(fp16(xb.d))), sum[t]);
        }
    }
#pragma GCC unroll 4
    for (int t = 0; t < T; ++t) {
        alignas(16) float out[R];
        _mm_store_ps(out, sum[t]);
        for (int r = 0; r < R; ++r) y[t * ldy + r] = out[r];
    }
}

// Q4_K / Q6_K against Q8_K (one row, T tokens): ggml's AVX2 recipe bit for bit (kernels/ref/kquant_dot.h):
// vpmaddubsw of unsigned weights with the activation bytes, vpmaddwd with the sub-block scale, 8 int32 lane sums
// per super-block accumulated by FMA with d_x * d_w; Q4_K's mins in a 4-lane chain over pairs of sub-blocks;
// Q6_K's -32 offset subtracted per pair of products (q x - 32 x), as ggml does.
// `ahead`: a row further on, prefetched as this one runs (as q8_tile does).
template <int T>
void q4_k_row(const block_q4_k* w, const uint8_t* ahead, const uint8_t* x, size_t xs, int64_t nb, float* y,
              int64_t ldy) {
    const __m256i low4 = _mm256_set1_epi8(0x0f);
    __m256 acc[T];
    __m128 acc_m[T];  // [4 lanes] -d_x * dmin * (mins . bsums) per pair of sub-blocks
    for (int t = 0; t < T; ++t) {
        acc[t] = _mm256_setzero_ps();
        acc_m[t] = _mm_setzero_ps();
    }
    for (int64_t b = 0; b < nb; ++b) {
        prefetch_bytes(ahead + b * sizeof(block_q4_k), sizeof(block_q4_k));
        const block_q4_k& wb = w[b];
        uint32_t s[3];
        std::memcpy(s, wb.scales, 12);
        const uint32_t words[4] = {s[0] & 0x3f3f3f3fu, (s[2] & 0x0f0f0f0fu) | ((s[0] >> 2) & 0x30303030u),
                                   s[1] & 0x3f3f3f3fu, ((s[2] >> 4) & 0x0f0f0f0fu) | ((s[1] >> 2) & 0x30303030u)};
        uint8_t sm[16];  // sc0..sc7, m0..m7
        std::memcpy(sm, words, 16);
        const float dw = fp16(wb.d), dminw = fp16(wb.dmin);
        const __m128i mins = _mm_cvtepu8_epi16(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(sm + 8)));
        __m256i sum[T];
        for (int t = 0; t < T; ++t) sum[t] = _mm256_setzero_si256();
#pragma GCC unroll 4
        for (int c = 0; c < 4; ++c) {
            const __m256i q = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(wb.qs + 32 * c));
            const __m256i lo = _mm256_and_si256(q, low4);
            const __m256i hi = _mm256_and_si256(_mm256_srli_epi16(q, 4), low4);
            const __m256i s_lo = _mm256_set1_epi16(sm[2 * c]), s_hi = _mm256_set1_epi16(sm[2 * c + 1]);
#pragma GCC unroll 4
            for (int t = 0; t < T; ++t) {
                const int8_t* xq = reinterpret_cast<const block_q8_k*>(x + t * xs)[b].qs + 64 * c;
                const __m256i p_lo = _mm256_maddubs_epi16(lo, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xq)));
                const __m256i p_hi =
                    _mm256_maddubs_epi16(hi, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xq + 32)));
                sum[t] = _mm256_add_epi32(
                    sum[t], _mm256_add_epi32(_mm256_madd_epi16(p_lo, s_lo), _mm256_madd_epi16(p_hi, s_hi)));
            }
        }
#pragma GCC unroll 4
        for (int t = 0; t < T; ++t) {
            const block_q8_k& xb = reinterpret_cast<const block_q8_k*>(x + t * xs)[b];
            const __m256i bs = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xb.bsums));
            const __m128i bsum32 = _mm_hadd_epi16(_mm256_castsi256_si128(bs), _mm256_extracti128_si256(bs, 1));
            const __m128i msum = _mm_madd_epi16(mins, bsum32);
            acc_m[t] = _mm_fmadd_ps(_mm_set1_ps(-xb.d * dminw), _mm_cvtepi32_ps(msum), acc_m[t]);
            acc[t] = _mm256_fmadd_ps(_mm256_set1_ps(xb.d * dw), _mm256_cvtepi32_ps(sum[t]), acc[t]);
        }
    }
    for (int t = 0; t < T; ++t) {
        const __m128 m = _mm_add_ps(acc_m[t], _mm_movehl_ps(acc_m[t], acc_m[t]));
        y[t * ldy] = hsum(acc[t]) + _mm_cvtss_f32(_mm_add_ss(m, _mm_movehdup_ps(m)));
    }
}

template <int T>
void q6_k_row(const block_q6_k* w, const uint8_t* ahead, const uint8_t* x, size_t xs, int64_t nb, float* y,
              int64_t ldy) {
    const __m256i low4 = _mm256_set1_epi8(0x0f), bits45 = _mm256_set1_epi8(0x30);
    __m256 acc[T];
    for (int t = 0; t < T; ++t) acc[t] = _mm256_setzero_ps();
    for (int64_t b = 0; b < nb; ++b) {
        prefetch_bytes(ahead + b * sizeof(block_q6_k), sizeof(block_q6_k));
        const block_q6_k& wb = w[b];
        const float dw = fp16(wb.d);
        const __m256i k32 = _mm256_set1_epi8(32);
        __m256i sum[T];
        for (int t = 0; t < T; ++t) sum[t] = _mm256_setzero_si256();
#pragma GCC unroll 2
        for (int half = 0; half < 2; ++half) {
            const __m256i l0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(wb.ql + 64 * half));
            const __m256i l1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(wb.ql + 64 * half + 32));
            const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(wb.qh + 32 * half));
            // Elements 128 half + 32 k + l, k = 0..3.
            const __m256i q[4] = {
                _mm256_or_si256(_mm256_and_si256(l0, low4), _mm256_and_si256(_mm256_slli_epi16(h, 4), bits45)),
                _mm256_or_si256(_mm256_and_si256(l1, low4), _mm256_and_si256(_mm256_slli_epi16(h, 2), bits45)),
                _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l0, 4), low4), _mm256_and_si256(h, bits45)),
                _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l1, 4), low4),
                                _mm256_and_si256(_mm256_srli_epi16(h, 2), bits45))};
#pragma GCC unroll 4
            for (int k = 0; k < 4; ++k) {
                const int j = 8 * half + 2 * k;  // sub-blocks j, j + 1
                const __m256i sc = _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_set1_epi16(wb.scales[j])),
                                                           _mm_set1_epi16(wb.scales[j + 1]), 1);
#pragma GCC unroll 4
                for (int t = 0; t < T; ++t) {
                    const int8_t* xq = reinterpret_cast<const block_q8_k*>(x + t * xs)[b].qs + 128 * half + 32 * k;
                    const __m256i xv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xq));
                    const __m256i p = _mm256_sub_epi16(_mm256_maddubs_epi16(q[k], xv), _mm256_maddubs_epi16(k32, xv));
                    sum[t] = _mm256_add_epi32(sum[t], _mm256_madd_epi16(p, sc));
                }
            }
        }
#pragma GCC unroll 4
        for (int t = 0; t < T; ++t) {
            const float dx = reinterpret_cast<const block_q8_k*>(x + t * xs)[b].d;
            acc[t] = _mm256_fmadd_ps(_mm256_set1_ps(dx * dw), _mm256_cvtepi32_ps(sum[t]), acc[t]);
        }
    }
    for (int t = 0; t < T; ++t) y[t * ldy] = hsum(acc[t]);
}

// Float weights, one tile of R rows x T tokens: decode takes 4 x 1 (through tile), several tokens 3 x 4
// (float_tile_walk.h: 12 accumulators, 3 weight vectors and one token's, all 16 registers). Each output's arithmetic is
// float_kernel::tile's at every tile shape, so a token's outputs do not depend on the tokens beside it (a verified
// draft, a batch) and equal a one-token decode's bit for bit. This replaced a packed float GEMM (6 tokens x 16 rows),
// whose sums differ: with its k block at 512 instead of 256, five spec plugins parted from plain decoding on
// rand10M-F16 (spec_greedy). troupe_kernels_bench 2 128, the same session: F32 prefill 300-311 tokens/s here against
// the GEMM's 287-294, F16 220-226 against 248-294, BF16 259-265 against 248-292. Float weights over several tokens:
// float_tile_walk.h's 3-row x 4-token tiles of float_kernel::tile.
using float_tiles_here = float_tiles<float_kernel>;

template <int R, int T>
void tile(const matmul_weight& w, prepared_x x, float* y, int64_t ldy, int64_t r, int64_t t0) {
    const uint8_t* wr = row_ptr(w, r);
    const auto* xt = static_cast<const uint8_t*>(x.data) + static_cast<size_t>(t0) * x.stride;
    float* yt = y + t0 * ldy + r;
    const int64_t n = w.n_in;
    switch (w.type) {
        case ggml_type::f32:
        case ggml_type::f16:
        case ggml_type::bf16:
            float_tiles_here::at<R, T>(w, x, y, ldy, r, t0);
            break;
        case ggml_type::q8_0:
            q8_tile<block_q8_0, R, T>(wr, w.row_stride, xt, x.stride, n / qk8_0, yt, ldy);
            break;
        case ggml_type::q4_0:
            if constexpr (R == 4) {
                q4_0_tile4<T>(wr, w.row_stride, xt, x.stride, n / qk4_0, yt, ldy);
            } else {
                q8_tile<block_q4_0, R, T>(wr, w.row_stride, xt, x.stride, n / qk4_0, yt, ldy);
            }
            break;
        case ggml_type::q5_0:
            if constexpr (T == 1 && R > 1) {  // decode: the rows' FMA chains side by side (q5_0_rows)
                q5_0_rows<R>(wr, w.row_stride, wr + R * w.row_stride, xt, n / qk5_0, yt);
            } else {
                for (int i = 0; i < R; ++i) {
                    q5_0_row<T>(reinterpret_cast<const block_q5_0*>(wr + i * w.row_stride), wr + (i + R) * w.row_stride,
                                xt, x.stride, n / qk5_0, yt + i, ldy);
                }
            }
            break;
        case ggml_type::q4_k:
            for (int i = 0; i < R; ++i) {
                q4_k_row<T>(reinterpret_cast<const block_q4_k*>(wr + i * w.row_stride), wr + (i + R) * w.row_stride, xt,
                            x.stride, n / qk_k, yt + i, ldy);
            }
            break;
        case ggml_type::q2_k:
            for (int i = 0; i < R; ++i) {
                q2_k_row<T>(reinterpret_cast<const block_q2_k*>(wr + i * w.row_stride), wr + (i + R) * w.row_stride, xt,
                            x.stride, n / qk_k, yt + i, ldy);
            }
            break;
        case ggml_type::q3_k:
            for (int i = 0; i < R; ++i) {
                q3_k_row<T>(reinterpret_cast<const block_q3_k*>(wr + i * w.row_stride), wr + (i + R) * w.row_stride, xt,
                            x.stride, n / qk_k, yt + i, ldy);
            }
            break;
        case ggml_type::q5_k:
            for (int i = 0; i < R; ++i) {
                q5_k_row<T>(reinterpret_cast<const block_q5_k*>(wr + i * w.row_stride), wr + (i + R) * w.row_stride, xt,
                            x.stride, n / qk_k, yt + i, ldy);
            }
            break;
        case ggml_type::q6_k:
            for (int i = 0; i < R; ++i) {
                q6_k_row<T>(reinterpret_cast<const block_q6_k*>(wr + i * w.row_stride), wr + (i + R) * w.row_stride, xt,
                            x.stride, n / qk_k, yt + i, ldy);
            }
            break;
        default:
            break;  // matmul() admits only the types above
    }
}

template <int R>
void tile_tokens(const matmul_weight& w, prepared_x x, float* y, int64_t ldy, int64_t r, int64_t t0, int64_t nt) {
    switch (nt) {
        case 1:
            tile<R, 1>(w, x, y, ldy, r, t0);
            break;
        case 2:
            tile<R, 2>(w, x, y, ldy, r, t0);
            break;
        case 3:
            tile<R, 3>(w, x, y, ldy, r, t0);
            break;
        default:
            tile<R, 4>(w, x, y, ldy, r, t0);
            break;
    }
}

void rows_avx2(const matmul_weight& w, prepared_x x, float* y, int64_t ldy, int64_t n_tokens, int64_t r0, int64_t r1) {
    const bool float_weights = w.type == ggml_type::f32 || w.type == ggml_type::f16 || w.type == ggml_type::bf16;
    if (float_weights && n_tokens >= 2) {
        float_rows_in_tiles<float_tiles_here>(w, x, y, ldy, n_tokens, r0, r1);
        return;
    }
    int64_t r = r0;
    for (; r + 4 <= r1; r += 4) {
        for (int64_t t0 = 0; t0 < n_tokens; t0 += 4) {
            tile_tokens<4>(w, x, y, ldy, r, t0, std::min<int64_t>(4, n_tokens - t0));
        }
    }
    for (; r < r1; ++r) {
        for (int64_t t0 = 0; t0 < n_tokens; t0 += 4) {
            tile_tokens<1>(w, x, y, ldy, r, t0, std::min<int64_t>(4, n_tokens - t0));
        }
    }
}

void round_f16_avx2(const float* x, float* y, int64_t n) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        const __m128i h = _mm256_cvtps_ph(_mm256_loadu_ps(x + i), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
        _mm256_storeu_ps(y + i, _mm256_cvtph_ps(h));
    }
    round_f16_scalar(x + i, y + i, n - i);
}

// ref::quantize_activations_q8_0 eight floats at a time (the same operations on each element: the block's largest
// |x|, x * (127 / amax) rounded half to even), bit for bit; the scalar version was ~3% of a 110M decode step.
void quantize_q8_0_avx2(const float* x, block_q8_0* y, int64_t n) {
    const __m256 sign_bit = _mm256_set1_ps(-0.0f);
    const __m256i dword_order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);  // undoes the packs' lane interleave
    for (int64_t b = 0; b < n / qk8_0; ++b) {
        __m256 v[4];
        __m256 m = _mm256_setzero_ps();
#pragma GCC unroll 4
        for (int i = 0; i < 4; ++i) {
            v[i] = _mm256_loadu_ps(x + b * qk8_0 + 8 * i);
            m = _mm256_max_ps(_mm256_andnot_ps(sign_bit, v[i]), m);  // a NaN |x| keeps m, as std::max in ref
        }
        __m128 h = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
        h = _mm_max_ps(h, _mm_movehl_ps(h, h));
        h = _mm_max_ss(h, _mm_movehdup_ps(h));
        const float amax = _mm_cvtss_f32(h);
        const float d = amax / 127.0f;
        const float id = amax != 0.0f ? 127.0f / amax : 0.0f;
        y[b].d = fp32_to_fp16(d);
        const __m256 s = _mm256_set1_ps(id);
        __m256i q[4];
#pragma GCC unroll 4
        for (int i = 0; i < 4; ++i) {
            q[i] = _mm256_cvtps_epi32(
                _mm256_round_ps(_mm256_mul_ps(v[i], s), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
        }
        const __m256i bytes = _mm256_packs_epi16(_mm256_packs_epi32(q[0], q[1]), _mm256_packs_epi32(q[2], q[3]));
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(y[b].qs), _mm256_permutevar8x32_epi32(bytes, dword_order));
    }
}

}  // namespace

const matmul_kernels& avx2_kernels() {
    static const matmul_kernels k{
        .rows = rows_avx2,
        .gemm = nullptr,  // no float GEMM: see float_kernel (float weights) and the next comment
        .gemm_min_tokens_float = INT64_MAX,
        // Quantized weights never take a float GEMM here either: its sums are not the dot kernels', so a token's logits
        // would depend on how many tokens share its step (a verified draft tree, a batch) and speculation would
        // change greedy text. The dot kernels' order does not depend on the tile. On a Zen 1 EPYC (2 threads,
        // troupe_kernels_bench 2 128) the int8 dot kernels also prefill faster than the float GEMM did: Q8_0 169
        // against 132 tokens/s, Q4_0 143 against 136; the float-activation recipe (opt-in) gives up 12-35% of its
        // prefill (Q8_0 130 against 148, Q4_K 91 against 141).
        .gemm_min_tokens_q8 = INT64_MAX,
        .gemm_rows = 0,
        .gemm_mr = 0,
        .gemm_kc = 0,
        .gemm_unordered = nullptr,
        .rows_float_act = rows_float_act_avx2,
        .gemm_min_tokens_float_act = INT64_MAX,
        .gemm_q8 = nullptr,
        .gemm_q8_rows = 0,
        .quantize_q8_0 = quantize_q8_0_avx2,
        .quantize_q8_k = ref::quantize_row_q8_k,
        .round_f16 = round_f16_avx2,
        .round_bf16 = round_bf16_scalar,
        .q8_0_values = q8_0_values_scalar,
        .q8_k_values = q8_k_values_scalar,
        .gemm_kquant = gemm_kquant_avx2,
        .gemm_min_tokens_q4_k = INT64_MAX,  // as fast as the dot kernels here (the same operations per chunk)
        .gemm_min_tokens_q6_k = 4,
        .gemm_kquant_rows = 16,
    };
    return k;
}

}  // namespace troupe::cpu::detail

#else  // built without AVX2 flags (another architecture): the level is never selected

namespace troupe::cpu::detail {
const matmul_kernels& avx2_kernels() {
    return scalar_kernels();
}
}  // namespace troupe::cpu::detail

#endif
