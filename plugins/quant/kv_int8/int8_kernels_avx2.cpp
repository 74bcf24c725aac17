// kv/int8 AVX2 kernels (built with -mavx2 -mfma -mf16c; called only when the CPU has them and lacks AVX-512F/BW/VL):
// int8_kernels_avx512.h's integer dot products in 8 lanes, with the scalar twin's query and weight codes
// (kv_query_avx2.h: quantize_query_ref vectorized; int8_quantize_weights), so every integer sum is the twin's.
//
// Scores: per query row, per 8 rows of the block (one per lane) and channel group, one 32-byte load of the codes
// [8 rows, 4 channels] meets the query's 4 codes of that group broadcast to every lane. The key codes are biased by
// 128: unbiased by an xor, a signed byte times a signed byte is exact through vpmaddubsw (|a| as unsigned, at most
// 128, times b with a's sign: a pair at most 32512) and vpmaddwd. Values: per query row and 8 channels (one per
// lane), one 32-byte load of the codes [8 channels, 4 rows] per row group meets the group's 4 weight codes (0..255,
// which vpmaddubsw could saturate) as 16-bit even and odd halves in two vpmaddwd.
#include <immintrin.h>

#include "int8_format.h"
#include "plugins/quant/kv_common/kv_kernels.h"
#include "plugins/quant/kv_common/kv_query_avx2.h"

namespace troupe::kv {
namespace {

// acc + the sums of the four products of a's and b's signed bytes in each 32-bit lane (exact).
inline __m256i dot_s8(__m256i acc, __m256i a, __m256i b) {
    const __m256i pairs = _mm256_maddubs_epi16(_mm256_abs_epi8(a), _mm256_sign_epi8(b, a));
    return _mm256_add_epi32(acc, _mm256_madd_epi16(pairs, _mm256_set1_epi16(1)));
}

void int8_scores_avx2(const void* format, const uint8_t* block, int32_t h, const float* q, int32_t group,
                      int32_t n_rows, float scale, float* s, int32_t s_stride) {
    const auto& f = *static_cast<const int8_format*>(format);
    const int32_t hd = f.geometry.head_dim;
    const int32_t n_groups = hd / 4;
    const float* ks = f.k_scales(block, h);
    const uint8_t* k0 = f.k_group(block, h, 0);
    const size_t group_bytes = static_cast<size_t>(f.geometry.block_size) * 4;
    const __m256i unbias = _mm256_set1_epi8(static_cast<char>(0x80));
    int8_t qi[max_head_dim + 8];
    for (int32_t g = 0; g < group; ++g) {
        const quantized_query iq = quantize_query_avx2(q + static_cast<size_t>(g) * hd, ks, hd, scale, qi);
        const __m256 qs = _mm256_set1_ps(iq.scale);
        for (int32_t r0 = 0; r0 < n_rows; r0 += 8) {
            const __m256i m = lanes8(n_rows - r0);
            const auto* rows = reinterpret_cast<const int*>(k0 + static_cast<size_t>(r0) * 4);
            __m256i acc[4] = {_mm256_setzero_si256(), _mm256_setzero_si256(), _mm256_setzero_si256(),
                              _mm256_setzero_si256()};
            auto step = [&](int32_t cg, int32_t u) {
                int32_t q4;
                std::memcpy(&q4, qi + 4 * cg, 4);
                const __m256i k = _mm256_xor_si256(_mm256_maskload_epi32(rows + cg * group_bytes / 4, m), unbias);
                acc[u] = dot_s8(acc[u], k, _mm256_set1_epi32(q4));
            };
            int32_t cg = 0;
            for (; cg + 4 <= n_groups; cg += 4) {
#pragma GCC unroll 4
                for (int32_t u = 0; u < 4; ++u) step(cg + u, u);
            }
            for (; cg < n_groups; ++cg) step(cg, 0);
            const __m256i dot = _mm256_add_epi32(_mm256_add_epi32(acc[0], acc[1]), _mm256_add_epi32(acc[2], acc[3]));
            _mm256_maskstore_ps(s + static_cast<size_t>(g) * s_stride + r0, m,
                                _mm256_mul_ps(qs, _mm256_cvtepi32_ps(dot)));
        }
    }
}

void int8_accumulate_avx2(const void* format, const uint8_t* block, int32_t h, const float* p, int32_t group,
                          int32_t n_rows, int32_t p_stride, float* acc) {
    const auto& f = *static_cast<const int8_format*>(format);
    const int32_t hd = f.geometry.head_dim;
    const int32_t n_groups = (n_rows + 3) / 4;
    const int8_t* v0 = f.v_group(block, h, 0);
    const size_t group_bytes = static_cast<size_t>(hd) * 4;
    uint8_t wq[max_block_size + 4];  // the weights' codes, zero to a multiple of 4 rows
    for (int32_t g = 0; g < group; ++g) {
        const float ws = int8_quantize_weights(p + static_cast<size_t>(g) * p_stride, f.v_scales(block, h), n_rows, wq);
        if (ws == 0.0f) continue;
        const __m256 wsv = _mm256_set1_ps(ws);
        float* ag = acc + static_cast<size_t>(g) * hd;
        for (int32_t c0 = 0; c0 < hd; c0 += 32) {
            __m256i m[4];
            __m256i dot[4];
#pragma GCC unroll 4
            for (int32_t u = 0; u < 4; ++u) {
                m[u] = lanes8(hd - c0 - 8 * u);
                dot[u] = _mm256_setzero_si256();
            }
            for (int32_t rg = 0; rg < n_groups; ++rg) {
                int32_t w4;
                std::memcpy(&w4, wq + 4 * rg, 4);
                const __m256i wv = _mm256_set1_epi32(w4);
                const __m256i w_even = _mm256_and_si256(wv, _mm256_set1_epi16(0x00ff));
                const __m256i w_odd = _mm256_srli_epi16(wv, 8);
                const auto* codes = reinterpret_cast<const int*>(v0 + rg * group_bytes + static_cast<size_t>(c0) * 4);
#pragma GCC unroll 4
                for (int32_t u = 0; u < 4; ++u) {
                    const __m256i v = _mm256_maskload_epi32(codes + 8 * u, m[u]);
                    const __m256i v_even = _mm256_srai_epi16(_mm256_slli_epi16(v, 8), 8);
                    const __m256i v_odd = _mm256_srai_epi16(v, 8);
                    dot[u] = _mm256_add_epi32(
                        dot[u], _mm256_add_epi32(_mm256_madd_epi16(w_even, v_even), _mm256_madd_epi16(w_odd, v_odd)));
                }
            }
#pragma GCC unroll 4
            for (int32_t u = 0; u < 4; ++u) {
                float* a = ag + c0 + 8 * u;
                _mm256_maskstore_ps(a, m[u],
                                    _mm256_fmadd_ps(wsv, _mm256_cvtepi32_ps(dot[u]), _mm256_maskload_ps(a, m[u])));
            }
        }
    }
}

}  // namespace

block_kernels int8_kernels_avx2() {
    return block_kernels{int8_scores_avx2,         int8_accumulate_avx2,    scores_f32<isa_avx2>,
                         accumulate_f32<isa_avx2>, softmax_block<isa_avx2>, int8_prefetch};
}

}  // namespace troupe::kv
