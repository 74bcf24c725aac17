// The per-block attention kernels of every quantized format, generic over a decoder and an instruction set. Included
// by each format's scalar file (isa_ref), AVX2 file (isa_avx2) and AVX-512 file (isa_avx512); everything here has
// internal linkage, so a copy compiled with AVX2 or AVX-512 flags is never the one the scalar file runs.
//
// A decoder D (one per format and instruction set) turns one row of one kv head of a block into floats, in a
// row-sized scratch in registers / L1, never the context:
//
//   D::key_channels(f, block, h, mul, add)   per-channel factors of the block's keys: k[c] = mul[c] * x[c] + add[c]
//   D::key_row(f, block, h, r, x)            x[c] of key row r (its codes, times a per-token scale where there is one)
//   D::value_row(f, block, h, r, x)          value row r, dequantized
//   D::prefetch(f, block, h)                 block_kernels::prefetch
//
// so a score is  scale * sum_c q[c] k[c] = sum_c (scale q[c] mul[c]) x[c] + scale sum_c q[c] add[c]: the query is
// scaled by the block's channel factors once per block, and each row costs one dot product with its codes.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "kv_format.h"

#if defined(__AVX512F__) || (defined(__AVX2__) && defined(__FMA__))
#include <immintrin.h>
#endif

namespace troupe::kv {
namespace {

struct isa_ref {
    // x[i] = exp(x[i] - m) for i < n, returns their sum.
    static float exp_sum(float* x, int32_t n, float m) {
        float sum = 0.0f;
        for (int32_t i = 0; i < n; ++i) sum += (x[i] = std::exp(x[i] - m));
        return sum;
    }
    static float max(const float* x, int32_t n, float m) {
        for (int32_t i = 0; i < n; ++i) m = std::max(m, x[i]);
        return m;
    }
    static void scale(float* y, float w, int32_t n) {
        for (int32_t i = 0; i < n; ++i) y[i] *= w;
    }
    static float dot(const float* a, const float* b, int32_t n) {
        float s = 0.0f;
        for (int32_t i = 0; i < n; ++i) s += a[i] * b[i];
        return s;
    }
    // y += w * x
    static void axpy(float w, const float* x, float* y, int32_t n) {
        for (int32_t i = 0; i < n; ++i) y[i] += w * x[i];
    }
};

#if defined(__AVX512F__)
// Lanes [0, n) of a 16-lane vector.
inline __mmask16 lanes_mask(int32_t n) {
    return n >= 16 ? static_cast<__mmask16>(0xffff) : static_cast<__mmask16>((1u << n) - 1u);
}

// exp(x) for x <= 0 (scores minus their max; -inf gives 0): 2^n * p(r), x = n ln2 + r, |r| <= ln2 / 2, p of degree 6
// (relative error ~2e-7).
inline __m512 exp_le0(__m512 x) {
    x = _mm512_max_ps(x, _mm512_set1_ps(-104.0f));  // below, exp is 0 in float (scalef flushes)
    const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504f)),
                                          _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693145752f), x);
    r = _mm512_fnmadd_ps(n, _mm512_set1_ps(1.42860677e-06f), r);
    __m512 p = _mm512_set1_ps(1.0f / 720);
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 120));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 24));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 6));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(0.5f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
    return _mm512_scalef_ps(p, n);
}

struct isa_avx512 {
    static float exp_sum(float* x, int32_t n, float m) {
        const __m512 mv = _mm512_set1_ps(m);
        __m512 sum = _mm512_setzero_ps();
        for (int32_t i = 0; i < n; i += 16) {
            const __mmask16 k = lanes_mask(n - i);
            const __m512 e = _mm512_maskz_mov_ps(k, exp_le0(_mm512_sub_ps(_mm512_maskz_loadu_ps(k, x + i), mv)));
            _mm512_mask_storeu_ps(x + i, k, e);
            sum = _mm512_add_ps(sum, e);
        }
        return _mm512_reduce_add_ps(sum);
    }
    static float max(const float* x, int32_t n, float m) {
        __m512 v = _mm512_set1_ps(m);
        for (int32_t i = 0; i < n; i += 16) {
            v = _mm512_mask_max_ps(v, lanes_mask(n - i), v, _mm512_maskz_loadu_ps(lanes_mask(n - i), x + i));
        }
        return _mm512_reduce_max_ps(v);
    }
    static void scale(float* y, float w, int32_t n) {
        const __m512 wv = _mm512_set1_ps(w);
        for (int32_t i = 0; i < n; i += 16) {
            const __mmask16 k = lanes_mask(n - i);
            _mm512_mask_storeu_ps(y + i, k, _mm512_mul_ps(wv, _mm512_maskz_loadu_ps(k, y + i)));
        }
    }
    static float dot(const float* a, const float* b, int32_t n) {
        __m512 s0 = _mm512_setzero_ps();
        __m512 s1 = _mm512_setzero_ps();
        int32_t i = 0;
        for (; i + 32 <= n; i += 32) {
            s0 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i), _mm512_loadu_ps(b + i), s0);
            s1 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i + 16), _mm512_loadu_ps(b + i + 16), s1);
        }
        for (; i < n; i += 16) {
            const __mmask16 m = lanes_mask(n - i);
            s0 = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, a + i), _mm512_maskz_loadu_ps(m, b + i), s0);
        }
        return _mm512_reduce_add_ps(_mm512_add_ps(s0, s1));
    }
    static void axpy(float w, const float* x, float* y, int32_t n) {
        const __m512 wv = _mm512_set1_ps(w);
        for (int32_t i = 0; i < n; i += 16) {
            const __mmask16 m = lanes_mask(n - i);
            _mm512_mask_storeu_ps(
                y + i, m, _mm512_fmadd_ps(wv, _mm512_maskz_loadu_ps(m, x + i), _mm512_maskz_loadu_ps(m, y + i)));
        }
    }
};
#endif

#if defined(__AVX2__) && defined(__FMA__) && !defined(__AVX512F__)
// The first n of 8 lanes (n <= 0: none) as a maskload / maskstore mask.
inline __m256i lanes8(int32_t n) {
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(n), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

// exp(x) for x <= 0 as exp_le0 (the same reduction and polynomial); below -87, where 2^n would leave the normal
// floats, 0 (exp(-87) = 1.6e-38 next to a sum of at least 1).
inline __m256 exp_le0_avx2(__m256 x) {
    const __m256 xc = _mm256_max_ps(x, _mm256_set1_ps(-87.0f));
    const __m256 n =
        _mm256_round_ps(_mm256_mul_ps(xc, _mm256_set1_ps(1.44269504f)), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693145752f), xc);
    r = _mm256_fnmadd_ps(n, _mm256_set1_ps(1.42860677e-06f), r);
    __m256 p = _mm256_set1_ps(1.0f / 720);
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 120));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 24));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 6));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(0.5f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
    const __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
    const __m256 y = _mm256_mul_ps(p, _mm256_castsi256_ps(e));
    return _mm256_and_ps(y, _mm256_cmp_ps(x, _mm256_set1_ps(-87.0f), _CMP_GE_OQ));
}

inline float hsum8(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    return _mm_cvtss_f32(_mm_add_ss(s, _mm_movehdup_ps(s)));
}

inline float hmax8(__m256 v) {
    __m128 s = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_max_ps(s, _mm_movehl_ps(s, s));
    return _mm_cvtss_f32(_mm_max_ss(s, _mm_movehdup_ps(s)));
}

// isa_avx512's operations in 8 lanes, masked tails by maskload / maskstore.
struct isa_avx2 {
    static float exp_sum(float* x, int32_t n, float m) {
        const __m256 mv = _mm256_set1_ps(m);
        __m256 sum = _mm256_setzero_ps();
        for (int32_t i = 0; i < n; i += 8) {
            const __m256i k = lanes8(n - i);
            const __m256 e =
                _mm256_and_ps(exp_le0_avx2(_mm256_sub_ps(_mm256_maskload_ps(x + i, k), mv)), _mm256_castsi256_ps(k));
            _mm256_maskstore_ps(x + i, k, e);
            sum = _mm256_add_ps(sum, e);
        }
        return hsum8(sum);
    }
    static float max(const float* x, int32_t n, float m) {
        __m256 v = _mm256_set1_ps(m);
        for (int32_t i = 0; i < n; i += 8) {
            const __m256i k = lanes8(n - i);
            v = _mm256_max_ps(
                v, _mm256_blendv_ps(_mm256_set1_ps(m), _mm256_maskload_ps(x + i, k), _mm256_castsi256_ps(k)));
        }
        return hmax8(v);
    }
    static void scale(float* y, float w, int32_t n) {
        const __m256 wv = _mm256_set1_ps(w);
        for (int32_t i = 0; i < n; i += 8) {
            const __m256i k = lanes8(n - i);
            _mm256_maskstore_ps(y + i, k, _mm256_mul_ps(wv, _mm256_maskload_ps(y + i, k)));
        }
    }
    static float dot(const float* a, const float* b, int32_t n) {
        __m256 s0 = _mm256_setzero_ps();
        __m256 s1 = _mm256_setzero_ps();
        int32_t i = 0;
        for (; i + 16 <= n; i += 16) {
            s0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), s0);
            s1 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 8), _mm256_loadu_ps(b + i + 8), s1);
        }
        for (; i < n; i += 8) {
            const __m256i k = lanes8(n - i);
            s0 = _mm256_fmadd_ps(_mm256_maskload_ps(a + i, k), _mm256_maskload_ps(b + i, k), s0);
        }
        return hsum8(_mm256_add_ps(s0, s1));
    }
    static void axpy(float w, const float* x, float* y, int32_t n) {
        const __m256 wv = _mm256_set1_ps(w);
        int32_t i = 0;
        for (; i + 8 <= n; i += 8) {
            _mm256_storeu_ps(y + i, _mm256_fmadd_ps(wv, _mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i)));
        }
        if (i < n) {
            const __m256i k = lanes8(n - i);
            _mm256_maskstore_ps(y + i, k,
                                _mm256_fmadd_ps(wv, _mm256_maskload_ps(x + i, k), _mm256_maskload_ps(y + i, k)));
        }
    }
};
#endif

// The online softmax's step over one block (block_kernels::softmax).
template <class Isa>
void softmax_block(float* s, int32_t s_stride, int32_t group, int32_t n_rows, const int32_t* n_seen, float* run_max,
                   float* run_sum, float* acc, int32_t head_dim) {
    for (int32_t g = 0; g < group; ++g) {
        float* sg = s + g * s_stride;
        const int32_t seen = n_seen[g];
        std::fill(sg + seen, sg + n_rows, 0.0f);  // past the row's position
        if (seen == 0) continue;                  // a block wholly after it: nothing changes
        const float m = Isa::max(sg, seen, run_max[g]);
        const float correction = std::exp(run_max[g] - m);  // 0 on the first block (exp(-inf))
        run_sum[g] = run_sum[g] * correction + Isa::exp_sum(sg, seen, m);
        if (correction != 1.0f) Isa::scale(acc + static_cast<size_t>(g) * head_dim, correction, head_dim);
        run_max[g] = m;
    }
}

// Float rows (a window): row r at rows + r * head_dim.
template <class Isa>
void scores_f32(const float* rows, int32_t head_dim, const float* q, int32_t group, int32_t n_rows, float scale,
                float* s, int32_t s_stride) {
    for (int32_t r = 0; r < n_rows; ++r) {
        const float* k = rows + static_cast<size_t>(r) * head_dim;
        for (int32_t g = 0; g < group; ++g)
            s[g * s_stride + r] = scale * Isa::dot(q + static_cast<size_t>(g) * head_dim, k, head_dim);
    }
}

#if defined(__AVX512F__)
// accumulate_f32 for AVX-512 at head_dim 16 N: a query row's accumulator stays in N registers over the rows.
template <int N>
void accumulate_f32_fused(const float* rows, const float* p, int32_t group, int32_t n_rows, int32_t p_stride,
                          float* acc) {
    for (int32_t g = 0; g < group; ++g) {
        float* ag = acc + static_cast<size_t>(g) * N * 16;
        __m512 a[N];
#pragma GCC unroll 16
        for (int i = 0; i < N; ++i) a[i] = _mm512_loadu_ps(ag + 16 * i);
        for (int32_t r = 0; r < n_rows; ++r) {
            const __m512 w = _mm512_set1_ps(p[g * p_stride + r]);
            const float* v = rows + static_cast<size_t>(r) * N * 16;
#pragma GCC unroll 16
            for (int i = 0; i < N; ++i) a[i] = _mm512_fmadd_ps(w, _mm512_loadu_ps(v + 16 * i), a[i]);
        }
#pragma GCC unroll 16
        for (int i = 0; i < N; ++i) _mm512_storeu_ps(ag + 16 * i, a[i]);
    }
}
#endif

template <class Isa>
void accumulate_f32(const float* rows, int32_t head_dim, const float* p, int32_t group, int32_t n_rows,
                    int32_t p_stride, float* acc) {
#if defined(__AVX512F__)
    if constexpr (std::is_same_v<Isa, isa_avx512>) {
        if (head_dim == 64) return accumulate_f32_fused<4>(rows, p, group, n_rows, p_stride, acc);
        if (head_dim == 128) return accumulate_f32_fused<8>(rows, p, group, n_rows, p_stride, acc);
    }
#endif
    for (int32_t r = 0; r < n_rows; ++r) {
        const float* v = rows + static_cast<size_t>(r) * head_dim;
        for (int32_t g = 0; g < group; ++g)
            Isa::axpy(p[g * p_stride + r], v, acc + static_cast<size_t>(g) * head_dim, head_dim);
    }
}

// Quantized blocks through decoder D (which also names its Isa and its format type).
template <class D>
void scores_block(const void* format, const uint8_t* block, int32_t h, const float* q, int32_t group, int32_t n_rows,
                  float scale, float* s, int32_t s_stride) {
    const auto& f = *static_cast<const typename D::format*>(format);
    const int32_t hd = f.geometry.head_dim;
    float mul[max_head_dim];
    float add[max_head_dim];
    D::key_channels(f, block, h, mul, add);
    float qs[max_group * max_head_dim];  // [group, head_dim] scale * q * mul
    float qa[max_group];                 // [group] scale * q . add
    for (int32_t g = 0; g < group; ++g) {
        const float* qg = q + static_cast<size_t>(g) * hd;
        float* qsg = qs + static_cast<size_t>(g) * hd;
        float a = 0.0f;
        for (int32_t c = 0; c < hd; ++c) {
            qsg[c] = scale * qg[c] * mul[c];
            a += qg[c] * add[c];
        }
        qa[g] = scale * a;
    }
    alignas(64) float x[max_head_dim];
    for (int32_t r = 0; r < n_rows; ++r) {
        D::key_row(f, block, h, r, x);
        for (int32_t g = 0; g < group; ++g) {
            s[g * s_stride + r] = D::isa::dot(qs + static_cast<size_t>(g) * hd, x, hd) + qa[g];
        }
    }
}

template <class D>
void accumulate_block(const void* format, const uint8_t* block, int32_t h, const float* p, int32_t group,
                      int32_t n_rows, int32_t p_stride, float* acc) {
    const auto& f = *static_cast<const typename D::format*>(format);
    const int32_t hd = f.geometry.head_dim;
    alignas(64) float x[max_head_dim];
    for (int32_t r = 0; r < n_rows; ++r) {
        D::value_row(f, block, h, r, x);
        for (int32_t g = 0; g < group; ++g) D::isa::axpy(p[g * p_stride + r], x, acc + static_cast<size_t>(g) * hd, hd);
    }
}

// The kernel table of decoder D.
template <class D>
block_kernels kernels_of() {
    return block_kernels{scores_block<D>,
                         accumulate_block<D>,
                         scores_f32<typename D::isa>,
                         accumulate_f32<typename D::isa>,
                         softmax_block<typename D::isa>,
                         D::prefetch};
}

#if defined(__AVX512F__)
// Fused kernels for few query rows (decode of MHA or small GQA groups): a row's codes become floats in registers and
// meet the scaled query (scores) or the accumulator (values) directly, with no row buffer; N = head_dim / 16 chunks.
// D provides key16(f, block, h, r, c), channels c..c+15 of key_row, and value16(f, block, h, r, c), of value_row.
template <class D, int N>
void scores_fused(const typename D::format& f, const uint8_t* block, int32_t h, const float* q, int32_t group,
                  int32_t n_rows, float scale, float* s, int32_t s_stride) {
    alignas(64) float mul[max_head_dim];
    alignas(64) float add[max_head_dim];
    D::key_channels(f, block, h, mul, add);
    const __m512 sv = _mm512_set1_ps(scale);
    for (int32_t g = 0; g < group; ++g) {
        const float* qg = q + static_cast<size_t>(g) * N * 16;
        __m512 qs[N];
        __m512 a = _mm512_setzero_ps();
#pragma GCC unroll 16
        for (int i = 0; i < N; ++i) {
            const __m512 qv = _mm512_loadu_ps(qg + 16 * i);
            qs[i] = _mm512_mul_ps(sv, _mm512_mul_ps(qv, _mm512_load_ps(mul + 16 * i)));
            a = _mm512_fmadd_ps(qv, _mm512_load_ps(add + 16 * i), a);
        }
        const float qa = scale * _mm512_reduce_add_ps(a);
        for (int32_t r = 0; r < n_rows; ++r) {
            __m512 d = _mm512_mul_ps(qs[0], D::key16(f, block, h, r, 0));
#pragma GCC unroll 16
            for (int i = 1; i < N; ++i) d = _mm512_fmadd_ps(qs[i], D::key16(f, block, h, r, 16 * i), d);
            s[g * s_stride + r] = _mm512_reduce_add_ps(d) + qa;
        }
    }
}

template <class D, int N>
void accumulate_fused(const typename D::format& f, const uint8_t* block, int32_t h, const float* p, int32_t group,
                      int32_t n_rows, int32_t p_stride, float* acc) {
    for (int32_t g = 0; g < group; ++g) {
        float* ag = acc + static_cast<size_t>(g) * N * 16;
        __m512 a[N];
#pragma GCC unroll 16
        for (int i = 0; i < N; ++i) a[i] = _mm512_loadu_ps(ag + 16 * i);
        for (int32_t r = 0; r < n_rows; ++r) {
            const __m512 w = _mm512_set1_ps(p[g * p_stride + r]);
#pragma GCC unroll 16
            for (int i = 0; i < N; ++i) a[i] = _mm512_fmadd_ps(w, D::value16(f, block, h, r, 16 * i), a[i]);
        }
#pragma GCC unroll 16
        for (int i = 0; i < N; ++i) _mm512_storeu_ps(ag + 16 * i, a[i]);
    }
}

// Query rows up to which the fused kernels run (beyond, decoding a row once into a buffer for all rows wins).
constexpr int32_t max_fused_rows = 2;

template <class D>
void scores_auto(const void* format, const uint8_t* block, int32_t h, const float* q, int32_t group, int32_t n_rows,
                 float scale, float* s, int32_t s_stride) {
    const auto& f = *static_cast<const typename D::format*>(format);
    const int32_t hd = f.geometry.head_dim;
    if (group <= max_fused_rows && hd == 64)
        return scores_fused<D, 4>(f, block, h, q, group, n_rows, scale, s, s_stride);
    if (group <= max_fused_rows && hd == 128)
        return scores_fused<D, 8>(f, block, h, q, group, n_rows, scale, s, s_stride);
    scores_block<D>(format, block, h, q, group, n_rows, scale, s, s_stride);
}

template <class D>
void accumulate_auto(const void* format, const uint8_t* block, int32_t h, const float* p, int32_t group, int32_t n_rows,
                     int32_t p_stride, float* acc) {
    const auto& f = *static_cast<const typename D::format*>(format);
    const int32_t hd = f.geometry.head_dim;
    if (group <= max_fused_rows && hd == 64)
        return accumulate_fused<D, 4>(f, block, h, p, group, n_rows, p_stride, acc);
    if (group <= max_fused_rows && hd == 128)
        return accumulate_fused<D, 8>(f, block, h, p, group, n_rows, p_stride, acc);
    accumulate_block<D>(format, block, h, p, group, n_rows, p_stride, acc);
}

// The kernel table of an AVX-512 decoder with key16 / value16: fused kernels for few query rows at head_dim 64 and
// 128, the row-buffer ones otherwise.
template <class D>
block_kernels fused_kernels_of() {
    return block_kernels{scores_auto<D>,
                         accumulate_auto<D>,
                         scores_f32<typename D::isa>,
                         accumulate_f32<typename D::isa>,
                         softmax_block<typename D::isa>,
                         D::prefetch};
}
#endif

}  // namespace
}  // namespace troupe::kv
