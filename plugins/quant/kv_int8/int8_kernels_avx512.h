// kv/int8 AVX-512 kernels, generic over the instruction that multiplies four unsigned key bytes by four signed query
// bytes per 32-bit lane and adds them up (vpdpbusd with VNNI, two vpmaddwd without). Included by
// int8_kernels_avx512.cpp and int8_kernels_vnni.cpp, each built with its own flags; everything here has internal
// linkage.
//
// Scores (int8_format.h): per query row, the query is quantized once per block against the block's channel
// scales; then per 16 rows of the block (one per lane) and channel group cg, one 64-byte load of the codes
// [16 rows, 4 channels] meets the query's 4 bytes of that group broadcast to every lane. Values: a row's codes widen
// to floats in registers and meet the accumulator (kv_kernels.h's fused kernels), 16 channels per step.
#pragma once

#include <immintrin.h>

#include "int8_format.h"
#include "plugins/quant/kv_common/kv_kernels.h"

namespace troupe::kv {
namespace {

struct int8_decoder_avx512 : int8_decoder_base<isa_avx512> {
    static void value_row(const int8_format& f, const uint8_t* block, int32_t h, int32_t r, float* x) {
        const int32_t n = f.geometry.head_dim;
        const __m512 s = _mm512_set1_ps(f.v_scales(block, h)[r]);
        const int8_t* codes = f.v_codes(block, h, r);
        for (int32_t c = 0; c < n; c += 16) {
            const __mmask16 m = lanes_mask(n - c);
            const __m512i w = _mm512_cvtepi8_epi32(_mm_maskz_loadu_epi8(m, codes + c));
            _mm512_mask_storeu_ps(x + c, m, _mm512_mul_ps(s, _mm512_cvtepi32_ps(w)));
        }
    }
    static __m512 value16(const int8_format& f, const uint8_t* block, int32_t h, int32_t r, int32_t c) {
        const int8_t* codes = f.v_codes(block, h, r) + c;
        return _mm512_mul_ps(
            _mm512_set1_ps(f.v_scales(block, h)[r]),
            _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(codes)))));
    }
};

// int8_quantize_query, vectorized: the same floats, so the same codes. codes: 64-byte aligned, max_head_dim bytes.
inline int8_query quantize_query(const float* q, const float* k_scales, int32_t n, float scale, int8_t* codes) {
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
    int8_query out;
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

// s[g * s_stride + r] = scale * (q_g . k_r) (block_kernels::scores). Dot::dp(acc, a, b): acc + the sums of four
// products of a's unsigned and b's signed bytes per lane.
template <class Dot>
void int8_scores(const void* format, const uint8_t* block, int32_t h, const float* q, int32_t group, int32_t n_rows,
                 float scale, float* s, int32_t s_stride) {
    const auto& f = *static_cast<const int8_format*>(format);
    const int32_t hd = f.geometry.head_dim;
    const int32_t n_groups = hd / 4;
    const float* ks = f.k_scales(block, h);
    const uint8_t* k0 = f.k_group(block, h, 0);
    const size_t group_bytes = static_cast<size_t>(f.geometry.block_size) * 4;
    alignas(64) int8_t qi[max_head_dim];  // [head_dim] the query's codes, read 4 at a time
    for (int32_t g = 0; g < group; ++g) {
        const int8_query iq = quantize_query(q + static_cast<size_t>(g) * hd, ks, hd, scale, qi);
        const __m512 qs = _mm512_set1_ps(iq.scale);
        const __m512i bias = _mm512_set1_epi32(128 * iq.sum);
        for (int32_t r0 = 0; r0 < n_rows; r0 += 16) {
            const __mmask16 m = lanes_mask(n_rows - r0);
            const uint8_t* rows = k0 + static_cast<size_t>(r0) * 4;
            // Four independent chains over the channel groups.
            __m512i acc[4] = {_mm512_setzero_si512(), _mm512_setzero_si512(), _mm512_setzero_si512(),
                              _mm512_setzero_si512()};
            int32_t cg = 0;
            for (; cg + 4 <= n_groups; cg += 4) {
#pragma GCC unroll 4
                for (int32_t u = 0; u < 4; ++u) {
                    int32_t q4;
                    std::memcpy(&q4, qi + 4 * (cg + u), 4);
                    acc[u] = Dot::dp(acc[u], _mm512_maskz_loadu_epi32(m, rows + (cg + u) * group_bytes),
                                     _mm512_set1_epi32(q4));
                }
            }
            for (; cg < n_groups; ++cg) {
                int32_t q4;
                std::memcpy(&q4, qi + 4 * cg, 4);
                acc[0] = Dot::dp(acc[0], _mm512_maskz_loadu_epi32(m, rows + cg * group_bytes), _mm512_set1_epi32(q4));
            }
            const __m512i dot = _mm512_add_epi32(_mm512_add_epi32(acc[0], acc[1]), _mm512_add_epi32(acc[2], acc[3]));
            _mm512_mask_storeu_ps(s + static_cast<size_t>(g) * s_stride + r0, m,
                                  _mm512_mul_ps(qs, _mm512_cvtepi32_ps(_mm512_sub_epi32(dot, bias))));
        }
    }
}

// The kernel table over Dot.
template <class Dot>
block_kernels int8_kernels_with() {
    using D = int8_decoder_avx512;
    return block_kernels{int8_scores<Dot>,           accumulate_auto<D>,        scores_f32<isa_avx512>,
                         accumulate_f32<isa_avx512>, softmax_block<isa_avx512>, int8_prefetch};
}

}  // namespace
}  // namespace troupe::kv
