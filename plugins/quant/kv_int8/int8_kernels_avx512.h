// kv/int8 AVX-512 kernels, generic over the instruction that multiplies four unsigned key bytes by four signed query
// bytes per 32-bit lane and adds them up (vpdpbusd with VNNI, two vpmaddwd without). Included by
// int8_kernels_avx512.cpp and int8_kernels_vnni.cpp, each built with its own flags; everything here has internal
// linkage.
//
// Scores (int8_format.h): per query row, the query is quantized once per block against the block's channel
// scales; then per 16 rows of the block (one per lane) and channel group cg, one 64-byte load of the codes
// [16 rows, 4 channels] meets the query's 4 bytes of that group broadcast to every lane. Values: per query row, the
// weights p * v_scale are quantized once per block; then per 16 channels (one per lane) and row group, one 64-byte
// load of the codes [16 channels, 4 rows] meets the group's 4 weights broadcast to every lane.
#pragma once

#include <immintrin.h>

#include "int8_format.h"
#include "plugins/quant/kv_common/kv_dot_avx512.h"
#include "plugins/quant/kv_common/kv_kernels.h"

namespace troupe::kv {
namespace {

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
        const quantized_query iq = quantize_query(q + static_cast<size_t>(g) * hd, ks, hd, scale, qi);
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

// int8_quantize_weights, vectorized: the same floats, so the same codes. codes: room for n_rows rounded up to 16.
inline float quantize_weights(const float* p, const float* v_scales, int32_t n_rows, uint8_t* codes) {
    alignas(64) float w[max_block_size];
    __m512 wmax = _mm512_setzero_ps();
    for (int32_t r = 0; r < n_rows; r += 16) {
        const __mmask16 m = lanes_mask(n_rows - r);
        const __m512 v = _mm512_mul_ps(_mm512_maskz_loadu_ps(m, p + r), _mm512_maskz_loadu_ps(m, v_scales + r));
        _mm512_store_ps(w + r, v);
        wmax = _mm512_max_ps(wmax, v);
    }
    const float top = _mm512_reduce_max_ps(wmax);
    if (!(top > 0.0f)) return 0.0f;
    const float scale = top / 255.0f;
    const __m512 inv = _mm512_set1_ps(1.0f / scale);
    for (int32_t r = 0; r < n_rows; r += 16) {
        __m512i v = _mm512_cvt_roundps_epi32(_mm512_mul_ps(_mm512_load_ps(w + r), inv),
                                             _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
        v = _mm512_maskz_mov_epi32(lanes_mask(n_rows - r), _mm512_max_epi32(_mm512_min_epi32(v, _mm512_set1_epi32(255)),
                                                                            _mm512_setzero_si512()));
        _mm_storeu_si128(reinterpret_cast<__m128i*>(codes + r), _mm512_cvtepi32_epi8(v));
    }
    return scale;
}

// acc[g * head_dim + c] += sum_r p[g * p_stride + r] * v_r[c] (block_kernels::accumulate): per query row, the
// weights are quantized once per block; then per 16 channels (lanes) and row group rg, one 64-byte load of the codes
// [16 channels, 4 rows] meets the 4 weights of that group broadcast to every lane.
template <class Dot>
void int8_accumulate(const void* format, const uint8_t* block, int32_t h, const float* p, int32_t group, int32_t n_rows,
                     int32_t p_stride, float* acc) {
    const auto& f = *static_cast<const int8_format*>(format);
    const int32_t hd = f.geometry.head_dim;
    const int32_t n_groups = (n_rows + 3) / 4;
    const int8_t* v0 = f.v_group(block, h, 0);
    const size_t group_bytes = static_cast<size_t>(hd) * 4;
    alignas(64) uint8_t wq[max_block_size + 16];  // [n_rows rounded up to 4] the weights' codes, read 4 at a time
    for (int32_t g = 0; g < group; ++g) {
        const float ws = quantize_weights(p + static_cast<size_t>(g) * p_stride, f.v_scales(block, h), n_rows, wq);
        if (ws == 0.0f) continue;
        const __m512 wsv = _mm512_set1_ps(ws);
        float* ag = acc + static_cast<size_t>(g) * hd;
        for (int32_t c0 = 0; c0 < hd; c0 += 64) {
            __mmask16 m[4];
            __m512i dot[4];
#pragma GCC unroll 4
            for (int32_t u = 0; u < 4; ++u) {
                m[u] = lanes_mask_or_none(hd - c0 - 16 * u);
                dot[u] = _mm512_setzero_si512();
            }
            for (int32_t rg = 0; rg < n_groups; ++rg) {
                int32_t w4;
                std::memcpy(&w4, wq + 4 * rg, 4);
                const __m512i wv = _mm512_set1_epi32(w4);
                const int8_t* codes = v0 + rg * group_bytes + static_cast<size_t>(c0) * 4;
#pragma GCC unroll 4
                for (int32_t u = 0; u < 4; ++u) {
                    dot[u] = Dot::dp(dot[u], wv, _mm512_maskz_loadu_epi32(m[u], codes + 64 * u));
                }
            }
#pragma GCC unroll 4
            for (int32_t u = 0; u < 4; ++u) {
                float* a = ag + c0 + 16 * u;
                _mm512_mask_storeu_ps(a, m[u],
                                      _mm512_fmadd_ps(wsv, _mm512_cvtepi32_ps(dot[u]), _mm512_maskz_loadu_ps(m[u], a)));
            }
        }
    }
}

// The kernel table over Dot.
template <class Dot>
block_kernels int8_kernels_with() {
    return block_kernels{int8_scores<Dot>,           int8_accumulate<Dot>,      scores_f32<isa_avx512>,
                         accumulate_f32<isa_avx512>, softmax_block<isa_avx512>, int8_prefetch};
}

}  // namespace
}  // namespace troupe::kv
