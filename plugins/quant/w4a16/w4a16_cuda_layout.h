// The device layout of quant/w4a16's CUDA path (w4a16_cuda.h), host side: the repacking prepare runs before the
// upload, and the code of one weight in it (what the device decode reads, for tests). Plain C++ without CUDA, so the
// layout is tested on every machine (tests/cuda/cuda_quant_layout_test.cpp), GPU or not.
//
//   codes  [n_out][n_in / 2] bytes in chunks of 16: chunk c of a row holds weights 32c .. 32c + 31, weight 32c + i
//          (i < 16) in the low nibble of byte i, weight 32c + 16 + i in its high nibble
//   scales [n_out][n_in / g] 4 bytes each: the group's fp16 d then fp16 m, as stored (a __half2 (d, m) on the device)
#pragma once

#include <troupe/plugin.h>

#include <cstdint>
#include <cstring>

#include "w4a16_format.h"

namespace troupe::w4a16_cuda {

// The 4-bit code of weight k of row r in the device layout.
inline int device_code(const uint8_t* codes, int64_t n_in, int64_t r, int64_t k) {
    const uint8_t byte = codes[static_cast<size_t>(r * n_in / 2 + (k / 32) * 16 + k % 16)];
    return k % 32 < 16 ? byte & 15 : byte >> 4;
}

// Rows [r0, r1) of the stored blocks in the device layout: codes [n_out][n_in / 2] bytes, scales [n_out][n_in / g].
inline void pack_rows(const troupe_weight* w, int g, uint8_t* codes, uint8_t* scales, int64_t r0, int64_t r1) {
    const int64_t n_in = w->n_in, n_groups = n_in / g;
    for (int64_t r = r0; r < r1; ++r) {
        const uint8_t* row = static_cast<const uint8_t*>(w->data) + static_cast<size_t>(r) * w->row_stride;
        uint8_t* dst = codes + static_cast<size_t>(r * n_in / 2);
        for (int64_t b = 0; b < n_groups; ++b) {
            const uint8_t* blk = row + static_cast<size_t>(b) * w4a16::block_bytes(g);
            const uint8_t* qs = blk + w4a16::k_block_header;
            std::memcpy(scales + static_cast<size_t>(r * n_groups + b) * 4, blk, 4);
            // Stored: element j < g/2 of the group is the low nibble of qs[j], j + g/2 its high nibble. Each run of
            // 16 elements starting at a multiple of 16 lies in one half: 16 codes from 16 bytes at once.
            for (int o = 0; o < g; o += 32) {  // device chunk: elements o .. o + 15 low nibbles, o + 16 .. o + 31 high
                uint8_t lo[16], hi[16];
                for (int h = 0; h < 2; ++h) {
                    const int j0 = o + 16 * h;
                    uint8_t* q = h == 0 ? lo : hi;
                    if (j0 < g / 2) {
                        for (int i = 0; i < 16; ++i) q[i] = qs[j0 + i] & 15;
                    } else {
                        for (int i = 0; i < 16; ++i) q[i] = qs[j0 - g / 2 + i] >> 4;
                    }
                }
                uint8_t* chunk = dst + static_cast<size_t>((b * g + o) / 2);
                for (int i = 0; i < 16; ++i) chunk[i] = static_cast<uint8_t>(lo[i] | hi[i] << 4);
            }
        }
    }
}

}  // namespace troupe::w4a16_cuda
