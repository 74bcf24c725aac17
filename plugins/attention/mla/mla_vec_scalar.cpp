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

float weight(const void* src, weight_type type, int64_t i) {
    switch (type) {
        case weight_type::f16:
            return quant_common::fp16_to_fp32(static_cast<const uint16_t*>(src)[i]);
        case weight_type::bf16:
            return quant_common::fp32_from_bits(static_cast<uint32_t>(static_cast<const uint16_t*>(src)[i]) << 16);
        case weight_type::f32:
            break;
    }
    return static_cast<const float*>(src)[i];
}

size_t weight_bytes(weight_type type) {
    return type == weight_type::f32 ? 4 : 2;
}

void gemv_w(const void* rows, weight_type type, int64_t stride, int64_t n_rows, const float* x, int64_t n, float* out) {
    if (type == weight_type::f32) return gemv(static_cast<const float*>(rows), stride, n_rows, x, n, out);
    for (int64_t r = 0; r < n_rows; ++r) {
        const void* row = static_cast<const uint8_t*>(rows) + static_cast<size_t>(r * stride) * weight_bytes(type);
        float s = 0.0f;
        for (int64_t i = 0; i < n; ++i) s += weight(row, type, i) * x[i];
        out[r] = s;
    }
}

void axpy_w(float* y, float a, const void* x, weight_type type, int64_t n) {
    if (type == weight_type::f32) return axpy(y, a, static_cast<const float*>(x), n);
    for (int64_t i = 0; i < n; ++i) y[i] += a * weight(x, type, i);
}

void load_w(const void* src, weight_type type, float* dst, int64_t n) {
    for (int64_t i = 0; i < n; ++i) dst[i] = weight(src, type, i);
}

}  // namespace

const vec_ops& scalar_vec_ops() {
    static const vec_ops ops{"scalar", dot, gemv, axpy, axpy_rows, scale, load, store, gemv_w, axpy_w, load_w};
    return ops;
}

}  // namespace troupe::mla
