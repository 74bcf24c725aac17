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

// The scale and min of the stored block at p.
inline void block_scale_min(const uint8_t* p, float* d, float* m) {
    uint16_t dh, mh;
    std::memcpy(&dh, p, 2);
    std::memcpy(&mh, p + 2, 2);
    *d = quant_common::fp16_to_fp32(dh);
    *m = quant_common::fp16_to_fp32(mh);
}

// ---- the kernels' layout, made by prepare ----------------------------------------------------------------------
// A row of n_in weights is cut into spans of 128 (the last one may hold 32, 64 or 96), and stored as
//
//   [ span 0: 64 bytes ][ span 1: 64 bytes ] ... [ float32 (d, m) of group 0, 1, ... n_in / g - 1 ] (padding to 64)
//
// In a span, the 4-byte lane i (i = 0..15, little endian) holds 8 nibbles: nibble (slot) k (bits 4k..4k+3) is the
// code of weight 128 s + 16 slot_block(k) + i, where the slots hold the span's blocks of 16 weights in the order
//
//   slot k    : 0  1  2  3  4  5  6  7
//   block     : 0  2  4  6  1  3  5  7        (slot_block; block_slot is its inverse)
//
// So one aligned 64-byte load gives the codes of 128 weights, and shifting it right by 4k puts the codes of block
// slot_block(k) in the low bits of the 16 lanes, in order: what a permute of a group's 16 levels (AVX-512) or a mask
// and convert (AVX2) turns into 16 weights, with no byte unpacking. Seen as 32 16-bit words, word 2i holds slots 0..3
// (blocks 0, 2, 4, 6) and word 2i + 1 slots 4..7 (blocks 1, 3, 5, 7): shifting the words right by 4c and masking
// gives, in 32-bit lane i, the pair (weight 32c + i, weight 32c + 16 + i): 32 consecutive weights of one group (g is
// a multiple of 32), what the bf16 decode (w4a16_bf16.h) multiplies by pairs. Nibbles past the end of a short last
// span are 0.
// The scales and mins are the stored fp16 values widened to float32 (exactly): a kernel broadcasts them straight
// from memory into its multiply and add, where fp16 would cost a load, a conversion and two shuffles per group
// (measured on one Zen 5 core, W4_G128 decode from L2: 26.5 -> 32.4 G weights * 0.53 B/s). That is 4 more bytes
// per group read: +6% for W4_G128, +11% for W4_G64, +20% for Q4_1 (prepared_bytes counts them).
constexpr int64_t k_span = 128;
constexpr size_t k_span_bytes = 64;

// The block of 16 weights that slot k of a span holds, and the slot of block b.
constexpr int slot_block(int k) {
    return k < 4 ? 2 * k : 2 * (k - 4) + 1;
}
constexpr int block_slot(int b) {
    return b % 2 == 0 ? b / 2 : 4 + b / 2;
}

constexpr int64_t n_spans(int64_t n_in) {
    return (n_in + k_span - 1) / k_span;
}
constexpr size_t scales_offset(int64_t n_in) {
    return static_cast<size_t>(n_spans(n_in)) * k_span_bytes;
}
// Bytes of a row a product reads, and bytes between rows.
constexpr size_t layout_read_bytes(int64_t n_in, int g) {
    return scales_offset(n_in) + static_cast<size_t>(n_in / g) * 2 * sizeof(float);
}
constexpr size_t layout_row_bytes(int64_t n_in, int g) {
    return (layout_read_bytes(n_in, g) + 63) / 64 * 64;
}

// A weight matrix in the kernels' layout: n_out rows, row_stride (= layout_row_bytes) bytes apart, 64-byte aligned.
// A shard of a weight the host placed (rows [first_row, ...) of n_out, in a region of their own) keeps the whole
// weight's n_out (y's row stride) and holds row first_row at data; the kernels are called only on its rows.
struct matrix {
    const uint8_t* data;
    int64_t n_in;  // a multiple of g
    int64_t n_out;
    size_t row_stride;
    int g;
    int64_t first_row = 0;  // the row at data

    const uint8_t* row(int64_t r) const { return data + static_cast<size_t>(r - first_row) * row_stride; }
    const uint8_t* spans(int64_t r) const { return row(r); }
    // [n_in / g][2]: d, m of each group
    const float* scales(int64_t r) const { return reinterpret_cast<const float*>(row(r) + scales_offset(n_in)); }
};

// The code of weight j of a row in the kernels' layout.
inline int layout_code(const uint8_t* spans, int64_t j) {
    const int64_t s = j / k_span, k = block_slot(static_cast<int>(j % k_span) / 16), i = j % 16;
    const uint8_t byte = spans[static_cast<size_t>(s) * k_span_bytes + 4 * i + k / 2];
    return (k % 2 == 0 ? byte : byte >> 4) & 15;
}

// Writes a row of stored blocks (n_in / g of them) into `dst` in the kernels' layout (layout_row_bytes bytes).
inline void pack_row(const uint8_t* blocks, int64_t n_in, int g, uint8_t* dst) {
    std::memset(dst, 0, layout_row_bytes(n_in, g));
    uint8_t* scales = dst + scales_offset(n_in);
    for (int64_t b = 0; b < n_in / g; ++b) {
        const uint8_t* blk = blocks + static_cast<size_t>(b) * block_bytes(g);
        float dm[2];
        block_scale_min(blk, &dm[0], &dm[1]);
        std::memcpy(scales + 8 * b, dm, 8);
        for (int j = 0; j < g; ++j) {
            const uint8_t q = j < g / 2 ? blk[k_block_header + j] & 15 : blk[k_block_header + j - g / 2] >> 4;
            const int64_t w = b * g + j;
            const int64_t s = w / k_span, k = block_slot(static_cast<int>(w % k_span) / 16), i = w % 16;
            dst[static_cast<size_t>(s) * k_span_bytes + 4 * i + k / 2] |= static_cast<uint8_t>(k % 2 == 0 ? q : q << 4);
        }
    }
}

}  // namespace troupe::w4a16
