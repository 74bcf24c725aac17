// The weight formats quant/w4a16 takes: 4-bit groups with a scale and a min (zero point), float activations.
//
//   type (id)        | G   | block bytes | block
//   -----------------+-----+-------------+-------------------------------------------
//   Q4_1 (3, GGUF)   | 32  | 20          | {fp16 d, fp16 m, uint8 qs[16]}
//   W4_G64 (1064)    | 64  | 36          | {fp16 d, fp16 m, uint8 qs[32]}
//   W4_G128 (1128)   | 128 | 68          | {fp16 d, fp16 m, uint8 qs[64]}
//
// Element j < G / 2 of a group is d * (qs[j] & 15) + m, element j + G / 2 is d * (qs[j] >> 4) + m (a float
// multiply, then a float add: every kernel dequantizes to exactly these values, as kernels/ref/quants.h does).
// The ids and layouts are the SDK's (troupe/types.h); this header names them for the plugin's own code.
#pragma once

#include <troupe/types.h>

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "plugins/common/half.h"

namespace troupe::w4a16 {

constexpr uint32_t k_type_q4_1 = TROUPE_TYPE_Q4_1;
constexpr uint32_t k_type_w4_g64 = TROUPE_TYPE_W4_G64;
constexpr uint32_t k_type_w4_g128 = TROUPE_TYPE_W4_G128;

// G of a type this plugin takes, else 0.
constexpr int group_size(uint32_t type) {
    return type == k_type_q4_1 ? 32 : type == k_type_w4_g64 ? 64 : type == k_type_w4_g128 ? 128 : 0;
}

constexpr const char* type_name(uint32_t type) {
    return type == k_type_q4_1 ? "Q4_1" : type == k_type_w4_g64 ? "W4_G64" : type == k_type_w4_g128 ? "W4_G128" : "?";
}

constexpr size_t k_block_header = 4;  // fp16 d, fp16 m
constexpr size_t block_bytes(int g) {
    return k_block_header + static_cast<size_t>(g / 2);
}

static_assert(block_bytes(32) == sizeof(troupe_block_q4_1) && block_bytes(64) == sizeof(troupe_block_w4_g64) &&
              block_bytes(128) == sizeof(troupe_block_w4_g128));

// A weight matrix as the kernels read it: n_out rows of n_in / g blocks, row_stride bytes apart.
struct matrix {
    const uint8_t* data;
    int64_t n_in;  // a multiple of g
    int64_t n_out;
    size_t row_stride;
    int g;

    const uint8_t* row(int64_t r) const { return data + static_cast<size_t>(r) * row_stride; }
};

// The scale and min of the block at p.
inline void block_scale_min(const uint8_t* p, float* d, float* m) {
    uint16_t dh, mh;
    std::memcpy(&dh, p, 2);
    std::memcpy(&mh, p + 2, 2);
    *d = quant_common::fp16_to_fp32(dh);
    *m = quant_common::fp16_to_fp32(mh);
}

}  // namespace troupe::w4a16
