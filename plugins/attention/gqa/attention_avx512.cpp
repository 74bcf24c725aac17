// AVX-512F attention (built with -mavx512f; called only when the CPU has it). Tails use masked loads.
#include <immintrin.h>

#include "attention_online.h"

namespace troupe::gqa {
namespace {

inline __mmask16 tail_mask(int32_t left) {
    return static_cast<__mmask16>((1u << left) - 1u);  // left <= 16
}

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
    // exp(x) for x <= 0 (scores minus their running max): Cody-Waite reduction x = n ln2 + r, the
    // Cephes degree-5 polynomial for e^r (about 1 ulp), 2^n applied by vscalefps (exact, underflows to 0).
    static void exp_shifted(float* s, int32_t n, float m) {
        const __mmask16 k = tail_mask(n);
        __m512 x = _mm512_sub_ps(_mm512_maskz_loadu_ps(k, s), _mm512_set1_ps(m));
        x = _mm512_max_ps(x, _mm512_set1_ps(-104.0f));  // below, e^x is 0 in float; keeps n finite
        const __m512 fx = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                               _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
        __m512 r = _mm512_fnmadd_ps(fx, _mm512_set1_ps(0.693359375f), x);
        r = _mm512_fnmadd_ps(fx, _mm512_set1_ps(-2.12194440e-4f), r);
        __m512 p = _mm512_set1_ps(1.9875691500e-4f);
        p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.3981999507e-3f));
        p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.3334519073e-3f));
        p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.1665795894e-2f));
        p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.6666665459e-1f));
        p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(5.0000001201e-1f));
        const __m512 y = _mm512_add_ps(_mm512_fmadd_ps(_mm512_mul_ps(p, r), r, r), _mm512_set1_ps(1.0f));
        _mm512_mask_storeu_ps(s, k, _mm512_scalef_ps(y, fx));
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
