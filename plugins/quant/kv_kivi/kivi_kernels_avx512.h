// kv/kivi AVX-512 kernels, generic over the byte dot product (kv_dot_avx512.h: vpdpbusd with VNNI, vpmaddwd pairs
// without). Included by kivi_kernels_avx512.cpp and kivi_kernels_vnni.cpp, each built with its own flags; internal
// linkage.
//
// Scores (kivi_format.h): per query row, the query is quantized once per block against the block's channel scales;
// then per 16 rows (one per lane) and channel group, 16 bytes of codes widen to 16 lanes of four byte codes and meet
// the query's 4 bytes of that group in one dot product; scale * (q . min) is added. Values (value groups of whole
// 16-lane vectors; others take kivi_accumulate_scalar): per query row and value group, the weights are quantized
// once per block; per 16 channels and row group, 16 bytes of codes widen to 16 lanes of four rows' codes and meet the
// group's 4 weights in one dot product; sum_r p[r] * min[r, j] is added.
#pragma once

#include <immintrin.h>

#include "kivi_format.h"
#include "plugins/quant/kv_common/kv_dot_avx512.h"
#include "plugins/quant/kv_common/kv_kernels.h"

namespace troupe::kv {
namespace {

struct kivi_decoder_avx512 : kivi_decoder_base<isa_avx512> {
    // The block's (scale, min) halves of 16 channels at a time: F16C conversions, then even / odd lanes apart.
    static void key_channels(const kivi_format& f, const uint8_t* block, int32_t h, float* mul, float* add) {
        const uint16_t* kp = f.k_params(block, h);
        const __m512i even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
        const __m512i odd = _mm512_add_epi32(even, _mm512_set1_epi32(1));
        for (int32_t c = 0; c < f.geometry.head_dim; c += 16) {
            const __m512 lo = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(kp + 2 * c)));
            const __m512 hi = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(kp + 2 * c + 16)));
            _mm512_storeu_ps(mul + c, _mm512_permutex2var_ps(lo, even, hi));
            _mm512_storeu_ps(add + c, _mm512_permutex2var_ps(lo, odd, hi));
        }
    }
};

using kivi_decoder_scalar_rows = kivi_decoder_base<isa_avx512>;

// The codes of 16 rows of a channel group (16 bytes) as 16 lanes of four byte codes: channel 4 cg + i in byte i.
inline __m512i spread_codes(const uint8_t* bytes, __mmask16 m) {
    const __m512i v = _mm512_cvtepu8_epi32(_mm_maskz_loadu_epi8(m, bytes));
    const __m512i t = _mm512_or_si512(_mm512_or_si512(v, _mm512_slli_epi32(v, 6)),
                                      _mm512_or_si512(_mm512_slli_epi32(v, 12), _mm512_slli_epi32(v, 18)));
    return _mm512_and_si512(t, _mm512_set1_epi32(0x03030303));
}

// s[g * s_stride + r] = scale * (q_g . k_r) (block_kernels::scores).
template <class Dot>
void kivi_scores(const void* format, const uint8_t* block, int32_t h, const float* q, int32_t group, int32_t n_rows,
                 float scale, float* s, int32_t s_stride) {
    const auto& f = *static_cast<const kivi_format*>(format);
    const int32_t hd = f.geometry.head_dim;
    const int32_t n_groups = hd / 4;
    const int32_t bs = f.geometry.block_size;
    alignas(64) float mul[max_head_dim];
    alignas(64) float add[max_head_dim];
    if (hd % 16 == 0) {
        kivi_decoder_avx512::key_channels(f, block, h, mul, add);
    } else {
        kivi_decoder_scalar_rows::key_channels(f, block, h, mul, add);
    }
    const uint8_t* k0 = f.k_group(block, h, 0);
    alignas(64) int8_t qi[max_head_dim];
    for (int32_t g = 0; g < group; ++g) {
        const float* qg = q + static_cast<size_t>(g) * hd;
        const float qa = scale * isa_avx512::dot(qg, add, hd);  // scale * (q . min)
        const quantized_query iq = quantize_query(qg, mul, hd, scale, qi);
        const __m512 qs = _mm512_set1_ps(iq.scale);
        const __m512 qav = _mm512_set1_ps(qa);
        for (int32_t r0 = 0; r0 < n_rows; r0 += 16) {
            const __mmask16 m = lanes_mask(n_rows - r0);
            const uint8_t* rows = k0 + r0;
            __m512i acc[4] = {_mm512_setzero_si512(), _mm512_setzero_si512(), _mm512_setzero_si512(),
                              _mm512_setzero_si512()};
            int32_t cg = 0;
            for (; cg + 4 <= n_groups; cg += 4) {
#pragma GCC unroll 4
                for (int32_t u = 0; u < 4; ++u) {
                    int32_t q4;
                    std::memcpy(&q4, qi + 4 * (cg + u), 4);
                    acc[u] = Dot::dp(acc[u], spread_codes(rows + (cg + u) * bs, m), _mm512_set1_epi32(q4));
                }
            }
            for (; cg < n_groups; ++cg) {
                int32_t q4;
                std::memcpy(&q4, qi + 4 * cg, 4);
                acc[0] = Dot::dp(acc[0], spread_codes(rows + cg * bs, m), _mm512_set1_epi32(q4));
            }
            const __m512i dot = _mm512_add_epi32(_mm512_add_epi32(acc[0], acc[1]), _mm512_add_epi32(acc[2], acc[3]));
            _mm512_mask_storeu_ps(s + static_cast<size_t>(g) * s_stride + r0, m,
                                  _mm512_fmadd_ps(qs, _mm512_cvtepi32_ps(dot), qav));
        }
    }
}

// kivi_quantize_weights, vectorized: the same floats, so the same codes. codes: room for n_rows rounded up to 16.
inline float quantize_weights(const float* p, const float* scales, int32_t n_rows, uint8_t* codes) {
    alignas(64) float w[max_block_size];
    __m512 wmax = _mm512_setzero_ps();
    for (int32_t r = 0; r < n_rows; r += 16) {
        const __mmask16 m = lanes_mask(n_rows - r);
        const __m512 v = _mm512_mul_ps(_mm512_maskz_loadu_ps(m, p + r), _mm512_maskz_loadu_ps(m, scales + r));
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

// The block's value scales and minimums of kv head h, scales[j * block_size + r] and mins likewise ([value_groups,
// block_size] floats; at most 16 value groups): the rows' halves converted 16 at a time, then each group's gathered.
inline void value_params(const kivi_format& f, const uint8_t* block, int32_t h, int32_t n_rows, float* scales,
                         float* mins) {
    const int32_t bs = f.geometry.block_size;
    const int32_t per_row = 2 * f.value_groups();  // halves of a row: (scale, min) per group
    const int32_t n = n_rows * per_row;
    const uint16_t* vp = f.v_params(block, h, 0);
    alignas(64) float all[max_block_size * max_head_dim / 16 * 2];  // [n_rows, value_groups, (scale, min)]
    for (int32_t i = 0; i < n; i += 16) {
        const __mmask16 m = lanes_mask(n - i);
        _mm512_store_ps(all + i, _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, vp + i)));
    }
    const __m512i lane = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    for (int32_t j = 0; j < f.value_groups(); ++j) {
        for (int32_t r = 0; r < n_rows; r += 16) {
            const __mmask16 m = lanes_mask(n_rows - r);
            const __m512i at = _mm512_add_epi32(
                _mm512_mullo_epi32(_mm512_add_epi32(lane, _mm512_set1_epi32(r)), _mm512_set1_epi32(per_row)),
                _mm512_set1_epi32(2 * j));
            _mm512_mask_storeu_ps(scales + j * bs + r, m, _mm512_mask_i32gather_ps(_mm512_setzero_ps(), m, at, all, 4));
            _mm512_mask_storeu_ps(mins + j * bs + r, m,
                                  _mm512_mask_i32gather_ps(_mm512_setzero_ps(), m, at, all + 1, 4));
        }
    }
}

// acc[g * head_dim + c] += sum_r p[g * p_stride + r] * v_r[c] (block_kernels::accumulate), for value groups of whole
// 16-lane vectors: per query row and value group, the weights are quantized once per block; then per 16 channels
// (lanes) and row group, 16 bytes of codes widen to 16 lanes of four rows' codes and meet the group's 4 weights.
template <class Dot>
void kivi_accumulate(const void* format, const uint8_t* block, int32_t h, const float* p, int32_t group, int32_t n_rows,
                     int32_t p_stride, float* acc) {
    const auto& f = *static_cast<const kivi_format*>(format);
    const int32_t hd = f.geometry.head_dim;
    const int32_t bs = f.geometry.block_size;
    const int32_t vg = f.value_group;
    const int32_t n_groups = (n_rows + 3) / 4;
    const uint8_t* v0 = f.v_group(block, h, 0);
    alignas(64) float scales[max_head_dim / 16 * max_block_size];  // [value_groups, block_size]
    alignas(64) float mins[max_head_dim / 16 * max_block_size];
    value_params(f, block, h, n_rows, scales, mins);
    alignas(64) uint8_t wq[max_block_size + 16];
    for (int32_t g = 0; g < group; ++g) {
        const float* pg = p + static_cast<size_t>(g) * p_stride;
        float* ag = acc + static_cast<size_t>(g) * hd;
        for (int32_t j = 0; j < f.value_groups(); ++j) {
            const float min_sum = isa_avx512::dot(pg, mins + j * bs, n_rows);  // sum_r p[r] * min[r, j]
            const float ws = quantize_weights(pg, scales + j * bs, n_rows, wq);
            const __m512 wsv = _mm512_set1_ps(ws);
            const __m512 msv = _mm512_set1_ps(min_sum);
            for (int32_t c = j * vg; c < (j + 1) * vg; c += 16) {
                __m512i dot = _mm512_setzero_si512();
                if (ws != 0.0f) {
                    for (int32_t rg = 0; rg < n_groups; ++rg) {
                        int32_t w4;
                        std::memcpy(&w4, wq + 4 * rg, 4);
                        dot = Dot::dp(dot, _mm512_set1_epi32(w4),
                                      spread_codes(v0 + static_cast<size_t>(rg) * hd + c, 0xffff));
                    }
                }
                const __m512 a = _mm512_fmadd_ps(wsv, _mm512_cvtepi32_ps(dot), _mm512_loadu_ps(ag + c));
                _mm512_storeu_ps(ag + c, _mm512_add_ps(a, msv));
            }
        }
    }
}

// The kernel table over Dot: the vector value kernel where value groups are whole 16-lane vectors.
template <class Dot>
block_kernels kivi_kernels_with(const kivi_format& f) {
    using D = kivi_decoder_scalar_rows;
    return block_kernels{
        kivi_scores<Dot>,          f.value_group % 16 == 0 ? kivi_accumulate<Dot> : kivi_accumulate_scalar,
        scores_f32<isa_avx512>,    accumulate_f32<isa_avx512>,
        softmax_block<isa_avx512>, D::prefetch};
}

}  // namespace
}  // namespace troupe::kv
