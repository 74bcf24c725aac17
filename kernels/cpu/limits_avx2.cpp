#include "kernels/cpu/limits_kernels.h"

#if defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>

namespace troupe::cpu::detail {

float read_stream_avx2(const float* p, size_t n) {
    __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
    for (size_t i = 0; i < n; i += 32) {
        a0 = _mm256_add_ps(a0, _mm256_load_ps(p + i));
        a1 = _mm256_add_ps(a1, _mm256_load_ps(p + i + 8));
        a2 = _mm256_add_ps(a2, _mm256_load_ps(p + i + 16));
        a3 = _mm256_add_ps(a3, _mm256_load_ps(p + i + 24));
    }
    const __m256 s = _mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3));
    alignas(32) float v[8];
    _mm256_store_ps(v, s);
    return v[0] + v[1] + v[2] + v[3] + v[4] + v[5] + v[6] + v[7];
}

double fma_chains_avx2(int64_t iterations) {
    constexpr int k_chains = 12;
    __m256 acc[k_chains];
    for (int c = 0; c < k_chains; ++c) acc[c] = _mm256_set1_ps(static_cast<float>(c) * 1e-3f);
    const __m256 a = _mm256_set1_ps(0.999999f), b = _mm256_set1_ps(1e-7f);
    for (int64_t i = 0; i < iterations; ++i) {
#pragma GCC unroll 12
        for (int c = 0; c < k_chains; ++c) acc[c] = _mm256_fmadd_ps(acc[c], a, b);
    }
    __m256 s = acc[0];
    for (int c = 1; c < k_chains; ++c) s = _mm256_add_ps(s, acc[c]);
    alignas(32) float v[8];
    _mm256_store_ps(v, s);
    volatile float sink = v[0];
    (void)sink;
    return static_cast<double>(iterations) * k_chains * 8 * 2;
}

double int8_dot_chains_avx2(int64_t iterations) {
    constexpr int k_chains = 12;  // each chain's bytes feed its next product, so nothing is loop-invariant
    __m256i acc[k_chains];
    for (int c = 0; c < k_chains; ++c) acc[c] = _mm256_set1_epi32(c);
    const __m256i a = _mm256_set1_epi8(3), ones = _mm256_set1_epi16(1);
    for (int64_t i = 0; i < iterations; ++i) {
#pragma GCC unroll 12
        for (int c = 0; c < k_chains; ++c)
            acc[c] = _mm256_add_epi32(acc[c], _mm256_madd_epi16(_mm256_maddubs_epi16(a, acc[c]), ones));
    }
    __m256i s = acc[0];
    for (int c = 1; c < k_chains; ++c) s = _mm256_add_epi32(s, acc[c]);
    alignas(32) int v[8];
    _mm256_store_si256(reinterpret_cast<__m256i*>(v), s);
    volatile int sink = v[0];
    (void)sink;
    return static_cast<double>(iterations) * k_chains * 32 * 2;
}

double int8_nibble_chains_avx2(int64_t iterations) {
    constexpr int k_chains = 6;  // int16 sums, each fed back into its next product (nothing loop-invariant)
    __m256i s16[k_chains], acc[k_chains];
    for (int c = 0; c < k_chains; ++c) acc[c] = s16[c] = _mm256_set1_epi32(c);
    const __m256i a = _mm256_set1_epi8(3), ones = _mm256_set1_epi16(1);
    for (int64_t i = 0; i < iterations; ++i) {
        // As q8_panels_avx2.cpp's Q4_0 block: eight vpmaddubsw added in int16, then one vpmaddwd.
#pragma GCC unroll 8
        for (int k = 0; k < 8; ++k) {
#pragma GCC unroll 6
            for (int c = 0; c < k_chains; ++c) s16[c] = _mm256_add_epi16(s16[c], _mm256_maddubs_epi16(a, s16[c]));
        }
#pragma GCC unroll 6
        for (int c = 0; c < k_chains; ++c) acc[c] = _mm256_add_epi32(acc[c], _mm256_madd_epi16(s16[c], ones));
    }
    __m256i s = acc[0];
    for (int c = 1; c < k_chains; ++c) s = _mm256_add_epi32(s, _mm256_add_epi32(acc[c], s16[c]));
    alignas(32) int v[8];
    _mm256_store_si256(reinterpret_cast<__m256i*>(v), s);
    volatile int sink = v[0];
    (void)sink;
    return static_cast<double>(iterations) * k_chains * 8 * 32 * 2;
}

}  // namespace troupe::cpu::detail
#else
namespace troupe::cpu::detail {
float read_stream_avx2(const float*, size_t) {
    return 0;
}
double fma_chains_avx2(int64_t) {
    return 0;
}
double int8_dot_chains_avx2(int64_t) {
    return 0;
}
double int8_nibble_chains_avx2(int64_t) {
    return 0;
}
}  // namespace troupe::cpu::detail
#endif
