// kv/int8: the layout of an int8 block and its scalar writes.
//
// Keys per channel within a block: a scale per (kv head, channel) per block, absmax / 127 over the block's rows.
// A block fills token by token, so a block's keys wait in float in the sequence's window until its last row is
// written; then the block's per-channel scales are computed and its keys quantized at once (kv_driver.h: the
// window, reads of an open block, reopening after a rollback). Values per token: a scale per (token, kv head),
// absmax / 127 over head_dim, quantized as they are written.
//
//   block (bytes): K codes  [n_kv_heads, block_size, head_dim] int8
//                  V codes  [n_kv_heads, block_size, head_dim] int8
//                  V scales [n_kv_heads, block_size] float
//                  K scales [n_kv_heads, head_dim] float          (per block)
//   bytes_per_token = n_kv_heads * (2 * head_dim + 4), bytes_per_block = 4 * n_kv_heads * head_dim
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>

#include "plugins/quant/kv_common/kv_format.h"

namespace troupe::kv {

struct int8_format {
    kv_geometry geometry;

    size_t head_rows() const { return static_cast<size_t>(geometry.block_size) * geometry.head_dim; }
    const int8_t* k_codes(const uint8_t* block, int32_t h, int32_t r) const {
        return reinterpret_cast<const int8_t*>(block) + h * head_rows() + static_cast<size_t>(r) * geometry.head_dim;
    }
    const int8_t* v_codes(const uint8_t* block, int32_t h, int32_t r) const {
        return k_codes(block, h, r) + geometry.n_kv_heads * head_rows();
    }
    const float* v_scales(const uint8_t* block, int32_t h) const {
        return reinterpret_cast<const float*>(block + 2 * geometry.n_kv_heads * head_rows()) +
               static_cast<size_t>(h) * geometry.block_size;
    }
    const float* k_scales(const uint8_t* block, int32_t h) const {
        return v_scales(block, 0) + static_cast<size_t>(geometry.n_kv_heads) * geometry.block_size +
               static_cast<size_t>(h) * geometry.head_dim;
    }
    size_t bytes_per_token() const { return static_cast<size_t>(geometry.n_kv_heads) * (2 * geometry.head_dim + 4); }
    size_t bytes_per_block() const { return 4 * static_cast<size_t>(geometry.n_kv_heads) * geometry.head_dim; }
};

static inline int8_t int8_code(float x, float inv_scale) {
    return static_cast<int8_t>(std::clamp(std::nearbyint(x * inv_scale), -127.0f, 127.0f));
}

// Codes of n values at `x` with the scale absmax / 127 (0 for a row of zeros: every code 0).
static inline float int8_quantize(const float* x, int32_t n, int32_t stride, int8_t* codes, int32_t code_stride) {
    float amax = 0.0f;
    for (int32_t i = 0; i < n; ++i) amax = std::max(amax, std::fabs(x[i * stride]));
    const float scale = amax / 127.0f;
    const float inv = scale > 0.0f ? 1.0f / scale : 0.0f;
    for (int32_t i = 0; i < n; ++i) codes[i * code_stride] = int8_code(x[i * stride], inv);
    return scale;
}

// Decoders of the block's rows for the kernels (kv_kernels.h), over instruction set Isa.
template <class Isa>
struct int8_decoder_base {
    using format = int8_format;
    using isa = Isa;
    static void key_channels(const int8_format& f, const uint8_t* block, int32_t h, float* mul, float* add) {
        const float* ks = f.k_scales(block, h);
        for (int32_t c = 0; c < f.geometry.head_dim; ++c) {
            mul[c] = ks[c];
            add[c] = 0.0f;
        }
    }
};

block_kernels int8_kernels_ref();
block_kernels int8_kernels_avx512();

}  // namespace troupe::kv
