// The AVX2 vector primitives (mla_vec.h), built with -mavx2 -mfma -mf16c: 8-float FMA lanes, F16C half conversions
// (round to nearest even, as the scalar twin). Everything here has internal linkage and includes no shared inline code
// (not even plugins/common/half.h): a copy built with these flags must never be the one the linker keeps for others.
#include <immintrin.h>

#include <cstring>

#include "mla_vec.h"

namespace troupe::mla {
namespace {

float hsum(__m256 v) {
    const __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    const __m128 t = _mm_add_ps(s, _mm_movehl_ps(s, s));
    return _mm_cvtss_f32(_mm_add_ss(t, _mm_movehdup_ps(t)));
}

float dot(const float* a, const float* b, int64_t n) {
    __m256 s0 = _mm256_setzero_ps(), s1 = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        s0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), s0);
        s1 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 8), _mm256_loadu_ps(b + i + 8), s1);
    }
    if (i + 8 <= n) {
        s0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), s0);
        i += 8;
    }
    float s = hsum(_mm256_add_ps(s0, s1));
    for (; i < n; ++i) s += a[i] * b[i];
    return s;
}

// Four rows against x at once: x is loaded once per four dot products.
void gemv(const float* rows, int64_t stride, int64_t n_rows, const float* x, int64_t n, float* out) {
    int64_t r = 0;
    const int64_t n8 = n / 8 * 8;
    for (; r + 4 <= n_rows; r += 4) {
        const float* r0 = rows + r * stride;
        const float* r1 = r0 + stride;
        const float* r2 = r1 + stride;
        const float* r3 = r2 + stride;
        __m256 s0 = _mm256_setzero_ps(), s1 = _mm256_setzero_ps(), s2 = _mm256_setzero_ps(), s3 = _mm256_setzero_ps();
        for (int64_t i = 0; i < n8; i += 8) {
            const __m256 xv = _mm256_loadu_ps(x + i);
            s0 = _mm256_fmadd_ps(_mm256_loadu_ps(r0 + i), xv, s0);
            s1 = _mm256_fmadd_ps(_mm256_loadu_ps(r1 + i), xv, s1);
            s2 = _mm256_fmadd_ps(_mm256_loadu_ps(r2 + i), xv, s2);
            s3 = _mm256_fmadd_ps(_mm256_loadu_ps(r3 + i), xv, s3);
        }
        float o0 = hsum(s0), o1 = hsum(s1), o2 = hsum(s2), o3 = hsum(s3);
        for (int64_t i = n8; i < n; ++i) {
            o0 += r0[i] * x[i];
            o1 += r1[i] * x[i];
            o2 += r2[i] * x[i];
            o3 += r3[i] * x[i];
        }
        out[r] = o0, out[r + 1] = o1, out[r + 2] = o2, out[r + 3] = o3;
    }
    for (; r < n_rows; ++r) out[r] = dot(rows + r * stride, x, n);
}

void axpy(float* y, float a, const float* x, int64_t n) {
    const __m256 av = _mm256_set1_ps(a);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(y + i, _mm256_fmadd_ps(av, _mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i)));
    for (; i < n; ++i) y[i] += a * x[i];
}

void axpy_rows(float* y, const float* w, const float* rows, int64_t stride, int64_t n_rows, int64_t n) {
    __m256 wv[16];
    for (int64_t j = 0; j < n_rows; ++j) wv[j] = _mm256_set1_ps(w[j]);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 acc = _mm256_loadu_ps(y + i);
        for (int64_t j = 0; j < n_rows; ++j) acc = _mm256_fmadd_ps(wv[j], _mm256_loadu_ps(rows + j * stride + i), acc);
        _mm256_storeu_ps(y + i, acc);
    }
    for (; i < n; ++i) {
        for (int64_t j = 0; j < n_rows; ++j) y[i] += w[j] * rows[j * stride + i];
    }
}

void scale(float* y, float a, int64_t n) {
    const __m256 av = _mm256_set1_ps(a);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, _mm256_mul_ps(av, _mm256_loadu_ps(y + i)));
    for (; i < n; ++i) y[i] *= a;
}

void load(const void* src, bool f16, float* dst, int64_t n) {
    if (!f16) {
        std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float));
        return;
    }
    const auto* h = static_cast<const uint16_t*>(src);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(h + i))));
    }
    for (; i < n; ++i) dst[i] = _cvtsh_ss(h[i]);
}

void store(const float* src, bool f16, void* dst, int64_t n) {
    if (!f16) {
        std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float));
        return;
    }
    auto* h = static_cast<uint16_t*>(dst);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        _mm_storeu_si128(reinterpret_cast<__m128i*>(h + i),
                         _mm256_cvtps_ph(_mm256_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
    }
    for (; i < n; ++i) h[i] = _cvtss_sh(src[i], _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
}

// Eight weights of a half row as floats: IEEE halves through F16C, bfloat16 by a 16-bit shift.
template <weight_type T>
__m256 load8(const uint16_t* h) {
    const __m128i bits = _mm_loadu_si128(reinterpret_cast<const __m128i*>(h));
    if constexpr (T == weight_type::f16) return _mm256_cvtph_ps(bits);
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(bits), 16));
}

template <weight_type T>
float load1(const uint16_t* h) {
    if constexpr (T == weight_type::f16) return _cvtsh_ss(*h);
    const uint32_t w = static_cast<uint32_t>(*h) << 16;
    float f;
    std::memcpy(&f, &w, 4);
    return f;
}

// gemv on half rows: four rows against x at once, each weight converted in registers.
template <weight_type T>
void gemv_half(const uint16_t* rows, int64_t stride, int64_t n_rows, const float* x, int64_t n, float* out) {
    int64_t r = 0;
    const int64_t n8 = n / 8 * 8;
    for (; r + 4 <= n_rows; r += 4) {
        const uint16_t* r0 = rows + r * stride;
        const uint16_t* r1 = r0 + stride;
        const uint16_t* r2 = r1 + stride;
        const uint16_t* r3 = r2 + stride;
        __m256 s0 = _mm256_setzero_ps(), s1 = _mm256_setzero_ps(), s2 = _mm256_setzero_ps(), s3 = _mm256_setzero_ps();
        for (int64_t i = 0; i < n8; i += 8) {
            const __m256 xv = _mm256_loadu_ps(x + i);
            s0 = _mm256_fmadd_ps(load8<T>(r0 + i), xv, s0);
            s1 = _mm256_fmadd_ps(load8<T>(r1 + i), xv, s1);
            s2 = _mm256_fmadd_ps(load8<T>(r2 + i), xv, s2);
            s3 = _mm256_fmadd_ps(load8<T>(r3 + i), xv, s3);
        }
        float o0 = hsum(s0), o1 = hsum(s1), o2 = hsum(s2), o3 = hsum(s3);
        for (int64_t i = n8; i < n; ++i) {
            o0 += load1<T>(r0 + i) * x[i];
            o1 += load1<T>(r1 + i) * x[i];
            o2 += load1<T>(r2 + i) * x[i];
            o3 += load1<T>(r3 + i) * x[i];
        }
        out[r] = o0, out[r + 1] = o1, out[r + 2] = o2, out[r + 3] = o3;
    }
    for (; r < n_rows; ++r) {
        const uint16_t* row = rows + r * stride;
        __m256 s0 = _mm256_setzero_ps();
        for (int64_t i = 0; i < n8; i += 8) s0 = _mm256_fmadd_ps(load8<T>(row + i), _mm256_loadu_ps(x + i), s0);
        float o = hsum(s0);
        for (int64_t i = n8; i < n; ++i) o += load1<T>(row + i) * x[i];
        out[r] = o;
    }
}

template <weight_type T>
void axpy_half(float* y, float a, const uint16_t* x, int64_t n) {
    const __m256 av = _mm256_set1_ps(a);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, _mm256_fmadd_ps(av, load8<T>(x + i), _mm256_loadu_ps(y + i)));
    for (; i < n; ++i) y[i] += a * load1<T>(x + i);
}

template <weight_type T>
void load_half(const uint16_t* src, float* dst, int64_t n) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(dst + i, load8<T>(src + i));
    for (; i < n; ++i) dst[i] = load1<T>(src + i);
}

void gemv_w(const void* rows, weight_type type, int64_t stride, int64_t n_rows, const float* x, int64_t n, float* out) {
    const auto* h = static_cast<const uint16_t*>(rows);
    switch (type) {
        case weight_type::f16:
            return gemv_half<weight_type::f16>(h, stride, n_rows, x, n, out);
        case weight_type::bf16:
            return gemv_half<weight_type::bf16>(h, stride, n_rows, x, n, out);
        case weight_type::f32:
            break;
    }
    gemv(static_cast<const float*>(rows), stride, n_rows, x, n, out);
}

void axpy_w(float* y, float a, const void* x, weight_type type, int64_t n) {
    const auto* h = static_cast<const uint16_t*>(x);
    switch (type) {
        case weight_type::f16:
            return axpy_half<weight_type::f16>(y, a, h, n);
        case weight_type::bf16:
            return axpy_half<weight_type::bf16>(y, a, h, n);
        case weight_type::f32:
            break;
    }
    axpy(y, a, static_cast<const float*>(x), n);
}

void load_w(const void* src, weight_type type, float* dst, int64_t n) {
    const auto* h = static_cast<const uint16_t*>(src);
    switch (type) {
        case weight_type::f16:
            return load_half<weight_type::f16>(h, dst, n);
        case weight_type::bf16:
            return load_half<weight_type::bf16>(h, dst, n);
        case weight_type::f32:
            break;
    }
    std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float));
}

}  // namespace

const vec_ops& avx2_vec_ops() {
    static const vec_ops ops{"avx2", dot, gemv, axpy, axpy_rows, scale, load, store, gemv_w, axpy_w, load_w};
    return ops;
}

}  // namespace troupe::mla
