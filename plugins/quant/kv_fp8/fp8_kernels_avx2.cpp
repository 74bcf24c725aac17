// kv/fp8 AVX2 kernels (built with -mavx2 -mfma -mf16c; called only when the CPU has them and lacks AVX-512F/BW/VL):
// fp8_kernels_avx512.cpp's in 8 lanes. 8 codes widen to halves by shifts and to floats by one vcvtph2ps (the scalar
// twin reads the format's table); scores with a block's rows in lanes, values through value rows decoded 8 channels
// at a time.
#include <immintrin.h>

#include <cstring>

#include "fp8_format.h"
#include "plugins/quant/kv_common/kv_kernels.h"

namespace troupe::kv {
namespace {

// n (1..8) codes as floats, as fp8_kernels_avx512.cpp's widen16: E5M2 is a half's high byte; E4M3's exponent and
// mantissa shifted under a half's sign are the value times 2^-8, so `unit` (the caller's scale) carries the 2^8.
inline __m256 widen8(const fp8_format& f, const uint8_t* codes, int32_t n = 8) {
    int64_t bytes = 0;
    if (n >= 8) {
        std::memcpy(&bytes, codes, 8);
    } else {
        std::memcpy(&bytes, codes, static_cast<size_t>(n));
    }
    const __m128i c = _mm_cvtepu8_epi16(_mm_cvtsi64_si128(bytes));
    __m128i bits;
    if (f.kind == troupe::fp8::format::e5m2) {
        bits = _mm_slli_epi16(c, 8);
    } else {
        const __m128i sign = _mm_slli_epi16(_mm_and_si128(c, _mm_set1_epi16(0x80)), 8);
        bits = _mm_or_si128(sign, _mm_slli_epi16(_mm_and_si128(c, _mm_set1_epi16(0x7f)), 7));
    }
    return _mm256_cvtph_ps(bits);
}

inline float unit(const fp8_format& f) {
    return f.kind == troupe::fp8::format::e5m2 ? 1.0f : 256.0f;
}

struct fp8_decoder_avx2 : fp8_decoder_base<isa_avx2> {
    static void value_row(const fp8_format& f, const uint8_t* block, int32_t h, int32_t r, float* x) {
        const __m256 s = _mm256_set1_ps(f.scale(block, true, h, r) * unit(f));
        const uint8_t* codes = f.v_codes(block, h, r);
        const int32_t n = f.geometry.head_dim;
        for (int32_t c = 0; c < n; c += 8) {
            _mm256_maskstore_ps(x + c, lanes8(n - c), _mm256_mul_ps(s, widen8(f, codes + c, n - c)));
        }
    }
};

// s[g * s_stride + r] = scale * (q_g . k_r) (block_kernels::scores), a block's rows in lanes: per channel, 8 rows'
// codes widen to floats (value / unit) and meet the query's channel broadcast, four chains over the channels; each
// lane is multiplied by its row's scale (and unit) at the end.
void fp8_scores_avx2(const void* format, const uint8_t* block, int32_t h, const float* q, int32_t group, int32_t n_rows,
                     float scale, float* s, int32_t s_stride) {
    const auto& f = *static_cast<const fp8_format*>(format);
    const int32_t hd = f.geometry.head_dim;
    const float* ks = f.scaled ? f.scale_at(const_cast<uint8_t*>(block), false, h, 0) : nullptr;
    for (int32_t r0 = 0; r0 < n_rows; r0 += 8) {
        const int32_t n = n_rows - r0;
        const __m256i m = lanes8(n);
        __m256 row_scale = _mm256_set1_ps(scale * unit(f));
        if (ks != nullptr) row_scale = _mm256_mul_ps(row_scale, _mm256_maskload_ps(ks + r0, m));
        for (int32_t g = 0; g < group; ++g) {
            const float* qg = q + static_cast<size_t>(g) * hd;
            __m256 acc[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps()};
            int32_t c = 0;
            for (; c + 4 <= hd; c += 4) {
#pragma GCC unroll 4
                for (int32_t u = 0; u < 4; ++u) {
                    acc[u] = _mm256_fmadd_ps(_mm256_set1_ps(qg[c + u]), widen8(f, f.k_channel(block, h, c + u) + r0, n),
                                             acc[u]);
                }
            }
            for (; c < hd; ++c) {
                acc[0] = _mm256_fmadd_ps(_mm256_set1_ps(qg[c]), widen8(f, f.k_channel(block, h, c) + r0, n), acc[0]);
            }
            const __m256 dot = _mm256_add_ps(_mm256_add_ps(acc[0], acc[1]), _mm256_add_ps(acc[2], acc[3]));
            _mm256_maskstore_ps(s + static_cast<size_t>(g) * s_stride + r0, m, _mm256_mul_ps(dot, row_scale));
        }
    }
}

}  // namespace

block_kernels fp8_kernels_avx2() {
    using D = fp8_decoder_avx2;
    return block_kernels{fp8_scores_avx2,          accumulate_block<D>,     scores_f32<isa_avx2>,
                         accumulate_f32<isa_avx2>, softmax_block<isa_avx2>, D::prefetch};
}

}  // namespace troupe::kv
