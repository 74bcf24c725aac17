// The float-activation recipe at the AVX-512 level (decode): one weight row x up to 4 tokens per pass, the row
// streamed once. Each 16-element chunk of a weight block is widened in registers (bytes -> int32 -> float):
//   - Q4_K / Q6_K: scaled as the reference dequantizes it (matmul_float_act_blocks.h), then multiplied with 16
//     float activations by FMA, four accumulator chains per token;
//   - Q8_0 / Q4_0 (one scale per 32): p = q . x per token first, then acc += d * p: one multiply per block instead
//     of one per weight (equal to the dequantized product but for rounding). One core is bound by its vector
//     units here, not by memory (about 28 G weights/s per core on Zen 5 for Q8_0, 30 GB/s of Q8_0 rows), so
//     the multiplies saved are time saved.
// Weight bytes are prefetched ahead like the integer kernels (TROUPE_PF).
#include "kernels/cpu/matmul_kernels.h"

#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__) && defined(__AVX512VNNI__)

#include <algorithm>
#include <cstdlib>

#include "kernels/cpu/matmul_float_act_blocks.h"

namespace troupe::cpu::detail {
namespace {

inline float fp16(uint16_t h) {
    return _cvtsh_ss(h);
}

const int k_prefetch_distance = std::getenv("TROUPE_PF") ? std::atoi(std::getenv("TROUPE_PF")) : 8192;

// Prefetches the cache lines of block *p shifted by pf bytes (pf: k_prefetch_distance, read once per row).
template <class B>
inline void prefetch_block(const B* p, int pf) {
    if (pf == 0) return;
    const char* q = reinterpret_cast<const char*>(p) + pf;
    for (size_t i = 0; i < sizeof(B); i += 64) _mm_prefetch(q + i, _MM_HINT_T0);
}

inline __m512 widen(__m128i q) {
    return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(q));
}

// acc[t] += wv * x[t * xs + 0..15]
template <int T>
inline void fma16(__m512 (&acc)[T], __m512 wv, const float* x, int64_t xs) {
#pragma GCC unroll 4
    for (int t = 0; t < T; ++t) acc[t] = _mm512_fmadd_ps(wv, _mm512_loadu_ps(x + t * xs), acc[t]);
}

// Four accumulator chains per token (a0..a3: chunks of a pair of blocks, or of two sub-blocks of a k-quant) keep
// four FMAs in flight per token, so one token is bound by the dequantization, not by the FMA latency. (Separate
// named arrays, indexed by constants only, so the compiler keeps them all in registers.)
#define TROUPE_FA_CHAINS               \
    __m512 a0[T], a1[T], a2[T], a3[T]; \
    for (int t = 0; t < T; ++t) a0[t] = a1[t] = a2[t] = a3[t] = _mm512_setzero_ps()

template <int T>
inline void store4(const __m512 (&a0)[T], const __m512 (&a1)[T], const __m512 (&a2)[T], const __m512 (&a3)[T], float* y,
                   int64_t ldy) {
    for (int t = 0; t < T; ++t) {
        y[t * ldy] = _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(a0[t], a1[t]), _mm512_add_ps(a2[t], a3[t])));
    }
}

// One block, two chunks of 16: p = q0 . x0 + q1 . x1 per token, then acc += d * p (the block's scale once per block
// and token instead of once per weight: d * sum(q x) equals sum((d q) x) but for rounding).
template <int T>
inline void scaled_block(__m512 q0, __m512 q1, float d, const float* xb, int64_t xs, __m512 (&acc)[T]) {
    const __m512 dv = _mm512_set1_ps(d);
#pragma GCC unroll 4
    for (int t = 0; t < T; ++t) {
        const __m512 p =
            _mm512_fmadd_ps(q1, _mm512_loadu_ps(xb + t * xs + 16), _mm512_mul_ps(q0, _mm512_loadu_ps(xb + t * xs)));
        acc[t] = _mm512_fmadd_ps(dv, p, acc[t]);
    }
}

template <int T>
inline void q8_0_block(const block_q8_0& wb, const float* xb, int64_t xs, __m512 (&acc)[T]) {
    scaled_block<T>(widen(load16(wb.qs)), widen(load16(wb.qs + 16)), fp16(wb.d), xb, xs, acc);
}

template <int T>
void q8_0_row(const block_q8_0* w, const float* x, int64_t xs, int64_t nb, float* y, int64_t ldy) {
    TROUPE_FA_CHAINS;
    const int pf = k_prefetch_distance;
    int64_t b = 0;
    for (; b + 2 <= nb; b += 2) {  // two blocks per step into chains a0 and a1 (a2, a3 unused)
        prefetch_block(w + b, pf);
        q8_0_block<T>(w[b], x + b * qk8_0, xs, a0);
        q8_0_block<T>(w[b + 1], x + (b + 1) * qk8_0, xs, a1);
    }
    if (b < nb) q8_0_block<T>(w[b], x + b * qk8_0, xs, a0);
    store4<T>(a0, a1, a2, a3, y, ldy);
}

template <int T>
inline void q4_0_block(const block_q4_0& wb, const float* xb, int64_t xs, __m512 (&acc)[T]) {
    scaled_block<T>(widen(q4_0_chunk(wb, 0)), widen(q4_0_chunk(wb, 1)), fp16(wb.d), xb, xs, acc);
}

template <int T>
void q4_0_row(const block_q4_0* w, const float* x, int64_t xs, int64_t nb, float* y, int64_t ldy) {
    TROUPE_FA_CHAINS;
    const int pf = k_prefetch_distance;
    int64_t b = 0;
    for (; b + 2 <= nb; b += 2) {  // two blocks per step into chains a0 and a1 (a2, a3 unused)
        prefetch_block(w + b, pf);
        q4_0_block<T>(w[b], x + b * qk4_0, xs, a0);
        q4_0_block<T>(w[b + 1], x + (b + 1) * qk4_0, xs, a1);
    }
    if (b < nb) q4_0_block<T>(w[b], x + b * qk4_0, xs, a0);
    store4<T>(a0, a1, a2, a3, y, ldy);
}

// Sub-block j (32 elements) of a Q4_K block: q * (d * sc) - dmin * m, into two chains.
template <int T>
inline void q4_k_sub(const block_q4_k& wb, int j, float scale, float min, const float* xj, int64_t xs,
                     __m512 (&acc0)[T], __m512 (&acc1)[T]) {
    const __m512 s = _mm512_set1_ps(scale), m = _mm512_set1_ps(min);
    fma16<T>(acc0, _mm512_sub_ps(_mm512_mul_ps(widen(q4_k_chunk(wb, j, 0)), s), m), xj, xs);
    fma16<T>(acc1, _mm512_sub_ps(_mm512_mul_ps(widen(q4_k_chunk(wb, j, 1)), s), m), xj + 16, xs);
}

template <int T>
void q4_k_row(const block_q4_k* w, const float* x, int64_t xs, int64_t nb, float* y, int64_t ldy) {
    TROUPE_FA_CHAINS;
    const int pf = k_prefetch_distance;
    for (int64_t b = 0; b < nb; ++b) {
        prefetch_block(w + b, pf);
        const block_q4_k& wb = w[b];
        uint8_t sc[8], mn[8];
        q4_k_unpack_scales(wb, sc, mn);
        const float d = fp16(wb.d), dmin = fp16(wb.dmin);
        const float* xb = x + b * qk_k;
#pragma GCC unroll 4
        for (int c = 0; c < 4; ++c) {  // sub-blocks 2c (low nibbles) and 2c + 1 (high nibbles)
            q4_k_sub<T>(wb, 2 * c, d * sc[2 * c], dmin * mn[2 * c], xb + 64 * c, xs, a0, a1);
            q4_k_sub<T>(wb, 2 * c + 1, d * sc[2 * c + 1], dmin * mn[2 * c + 1], xb + 64 * c + 32, xs, a2, a3);
        }
    }
    store4<T>(a0, a1, a2, a3, y, ldy);
}

// Group k (32 elements) of half `half` of a Q6_K block: (d * scale) * (q - 32), into two chains.
template <int T>
inline void q6_k_group(const block_q6_k& wb, float d, int half, int k, const float* xk, int64_t xs, __m512 (&acc0)[T],
                       __m512 (&acc1)[T]) {
    const int j = 8 * half + 2 * k;
    fma16<T>(acc0, _mm512_mul_ps(widen(q6_k_chunk(wb, half, k, 0)), _mm512_set1_ps(d * wb.scales[j])), xk, xs);
    fma16<T>(acc1, _mm512_mul_ps(widen(q6_k_chunk(wb, half, k, 1)), _mm512_set1_ps(d * wb.scales[j + 1])), xk + 16, xs);
}

template <int T>
void q6_k_row(const block_q6_k* w, const float* x, int64_t xs, int64_t nb, float* y, int64_t ldy) {
    TROUPE_FA_CHAINS;
    const int pf = k_prefetch_distance;
    for (int64_t b = 0; b < nb; ++b) {
        prefetch_block(w + b, pf);
        const block_q6_k& wb = w[b];
        const float d = fp16(wb.d);
        const float* xb = x + b * qk_k;
#pragma GCC unroll 4
        for (int g = 0; g < 4; ++g) {  // groups 2 (g % 2) and 2 (g % 2) + 1 of half g / 2
            const int half = g / 2, k = 2 * (g % 2);
            q6_k_group<T>(wb, d, half, k, xb + 128 * half + 32 * k, xs, a0, a1);
            q6_k_group<T>(wb, d, half, k + 1, xb + 128 * half + 32 * (k + 1), xs, a2, a3);
        }
    }
    store4<T>(a0, a1, a2, a3, y, ldy);
}

#undef TROUPE_FA_CHAINS

template <int T>
void row_tile(const matmul_weight& w, const float* x, float* y, int64_t ldy, int64_t r) {
    const auto* wr = static_cast<const uint8_t*>(w.data) + static_cast<size_t>(r) * w.row_stride;
    const int64_t n = w.n_in;
    switch (w.type) {
        case ggml_type::q8_0:
            q8_0_row<T>(reinterpret_cast<const block_q8_0*>(wr), x, n, n / qk8_0, y, ldy);
            break;
        case ggml_type::q4_0:
            q4_0_row<T>(reinterpret_cast<const block_q4_0*>(wr), x, n, n / qk4_0, y, ldy);
            break;
        case ggml_type::q4_k:
            q4_k_row<T>(reinterpret_cast<const block_q4_k*>(wr), x, n, n / qk_k, y, ldy);
            break;
        case ggml_type::q6_k:
            q6_k_row<T>(reinterpret_cast<const block_q6_k*>(wr), x, n, n / qk_k, y, ldy);
            break;
        default:  // float weights take the float dot kernels (matmul.cpp)
            rows_float_act_scalar(w, x, y - r, ldy, T, r, r + 1);
            break;
    }
}

}  // namespace

void rows_float_act_avx512(const matmul_weight& w, const float* x, float* y, int64_t ldy, int64_t n_tokens, int64_t r0,
                           int64_t r1) {
    const int64_t n = w.n_in;
    for (int64_t r = r0; r < r1; ++r) {
        for (int64_t t0 = 0; t0 < n_tokens; t0 += 4) {
            const float* xt = x + t0 * n;
            float* yt = y + t0 * ldy + r;
            switch (std::min<int64_t>(4, n_tokens - t0)) {
                case 1:
                    row_tile<1>(w, xt, yt, ldy, r);
                    break;
                case 2:
                    row_tile<2>(w, xt, yt, ldy, r);
                    break;
                case 3:
                    row_tile<3>(w, xt, yt, ldy, r);
                    break;
                default:
                    row_tile<4>(w, xt, yt, ldy, r);
                    break;
            }
        }
    }
}

}  // namespace troupe::cpu::detail

#endif
