// Reference quantize / dequantize of the 4-bit group formats with a scale and a min: Q4_1 (groups of 32),
// W4_G64 and W4_G128 (kernels/ggml_types.h). One block per group of G:
//
//   bytes 0..1  fp16 d      element j       = d * (qs[j] & 15) + m          (j < G / 2)
//   bytes 2..3  fp16 m      element j + G/2 = d * (qs[j] >> 4) + m
//   bytes 4..   qs[G / 2]
//
// Quantization is round to nearest against the group's stored (fp16-rounded) scale and min, so every code is
// the nearest of the 16 levels the block can actually decode to.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "core/result.h"
#include "kernels/fp16.h"
#include "kernels/ref/quants.h"

namespace troupe::ref {
namespace {

constexpr size_t k_header_bytes = 4;  // fp16 d, fp16 m

size_t block_bytes(int g) {
    return k_header_bytes + static_cast<size_t>(g / 2);
}

int checked_group_size(ggml_type type, int64_t n) {
    const int g = w4_group_size(type);
    TROUPE_ASSERT(g > 0, "not a 4-bit group type: " + std::string(traits(type).name));
    TROUPE_ASSERT(n % g == 0, "row length " + std::to_string(n) + " is not a multiple of the group size " +
                                  std::to_string(g) + " of " + std::string(traits(type).name));
    return g;
}

}  // namespace

int w4_group_size(ggml_type type) {
    switch (type) {
        case ggml_type::q4_1:
            return 32;
        case ggml_type::w4_g64:
            return 64;
        case ggml_type::w4_g128:
            return 128;
        default:
            return 0;
    }
}

w4_scale_min w4_fit_min_max(const float* x, int g) {
    float lo = x[0], hi = x[0];
    for (int i = 1; i < g; ++i) {
        lo = std::min(lo, x[i]);
        hi = std::max(hi, x[i]);
    }
    return {fp16_to_fp32(fp32_to_fp16((hi - lo) / 15.0f)), fp16_to_fp32(fp32_to_fp16(lo))};
}

int w4_code(float x, float d, float m) {
    if (!(d > 0.0f)) return 0;
    const float v = (x - m) / d;
    if (!(v > 0.0f)) return 0;  // also NaN
    if (v >= 15.0f) return 15;
    return nearest_int(v);
}

void quantize_row_w4_with(ggml_type type, const float* x, const w4_scale_min* groups, void* dst, int64_t n) {
    const int g = checked_group_size(type, n);
    auto* out = static_cast<uint8_t*>(dst);
    for (int64_t b = 0; b < n / g; ++b) {
        const float* xb = x + b * g;
        uint8_t* blk = out + static_cast<size_t>(b) * block_bytes(g);
        const uint16_t dh = fp32_to_fp16(groups[b].d), mh = fp32_to_fp16(groups[b].m);
        std::memcpy(blk, &dh, 2);
        std::memcpy(blk + 2, &mh, 2);
        const float d = fp16_to_fp32(dh), m = fp16_to_fp32(mh);
        for (int j = 0; j < g / 2; ++j) {
            const int lo = w4_code(xb[j], d, m), hi = w4_code(xb[j + g / 2], d, m);
            blk[k_header_bytes + j] = static_cast<uint8_t>(lo | (hi << 4));
        }
    }
}

void quantize_row_w4(ggml_type type, const float* x, void* dst, int64_t n) {
    const int g = checked_group_size(type, n);
    std::vector<w4_scale_min> groups(static_cast<size_t>(n / g));
    for (int64_t b = 0; b < n / g; ++b) groups[b] = w4_fit_min_max(x + b * g, g);
    quantize_row_w4_with(type, x, groups.data(), dst, n);
}

void dequantize_row_w4(ggml_type type, const void* src, float* y, int64_t n) {
    const int g = checked_group_size(type, n);
    const auto* in = static_cast<const uint8_t*>(src);
    for (int64_t b = 0; b < n / g; ++b) {
        const uint8_t* blk = in + static_cast<size_t>(b) * block_bytes(g);
        uint16_t dh, mh;
        std::memcpy(&dh, blk, 2);
        std::memcpy(&mh, blk + 2, 2);
        const float d = fp16_to_fp32(dh), m = fp16_to_fp32(mh);
        float* yb = y + b * g;
        for (int j = 0; j < g / 2; ++j) {
            const float scaled_lo = d * static_cast<float>(blk[k_header_bytes + j] & 15);
            const float scaled_hi = d * static_cast<float>(blk[k_header_bytes + j] >> 4);
            yb[j] = scaled_lo + m;
            yb[j + g / 2] = scaled_hi + m;
        }
    }
}

}  // namespace troupe::ref
