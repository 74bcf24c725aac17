// kv/fp8 scalar kernels: the reference twin of fp8_kernels_avx512.cpp.
#include "fp8_format.h"
#include "plugins/quant/kv_common/kv_kernels.h"

namespace troupe::kv {
namespace {

inline void decode(const fp8_format& f, const uint8_t* codes, float scale, float* x) {
    for (int32_t c = 0; c < f.geometry.head_dim; ++c) x[c] = scale * f.lut[codes[c]];
}

struct fp8_decoder_ref : fp8_decoder_base<isa_ref> {
    static void key_row(const fp8_format& f, const uint8_t* block, int32_t h, int32_t r, float* x) {
        const float scale = f.scale(block, false, h, r);
        for (int32_t c = 0; c < f.geometry.head_dim; ++c) x[c] = scale * f.lut[f.k_code(block, h, r, c)];
    }
    static void value_row(const fp8_format& f, const uint8_t* block, int32_t h, int32_t r, float* x) {
        decode(f, f.v_codes(block, h, r), f.scale(block, true, h, r), x);
    }
};

}  // namespace

block_kernels fp8_kernels_ref() {
    return kernels_of<fp8_decoder_ref>();
}

}  // namespace troupe::kv
