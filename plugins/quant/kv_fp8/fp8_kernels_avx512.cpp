// kv/fp8 AVX-512 kernels (built with -mavx512f -mavx512bw -mavx512vl -mf16c; called only when the CPU has them): 16
// codes widen to halves by shifts and to floats by one conversion (the scalar twin reads the format's table), masked
// tails for any head_dim; scores with a block's rows in lanes (fp8_format.h), values with channels in lanes.
#include <immintrin.h>

#include "fp8_format.h"
#include "plugins/quant/kv_common/kv_kernels.h"

namespace troupe::kv {
namespace {

// 16 codes as floats without a table: an FP8 code is a half with fewer bits. E5M2 is a half's high byte; E4M3's
// exponent and mantissa shifted under a half's sign are the value times 2^-8 (bias 7 against 15), subnormals
// included, so `unit` (the caller's scale) carries the 2^8.
inline __m512 widen16(const fp8_format& f, const uint8_t* codes, __mmask16 m = 0xffff) {
    const __m256i c = _mm256_cvtepu8_epi16(_mm_maskz_loadu_epi8(m, codes));
    __m256i bits;
    if (f.kind == troupe::fp8::format::e5m2) {
        bits = _mm256_slli_epi16(c, 8);
    } else {
        const __m256i sign = _mm256_slli_epi16(_mm256_and_si256(c, _mm256_set1_epi16(0x80)), 8);
        bits = _mm256_or_si256(sign, _mm256_slli_epi16(_mm256_and_si256(c, _mm256_set1_epi16(0x7f)), 7));
    }
    return _mm512_cvtph_ps(bits);
}

inline float unit(const fp8_format& f) {
    return f.kind == troupe::fp8::format::e5m2 ? 1.0f : 256.0f;
}

inline void decode(const fp8_format& f, const uint8_t* codes, float scale, float* x) {
    const __m512 s = _mm512_set1_ps(scale * unit(f));
    const int32_t n = f.geometry.head_dim;
    for (int32_t c = 0; c < n; c += 16) {
        const __mmask16 m = lanes_mask(n - c);
        _mm512_mask_storeu_ps(x + c, m, _mm512_mul_ps(s, widen16(f, codes + c, m)));
    }
}

struct fp8_decoder_avx512 : fp8_decoder_base<isa_avx512> {
    static void value_row(const fp8_format& f, const uint8_t* block, int32_t h, int32_t r, float* x) {
        decode(f, f.v_codes(block, h, r), f.scale(block, true, h, r), x);
    }
    static __m512 value16(const fp8_format& f, const uint8_t* block, int32_t h, int32_t r, int32_t c) {
        return _mm512_mul_ps(_mm512_set1_ps(f.scale(block, true, h, r) * unit(f)),
                             widen16(f, f.v_codes(block, h, r) + c));
    }
};

// s[g * s_stride + r] = scale * (q_g . k_r) (block_kernels::scores), a block's rows in lanes: per channel, 16 rows'
// codes widen to floats (value / unit) and meet the query's channel broadcast, four chains over the channels; each
// lane is multiplied by its row's scale (and unit) at the end.
void fp8_scores(const void* format, const uint8_t* block, int32_t h, const float* q, int32_t group, int32_t n_rows,
                float scale, float* s, int32_t s_stride) {
    const auto& f = *static_cast<const fp8_format*>(format);
    const int32_t hd = f.geometry.head_dim;
    const float* ks = f.scaled ? f.scale_at(const_cast<uint8_t*>(block), false, h, 0) : nullptr;
    for (int32_t r0 = 0; r0 < n_rows; r0 += 16) {
        const __mmask16 m = lanes_mask(n_rows - r0);
        __m512 row_scale = _mm512_set1_ps(scale * unit(f));
        if (ks != nullptr) row_scale = _mm512_mul_ps(row_scale, _mm512_maskz_loadu_ps(m, ks + r0));
        for (int32_t g = 0; g < group; ++g) {
            const float* qg = q + static_cast<size_t>(g) * hd;
            __m512 acc[4] = {_mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps()};
            int32_t c = 0;
            for (; c + 4 <= hd; c += 4) {
#pragma GCC unroll 4
                for (int32_t u = 0; u < 4; ++u) {
                    acc[u] = _mm512_fmadd_ps(_mm512_set1_ps(qg[c + u]),
                                             widen16(f, f.k_channel(block, h, c + u) + r0, m), acc[u]);
                }
            }
            for (; c < hd; ++c) {
                acc[0] = _mm512_fmadd_ps(_mm512_set1_ps(qg[c]), widen16(f, f.k_channel(block, h, c) + r0, m), acc[0]);
            }
            const __m512 dot = _mm512_add_ps(_mm512_add_ps(acc[0], acc[1]), _mm512_add_ps(acc[2], acc[3]));
            _mm512_mask_storeu_ps(s + static_cast<size_t>(g) * s_stride + r0, m, _mm512_mul_ps(dot, row_scale));
        }
    }
}

}  // namespace

block_kernels fp8_kernels_avx512() {
    using D = fp8_decoder_avx512;
    return block_kernels{
        fp8_scores, accumulate_auto<D>, scores_f32<isa_avx512>, accumulate_f32<isa_avx512>, softmax_block<isa_avx512>,
        D::prefetch};
}

}  // namespace troupe::kv
