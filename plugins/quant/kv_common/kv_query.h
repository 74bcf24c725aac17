// The query of troupe's integer KV-cache kernels (kv/int8, kv/kivi), quantized once per block against the block's
// per-channel key factors: the scalar reference. kv_dot_avx512.h has its vectorized twin.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "kv_format.h"

namespace troupe::kv {

// A query row meeting one block's keys: x[c] = scale * q[c] * k_scale[c] (the block's per-channel factor folded
// into the query), quantized to int8 codes with the scale absmax / 127 (as llama.cpp's q8_0 cache quantizes the
// query), for integer dot products with the block's key codes. The AVX-512 kernels compute the same floats
// with the same operations (two products, a maximum, one product, rounding to nearest even), so their codes are
// these codes.
struct quantized_query {
    float scale = 0.0f;  // a score is scale * (sum_c code[c] * k_code[c])
    int32_t sum = 0;     // sum_c code[c] (int8's keys are biased by 128, which adds 128 * sum)
};

static inline quantized_query quantize_query_ref(const float* q, const float* k_scales, int32_t n, float scale,
                                                 int8_t* codes) {
    float x[max_head_dim];
    float amax = 0.0f;
    for (int32_t c = 0; c < n; ++c) {
        x[c] = (scale * q[c]) * k_scales[c];
        amax = std::max(amax, std::fabs(x[c]));
    }
    quantized_query out;
    out.scale = amax / 127.0f;
    const float inv = out.scale > 0.0f ? 1.0f / out.scale : 0.0f;
    for (int32_t c = 0; c < n; ++c) {
        codes[c] = static_cast<int8_t>(std::clamp(std::nearbyint(x[c] * inv), -127.0f, 127.0f));
        out.sum += codes[c];
    }
    return out;
}

}  // namespace troupe::kv
