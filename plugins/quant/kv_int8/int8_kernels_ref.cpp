// kv/int8 scalar kernels: the reference twin of int8_kernels_avx512.h (the same query codes, integer dot products
// with the biased key codes, the same float operations after them).
#include "int8_format.h"
#include "plugins/quant/kv_common/kv_kernels.h"

namespace troupe::kv {
namespace {

struct int8_decoder_ref : int8_decoder_base<isa_ref> {
    static void value_row(const int8_format& f, const uint8_t* block, int32_t h, int32_t r, float* x) {
        const int8_t* codes = f.v_codes(block, h, r);
        const float scale = f.v_scales(block, h)[r];
        for (int32_t c = 0; c < f.geometry.head_dim; ++c) x[c] = scale * codes[c];
    }
};

void int8_scores_ref(const void* format, const uint8_t* block, int32_t h, const float* q, int32_t group, int32_t n_rows,
                     float scale, float* s, int32_t s_stride) {
    const auto& f = *static_cast<const int8_format*>(format);
    const int32_t hd = f.geometry.head_dim;
    int8_t qi[max_head_dim];
    for (int32_t g = 0; g < group; ++g) {
        const int8_query iq = int8_quantize_query(q + static_cast<size_t>(g) * hd, f.k_scales(block, h), hd, scale, qi);
        for (int32_t r = 0; r < n_rows; ++r) {
            int32_t dot = 0;  // biased codes: sum_c (k[c] + 128) * qi[c]
            for (int32_t c = 0; c < hd; ++c) dot += (f.k_code(block, h, r, c) + 128) * qi[c];
            s[static_cast<size_t>(g) * s_stride + r] = iq.scale * static_cast<float>(dot - 128 * iq.sum);
        }
    }
}

}  // namespace

block_kernels int8_kernels_ref() {
    using D = int8_decoder_ref;
    return block_kernels{int8_scores_ref,         accumulate_block<D>,    scores_f32<isa_ref>,
                         accumulate_f32<isa_ref>, softmax_block<isa_ref>, int8_prefetch};
}

}  // namespace troupe::kv
