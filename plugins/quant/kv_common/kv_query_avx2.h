// quantize_query_ref (kv_query.h) in 8 AVX2 lanes, for the AVX2 kernels of kv/int8 and kv/kivi: the same floats with
// the same operations (two products, a maximum, one product, rounding to nearest even), so the same codes. Included by
// AVX2 files only; internal linkage.
#pragma once

#include <immintrin.h>

#include <cstring>

#include "kv_kernels.h"
#include "kv_query.h"

namespace troupe::kv {
namespace {

// codes: room for n rounded up to 8 (the lanes past n are written as 0).
inline quantized_query quantize_query_avx2(const float* q, const float* k_scales, int32_t n, float scale,
                                           int8_t* codes) {
    alignas(32) float x[max_head_dim];
    const __m256 sv = _mm256_set1_ps(scale);
    const __m256 magnitude = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
    __m256 amax = _mm256_setzero_ps();
    for (int32_t c = 0; c < n; c += 8) {
        const __m256i m = lanes8(n - c);
        const __m256 v =
            _mm256_mul_ps(_mm256_mul_ps(sv, _mm256_maskload_ps(q + c, m)), _mm256_maskload_ps(k_scales + c, m));
        _mm256_store_ps(x + c, v);
        amax = _mm256_max_ps(amax, _mm256_and_ps(v, magnitude));
    }
    quantized_query out;
    out.scale = hmax8(amax) / 127.0f;
    const __m256 inv = _mm256_set1_ps(out.scale > 0.0f ? 1.0f / out.scale : 0.0f);
    __m256i sum = _mm256_setzero_si256();
    for (int32_t c = 0; c < n; c += 8) {
        __m256i v = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_load_ps(x + c), inv));  // to nearest even
        v = _mm256_max_epi32(_mm256_min_epi32(v, _mm256_set1_epi32(127)), _mm256_set1_epi32(-127));
        v = _mm256_and_si256(v, lanes8(n - c));
        const __m256i bytes = _mm256_packs_epi16(_mm256_packs_epi32(v, v), _mm256_setzero_si256());
        const int32_t lo = _mm_cvtsi128_si32(_mm256_castsi256_si128(bytes));
        const int32_t hi = _mm_cvtsi128_si32(_mm256_extracti128_si256(bytes, 1));
        std::memcpy(codes + c, &lo, 4);
        std::memcpy(codes + c + 4, &hi, 4);
        sum = _mm256_add_epi32(sum, v);
    }
    const __m128i s4 = _mm_add_epi32(_mm256_castsi256_si128(sum), _mm256_extracti128_si256(sum, 1));
    const __m128i s2 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, 0x4e));
    out.sum = _mm_cvtsi128_si32(_mm_add_epi32(s2, _mm_shuffle_epi32(s2, 0xb1)));
    return out;
}

}  // namespace
}  // namespace troupe::kv
