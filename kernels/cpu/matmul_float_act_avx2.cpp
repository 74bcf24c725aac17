// The float-activation recipe at the AVX2 level (decode): one weight row x up to 2 tokens per pass, the row
// streamed once (from L1 for the further pairs). Each 16-element chunk of a weight block is widened in registers (bytes
// -> int32 -> float, two halves of 8), scaled exactly as the reference dequantizes it (matmul_float_act_blocks.h), and
// multiplied with 8 float activations by FMA; four accumulator chains per token (the halves of even and odd chunks)
// hide the FMA latency.
#include "kernels/cpu/matmul_kernels.h"

#if defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)

#include <algorithm>

#include "kernels/cpu/matmul_float_act_blocks.h"

namespace troupe::cpu::detail {
namespace {

inline float fp16(uint16_t h) {
    return _cvtsh_ss(h);
}

inline float hsum(__m256 v) {
    const __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    const __m128 s2 = _mm_add_ps(s, _mm_movehl_ps(s, s));
    return _mm_cvtss_f32(_mm_add_ss(s2, _mm_movehdup_ps(s2)));
}

// The 16 values of a chunk as two float vectors, scaled (value = q * scale - min, in that order).
struct chunk16 {
    __m256 lo, hi;
};

inline chunk16 scaled(__m128i q, __m256 scale) {
    return {_mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(q)), scale),
            _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(q, 8))), scale)};
}

inline chunk16 scaled(__m128i q, __m256 scale, __m256 min) {
    const chunk16 c = scaled(q, scale);
    return {_mm256_sub_ps(c.lo, min), _mm256_sub_ps(c.hi, min)};
}

// acc0[t] += c.lo * x[t * xs + 0..7], acc1[t] += c.hi * x[t * xs + 8..15]
template <int T>
inline void fma16(__m256 (&acc0)[T], __m256 (&acc1)[T], chunk16 c, const float* x, int64_t xs) {
#pragma GCC unroll 4
    for (int t = 0; t < T; ++t) {
        acc0[t] = _mm256_fmadd_ps(c.lo, _mm256_loadu_ps(x + t * xs), acc0[t]);
        acc1[t] = _mm256_fmadd_ps(c.hi, _mm256_loadu_ps(x + t * xs + 8), acc1[t]);
    }
}

// Four accumulator chains per token, for tiles of at most 2 tokens (16 ymm registers: 4 x 4 accumulators would
// spill). The order of operations of a token does not depend on its tile, so results do not depend on the batch.
#define TROUPE_FA_CHAINS                       \
    static_assert(T <= 2);                     \
    __m256 acc0[T], acc1[T], acc2[T], acc3[T]; \
    for (int t = 0; t < T; ++t) acc0[t] = acc1[t] = acc2[t] = acc3[t] = _mm256_setzero_ps()

template <int T>
inline void store(__m256 (&acc0)[T], __m256 (&acc1)[T], __m256 (&acc2)[T], __m256 (&acc3)[T], float* y, int64_t ldy) {
    for (int t = 0; t < T; ++t) {
        y[t * ldy] = hsum(_mm256_add_ps(_mm256_add_ps(acc0[t], acc1[t]), _mm256_add_ps(acc2[t], acc3[t])));
    }
}

template <int T>
void q8_0_row(const block_q8_0* w, const float* x, int64_t xs, int64_t nb, float* y, int64_t ldy) {
    TROUPE_FA_CHAINS;
    for (int64_t b = 0; b < nb; ++b) {
        const __m256 d = _mm256_set1_ps(fp16(w[b].d));
        const float* xb = x + b * qk8_0;
        fma16<T>(acc0, acc1, scaled(load16(w[b].qs), d), xb, xs);
        fma16<T>(acc2, acc3, scaled(load16(w[b].qs + 16), d), xb + 16, xs);
    }
    store<T>(acc0, acc1, acc2, acc3, y, ldy);
}

// A block of 32 nibbles' chunk h (0: elements 0..15) as signed values: Q4_0's and Q5_0's.
inline __m128i nibble_chunk(const block_q4_0& b, int h) {
    return q4_0_chunk(b, h);
}
inline __m128i nibble_chunk(const block_q5_0& b, int h) {
    return q5_0_chunk(b, h);
}

template <class Block, int T>
void q4_0_row(const Block* w, const float* x, int64_t xs, int64_t nb, float* y, int64_t ldy) {
    static_assert(qk4_0 == 32 && qk5_0 == 32);
    TROUPE_FA_CHAINS;
    for (int64_t b = 0; b < nb; ++b) {
        const __m256 d = _mm256_set1_ps(fp16(w[b].d));
        const float* xb = x + b * qk4_0;
        fma16<T>(acc0, acc1, scaled(nibble_chunk(w[b], 0), d), xb, xs);
        fma16<T>(acc2, acc3, scaled(nibble_chunk(w[b], 1), d), xb + 16, xs);
    }
    store<T>(acc0, acc1, acc2, acc3, y, ldy);
}

// Sub-block j's half h of a Q4_K or Q5_K block (the same scales and mins).
inline __m128i k_chunk(const block_q4_k& b, int j, int h) {
    return q4_k_chunk(b, j, h);
}
inline __m128i k_chunk(const block_q5_k& b, int j, int h) {
    return q5_k_chunk(b, j, h);
}

template <class Block, int T>
void q4_k_row(const Block* w, const float* x, int64_t xs, int64_t nb, float* y, int64_t ldy) {
    TROUPE_FA_CHAINS;
    for (int64_t b = 0; b < nb; ++b) {
        const Block& wb = w[b];
        uint8_t sc[8], mn[8];
        q4_k_unpack_scales(wb, sc, mn);
        const float d = fp16(wb.d), dmin = fp16(wb.dmin);
        const float* xb = x + b * qk_k;
#pragma GCC unroll 8
        for (int j = 0; j < 8; ++j) {
            const __m256 scale = _mm256_set1_ps(d * sc[j]), min = _mm256_set1_ps(dmin * mn[j]);
            fma16<T>(acc0, acc1, scaled(k_chunk(wb, j, 0), scale, min), xb + 32 * j, xs);
            fma16<T>(acc2, acc3, scaled(k_chunk(wb, j, 1), scale, min), xb + 32 * j + 16, xs);
        }
    }
    store<T>(acc0, acc1, acc2, acc3, y, ldy);
}

template <int T>
void q6_k_row(const block_q6_k* w, const float* x, int64_t xs, int64_t nb, float* y, int64_t ldy) {
    TROUPE_FA_CHAINS;
    for (int64_t b = 0; b < nb; ++b) {
        const block_q6_k& wb = w[b];
        const float d = fp16(wb.d);
#pragma GCC unroll 2
        for (int half = 0; half < 2; ++half) {
#pragma GCC unroll 4
            for (int k = 0; k < 4; ++k) {
                const int j = 8 * half + 2 * k;
                const float* xk = x + b * qk_k + 128 * half + 32 * k;
                fma16<T>(acc0, acc1, scaled(q6_k_chunk(wb, half, k, 0), _mm256_set1_ps(d * wb.scales[j])), xk, xs);
                fma16<T>(acc2, acc3, scaled(q6_k_chunk(wb, half, k, 1), _mm256_set1_ps(d * wb.scales[j + 1])), xk + 16,
                         xs);
            }
        }
    }
    store<T>(acc0, acc1, acc2, acc3, y, ldy);
}

// Q2_K and Q3_K: 16 chunks of 16 per block, each with its own scale (and Q2_K's min); a block's scales read once
// (the struct), its chunks then one by one.
struct q2_k_chunks {
    const block_q2_k& b;
    float d, dmin;
    explicit q2_k_chunks(const block_q2_k& wb) : b(wb), d(fp16(wb.d)), dmin(fp16(wb.dmin)) {}
    chunk16 operator()(int c) const {
        return scaled(q2_k_chunk(b, c), _mm256_set1_ps(d * static_cast<float>(b.scales[c] & 0x0f)),
                      _mm256_set1_ps(dmin * static_cast<float>(b.scales[c] >> 4)));
    }
};

struct q3_k_chunks {
    const block_q3_k& b;
    float d;
    int sc[16];
    explicit q3_k_chunks(const block_q3_k& wb) : b(wb), d(fp16(wb.d)) { q3_k_unpack_scales(wb, sc); }
    chunk16 operator()(int c) const { return scaled(q3_k_chunk(b, c), _mm256_set1_ps(d * static_cast<float>(sc[c]))); }
};

template <class Chunks, class Block, int T>
void sixteen_chunk_row(const Block* w, const float* x, int64_t xs, int64_t nb, float* y, int64_t ldy) {
    TROUPE_FA_CHAINS;
    for (int64_t b = 0; b < nb; ++b) {
        const Chunks chunk(w[b]);
        const float* xb = x + b * qk_k;
#pragma GCC unroll 8
        for (int c = 0; c < 16; c += 2) {
            fma16<T>(acc0, acc1, chunk(c), xb + 16 * c, xs);
            fma16<T>(acc2, acc3, chunk(c + 1), xb + 16 * c + 16, xs);
        }
    }
    store<T>(acc0, acc1, acc2, acc3, y, ldy);
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
            q4_0_row<block_q4_0, T>(reinterpret_cast<const block_q4_0*>(wr), x, n, n / qk4_0, y, ldy);
            break;
        case ggml_type::q5_0:
            q4_0_row<block_q5_0, T>(reinterpret_cast<const block_q5_0*>(wr), x, n, n / qk5_0, y, ldy);
            break;
        case ggml_type::q4_k:
            q4_k_row<block_q4_k, T>(reinterpret_cast<const block_q4_k*>(wr), x, n, n / qk_k, y, ldy);
            break;
        case ggml_type::q5_k:
            q4_k_row<block_q5_k, T>(reinterpret_cast<const block_q5_k*>(wr), x, n, n / qk_k, y, ldy);
            break;
        case ggml_type::q6_k:
            q6_k_row<T>(reinterpret_cast<const block_q6_k*>(wr), x, n, n / qk_k, y, ldy);
            break;
        case ggml_type::q2_k:
            sixteen_chunk_row<q2_k_chunks, block_q2_k, T>(reinterpret_cast<const block_q2_k*>(wr), x, n, n / qk_k, y,
                                                          ldy);
            break;
        case ggml_type::q3_k:
            sixteen_chunk_row<q3_k_chunks, block_q3_k, T>(reinterpret_cast<const block_q3_k*>(wr), x, n, n / qk_k, y,
                                                          ldy);
            break;
        default:  // float weights take the float dot kernels (matmul.cpp)
            rows_float_act_scalar(w, x, y - r, ldy, T, r, r + 1);
            break;
    }
}

}  // namespace

void rows_float_act_avx2(const matmul_weight& w, const float* x, float* y, int64_t ldy, int64_t n_tokens, int64_t r0,
                         int64_t r1) {
    const int64_t n = w.n_in;
    for (int64_t r = r0; r < r1; ++r) {
        for (int64_t t0 = 0; t0 < n_tokens; t0 += 2) {  // tiles of 2 tokens (see TROUPE_FA_CHAINS)
            if (n_tokens - t0 >= 2) {
                row_tile<2>(w, x + t0 * n, y + t0 * ldy + r, ldy, r);
            } else {
                row_tile<1>(w, x + t0 * n, y + t0 * ldy + r, ldy, r);
            }
        }
    }
}

}  // namespace troupe::cpu::detail

#endif
