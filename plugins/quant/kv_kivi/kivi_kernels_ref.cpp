// kv/kivi scalar kernels: the reference twin of kivi_kernels_avx512.h (the same query and weight codes, integer dot
// products with the key and value codes, the same float operations around them).
#include "kivi_format.h"
#include "plugins/quant/kv_common/kv_kernels.h"

namespace troupe::kv {
namespace {

void kivi_scores_ref(const void* format, const uint8_t* block, int32_t h, const float* q, int32_t group, int32_t n_rows,
                     float scale, float* s, int32_t s_stride) {
    const auto& f = *static_cast<const kivi_format*>(format);
    const int32_t hd = f.geometry.head_dim;
    float mul[max_head_dim];
    float add[max_head_dim];
    kivi_decoder_base<isa_ref>::key_channels(f, block, h, mul, add);
    int8_t qi[max_head_dim];
    for (int32_t g = 0; g < group; ++g) {
        const float* qg = q + static_cast<size_t>(g) * hd;
        const float qa = scale * isa_ref::dot(qg, add, hd);  // scale * (q . min)
        const quantized_query iq = quantize_query_ref(qg, mul, hd, scale, qi);
        for (int32_t r = 0; r < n_rows; ++r) {
            int32_t dot = 0;
            for (int32_t c = 0; c < hd; ++c) dot += f.k_code(block, h, r, c) * qi[c];
            s[static_cast<size_t>(g) * s_stride + r] = iq.scale * static_cast<float>(dot) + qa;
        }
    }
}

}  // namespace

block_kernels kivi_kernels_ref() {
    using D = kivi_decoder_base<isa_ref>;
    return block_kernels{kivi_scores_ref,         kivi_accumulate_scalar, scores_f32<isa_ref>,
                         accumulate_f32<isa_ref>, softmax_block<isa_ref>, D::prefetch};
}

}  // namespace troupe::kv
