// kv/kivi: KIVI's 2-bit KV cache (Liu et al. 2024, "KIVI: a tuning-free asymmetric 2bit quantization for KV cache"):
// asymmetric codes x ~ min + code * scale, code in 0..3, with
//   keys per channel: one (scale, min) per (kv head, channel) per block, over the block's rows;
//   values per token: one (scale, min) per group of `value_group` channels of a (token, kv head).
// KIVI's float residual is the newest tokens of the open block: keys and values wait in float in the sequence's
// window until their block fills, then both are quantized into the block (kv_driver.h).
//
//   block (bytes): K codes  [n_kv_heads, head_dim / 4, block_size] four 2-bit codes a byte: channels 4 cg..4 cg + 3
//                                                                   of one row, channel 4 cg + i at bit 2 i
//                  V codes  [n_kv_heads, block_size, head_dim / 4] four 2-bit codes a byte (packing below)
//                  V params [n_kv_heads, block_size, head_dim / value_group, (scale, min)] IEEE half
//                  K params [n_kv_heads, head_dim, (scale, min)] IEEE half      (per block)
//   bytes_per_token = n_kv_heads * (head_dim / 2 + 4 * head_dim / value_group)
//   bytes_per_block = 4 * n_kv_heads * head_dim
//
// The keys are stored channel-group-major (as kv/int8's) so that a block's scores are integer dot products: 16 bytes
// (16 rows of one channel group) widen to 16 lanes of four byte codes each, which meet the query quantized once per
// block against the channel scales (kv_query.h) in one vpdpbusd; the channel minimums add scale * (q . min).
//
// Packing of a value row's codes: with head_dim a multiple of 64, channel c is in byte 16 * (c / 64) + c % 16 at bit
// 2 * ((c % 64) / 16) (16 bytes widen to 16 lanes, and four shifts give 64 channels); otherwise in byte c / 4 at bit
// 2 * (c % 4).
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
    bool interleaved() const { return geometry.head_dim % 64 == 0; }
    size_t head_bytes() const { return static_cast<size_t>(geometry.block_size) * row_bytes(); }
    int32_t value_groups() const { return geometry.head_dim / value_group; }
    // Channel group cg of kv head h's keys: [block_size] bytes.
    const uint8_t* k_group(const uint8_t* block, int32_t h, int32_t cg) const {
        return block + h * head_bytes() + static_cast<size_t>(cg) * geometry.block_size;
    }
    int32_t k_code(const uint8_t* block, int32_t h, int32_t r, int32_t c) const {
        return (k_group(block, h, c / 4)[r] >> (2 * (c % 4))) & 3;
    }
    const uint8_t* v_codes(const uint8_t* block, int32_t h, int32_t r) const {
        return block + (geometry.n_kv_heads + h) * head_bytes() + static_cast<size_t>(r) * row_bytes();
    }
    // [value_groups, (scale, min)] of value row r
    const uint16_t* v_params(const uint8_t* block, int32_t h, int32_t r) const {
        return reinterpret_cast<const uint16_t*>(block + 2 * geometry.n_kv_heads * head_bytes()) +
               (static_cast<size_t>(h) * geometry.block_size + r) * value_groups() * 2;
    }
    // [head_dim, (scale, min)]
    const uint16_t* k_params(const uint8_t* block, int32_t h) const {
        return v_params(block, geometry.n_kv_heads, 0) + static_cast<size_t>(h) * geometry.head_dim * 2;
    }
    // Byte and bit of channel c in a row.
    int32_t code_byte(int32_t c) const { return interleaved() ? 16 * (c / 64) + c % 16 : c / 4; }
    int32_t code_shift(int32_t c) const { return interleaved() ? 2 * ((c % 64) / 16) : 2 * (c % 4); }
    int32_t code(const uint8_t* row, int32_t c) const { return (row[code_byte(c)] >> code_shift(c)) & 3; }

    size_t bytes_per_token() const {
        return static_cast<size_t>(geometry.n_kv_heads) * (geometry.head_dim / 2 + 4 * value_groups());
    }
    size_t bytes_per_block() const { return 4 * static_cast<size_t>(geometry.n_kv_heads) * geometry.head_dim; }
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
        prefetch_bytes(f.v_codes(block, h, 0), f.head_bytes());
        prefetch_bytes(f.v_params(block, h, 0),
                       static_cast<size_t>(f.geometry.block_size) * f.value_groups() * 2 * sizeof(uint16_t));
        prefetch_bytes(f.k_params(block, h), static_cast<size_t>(f.geometry.head_dim) * 2 * sizeof(uint16_t));
    }
    // The scalar value rows (the reference; the AVX-512 decoder replaces them where the packing allows).
    static void value_row(const kivi_format& f, const uint8_t* block, int32_t h, int32_t r, float* x) {
        const uint8_t* row = f.v_codes(block, h, r);
        const uint16_t* vp = f.v_params(block, h, r);
        for (int32_t c = 0; c < f.geometry.head_dim; ++c) {
            const int32_t j = c / f.value_group;
            x[c] = fp16_to_fp32(vp[2 * j + 1]) + fp16_to_fp32(vp[2 * j]) * static_cast<float>(f.code(row, c));
        }
    }
};

block_kernels kivi_kernels_ref();
block_kernels kivi_kernels_avx512_for(const kivi_format& f);       // AVX-512F/BW: vpdpbusd emulated
block_kernels kivi_kernels_avx512_vnni_for(const kivi_format& f);  // AVX-512 VNNI

}  // namespace troupe::kv
