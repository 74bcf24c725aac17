#include "plugins/common/q4_rows.h"

#include <immintrin.h>

#include <algorithm>
#include <cmath>

#include "plugins/common/prefetch.h"

// GCC 12 reports the AVX-512 intrinsics' own _mm512_undefined_ps() operands as uninitialized in functions built with a
// target attribute (a false positive in its headers, not in this code).
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

namespace troupe::spec_common::q4_rows {
namespace {

__attribute__((target("avx2,fma"))) float hsum(__m256 v) {
    __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s4 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
    s4 = _mm_add_ss(s4, _mm_shuffle_ps(s4, s4, 1));
    return _mm_cvtss_f32(s4);
}

// The unsigned part Σ_g d_g · xs_g · Σ code_i · xq_i of groups [g0, g1): a short last chunk's, after the vector loop.
float codes_part_scalar(const uint8_t* codes, const float* ds, int64_t n, const int8_t* xq, const float* xs, int64_t g0,
                        int64_t g1) {
    float s = 0;
    for (int64_t g = g0; g < g1; ++g) {
        int32_t acc = 0;
        for (int64_t j = 32 * g; j < 32 * g + 32; ++j) acc += code(codes, n, j) * xq[j];
        s += ds[g] * xs[g] * static_cast<float>(acc);
    }
    return s;
}

// Σ_g d_g · block_sums_g over groups [g0, g1).
float correction(const float* ds, const float* bs, int64_t g0, int64_t g1) {
    float s = 0;
    for (int64_t g = g0; g < g1; ++g) s += ds[g] * bs[g];
    return s;
}

// acc + d_g · xs_g · Σ q · x over group g, q its 32 codes.
__attribute__((target("avx2,fma,f16c"), always_inline)) inline __m256 group_avx2(__m256 acc, __m256i q, int64_t g,
                                                                                 const int8_t* xq, const float* ds,
                                                                                 const float* xs) {
    const __m256i xv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xq + 32 * g));
    const __m256i p = _mm256_madd_epi16(_mm256_maddubs_epi16(q, xv), _mm256_set1_epi16(1));
    return _mm256_fmadd_ps(_mm256_cvtepi32_ps(p), _mm256_set1_ps(ds[g] * xs[g]), acc);
}

}  // namespace

int code(const uint8_t* codes, int64_t n, int64_t i) {
    const int64_t c = i / 128, j = i % 128, half = std::min<int64_t>(128, n - 128 * c) / 2;
    const uint8_t byte = codes[64 * c + (j < half ? j : j - half)];
    return j < half ? byte & 15 : byte >> 4;
}

float dot_scalar(const uint8_t* codes, const float* ds, int64_t n, const int8_t* xq, const float* xs) {
    float s = 0;
    for (int64_t g = 0; g < n / 32; ++g) {
        int32_t acc = 0;
        for (int64_t j = 32 * g; j < 32 * g + 32; ++j) acc += (code(codes, n, j) - 8) * xq[j];
        s += ds[g] * xs[g] * static_cast<float>(acc);
    }
    return s;
}

// The scale d and steps q (-8..7) of a group of 32 weights w ~ d · q: llama.cpp's Q4_0 rule (d = the weight of
// largest magnitude / -8) and 20 grids around it, each refit by least squares (d = Σ w q / Σ q²), the one of least
// squared error kept. Drafting's acceptance follows the layer's error: on the grown 110M's EAGLE layer the plain rule
// lost more of the second draft's acceptance.
float fit_group(const float* w, int8_t* q) {
    float m = 0;
    for (int j = 0; j < 32; ++j) {
        if (std::fabs(w[j]) > std::fabs(m)) m = w[j];
    }
    if (m == 0) {
        std::fill_n(q, 32, int8_t{0});
        return 0.0f;
    }
    float best_d = 0, best_err = INFINITY;
    int8_t trial[32];
    for (int k = -10; k <= 10; ++k) {
        const float inv = (-8.0f + 0.1f * static_cast<float>(k)) / m;
        float wq = 0, qq = 0;
        for (int j = 0; j < 32; ++j) {
            trial[j] = static_cast<int8_t>(std::clamp<long>(std::lrint(w[j] * inv), -8, 7));
            wq += w[j] * trial[j];
            qq += static_cast<float>(trial[j] * trial[j]);
        }
        const float d = k == 0 ? 1.0f / inv : (qq > 0 ? wq / qq : 0.0f);
        float err = 0;
        for (int j = 0; j < 32; ++j) {
            const float e = w[j] - d * trial[j];
            err += e * e;
        }
        if (err < best_err) {
            best_err = err;
            best_d = d;
            std::copy_n(trial, 32, q);
        }
    }
    return best_d;
}

// 32 bytes of each 64-byte chunk at a time: the low nibbles are one group, the high nibbles the group 64 weights on.
__attribute__((target("avx2,fma,f16c"))) float dot_avx2(const uint8_t* codes, const float* ds, int64_t n,
                                                        const int8_t* xq, const float* xs, const float* bs) {
    __m256 acc = _mm256_setzero_ps();
    const __m256i low4 = _mm256_set1_epi8(0x0f);
    int64_t c = 0;
    for (; 128 * (c + 1) <= n; ++c) {
        plugin_support::prefetch_stream(codes + 64 * c);
        const __m256i v0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(codes + 64 * c));
        const __m256i v1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(codes + 64 * c + 32));
        acc = group_avx2(acc, _mm256_and_si256(v0, low4), 4 * c, xq, ds, xs);
        acc = group_avx2(acc, _mm256_and_si256(v1, low4), 4 * c + 1, xq, ds, xs);
        acc = group_avx2(acc, _mm256_and_si256(_mm256_srli_epi16(v0, 4), low4), 4 * c + 2, xq, ds, xs);
        acc = group_avx2(acc, _mm256_and_si256(_mm256_srli_epi16(v1, 4), low4), 4 * c + 3, xq, ds, xs);
    }
    const float s = hsum(acc) + codes_part_scalar(codes, ds, n, xq, xs, 4 * c, n / 32);
    return s - 8.0f * correction(ds, bs, 0, n / 32);
}

// 128 weights a step: one load of 64 code bytes, two vectors of 64 codes, two vpdpbusd against the activations, each
// vector's 16 lanes two groups of 32 (lanes 0-7, 8-15), scaled by the group's d times the block's activation scale.
__attribute__((target("avx512f,avx512bw,avx512vnni,fma"))) float dot_vnni(const uint8_t* codes, const float* ds,
                                                                               int64_t n, const int8_t* xq,
                                                                               const float* xs,
                                                                               const float* lane_scales,
                                                                               const float* bs) {
    __m512 acc0 = _mm512_setzero_ps(), acc1 = _mm512_setzero_ps();
    __m128 corr = _mm_setzero_ps();
    const __m512i low4 = _mm512_set1_epi8(0x0f);
    const __m512i first = _mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1);
    const __m512i second = _mm512_setr_epi32(2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3);
    int64_t c = 0;
    for (; 128 * (c + 1) <= n; ++c) {
        plugin_support::prefetch_stream(codes + 64 * c);
        const __m512i v = _mm512_loadu_si512(codes + 64 * c);
        const __m512i lo = _mm512_and_si512(v, low4);
        const __m512i hi = _mm512_and_si512(_mm512_srli_epi16(v, 4), low4);
        const __m512i p0 = _mm512_dpbusd_epi32(_mm512_setzero_si512(), lo, _mm512_loadu_si512(xq + 128 * c));
        const __m512i p1 = _mm512_dpbusd_epi32(_mm512_setzero_si512(), hi, _mm512_loadu_si512(xq + 128 * c + 64));
        const __m128 d4 = _mm_loadu_ps(ds + 4 * c);
        const __m512 d = _mm512_zextps128_ps512(d4);
        acc0 = _mm512_fmadd_ps(_mm512_cvtepi32_ps(p0),
                               _mm512_mul_ps(_mm512_permutexvar_ps(first, d), _mm512_loadu_ps(lane_scales + 32 * c)),
                               acc0);
        acc1 = _mm512_fmadd_ps(
            _mm512_cvtepi32_ps(p1),
            _mm512_mul_ps(_mm512_permutexvar_ps(second, d), _mm512_loadu_ps(lane_scales + 32 * c + 16)), acc1);
        corr = _mm_fmadd_ps(d4, _mm_loadu_ps(bs + 4 * c), corr);
    }
    __m128 c2 = _mm_add_ps(corr, _mm_movehl_ps(corr, corr));
    c2 = _mm_add_ss(c2, _mm_shuffle_ps(c2, c2, 1));
    const float s =
        _mm512_reduce_add_ps(_mm512_add_ps(acc0, acc1)) + codes_part_scalar(codes, ds, n, xq, xs, 4 * c, n / 32);
    return s - 8.0f * (_mm_cvtss_f32(c2) + correction(ds, bs, 4 * c, n / 32));
}

}  // namespace troupe::spec_common::q4_rows
