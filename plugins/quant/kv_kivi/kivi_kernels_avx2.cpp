// kv/kivi AVX2 kernels (built with -mavx2 -mfma -mf16c; called only when the CPU has them and lacks AVX-512F/BW/VL):
// kivi_kernels_avx512.h in 8 lanes, with the scalar twin's query and weight codes (kv_query_avx2.h,
// kivi_quantize_weights), so every integer sum is the twin's. The 2-bit codes are at most 3, so vpmaddubsw's pairs
// cannot saturate (3 * 127 * 2 with the query, 255 * 3 * 2 with the weights): one vpmaddubsw and one vpmaddwd per
// 8 lanes of four codes.
#include <immintrin.h>

#include <cstring>

#include "kivi_format.h"
#include "plugins/quant/kv_common/kv_kernels.h"
#include "plugins/quant/kv_common/kv_query_avx2.h"

namespace troupe::kv {
namespace {

// n (1..8) bytes of codes as 8 lanes of four byte codes: code i of byte b (bits 2i, 2i + 1) in byte i of lane b.
inline __m256i spread8(const uint8_t* bytes, int32_t n = 8) {
    int64_t b = 0;
    std::memcpy(&b, bytes, static_cast<size_t>(n < 8 ? n : 8));
    const __m256i v = _mm256_cvtepu8_epi32(_mm_cvtsi64_si128(b));
    const __m256i t = _mm256_or_si256(_mm256_or_si256(v, _mm256_slli_epi32(v, 6)),
                                      _mm256_or_si256(_mm256_slli_epi32(v, 12), _mm256_slli_epi32(v, 18)));
    return _mm256_and_si256(t, _mm256_set1_epi32(0x03030303));
}

// acc + the sums of four products of a's unsigned and b's signed bytes per lane (no pair may exceed 32767).
inline __m256i dot_small(__m256i acc, __m256i a, __m256i b) {
    return _mm256_add_epi32(acc, _mm256_madd_epi16(_mm256_maddubs_epi16(a, b), _mm256_set1_epi16(1)));
}

// s[g * s_stride + r] = scale * (q_g . k_r) (block_kernels::scores): per 8 rows (lanes) and channel group, the rows'
// byte of four codes meets the query's 4 codes of that group; scale * (q . min) is added.
void kivi_scores_avx2(const void* format, const uint8_t* block, int32_t h, const float* q, int32_t group,
                      int32_t n_rows, float scale, float* s, int32_t s_stride) {
    const auto& f = *static_cast<const kivi_format*>(format);
    const int32_t hd = f.geometry.head_dim;
    const int32_t n_groups = hd / 4;
    const int32_t bs = f.geometry.block_size;
    float mul[max_head_dim];
    float add[max_head_dim];
    kivi_decoder_base<isa_avx2>::key_channels(f, block, h, mul, add);
    const uint8_t* k0 = f.k_group(block, h, 0);
    int8_t qi[max_head_dim + 8];
    for (int32_t g = 0; g < group; ++g) {
        const float* qg = q + static_cast<size_t>(g) * hd;
        const float qa = scale * isa_avx2::dot(qg, add, hd);  // scale * (q . min)
        const quantized_query iq = quantize_query_avx2(qg, mul, hd, scale, qi);
        const __m256 qs = _mm256_set1_ps(iq.scale);
        const __m256 qav = _mm256_set1_ps(qa);
        for (int32_t r0 = 0; r0 < n_rows; r0 += 8) {
            const int32_t n = n_rows - r0;
            const uint8_t* rows = k0 + r0;
            __m256i acc[4] = {_mm256_setzero_si256(), _mm256_setzero_si256(), _mm256_setzero_si256(),
                              _mm256_setzero_si256()};
            auto step = [&](int32_t cg, int32_t u) {
                int32_t q4;
                std::memcpy(&q4, qi + 4 * cg, 4);
                acc[u] = dot_small(acc[u], spread8(rows + cg * bs, n), _mm256_set1_epi32(q4));
            };
            int32_t cg = 0;
            for (; cg + 4 <= n_groups; cg += 4) {
#pragma GCC unroll 4
                for (int32_t u = 0; u < 4; ++u) step(cg + u, u);
            }
            for (; cg < n_groups; ++cg) step(cg, 0);
            const __m256i dot = _mm256_add_epi32(_mm256_add_epi32(acc[0], acc[1]), _mm256_add_epi32(acc[2], acc[3]));
            _mm256_maskstore_ps(s + static_cast<size_t>(g) * s_stride + r0, lanes8(n),
                                _mm256_fmadd_ps(qs, _mm256_cvtepi32_ps(dot), qav));
        }
    }
}

// acc[g * head_dim + c] += sum_r p[g * p_stride + r] * v_r[c] (block_kernels::accumulate), for value groups of whole
// 8-lane vectors: per query row and value group, the weights are quantized once per block; then per 8 channels
// (lanes) and row group, the channels' byte of four rows' codes meets the group's 4 weights; sum_r p[r] * min[r, j]
// is added.
void kivi_accumulate_avx2(const void* format, const uint8_t* block, int32_t h, const float* p, int32_t group,
                          int32_t n_rows, int32_t p_stride, float* acc) {
    const auto& f = *static_cast<const kivi_format*>(format);
    const int32_t hd = f.geometry.head_dim;
    const int32_t bs = f.geometry.block_size;
    const int32_t vg = f.value_group;
    const int32_t n_groups = (n_rows + 3) / 4;
    const uint8_t* v0 = f.v_group(block, h, 0);
    float scales[max_head_dim / 8 * max_block_size];  // [value_groups, block_size]
    float mins[max_head_dim / 8 * max_block_size];
    for (int32_t r = 0; r < n_rows; ++r) {
        const uint16_t* vp = f.v_params(block, h, r);
        for (int32_t j = 0; j < f.value_groups(); ++j) {
            scales[j * bs + r] = fp16_to_fp32(vp[2 * j]);
            mins[j * bs + r] = fp16_to_fp32(vp[2 * j + 1]);
        }
    }
    uint8_t wq[max_block_size + 4];
    for (int32_t g = 0; g < group; ++g) {
        const float* pg = p + static_cast<size_t>(g) * p_stride;
        float* ag = acc + static_cast<size_t>(g) * hd;
        for (int32_t j = 0; j < f.value_groups(); ++j) {
            const float min_sum = isa_avx2::dot(pg, mins + j * bs, n_rows);  // sum_r p[r] * min[r, j]
            const float ws = kivi_quantize_weights(pg, scales + j * bs, n_rows, wq);
            const __m256 wsv = _mm256_set1_ps(ws);
            const __m256 msv = _mm256_set1_ps(min_sum);
            for (int32_t c = j * vg; c < (j + 1) * vg; c += 8) {
                __m256i dot = _mm256_setzero_si256();
                if (ws != 0.0f) {
                    for (int32_t rg = 0; rg < n_groups; ++rg) {
                        int32_t w4;
                        std::memcpy(&w4, wq + 4 * rg, 4);
                        dot = dot_small(dot, _mm256_set1_epi32(w4), spread8(v0 + static_cast<size_t>(rg) * hd + c));
                    }
                }
                const __m256 a = _mm256_fmadd_ps(wsv, _mm256_cvtepi32_ps(dot), _mm256_loadu_ps(ag + c));
                _mm256_storeu_ps(ag + c, _mm256_add_ps(a, msv));
            }
        }
    }
}

}  // namespace

block_kernels kivi_kernels_avx2_for(const kivi_format& f) {
    using D = kivi_decoder_base<isa_avx2>;
    return block_kernels{
        kivi_scores_avx2,        f.value_group % 8 == 0 ? kivi_accumulate_avx2 : kivi_accumulate_scalar,
        scores_f32<isa_avx2>,    accumulate_f32<isa_avx2>,
        softmax_block<isa_avx2>, D::prefetch};
}

}  // namespace troupe::kv
