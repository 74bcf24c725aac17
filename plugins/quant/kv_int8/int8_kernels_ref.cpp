// kv/int8 scalar kernels: the reference twin of int8_kernels_avx512.cpp.
#include "int8_format.h"
#include "plugins/quant/kv_common/kv_kernels.h"

namespace troupe::kv {
namespace {

struct int8_decoder_ref : int8_decoder_base<isa_ref> {
    static void key_row(const int8_format& f, const uint8_t* block, int32_t h, int32_t r, float* x) {
        const int8_t* codes = f.k_codes(block, h, r);
        for (int32_t c = 0; c < f.geometry.head_dim; ++c) x[c] = codes[c];
    }
    static void value_row(const int8_format& f, const uint8_t* block, int32_t h, int32_t r, float* x) {
        const int8_t* codes = f.v_codes(block, h, r);
        const float scale = f.v_scales(block, h)[r];
        for (int32_t c = 0; c < f.geometry.head_dim; ++c) x[c] = scale * codes[c];
    }
};

}  // namespace

block_kernels int8_kernels_ref() {
    return kernels_of<int8_decoder_ref>();
}

}  // namespace troupe::kv
