// AVX-512 row ops. exp (softmax): x = n ln2 + r with |r| <= ln2 / 2, e^r by a degree-6 polynomial (relative error
// ~2e-7), scaled by 2^n with vscalefps (which also gives 0 and inf at the ends of the range). SwiGLU takes ggml's
// own vector exponential instead (ggml_expf512), so its outputs are llama.cpp's bit for bit.
#include "kernels/cpu/row_ops_kernels.h"

#if defined(__AVX512F__)

#include <immintrin.h>

#include <cmath>
#include <vector>

#include "kernels/ref/ops.h"

namespace troupe::cpu::detail {
namespace {

inline __m512 exp512(__m512 x) {
    x = _mm512_max_ps(_mm512_min_ps(x, _mm512_set1_ps(88.7f)), _mm512_set1_ps(-104.0f));
    const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                          _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693145751953125f), x);  // ln2 split in two for exactness
    r = _mm512_fnmadd_ps(n, _mm512_set1_ps(1.428606765330187045e-06f), r);
    __m512 p = _mm512_set1_ps(1.0f / 720);
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 120));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 24));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 6));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(0.5f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
    return _mm512_scalef_ps(p, n);
}

// ggml's ggml_v_expf (AVX-512 form), operation for operation: llama.cpp's SiLU takes its exponentials from it, and
// one ulp of difference in a SiLU output can move the Q8_K rounding of ffn_down's activations (the int8 recipe).
inline __m512 ggml_expf512(__m512 x) {
    const __m512 r = _mm512_set1_ps(0x1.8p23f);
    const __m512 z = _mm512_fmadd_ps(x, _mm512_set1_ps(0x1.715476p+0f), r);
    const __m512 n = _mm512_sub_ps(z, r);
    const __m512 b =
        _mm512_fnmadd_ps(n, _mm512_set1_ps(0x1.7f7d1cp-20f), _mm512_fnmadd_ps(n, _mm512_set1_ps(0x1.62e4p-1f), x));
    const __mmask16 d = _mm512_cmp_ps_mask(_mm512_abs_ps(n), _mm512_set1_ps(192), _CMP_GT_OQ);
    const __m512 u = _mm512_mul_ps(b, b);
    const __m512 j = _mm512_fmadd_ps(
        _mm512_fmadd_ps(_mm512_fmadd_ps(_mm512_set1_ps(0x1.0e4020p-7f), b, _mm512_set1_ps(0x1.573e2ep-5f)), u,
                        _mm512_fmadd_ps(_mm512_set1_ps(0x1.555e66p-3f), b, _mm512_set1_ps(0x1.fffdb6p-2f))),
        u, _mm512_fmadd_ps(_mm512_set1_ps(0x1.ffffecp-1f), b, _mm512_set1_ps(1.0f)));
    const __m512 res = _mm512_scalef_ps(j, n);
    if (_mm512_kortestz(d, d)) return res;
    const __m512 zero = _mm512_setzero_ps();
    const __m512 alt = _mm512_mask_blend_ps(_mm512_cmp_ps_mask(n, zero, _CMP_LE_OQ), _mm512_set1_ps(INFINITY), zero);
    return _mm512_mask_blend_ps(d, res, alt);
}

inline __mmask16 tail_mask(int64_t left) {
    return static_cast<__mmask16>(left >= 16 ? 0xffff : (1u << left) - 1);
}

void rmsnorm_avx512(const float* x, const float* weight, float* y, int64_t n_rows, int64_t n, float eps) {
    double sums[4];
    for (int64_t r = 0; r < n_rows; ++r) {
        const float* xr = x + r * n;
        float* yr = y + r * n;
        // ggml_compute_forward_rms_norm_f32: float squares summed in order in double, the mean rounded to float
        // (four rows' sums at a time, row_ops_kernels.h).
        if (r % 4 == 0) sums_of_squares_in_order(xr, n_rows - r < 4 ? n_rows - r : 4, n, sums);
        const float mean = static_cast<float>(sums[r % 4] / static_cast<double>(n));
        const __m512 scale = _mm512_set1_ps(1.0f / std::sqrt(mean + eps));
        for (int64_t i = 0; i < n; i += 16) {
            const __mmask16 m = tail_mask(n - i);
            __m512 v = _mm512_mul_ps(_mm512_maskz_loadu_ps(m, xr + i), scale);
            if (weight) v = _mm512_mul_ps(v, _mm512_maskz_loadu_ps(m, weight + i));
            _mm512_mask_storeu_ps(yr + i, m, v);
        }
    }
}

void softmax_avx512(float* x, int64_t n_rows, int64_t n) {
    for (int64_t r = 0; r < n_rows; ++r) {
        float* xr = x + r * n;
        __m512 mv = _mm512_set1_ps(-INFINITY);
        for (int64_t i = 0; i < n; i += 16) {
            mv = _mm512_max_ps(mv, _mm512_mask_loadu_ps(_mm512_set1_ps(-INFINITY), tail_mask(n - i), xr + i));
        }
        const __m512 max = _mm512_set1_ps(_mm512_reduce_max_ps(mv));
        __m512 sv = _mm512_setzero_ps();
        for (int64_t i = 0; i < n; i += 16) {
            const __mmask16 m = tail_mask(n - i);
            const __m512 e = _mm512_maskz_mov_ps(m, exp512(_mm512_sub_ps(_mm512_maskz_loadu_ps(m, xr + i), max)));
            _mm512_mask_storeu_ps(xr + i, m, e);
            sv = _mm512_add_ps(sv, e);
        }
        const __m512 inv = _mm512_set1_ps(1.0f / _mm512_reduce_add_ps(sv));
        for (int64_t i = 0; i < n; i += 16) {
            const __mmask16 m = tail_mask(n - i);
            _mm512_mask_storeu_ps(xr + i, m, _mm512_mul_ps(_mm512_maskz_loadu_ps(m, xr + i), inv));
        }
    }
}

// llama.cpp's ggml_vec_silu_f32 then ggml_vec_mul_f32: silu(g) = g / (1 + ggml_v_expf(-g)) per 16 lanes (expf on a
// tail shorter than 16), rounded, then times up.
void swiglu_avx512(const float* gate, const float* up, float* out, int64_t n) {
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        const __m512 g = _mm512_loadu_ps(gate + i);
        const __m512 silu =
            _mm512_div_ps(g, _mm512_add_ps(_mm512_set1_ps(1.0f), ggml_expf512(_mm512_sub_ps(_mm512_setzero_ps(), g))));
        _mm512_storeu_ps(out + i, _mm512_mul_ps(silu, _mm512_loadu_ps(up + i)));
    }
    for (; i < n; ++i) {
        const float silu = gate[i] / (1.0f + std::exp(-gate[i]));
        out[i] = silu * up[i];
    }
}

void add_avx512(const float* a, const float* b, float* out, int64_t n) {
    for (int64_t i = 0; i < n; i += 16) {
        const __mmask16 m = tail_mask(n - i);
        _mm512_mask_storeu_ps(out + i, m,
                              _mm512_add_ps(_mm512_maskz_loadu_ps(m, a + i), _mm512_maskz_loadu_ps(m, b + i)));
    }
}

// The first index of the largest non-NaN element (the reference's answer when there is one).
int64_t argmax_avx512(const float* x, int64_t n) {
    __m512 mv = _mm512_set1_ps(-INFINITY);
    bool any = false;
    for (int64_t i = 0; i < n; i += 16) {
        const __mmask16 m = tail_mask(n - i);
        const __m512 v = _mm512_maskz_loadu_ps(m, x + i);
        const __mmask16 ordered = _mm512_mask_cmp_ps_mask(m, v, v, _CMP_ORD_Q);
        any |= ordered != 0;
        mv = _mm512_mask_max_ps(mv, ordered, mv, v);
    }
    if (!any || std::isnan(x[0])) return ref::argmax(x, n);
    const __m512 max = _mm512_set1_ps(_mm512_reduce_max_ps(mv));
    for (int64_t i = 0; i < n; i += 16) {
        const __mmask16 eq =
            _mm512_mask_cmp_ps_mask(tail_mask(n - i), _mm512_maskz_loadu_ps(tail_mask(n - i), x + i), max, _CMP_EQ_OQ);
        if (eq) return i + __builtin_ctz(eq);
    }
    return ref::argmax(x, n);
}

// rope_ggml_apply's rotation, the same contractions per element: x0' = fma(x0, cos, -(x1 * sin)),
// x1' = fma(x0, sin, x1 * cos). A token's cos / sin are laid out once for all its heads: NeoX pairs (x0 in the first
// half, x1 in the second) take them apart; normal pairs (x0, x1 side by side) take each duplicated over its pair,
// and fmaddsub subtracts in the even lanes and adds in the odd ones.
void rope_ggml_apply_avx512(float* x, int64_t n_tokens, int64_t n_heads, const float* cs, int32_t head_dim,
                            int32_t n_rot, bool neox) {
    const int32_t half = n_rot / 2;
    std::vector<float> cos_of(n_rot), sin_of(n_rot);
    for (int64_t t = 0; t < n_tokens; ++t) {
        const float* c = cs + t * 2 * half;
        for (int32_t i = 0; i < half; ++i) {
            if (neox) {
                cos_of[i] = c[2 * i], sin_of[i] = c[2 * i + 1];
            } else {
                cos_of[2 * i] = cos_of[2 * i + 1] = c[2 * i];
                sin_of[2 * i] = sin_of[2 * i + 1] = c[2 * i + 1];
            }
        }
        for (int64_t h = 0; h < n_heads; ++h) {
            float* v = x + (t * n_heads + h) * head_dim;
            if (neox) {
                for (int32_t i = 0; i < half; i += 16) {
                    const __mmask16 m = tail_mask(half - i);
                    const __m512 x0 = _mm512_maskz_loadu_ps(m, v + i), x1 = _mm512_maskz_loadu_ps(m, v + half + i);
                    const __m512 co = _mm512_maskz_loadu_ps(m, cos_of.data() + i);
                    const __m512 si = _mm512_maskz_loadu_ps(m, sin_of.data() + i);
                    _mm512_mask_storeu_ps(v + i, m, _mm512_fmsub_ps(x0, co, _mm512_mul_ps(x1, si)));
                    _mm512_mask_storeu_ps(v + half + i, m, _mm512_fmadd_ps(x0, si, _mm512_mul_ps(x1, co)));
                }
            } else {
                for (int32_t i = 0; i < n_rot; i += 16) {
                    const __mmask16 m = tail_mask(n_rot - i);
                    const __m512 xv = _mm512_maskz_loadu_ps(m, v + i);
                    const __m512 swapped = _mm512_permute_ps(xv, 0xB1);  // (x1, x0) in each pair
                    const __m512 co = _mm512_maskz_loadu_ps(m, cos_of.data() + i);
                    const __m512 si = _mm512_maskz_loadu_ps(m, sin_of.data() + i);
                    // even lanes: x0 * cos - x1 * sin; odd lanes: x0 * sin + x1 * cos
                    constexpr __mmask16 even = 0x5555;
                    const __m512 a = _mm512_mask_blend_ps(even, swapped, xv);                 // x0 in both lanes
                    const __m512 b = _mm512_mask_blend_ps(even, si, co);                      // cos | sin
                    const __m512 rounded = _mm512_mask_blend_ps(even, _mm512_mul_ps(xv, co),  // x1 * cos
                                                                _mm512_mul_ps(swapped, si));  // x1 * sin
                    _mm512_mask_storeu_ps(v + i, m, _mm512_fmaddsub_ps(a, b, rounded));
                }
            }
        }
    }
}

}  // namespace

const row_op_kernels& avx512_row_ops() {
    static const row_op_kernels k{rmsnorm_avx512, softmax_avx512, swiglu_avx512,
                                  add_avx512,     argmax_avx512,  rope_ggml_apply_avx512};
    return k;
}

}  // namespace troupe::cpu::detail

#else

namespace troupe::cpu::detail {
const row_op_kernels& avx512_row_ops() {
    static const row_op_kernels k{};
    return k;
}
}  // namespace troupe::cpu::detail

#endif
