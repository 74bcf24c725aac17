// AVX2 + FMA attention (built with -mavx2 -mfma; called only when the CPU has both).
#include <immintrin.h>

#include "attention_online.h"

namespace troupe::gqa {
namespace {

struct avx2 {
    static float dot(const float* a, const float* b, int32_t n) {
        __m256 s = _mm256_setzero_ps();
        int32_t i = 0;
        for (; i + 8 <= n; i += 8) s = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), s);
        __m128 r = _mm_add_ps(_mm256_castps256_ps128(s), _mm256_extractf128_ps(s, 1));
        r = _mm_add_ps(r, _mm_movehl_ps(r, r));
        r = _mm_add_ss(r, _mm_movehdup_ps(r));
        float sum = _mm_cvtss_f32(r);
        for (; i < n; ++i) sum += a[i] * b[i];
        return sum;
    }
    static void axpy(float* acc, float w, const float* v, int32_t n) {
        const __m256 vw = _mm256_set1_ps(w);
        int32_t i = 0;
        for (; i + 8 <= n; i += 8) {
            _mm256_storeu_ps(acc + i, _mm256_fmadd_ps(_mm256_loadu_ps(v + i), vw, _mm256_loadu_ps(acc + i)));
        }
        for (; i < n; ++i) acc[i] += w * v[i];
    }
    static void exp_shifted(float* s, int32_t n, float m) {
        for (int32_t i = 0; i < n; ++i) s[i] = expf(s[i] - m);
    }
    static void scale(float* out, const float* acc, float f, int32_t n) {
        const __m256 vf = _mm256_set1_ps(f);
        int32_t i = 0;
        for (; i + 8 <= n; i += 8) _mm256_storeu_ps(out + i, _mm256_mul_ps(_mm256_loadu_ps(acc + i), vf));
        for (; i < n; ++i) out[i] = acc[i] * f;
    }
};

}  // namespace

void attend_avx2(const troupe_attention_call& call, int64_t begin, int64_t end) {
    attend_online<avx2>(call, begin, end);
}

}  // namespace troupe::gqa
