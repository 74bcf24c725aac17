// kv/kivi AVX-512 kernels, generic over the byte dot product (kv_dot_avx512.h: vpdpbusd with VNNI, vpmaddwd pairs
// without). Included by kivi_kernels_avx512.cpp and kivi_kernels_vnni.cpp, each built with its own flags; internal
// linkage.
//
// Scores (kivi_format.h): per query row, the query is quantized once per block against the block's channel scales;
// then per 16 rows (one per lane) and channel group, 16 bytes of codes widen to 16 lanes of four byte codes and meet
// the query's 4 bytes of that group in one dot product; scale * (q . min) is added. Values: with head_dim a
// multiple of 64 and value_group a multiple of 16 (the interleaved packing), 16 bytes of a row widen to 16 lanes and
// four shifts give its 64 codes; other shapes use the scalar value rows.
#pragma once

#include <immintrin.h>

#include "kivi_format.h"
#include "plugins/quant/kv_common/kv_dot_avx512.h"
#include "plugins/quant/kv_common/kv_kernels.h"

namespace troupe::kv {
namespace {

// x[c] = code(c) for a row in the interleaved packing.
inline void unpack(const uint8_t* row, int32_t head_dim, float* x) {
    const __m512i three = _mm512_set1_epi32(3);
    for (int32_t c = 0; c < head_dim; c += 64) {
        const __m512i bytes = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(row + c / 4)));
        for (int32_t j = 0; j < 4; ++j) {
            const __m512i codes = _mm512_and_si512(_mm512_srli_epi32(bytes, 2 * j), three);
            _mm512_storeu_ps(x + c + 16 * j, _mm512_cvtepi32_ps(codes));
        }
    }
}

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
    static __m512 value16(const kivi_format& f, const uint8_t* block, int32_t h, int32_t r, int32_t c) {
        const uint16_t* vp = f.v_params(block, h, r) + 2 * (c / f.value_group);
        return _mm512_fmadd_ps(codes16(f.v_codes(block, h, r), c), _mm512_set1_ps(_cvtsh_ss(vp[0])),
                               _mm512_set1_ps(_cvtsh_ss(vp[1])));
    }
    // Codes of channels c..c+15 (interleaved packing: the 16 bytes of c's 64-channel group, shifted).
    static __m512 codes16(const uint8_t* row, int32_t c) {
        const __m512i bytes =
            _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(row + c / 4 - (c % 64) / 4)));
        const __m512i codes =
            _mm512_and_si512(_mm512_srlv_epi32(bytes, _mm512_set1_epi32(2 * ((c % 64) / 16))), _mm512_set1_epi32(3));
        return _mm512_cvtepi32_ps(codes);
    }

    static void value_row(const kivi_format& f, const uint8_t* block, int32_t h, int32_t r, float* x) {
        const int32_t hd = f.geometry.head_dim;
        unpack(f.v_codes(block, h, r), hd, x);
        const uint16_t* vp = f.v_params(block, h, r);
        for (int32_t c = 0; c < hd; c += 16) {
            const int32_t j = c / f.value_group;
            const __m512 scale = _mm512_set1_ps(fp16_to_fp32(vp[2 * j]));
            const __m512 mn = _mm512_set1_ps(fp16_to_fp32(vp[2 * j + 1]));
            _mm512_storeu_ps(x + c, _mm512_fmadd_ps(_mm512_loadu_ps(x + c), scale, mn));
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

// The kernel table over Dot: the fused value kernels where the packing allows, the row-buffer ones otherwise.
template <class Dot>
block_kernels kivi_kernels_with(const kivi_format& f) {
    if (f.interleaved() && f.value_group % 16 == 0) {
        using D = kivi_decoder_avx512;
        return block_kernels{kivi_scores<Dot>,           accumulate_auto<D>,        scores_f32<isa_avx512>,
                             accumulate_f32<isa_avx512>, softmax_block<isa_avx512>, D::prefetch};
    }
    using D = kivi_decoder_scalar_rows;
    return block_kernels{kivi_scores<Dot>,           accumulate_block<D>,       scores_f32<isa_avx512>,
                         accumulate_f32<isa_avx512>, softmax_block<isa_avx512>, D::prefetch};
}

}  // namespace
}  // namespace troupe::kv
