// AVX-512 pieces of troupe's integer KV-cache kernels (kv/int8, kv/kivi): the query quantized against a block's
// key factors (the twin of kv_query.h) and the byte dot products of four unsigned by four signed bytes per lane,
// with VNNI or without. Included by AVX-512 files only; internal linkage.
#pragma once

#include <immintrin.h>

#include <cstring>

#include "kv_kernels.h"
#include "kv_query.h"

namespace troupe::kv {
namespace {

// Lanes [0, n) of a 16-lane vector, none for n <= 0.
inline __mmask16 lanes_mask_or_none(int32_t n) {
    return n <= 0 ? static_cast<__mmask16>(0) : lanes_mask(n);
}

// quantize_query_ref (kv_query.h), vectorized: the same floats, so the same codes. codes: 64-byte aligned, max_head_dim
// bytes.
inline quantized_query quantize_query(const float* q, const float* k_scales, int32_t n, float scale, int8_t* codes) {
    alignas(64) float x[max_head_dim];
    const __m512 sv = _mm512_set1_ps(scale);
    __m512 amax = _mm512_setzero_ps();
    for (int32_t c = 0; c < n; c += 16) {
        const __mmask16 m = lanes_mask(n - c);
        const __m512 v =
            _mm512_mul_ps(_mm512_mul_ps(sv, _mm512_maskz_loadu_ps(m, q + c)), _mm512_maskz_loadu_ps(m, k_scales + c));
        _mm512_store_ps(x + c, v);
        amax = _mm512_max_ps(amax, _mm512_abs_ps(v));
    }
    quantized_query out;
    out.scale = _mm512_reduce_max_ps(amax) / 127.0f;
    const __m512 inv = _mm512_set1_ps(out.scale > 0.0f ? 1.0f / out.scale : 0.0f);
    __m512i sum = _mm512_setzero_si512();
    for (int32_t c = 0; c < n; c += 16) {
        const __mmask16 m = lanes_mask(n - c);
        __m512i v = _mm512_cvt_roundps_epi32(_mm512_mul_ps(_mm512_load_ps(x + c), inv),
                                             _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
        v = _mm512_maskz_mov_epi32(
            m, _mm512_max_epi32(_mm512_min_epi32(v, _mm512_set1_epi32(127)), _mm512_set1_epi32(-127)));
        // A whole 16-byte store (codes has room; lanes past n are 0), which later 4-byte loads forward from.
        _mm_store_si128(reinterpret_cast<__m128i*>(codes + c), _mm512_cvtepi32_epi8(v));
        sum = _mm512_add_epi32(sum, v);
    }
    out.sum = _mm512_reduce_add_epi32(sum);
    return out;
}

// Dot::dp(acc, a, b): acc + the sums of four products of a's unsigned and b's signed bytes in each 32-bit lane.
// Without VNNI (AVX-512BW): the even and odd bytes widened to 16 bits and multiplied-and-paired by vpmaddwd, exact
// (a product is at most 255 * 127, a pair's sum fits).
struct dot_bw {
    static __m512i dp(__m512i acc, __m512i a, __m512i b) {
        const __m512i a_even = _mm512_and_si512(a, _mm512_set1_epi16(0x00ff));
        const __m512i a_odd = _mm512_srli_epi16(a, 8);
        const __m512i b_even = _mm512_srai_epi16(_mm512_slli_epi16(b, 8), 8);
        const __m512i b_odd = _mm512_srai_epi16(b, 8);
        return _mm512_add_epi32(acc,
                                _mm512_add_epi32(_mm512_madd_epi16(a_even, b_even), _mm512_madd_epi16(a_odd, b_odd)));
    }
};

#if defined(__AVX512VNNI__)
// With VNNI: one vpdpbusd.
struct dot_vnni {
    static __m512i dp(__m512i acc, __m512i a, __m512i b) { return _mm512_dpbusd_epi32(acc, a, b); }
};
#endif

}  // namespace
}  // namespace troupe::kv
