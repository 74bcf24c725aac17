// kv/int8 scalar kernels: the reference twin of int8_kernels_avx512.h (the same query and weight codes, integer dot
// products with the key and value codes, the same float operations around them).
#include "int8_format.h"
#include "plugins/quant/kv_common/kv_kernels.h"

namespace troupe::kv {
namespace {

void int8_scores_ref(const void* format, const uint8_t* block, int32_t h, const float* q, int32_t group, int32_t n_rows,
                     float scale, float* s, int32_t s_stride) {
    const auto& f = *static_cast<const int8_format*>(format);
    const int32_t hd = f.geometry.head_dim;
    int8_t qi[max_head_dim];
    for (int32_t g = 0; g < group; ++g) {
        const quantized_query iq =
            quantize_query_ref(q + static_cast<size_t>(g) * hd, f.k_scales(block, h), hd, scale, qi);
        for (int32_t r = 0; r < n_rows; ++r) {
            int32_t dot = 0;  // biased codes: sum_c (k[c] + 128) * qi[c]
            for (int32_t c = 0; c < hd; ++c) dot += (f.k_code(block, h, r, c) + 128) * qi[c];
            s[static_cast<size_t>(g) * s_stride + r] = iq.scale * static_cast<float>(dot - 128 * iq.sum);
        }
    }
}

void int8_accumulate_ref(const void* format, const uint8_t* block, int32_t h, const float* p, int32_t group,
                         int32_t n_rows, int32_t p_stride, float* acc) {
    const auto& f = *static_cast<const int8_format*>(format);
    const int32_t hd = f.geometry.head_dim;
    uint8_t wq[max_block_size + 4];
    for (int32_t g = 0; g < group; ++g) {
        const float ws = int8_quantize_weights(p + static_cast<size_t>(g) * p_stride, f.v_scales(block, h), n_rows, wq);
        if (ws == 0.0f) continue;
        float* ag = acc + static_cast<size_t>(g) * hd;
        for (int32_t c = 0; c < hd; ++c) {
            int32_t dot = 0;
            for (int32_t r = 0; r < n_rows; ++r) dot += wq[r] * f.v_code(block, h, r, c);
            ag[c] += ws * static_cast<float>(dot);
        }
    }
}

}  // namespace

block_kernels int8_kernels_ref() {
    return block_kernels{int8_scores_ref,         int8_accumulate_ref,    scores_f32<isa_ref>,
                         accumulate_f32<isa_ref>, softmax_block<isa_ref>, int8_prefetch};
}

}  // namespace troupe::kv
