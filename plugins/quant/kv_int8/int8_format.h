// kv/int8: the layout of an int8 block and its scalar writes.
//
// Keys per channel within a block: a scale per (kv head, channel) per block, absmax / 127 over the block's rows.
// A block fills token by token, so a block's keys wait in float in the sequence's window until its last row is
// written; then the block's per-channel scales are computed and its keys quantized at once (kv_driver.h: the
// window, reads of an open block, reopening after a rollback). Values per token: a scale per (token, kv head),
// absmax / 127 over head_dim, quantized as they are written.
//
//   block (bytes): K codes  [n_kv_heads, head_dim / 4, block_size, 4] code + 128 as uint8   (channel groups of 4)
//                  V codes  [n_kv_heads, ceil(block_size / 4), head_dim, 4] int8              (row groups of 4)
//                  V scales [n_kv_heads, block_size] float
//                  K scales [n_kv_heads, head_dim] float          (per block)
//   bytes_per_token = n_kv_heads * (2 * head_dim + 4),
//   bytes_per_block = 4 * n_kv_heads * head_dim (+ n_kv_heads * head_dim for each row that pads the last row group)
//
// Both parts are laid out for AVX-512 VNNI's vpdpbusd (four products of unsigned by signed bytes summed into each
// 32-bit lane): the keys channel-group-major, so a 64-byte vector holds sixteen rows' four channels and a block's
// scores are integer dot products of the codes with the query quantized once per block (kv_query.h), rows in
// lanes, no horizontal sum (the codes are biased by 128 to be the unsigned operand, and 128 * the sum of the query's
// codes comes back out); the values row-group-major, so a vector holds sixteen channels of four rows and the
// probability-weighted sum of a block's value rows is integer dot products of the codes with the weights
// p[r] * v_scale[r] quantized once per block to 0..255 (int8_weights below), channels in lanes.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>

#include "plugins/quant/kv_common/kv_format.h"
#include "plugins/quant/kv_common/kv_query.h"

namespace troupe::kv {

struct int8_format {
    kv_geometry geometry;

    size_t head_rows() const { return static_cast<size_t>(geometry.block_size) * geometry.head_dim; }
    // Channel group cg (channels 4 cg .. 4 cg + 3) of kv head h: [block_size, 4] biased codes.
    const uint8_t* k_group(const uint8_t* block, int32_t h, int32_t cg) const {
        return block + h * head_rows() + static_cast<size_t>(cg) * geometry.block_size * 4;
    }
    int32_t k_code(const uint8_t* block, int32_t h, int32_t r, int32_t c) const {
        return static_cast<int32_t>(k_group(block, h, c / 4)[r * 4 + c % 4]) - 128;
    }
    int32_t row_groups() const { return (geometry.block_size + 3) / 4; }
    size_t v_head_bytes() const { return static_cast<size_t>(row_groups()) * 4 * geometry.head_dim; }
    // Row group rg (rows 4 rg .. 4 rg + 3) of kv head h's values: [head_dim, 4] codes.
    const int8_t* v_group(const uint8_t* block, int32_t h, int32_t rg) const {
        return reinterpret_cast<const int8_t*>(block) + geometry.n_kv_heads * head_rows() + h * v_head_bytes() +
               static_cast<size_t>(rg) * geometry.head_dim * 4;
    }
    int32_t v_code(const uint8_t* block, int32_t h, int32_t r, int32_t c) const {
        return v_group(block, h, r / 4)[c * 4 + r % 4];
    }
    const float* v_scales(const uint8_t* block, int32_t h) const {
        return reinterpret_cast<const float*>(block + geometry.n_kv_heads * (head_rows() + v_head_bytes())) +
               static_cast<size_t>(h) * geometry.block_size;
    }
    const float* k_scales(const uint8_t* block, int32_t h) const {
        return v_scales(block, 0) + static_cast<size_t>(geometry.n_kv_heads) * geometry.block_size +
               static_cast<size_t>(h) * geometry.head_dim;
    }
    size_t bytes_per_token() const { return static_cast<size_t>(geometry.n_kv_heads) * (2 * geometry.head_dim + 4); }
    size_t bytes_per_block() const {
        const size_t pad_rows = static_cast<size_t>(row_groups()) * 4 - geometry.block_size;
        return (4 + pad_rows) * geometry.n_kv_heads * geometry.head_dim;
    }
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

// block_kernels::prefetch: kv head h's key codes, value codes and both scales.
static inline void int8_prefetch(const void* format, const uint8_t* block, int32_t h) {
    const auto& f = *static_cast<const int8_format*>(format);
    prefetch_bytes(f.k_group(block, h, 0), f.head_rows());
    prefetch_bytes(f.v_group(block, h, 0), f.v_head_bytes());
    prefetch_bytes(f.v_scales(block, h), static_cast<size_t>(f.geometry.block_size) * sizeof(float));
    prefetch_bytes(f.k_scales(block, h), static_cast<size_t>(f.geometry.head_dim) * sizeof(float));
}

// A block's probabilities meeting its value rows: w[r] = p[r] * v_scale[r] (>= 0), quantized to 0..255 with the
// scale max / 255; rows [n_rows, 4 * ceil(n_rows / 4)) get 0. Returns the scale (0: every weight is 0). The AVX-512
// kernels compute the same floats with the same operations.
static inline float int8_quantize_weights(const float* p, const float* v_scales, int32_t n_rows, uint8_t* codes) {
    float w[max_block_size];
    float wmax = 0.0f;
    for (int32_t r = 0; r < n_rows; ++r) {
        w[r] = p[r] * v_scales[r];
        wmax = std::max(wmax, w[r]);
    }
    if (!(wmax > 0.0f)) return 0.0f;
    const float scale = wmax / 255.0f;
    const float inv = 1.0f / scale;
    for (int32_t r = 0; r < n_rows; ++r)
        codes[r] = static_cast<uint8_t>(std::clamp(std::nearbyint(w[r] * inv), 0.0f, 255.0f));
    for (int32_t r = n_rows; r % 4 != 0; ++r) codes[r] = 0;
    return scale;
}

block_kernels int8_kernels_ref();
block_kernels int8_kernels_avx2();         // AVX2 (+FMA, F16C)
block_kernels int8_kernels_avx512();       // AVX-512F/BW: vpdpbusd emulated by vpmaddwd
block_kernels int8_kernels_avx512_vnni();  // AVX-512 VNNI

}  // namespace troupe::kv
