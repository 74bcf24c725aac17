// The scalar vector primitives (mla_vec.h): plain loops, exact half conversions (plugins/common/half.h).
#include <cstring>

#include "mla_vec.h"
#include "plugins/common/half.h"

namespace troupe::mla {
namespace {

float dot(const float* a, const float* b, int64_t n) {
    float s0 = 0.0f, s1 = 0.0f, s2 = 0.0f, s3 = 0.0f;
    int64_t i = 0;
    for (; i + 4 <= n; i += 4) {
        s0 += a[i] * b[i];
        s1 += a[i + 1] * b[i + 1];
        s2 += a[i + 2] * b[i + 2];
        s3 += a[i + 3] * b[i + 3];
    }
    for (; i < n; ++i) s0 += a[i] * b[i];
    return (s0 + s1) + (s2 + s3);
}

void gemv(const float* rows, int64_t stride, int64_t n_rows, const float* x, int64_t n, float* out) {
    for (int64_t r = 0; r < n_rows; ++r) out[r] = dot(rows + r * stride, x, n);
}

void axpy(float* y, float a, const float* x, int64_t n) {
    for (int64_t i = 0; i < n; ++i) y[i] += a * x[i];
}

void axpy_rows(float* y, const float* w, const float* rows, int64_t stride, int64_t n_rows, int64_t n) {
    for (int64_t j = 0; j < n_rows; ++j) axpy(y, w[j], rows + j * stride, n);
}

void scale(float* y, float a, int64_t n) {
    for (int64_t i = 0; i < n; ++i) y[i] *= a;
}

void load(const void* src, bool f16, float* dst, int64_t n) {
    if (!f16) {
        std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float));
        return;
    }
    const auto* h = static_cast<const uint16_t*>(src);
    for (int64_t i = 0; i < n; ++i) dst[i] = quant_common::fp16_to_fp32(h[i]);
}

void store(const float* src, bool f16, void* dst, int64_t n) {
    if (!f16) {
        std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float));
        return;
    }
    auto* h = static_cast<uint16_t*>(dst);
    for (int64_t i = 0; i < n; ++i) h[i] = quant_common::fp32_to_fp16(src[i]);
}

}  // namespace

const vec_ops& scalar_vec_ops() {
    static const vec_ops ops{"scalar", dot, gemv, axpy, axpy_rows, scale, load, store};
    return ops;
}

}  // namespace troupe::mla
