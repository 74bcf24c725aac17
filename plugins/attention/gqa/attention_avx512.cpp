// AVX-512F attention (built with -mavx512f; called only when the CPU has it). Tails use masked loads.
#include <immintrin.h>

#include "attention_online.h"
#include "avx512_exp.h"

namespace troupe::gqa {
namespace {

struct avx512 {
    static float dot(const float* a, const float* b, int32_t n) {
        __m512 s = _mm512_setzero_ps();
        int32_t i = 0;
        for (; i + 16 <= n; i += 16) s = _mm512_fmadd_ps(_mm512_loadu_ps(a + i), _mm512_loadu_ps(b + i), s);
        if (i < n) {
            const __mmask16 k = tail_mask(n - i);
            s = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(k, a + i), _mm512_maskz_loadu_ps(k, b + i), s);
        }
        return _mm512_reduce_add_ps(s);
    }
    static void axpy(float* acc, float w, const float* v, int32_t n) {
        const __m512 vw = _mm512_set1_ps(w);
        int32_t i = 0;
        for (; i + 16 <= n; i += 16) {
            _mm512_storeu_ps(acc + i, _mm512_fmadd_ps(_mm512_loadu_ps(v + i), vw, _mm512_loadu_ps(acc + i)));
        }
        if (i < n) {
            const __mmask16 k = tail_mask(n - i);
            _mm512_mask_storeu_ps(
                acc + i, k, _mm512_fmadd_ps(_mm512_maskz_loadu_ps(k, v + i), vw, _mm512_maskz_loadu_ps(k, acc + i)));
        }
    }
    static void exp_shifted(float* s, int32_t n, float m) {
        const __mmask16 k = tail_mask(n);
        _mm512_mask_storeu_ps(s, k, exp_nonpositive(_mm512_sub_ps(_mm512_maskz_loadu_ps(k, s), _mm512_set1_ps(m))));
    }
    static void scale(float* out, const float* acc, float f, int32_t n) {
        const __m512 vf = _mm512_set1_ps(f);
        int32_t i = 0;
        for (; i + 16 <= n; i += 16) _mm512_storeu_ps(out + i, _mm512_mul_ps(_mm512_loadu_ps(acc + i), vf));
        if (i < n) {
            const __mmask16 k = tail_mask(n - i);
            _mm512_mask_storeu_ps(out + i, k, _mm512_mul_ps(_mm512_maskz_loadu_ps(k, acc + i), vf));
        }
    }
};

}  // namespace

void attend_avx512(const troupe_attention_call& call, int64_t begin, int64_t end) {
    attend_online<avx512>(call, begin, end);
}

}  // namespace troupe::gqa
