// kv/fp8: a KV cache of FP8 codes (plugins/common/fp8.h: E4M3 or E5M2), each (token, kv head) row of K and of V
// with its own scale (absmax / the format's largest finite value), or none (params.scale: none; the codes are the
// values themselves). No window: a token is encoded as it is written.
//
//   block (bytes): K codes  [n_kv_heads, head_dim, block_size] fp8   (channel-major: a channel's rows in a row)
//                  V codes  [n_kv_heads, block_size, head_dim] fp8
//                  K scales [n_kv_heads, block_size] float     (scale: token)
//                  V scales [n_kv_heads, block_size] float     (scale: token)
//   bytes_per_token = n_kv_heads * (2 * head_dim + 8), or n_kv_heads * 2 * head_dim without scales
//
// Decoding is a 256-entry table (lut) in the scalar kernels, shifts into IEEE halves in the AVX-512 ones. The keys are
// channel-major so that the AVX-512 scores keep a block's rows in vector lanes: per channel, 16 rows' codes become 16
// floats that meet that channel of the query broadcast, with no horizontal sum per score; a row's scale multiplies its
// lane at the end.
#pragma once

#include <cstdint>

#include "plugins/common/fp8.h"
#include "plugins/quant/kv_common/kv_format.h"

namespace troupe::kv {

struct fp8_format {
    kv_geometry geometry;
    troupe::fp8::format kind = troupe::fp8::format::e4m3;
    bool scaled = true;
    alignas(64) float lut[256];  // code -> value

    size_t head_rows() const { return static_cast<size_t>(geometry.block_size) * geometry.head_dim; }
    // Channel c of kv head h's keys: [block_size] codes.
    const uint8_t* k_channel(const uint8_t* block, int32_t h, int32_t c) const {
        return block + h * head_rows() + static_cast<size_t>(c) * geometry.block_size;
    }
    uint8_t k_code(const uint8_t* block, int32_t h, int32_t r, int32_t c) const { return k_channel(block, h, c)[r]; }
    const uint8_t* v_codes(const uint8_t* block, int32_t h, int32_t r) const {
        return block + (geometry.n_kv_heads + h) * head_rows() + static_cast<size_t>(r) * geometry.head_dim;
    }
    // Row r's scale of K or V (1 without scales).
    float* scale_at(uint8_t* block, bool values, int32_t h, int32_t r) const {
        return reinterpret_cast<float*>(block + 2 * geometry.n_kv_heads * head_rows()) +
               (static_cast<size_t>(values ? geometry.n_kv_heads : 0) + h) * geometry.block_size + r;
    }
    float scale(const uint8_t* block, bool values, int32_t h, int32_t r) const {
        return scaled ? *scale_at(const_cast<uint8_t*>(block), values, h, r) : 1.0f;
    }
    size_t bytes_per_token() const {
        return static_cast<size_t>(geometry.n_kv_heads) * (2 * geometry.head_dim + (scaled ? 8 : 0));
    }
};

template <class Isa>
struct fp8_decoder_base {
    using format = fp8_format;
    using isa = Isa;
    static void prefetch(const void* format, const uint8_t* block, int32_t h) {
        const auto& f = *static_cast<const fp8_format*>(format);
        prefetch_bytes(f.k_channel(block, h, 0), f.head_rows());
        prefetch_bytes(f.v_codes(block, h, 0), f.head_rows());
        if (f.scaled) {
            auto* b = const_cast<uint8_t*>(block);
            prefetch_bytes(f.scale_at(b, false, h, 0), static_cast<size_t>(f.geometry.block_size) * sizeof(float));
            prefetch_bytes(f.scale_at(b, true, h, 0), static_cast<size_t>(f.geometry.block_size) * sizeof(float));
        }
    }
    static void key_channels(const fp8_format& f, const uint8_t*, int32_t, float* mul, float* add) {
        for (int32_t c = 0; c < f.geometry.head_dim; ++c) {
            mul[c] = 1.0f;
            add[c] = 0.0f;
        }
    }
};

block_kernels fp8_kernels_ref();
block_kernels fp8_kernels_avx2();
block_kernels fp8_kernels_avx512();

}  // namespace troupe::kv
