// kv/kivi: KIVI's 2-bit KV cache (Liu et al. 2024, "KIVI: a tuning-free asymmetric 2bit quantization for KV cache"):
// asymmetric codes x ~ min + code * scale, code in 0..3, with
//   keys per channel: one (scale, min) per (kv head, channel) per block, over the block's rows;
//   values per token: one (scale, min) per group of `value_group` channels of a (token, kv head).
// KIVI's float residual is the newest tokens of the open block: keys and values wait in float in the sequence's
// window until their block fills, then both are quantized into the block (kv_driver.h).
//
//   block (bytes): K codes  [n_kv_heads, head_dim / 4, block_size] four 2-bit codes a byte: channels 4 cg..4 cg + 3
//                                                                   of one row, channel 4 cg + i at bit 2 i
//                  V codes  [n_kv_heads, ceil(block_size / 4), head_dim] four 2-bit codes a byte: rows 4 rg..4 rg + 3
//                                                                         of one channel, row 4 rg + i at bit 2 i
//                  V params [n_kv_heads, block_size, head_dim / value_group, (scale, min)] IEEE half
//                  K params [n_kv_heads, head_dim, (scale, min)] IEEE half      (per block)
//   bytes_per_token = n_kv_heads * (head_dim / 2 + 4 * head_dim / value_group)
//   bytes_per_block = 4 * n_kv_heads * head_dim (+ the value rows that pad the last row group)
//
// Both parts are laid out for integer dot products (kv/int8's layout with 2-bit codes). Keys channel-group-major:
// 16 bytes (16 rows of one channel group) widen to 16 lanes of four byte codes, which meet the query quantized once
// per block against the channel scales (kv_query.h) in one vpdpbusd; the channel minimums add scale * (q . min).
// Values row-group-major: 16 bytes (16 channels of one row group) widen to 16 lanes of four byte codes, which meet
// the weights p[r] * v_scale[r, j] of the group's four rows, quantized once per block and value group to 0..255;
// the minimums add sum_r p[r] * v_min[r, j].
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "plugins/common/half.h"
#include "plugins/quant/kv_common/kv_format.h"
#include "plugins/quant/kv_common/kv_query.h"

namespace troupe::kv {

using quant_common::fp16_to_fp32;
using quant_common::fp32_to_fp16;

struct kivi_format {
    kv_geometry geometry;
    int32_t value_group = 32;

    int32_t row_bytes() const { return geometry.head_dim / 4; }
    size_t head_bytes() const { return static_cast<size_t>(geometry.block_size) * row_bytes(); }
    int32_t row_groups() const { return (geometry.block_size + 3) / 4; }
    size_t v_head_bytes() const { return static_cast<size_t>(row_groups()) * geometry.head_dim; }
    int32_t value_groups() const { return geometry.head_dim / value_group; }
    // Channel group cg of kv head h's keys: [block_size] bytes.
    const uint8_t* k_group(const uint8_t* block, int32_t h, int32_t cg) const {
        return block + h * head_bytes() + static_cast<size_t>(cg) * geometry.block_size;
    }
    int32_t k_code(const uint8_t* block, int32_t h, int32_t r, int32_t c) const {
        return (k_group(block, h, c / 4)[r] >> (2 * (c % 4))) & 3;
    }
    // Row group rg of kv head h's values: [head_dim] bytes.
    const uint8_t* v_group(const uint8_t* block, int32_t h, int32_t rg) const {
        return block + geometry.n_kv_heads * head_bytes() + h * v_head_bytes() +
               static_cast<size_t>(rg) * geometry.head_dim;
    }
    int32_t v_code(const uint8_t* block, int32_t h, int32_t r, int32_t c) const {
        return (v_group(block, h, r / 4)[c] >> (2 * (r % 4))) & 3;
    }
    // [value_groups, (scale, min)] of value row r
    const uint16_t* v_params(const uint8_t* block, int32_t h, int32_t r) const {
        return reinterpret_cast<const uint16_t*>(block + geometry.n_kv_heads * (head_bytes() + v_head_bytes())) +
               (static_cast<size_t>(h) * geometry.block_size + r) * value_groups() * 2;
    }
    // [head_dim, (scale, min)]
    const uint16_t* k_params(const uint8_t* block, int32_t h) const {
        return v_params(block, geometry.n_kv_heads, 0) + static_cast<size_t>(h) * geometry.head_dim * 2;
    }

    size_t bytes_per_token() const {
        return static_cast<size_t>(geometry.n_kv_heads) * (geometry.head_dim / 2 + 4 * value_groups());
    }
    size_t bytes_per_block() const {
        return static_cast<size_t>(geometry.n_kv_heads) *
               (4 * static_cast<size_t>(geometry.head_dim) + v_head_bytes() - head_bytes());
    }
};

// Quantizes n values x[i * stride] into 2-bit codes: value i goes to byte place(i).first at bit place(i).second (the
// caller has cleared those bits). Writes (scale, min) as halves; the codes are computed with the rounded halves, so
// decoding gives min + code * scale exactly as written.
template <class Place>
void kivi_quantize(const float* x, int32_t n, int32_t stride, Place place, uint16_t* params) {
    float lo = x[0];
    float hi = x[0];
    for (int32_t i = 1; i < n; ++i) {
        lo = std::min(lo, x[i * stride]);
        hi = std::max(hi, x[i * stride]);
    }
    params[0] = fp32_to_fp16((hi - lo) / 3.0f);
    params[1] = fp32_to_fp16(lo);
    const float scale = fp16_to_fp32(params[0]);
    const float mn = fp16_to_fp32(params[1]);
    const float inv = scale > 0.0f ? 1.0f / scale : 0.0f;
    for (int32_t i = 0; i < n; ++i) {
        const int32_t code = static_cast<int32_t>(std::clamp(std::nearbyint((x[i * stride] - mn) * inv), 0.0f, 3.0f));
        const auto [byte, shift] = place(i);
        *byte = static_cast<uint8_t>(*byte | (code << shift));
    }
}

template <class Isa>
struct kivi_decoder_base {
    using format = kivi_format;
    using isa = Isa;
    static void key_channels(const kivi_format& f, const uint8_t* block, int32_t h, float* mul, float* add) {
        const uint16_t* kp = f.k_params(block, h);
        for (int32_t c = 0; c < f.geometry.head_dim; ++c) {
            mul[c] = fp16_to_fp32(kp[2 * c]);
            add[c] = fp16_to_fp32(kp[2 * c + 1]);
        }
    }
    static void prefetch(const void* format, const uint8_t* block, int32_t h) {
        const auto& f = *static_cast<const kivi_format*>(format);
        prefetch_bytes(f.k_group(block, h, 0), f.head_bytes());
        prefetch_bytes(f.v_group(block, h, 0), f.v_head_bytes());
        prefetch_bytes(f.v_params(block, h, 0),
                       static_cast<size_t>(f.geometry.block_size) * f.value_groups() * 2 * sizeof(uint16_t));
        prefetch_bytes(f.k_params(block, h), static_cast<size_t>(f.geometry.head_dim) * 2 * sizeof(uint16_t));
    }
};

// A block's probabilities meeting value group j of its rows: w[r] = p[r] * scale[r] (>= 0), quantized to 0..255
// with the scale max / 255; rows [n_rows, 4 * ceil(n_rows / 4)) get 0. Returns the scale (0: every weight is 0). The
// AVX-512 kernels compute the same floats with the same operations.
static inline float kivi_quantize_weights(const float* p, const float* scales, int32_t n_rows, uint8_t* codes) {
    float w[max_block_size];
    float wmax = 0.0f;
    for (int32_t r = 0; r < n_rows; ++r) {
        w[r] = p[r] * scales[r];
        wmax = std::max(wmax, w[r]);
    }
    for (int32_t r = n_rows; r % 4 != 0; ++r) codes[r] = 0;
    if (!(wmax > 0.0f)) return 0.0f;
    const float scale = wmax / 255.0f;
    const float inv = 1.0f / scale;
    for (int32_t r = 0; r < n_rows; ++r) {
        codes[r] = static_cast<uint8_t>(std::clamp(std::nearbyint(w[r] * inv), 0.0f, 255.0f));
    }
    return scale;
}

// acc[g * head_dim + c] += sum_r p[g * p_stride + r] * v_r[c] (block_kernels::accumulate), in integers as the
// AVX-512 kernel does: the scalar reference, and the AVX-512 kernels' path for shapes whose value groups are not
// whole 16-lane vectors.
static inline void kivi_accumulate_scalar(const void* format, const uint8_t* block, int32_t h, const float* p,
                                          int32_t group, int32_t n_rows, int32_t p_stride, float* acc) {
    const auto& f = *static_cast<const kivi_format*>(format);
    const int32_t hd = f.geometry.head_dim;
    uint8_t wq[max_block_size + 4];
    float scales[max_block_size];  // [n_rows] of value group j
    for (int32_t g = 0; g < group; ++g) {
        const float* pg = p + static_cast<size_t>(g) * p_stride;
        float* ag = acc + static_cast<size_t>(g) * hd;
        for (int32_t j = 0; j < f.value_groups(); ++j) {
            float min_sum = 0.0f;  // sum_r p[r] * min[r, j]
            for (int32_t r = 0; r < n_rows; ++r) {
                const uint16_t* vp = f.v_params(block, h, r) + 2 * j;
                scales[r] = fp16_to_fp32(vp[0]);
                min_sum += pg[r] * fp16_to_fp32(vp[1]);
            }
            const float ws = kivi_quantize_weights(pg, scales, n_rows, wq);
            for (int32_t c = j * f.value_group; c < (j + 1) * f.value_group; ++c) {
                int32_t dot = 0;
                if (ws != 0.0f) {
                    for (int32_t r = 0; r < n_rows; ++r) dot += wq[r] * f.v_code(block, h, r, c);
                }
                ag[c] = (ag[c] + ws * static_cast<float>(dot)) + min_sum;
            }
        }
    }
}

block_kernels kivi_kernels_ref();
block_kernels kivi_kernels_avx2_for(const kivi_format& f);         // AVX2 (+FMA, F16C)
block_kernels kivi_kernels_avx512_for(const kivi_format& f);       // AVX-512F/BW: vpdpbusd emulated
block_kernels kivi_kernels_avx512_vnni_for(const kivi_format& f);  // AVX-512 VNNI

}  // namespace troupe::kv
