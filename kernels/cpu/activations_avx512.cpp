// The AVX-512 level's activation quantizers and roundings (matmul_avx512.cpp's kernel table), each bit-exact with
// its reference (kernels/ref): Q8_0 and Q8_K blocks as llama.cpp's x86 code makes them, their dequantized values, and
// rounding to F16 / BF16. Compiled with the AVX-512 flags only (kernels/CMakeLists.txt).
#include "kernels/cpu/activations_avx512.h"

#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__) && defined(__AVX512VNNI__)

#include <immintrin.h>

#include <cstring>

#include "kernels/fp16.h"

namespace troupe::cpu::detail {

namespace {

// One Q8_0 activation block as ref::quantize_activations_q8_0 makes it (llama.cpp's x86 blocks): d = amax / 127 and
// the 32 values x * (127 / amax) rounded half to even, still as floats.
struct q8_0_rounded {
    float d;
    __m512 r0, r1;
};

inline q8_0_rounded round_q8_0_block(const float* x) {
    const __m512 v0 = _mm512_loadu_ps(x), v1 = _mm512_loadu_ps(x + 16);
    const float amax = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_abs_ps(v0), _mm512_abs_ps(v1)));
    const __m512 s = _mm512_set1_ps(amax != 0.0f ? 127.0f / amax : 0.0f);
    constexpr int nearest = _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC;
    return {amax / 127.0f, _mm512_roundscale_ps(_mm512_mul_ps(v0, s), nearest),
            _mm512_roundscale_ps(_mm512_mul_ps(v1, s), nearest)};
}

}  // namespace

void quantize_q8_0_avx512(const float* x, block_q8_0* y, int64_t n) {
    for (int64_t b = 0; b < n / qk8_0; ++b) {
        const q8_0_rounded q = round_q8_0_block(x + b * qk8_0);
        y[b].d = fp32_to_fp16(q.d);
        _mm_storeu_si128(reinterpret_cast<__m128i*>(y[b].qs), _mm512_cvtepi32_epi8(_mm512_cvtps_epi32(q.r0)));
        _mm_storeu_si128(reinterpret_cast<__m128i*>(y[b].qs + 16), _mm512_cvtepi32_epi8(_mm512_cvtps_epi32(q.r1)));
    }
}

void quantize_q8_k_avx512(const float* x, block_q8_k* y, int64_t n) {
    for (int64_t b = 0; b < n / qk_k; ++b) {
        const float* xb = x + b * qk_k;
        __m512 amax_v = _mm512_setzero_ps();
        for (int j = 0; j < qk_k; j += 16) amax_v = _mm512_max_ps(amax_v, _mm512_abs_ps(_mm512_loadu_ps(xb + j)));
        const float amax = _mm512_reduce_max_ps(amax_v);
        if (amax == 0.0f) {
            std::memset(&y[b], 0, sizeof y[b]);
            continue;
        }
        float max = 0.0f;  // the first element whose |x| is amax, with its sign
        for (int j = 0; j < qk_k; j += 16) {
            const __mmask16 m =
                _mm512_cmp_ps_mask(_mm512_abs_ps(_mm512_loadu_ps(xb + j)), _mm512_set1_ps(amax), _CMP_EQ_OQ);
            if (m) {
                max = xb[j + __builtin_ctz(m)];
                break;
            }
        }
        const float iscale = -127.0f / max;
        const __m512 s = _mm512_set1_ps(iscale);
        for (int j = 0; j < qk_k; j += 16) {
            const __m512i q =
                _mm512_min_epi32(_mm512_cvtps_epi32(_mm512_mul_ps(_mm512_loadu_ps(xb + j), s)), _mm512_set1_epi32(127));
            _mm_storeu_si128(reinterpret_cast<__m128i*>(y[b].qs + j), _mm512_cvtepi32_epi8(q));
            y[b].bsums[j / 16] = static_cast<int16_t>(_mm512_reduce_add_epi32(q));
        }
        y[b].d = 1.0f / iscale;
    }
}

void q8_0_values_avx512(const float* x, float* y, int64_t n) {
    for (int64_t b = 0; b < n / qk8_0; ++b) {
        const q8_0_rounded q = round_q8_0_block(x + b * qk8_0);
        const __m512 dq = _mm512_set1_ps(fp16_to_fp32(fp32_to_fp16(q.d)));
        _mm512_storeu_ps(y + b * qk8_0, _mm512_mul_ps(dq, q.r0));
        _mm512_storeu_ps(y + b * qk8_0 + 16, _mm512_mul_ps(dq, q.r1));
    }
}

void q8_k_values_avx512(const float* x, float* y, int64_t n) {
    for (int64_t b = 0; b < n / qk_k; ++b) {
        block_q8_k q;
        quantize_q8_k_avx512(x + b * qk_k, &q, qk_k);
        const __m512 d = _mm512_set1_ps(q.d);
        for (int j = 0; j < qk_k; j += 16) {
            const __m512i v = _mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(q.qs + j)));
            _mm512_storeu_ps(y + b * qk_k + j, _mm512_mul_ps(d, _mm512_cvtepi32_ps(v)));
        }
    }
}

void round_f16_avx512(const float* x, float* y, int64_t n) {
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        const __m256i h = _mm512_cvtps_ph(_mm512_loadu_ps(x + i), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
        _mm512_storeu_ps(y + i, _mm512_cvtph_ps(h));
    }
    round_f16_scalar(x + i, y + i, n - i);
}

void round_bf16_avx512(const float* x, float* y, int64_t n) {
    int64_t i = 0;
    const __m512i abs_mask = _mm512_set1_epi32(0x7fffffff), inf = _mm512_set1_epi32(0x7f800000);
    for (; i + 16 <= n; i += 16) {
        const __m512i v = _mm512_loadu_si512(x + i);
        const __m512i odd = _mm512_and_si512(_mm512_srli_epi32(v, 16), _mm512_set1_epi32(1));
        __m512i r = _mm512_add_epi32(v, _mm512_add_epi32(_mm512_set1_epi32(0x7fff), odd));
        const __mmask16 nan = _mm512_cmpgt_epi32_mask(_mm512_and_si512(v, abs_mask), inf);
        r = _mm512_mask_or_epi32(r, nan, v, _mm512_set1_epi32(0x00400000));
        _mm512_storeu_si512(y + i, _mm512_and_si512(r, _mm512_set1_epi32(static_cast<int>(0xffff0000u))));
    }
    round_bf16_scalar(x + i, y + i, n - i);
}

}  // namespace troupe::cpu::detail

#endif
