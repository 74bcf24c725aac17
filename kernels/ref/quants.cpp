// Reference quantize / dequantize (see quants.h). Plain loops over blocks, one block format per function; the
// k-quant formats (Q2_K .. Q6_K) are in kquants.cpp.
#include "kernels/ref/quants.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/result.h"
#include "kernels/fp16.h"

namespace troupe::ref {

int nearest_int(float x) {
    float v = x + 12582912.f;  // 1.5 * 2^23: the addition rounds to an integer, half to even
    int32_t i;
    std::memcpy(&i, &v, sizeof i);
    return (i & 0x007fffff) - 0x00400000;
}

// ---- dequantize ----

void dequantize_row_q8_0(const block_q8_0* x, float* y, int64_t n) {
    for (int64_t b = 0; b < n / qk8_0; ++b) {
        const float d = fp16_to_fp32(x[b].d);
        for (int j = 0; j < qk8_0; ++j) y[b * qk8_0 + j] = x[b].qs[j] * d;
    }
}

void dequantize_row_q4_0(const block_q4_0* x, float* y, int64_t n) {
    for (int64_t b = 0; b < n / qk4_0; ++b) {
        const float d = fp16_to_fp32(x[b].d);
        float* out = y + b * qk4_0;
        for (int j = 0; j < qk4_0 / 2; ++j) {
            out[j] = ((x[b].qs[j] & 0x0f) - 8) * d;
            out[j + qk4_0 / 2] = ((x[b].qs[j] >> 4) - 8) * d;
        }
    }
}

// Element j of a Q5_0 block as its 5-bit code q (x = d * (q - 16)).
int q5_0_code(const block_q5_0& b, int j) {
    uint32_t qh;
    std::memcpy(&qh, b.qh, sizeof qh);
    const int low = j < qk5_0 / 2 ? (b.qs[j] & 0x0f) : (b.qs[j - qk5_0 / 2] >> 4);
    return low | static_cast<int>(((qh >> j) & 1u) << 4);
}

void dequantize_row_q5_0(const block_q5_0* x, float* y, int64_t n) {
    for (int64_t b = 0; b < n / qk5_0; ++b) {
        const float d = fp16_to_fp32(x[b].d);
        for (int j = 0; j < qk5_0; ++j) y[b * qk5_0 + j] = (q5_0_code(x[b], j) - 16) * d;
    }
}

void dequantize_row_q8_k(const block_q8_k* x, float* y, int64_t n) {
    for (int64_t b = 0; b < n / qk_k; ++b) {
        for (int j = 0; j < qk_k; ++j) y[b * qk_k + j] = x[b].d * x[b].qs[j];
    }
}

void dequantize_row(ggml_type type, const void* src, float* dst, int64_t n) {
    TROUPE_ASSERT(n % traits(type).block_size == 0, "row length is not a multiple of the block size");
    switch (type) {
        case ggml_type::f32:
            std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float));
            return;
        case ggml_type::f16: {
            const auto* h = static_cast<const uint16_t*>(src);
            for (int64_t i = 0; i < n; ++i) dst[i] = fp16_to_fp32(h[i]);
            return;
        }
        case ggml_type::bf16: {
            const auto* h = static_cast<const uint16_t*>(src);
            for (int64_t i = 0; i < n; ++i) dst[i] = bf16_to_fp32(h[i]);
            return;
        }
        case ggml_type::q8_0:
            return dequantize_row_q8_0(static_cast<const block_q8_0*>(src), dst, n);
        case ggml_type::q4_0:
            return dequantize_row_q4_0(static_cast<const block_q4_0*>(src), dst, n);
        case ggml_type::q5_0:
            return dequantize_row_q5_0(static_cast<const block_q5_0*>(src), dst, n);
        case ggml_type::q2_k:
            return dequantize_row_q2_k(static_cast<const block_q2_k*>(src), dst, n);
        case ggml_type::q3_k:
            return dequantize_row_q3_k(static_cast<const block_q3_k*>(src), dst, n);
        case ggml_type::q4_k:
            return dequantize_row_q4_k(static_cast<const block_q4_k*>(src), dst, n);
        case ggml_type::q5_k:
            return dequantize_row_q5_k(static_cast<const block_q5_k*>(src), dst, n);
        case ggml_type::q6_k:
            return dequantize_row_q6_k(static_cast<const block_q6_k*>(src), dst, n);
        case ggml_type::q8_k:
            return dequantize_row_q8_k(static_cast<const block_q8_k*>(src), dst, n);
        case ggml_type::q4_1:
        case ggml_type::w4_g64:
        case ggml_type::w4_g128:
            return dequantize_row_w4(type, src, dst, n);
        case ggml_type::q5_1:
        case ggml_type::q8_1:
        case ggml_type::iq2_xxs:
        case ggml_type::iq2_xs:
        case ggml_type::iq3_xxs:
        case ggml_type::iq1_s:
        case ggml_type::iq4_nl:
        case ggml_type::iq3_s:
        case ggml_type::iq2_s:
        case ggml_type::iq4_xs:
        case ggml_type::i8:
        case ggml_type::i16:
        case ggml_type::i32:
        case ggml_type::i64:
        case ggml_type::f64:
        case ggml_type::iq1_m:
        case ggml_type::tq1_0:
        case ggml_type::tq2_0:
            break;
    }
    TROUPE_ASSERT(false, "dequantize_row: no reference for type " + std::string(traits(type).name));
}

// ---- quantize ----

void quantize_row_q8_0(const float* x, block_q8_0* y, int64_t n) {
    TROUPE_ASSERT(n % qk8_0 == 0);
    for (int64_t b = 0; b < n / qk8_0; ++b) {
        const float* xb = x + b * qk8_0;
        float amax = 0.0f;
        for (int j = 0; j < qk8_0; ++j) amax = std::max(amax, std::fabs(xb[j]));
        const float d = amax / 127.0f;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        y[b].d = fp32_to_fp16(d);
        for (int j = 0; j < qk8_0; ++j) y[b].qs[j] = static_cast<int8_t>(std::round(xb[j] * id));
    }
}

void quantize_activations_q8_0(const float* x, block_q8_0* y, int64_t n) {
    TROUPE_ASSERT(n % qk8_0 == 0);
    for (int64_t b = 0; b < n / qk8_0; ++b) {
        const float* xb = x + b * qk8_0;
        float amax = 0.0f;
        for (int j = 0; j < qk8_0; ++j) amax = std::max(amax, std::fabs(xb[j]));
        const float d = amax / 127.0f;
        const float id = amax != 0.0f ? 127.0f / amax : 0.0f;
        y[b].d = fp32_to_fp16(d);
        for (int j = 0; j < qk8_0; ++j) {
            const float v = xb[j] * id;
            y[b].qs[j] = static_cast<int8_t>(std::nearbyint(v));  // the default rounding: half to even
        }
    }
}

void quantize_row_q8_k(const float* x, block_q8_k* y, int64_t n) {
    TROUPE_ASSERT(n % qk_k == 0);
    for (int64_t b = 0; b < n / qk_k; ++b) {
        const float* xb = x + b * qk_k;
        float amax = 0.0f, max = 0.0f;
        for (int j = 0; j < qk_k; ++j) {
            if (std::fabs(xb[j]) > amax) {
                amax = std::fabs(xb[j]);
                max = xb[j];
            }
        }
        if (amax == 0.0f) {
            y[b].d = 0.0f;
            std::memset(y[b].qs, 0, sizeof y[b].qs);
            std::memset(y[b].bsums, 0, sizeof y[b].bsums);
            continue;
        }
        const float iscale = -127.0f / max;
        for (int j = 0; j < qk_k; ++j) y[b].qs[j] = static_cast<int8_t>(std::min(127, nearest_int(iscale * xb[j])));
        for (int j = 0; j < qk_k / 16; ++j) {
            int sum = 0;
            for (int i = 0; i < 16; ++i) sum += y[b].qs[16 * j + i];
            y[b].bsums[j] = static_cast<int16_t>(sum);
        }
        y[b].d = 1.0f / iscale;
    }
}

namespace {

// The element of largest |x| with its sign (the first of equals; 0 for none above 0): ggml's Q4_0 / Q5_0 scale
// maps it to the lowest code.
float signed_absmax(const float* x, int n) {
    float amax = 0.0f, max = 0.0f;
    for (int j = 0; j < n; ++j) {
        if (std::fabs(x[j]) > amax) {
            amax = std::fabs(x[j]);
            max = x[j];
        }
    }
    return max;
}

}  // namespace

void quantize_row_q4_0(const float* x, block_q4_0* y, int64_t n) {
    TROUPE_ASSERT(n % qk4_0 == 0);
    for (int64_t b = 0; b < n / qk4_0; ++b) {
        const float* xb = x + b * qk4_0;
        const float d = signed_absmax(xb, qk4_0) / -8.0f;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        y[b].d = fp32_to_fp16(d);
        for (int j = 0; j < qk4_0 / 2; ++j) {
            const int q0 = std::min(15, static_cast<int>(xb[j] * id + 8.5f));
            const int q1 = std::min(15, static_cast<int>(xb[j + qk4_0 / 2] * id + 8.5f));
            y[b].qs[j] = static_cast<uint8_t>(q0 | (q1 << 4));
        }
    }
}

void quantize_row_q5_0(const float* x, block_q5_0* y, int64_t n) {
    TROUPE_ASSERT(n % qk5_0 == 0);
    for (int64_t b = 0; b < n / qk5_0; ++b) {
        const float* xb = x + b * qk5_0;
        const float d = signed_absmax(xb, qk5_0) / -16.0f;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        y[b].d = fp32_to_fp16(d);
        uint32_t qh = 0;
        for (int j = 0; j < qk5_0 / 2; ++j) {
            const int q0 = std::min(31, static_cast<int>(xb[j] * id + 16.5f));
            const int q1 = std::min(31, static_cast<int>(xb[j + qk5_0 / 2] * id + 16.5f));
            y[b].qs[j] = static_cast<uint8_t>((q0 & 0x0f) | ((q1 & 0x0f) << 4));
            qh |= static_cast<uint32_t>((q0 >> 4) & 1) << j;
            qh |= static_cast<uint32_t>((q1 >> 4) & 1) << (j + qk5_0 / 2);
        }
        std::memcpy(y[b].qh, &qh, sizeof qh);
    }
}

size_t quantize_row(ggml_type type, const float* x, void* dst, int64_t n) {
    TROUPE_ASSERT(n % traits(type).block_size == 0, "row length is not a multiple of the block size");
    switch (type) {
        case ggml_type::f32:
            std::memcpy(dst, x, static_cast<size_t>(n) * sizeof(float));
            break;
        case ggml_type::f16:
            for (int64_t i = 0; i < n; ++i) static_cast<uint16_t*>(dst)[i] = fp32_to_fp16(x[i]);
            break;
        case ggml_type::bf16:
            for (int64_t i = 0; i < n; ++i) static_cast<uint16_t*>(dst)[i] = fp32_to_bf16(x[i]);
            break;
        case ggml_type::q8_0:
            quantize_row_q8_0(x, static_cast<block_q8_0*>(dst), n);
            break;
        case ggml_type::q4_0:
            quantize_row_q4_0(x, static_cast<block_q4_0*>(dst), n);
            break;
        case ggml_type::q5_0:
            quantize_row_q5_0(x, static_cast<block_q5_0*>(dst), n);
            break;
        case ggml_type::q2_k:
            quantize_row_q2_k(x, static_cast<block_q2_k*>(dst), n);
            break;
        case ggml_type::q3_k:
            quantize_row_q3_k(x, static_cast<block_q3_k*>(dst), n);
            break;
        case ggml_type::q4_k:
            quantize_row_q4_k(x, static_cast<block_q4_k*>(dst), n);
            break;
        case ggml_type::q5_k:
            quantize_row_q5_k(x, static_cast<block_q5_k*>(dst), n);
            break;
        case ggml_type::q6_k:
            quantize_row_q6_k(x, static_cast<block_q6_k*>(dst), n);
            break;
        case ggml_type::q8_k:
            quantize_row_q8_k(x, static_cast<block_q8_k*>(dst), n);
            break;
        case ggml_type::q4_1:
        case ggml_type::w4_g64:
        case ggml_type::w4_g128:
            quantize_row_w4(type, x, dst, n);
            break;
        case ggml_type::q5_1:
        case ggml_type::q8_1:
        case ggml_type::iq2_xxs:
        case ggml_type::iq2_xs:
        case ggml_type::iq3_xxs:
        case ggml_type::iq1_s:
        case ggml_type::iq4_nl:
        case ggml_type::iq3_s:
        case ggml_type::iq2_s:
        case ggml_type::iq4_xs:
        case ggml_type::i8:
        case ggml_type::i16:
        case ggml_type::i32:
        case ggml_type::i64:
        case ggml_type::f64:
        case ggml_type::iq1_m:
        case ggml_type::tq1_0:
        case ggml_type::tq2_0:
            TROUPE_ASSERT(false, "quantize_row: no quantizer for type " + std::string(traits(type).name));
    }
    return row_bytes(type, n);
}

}  // namespace troupe::ref
