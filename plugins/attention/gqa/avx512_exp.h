// AVX-512F vector helpers shared by the AVX-512 attention files (built with -mavx512f only). Everything
// here has internal linkage: an out-of-line copy must never be the one the linker keeps for other CPUs.
#pragma once

#include <immintrin.h>

#include <cstdint>

namespace troupe::gqa {
namespace {

inline __mmask16 tail_mask(int32_t left) {
    return static_cast<__mmask16>((1u << left) - 1u);  // left <= 16
}

// e^x for x <= 0 (scores minus their running max), -inf included: Cody-Waite reduction x = n ln2 + r,
// the Cephes degree-5 polynomial for e^r (about 1 ulp), 2^n applied by vscalefps. Below -87, e^x is
// under the smallest normal float and the result is exactly 0, so no denormal reaches later FMAs.
inline __m512 exp_nonpositive(__m512 x) {
    const __mmask16 normal = _mm512_cmp_ps_mask(x, _mm512_set1_ps(-87.0f), _CMP_GE_OQ);
    x = _mm512_max_ps(x, _mm512_set1_ps(-87.0f));  // keeps n finite for -inf
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
    return _mm512_maskz_mov_ps(normal, _mm512_scalef_ps(y, fx));
}

}  // namespace
}  // namespace troupe::gqa
