// q8_kernels.h's products as scalar loops with the same recipes, SDK types only: the build of the plugin without
// troupe's kernel library (no panels).
#include <vector>

#include "plugins/common/half.h"
#include "q8_kernels.h"

namespace troupe::q8 {
namespace {

const block_q8_0* row_of(const block_q8_0* w, size_t row_stride, int64_t o) {
    return reinterpret_cast<const block_q8_0*>(reinterpret_cast<const uint8_t*>(w) +
                                               static_cast<size_t>(o) * row_stride);
}

// W8A16: each row dequantized (d * q, exact), dotted with the float activations.
void matmul_float(const block_q8_0* w, int64_t n_in, int64_t n_out, size_t row_stride, const float* x, float* y,
                  int64_t n_tokens, const parallel_fn& parallel_for) {
    parallel_for(n_out, [&](int64_t begin, int64_t end) {
        std::vector<float> row(static_cast<size_t>(n_in));  // [n_in] one dequantized weight row
        for (int64_t o = begin; o < end; ++o) {
            const block_q8_0* wr = row_of(w, row_stride, o);
            for (int64_t b = 0; b < n_in / qk8_0; ++b) {
                const float d = quant_common::fp16_to_fp32(wr[b].d);
                for (int i = 0; i < qk8_0; ++i) row[b * qk8_0 + i] = wr[b].qs[i] * d;
            }
            for (int64_t t = 0; t < n_tokens; ++t) {
                const float* xt = x + t * n_in;
                float sum = 0.0f;
                for (int64_t i = 0; i < n_in; ++i) sum += row[i] * xt[i];
                y[t * n_out + o] = sum;
            }
        }
    });
}

}  // namespace

size_t panel_bytes(int64_t, int64_t, activations) {
    return 0;
}

int pack_panels(const block_q8_0*, int64_t, int64_t, size_t, void*) {
    return 0;
}

void matmul(const block_q8_0* w, const void*, int, int64_t n_in, int64_t n_out, size_t row_stride, const float* x,
            float* y, int64_t n_tokens, const parallel_fn& parallel_for, activations recipe, const ranges_fn&) {
    if (recipe == activations::float32) return matmul_float(w, n_in, n_out, row_stride, x, y, n_tokens, parallel_for);
    const int64_t n_blocks = n_in / qk8_0;
    std::vector<block_q8_0> xq(static_cast<size_t>(n_tokens * n_blocks));  // [n_tokens, n_blocks]
    for (int64_t t = 0; t < n_tokens; ++t) quantize_row_q8_0(x + t * n_in, xq.data() + t * n_blocks, n_in);
    parallel_for(n_out, [&](int64_t begin, int64_t end) {
        for (int64_t o = begin; o < end; ++o) {
            const block_q8_0* wr = row_of(w, row_stride, o);
            for (int64_t t = 0; t < n_tokens; ++t) {
                const block_q8_0* xr = xq.data() + t * n_blocks;
                float sum = 0.0f;
                for (int64_t b = 0; b < n_blocks; ++b) {
                    int32_t isum = 0;
                    for (int i = 0; i < qk8_0; ++i) isum += int32_t{wr[b].qs[i]} * int32_t{xr[b].qs[i]};
                    sum += static_cast<float>(isum) *
                           (quant_common::fp16_to_fp32(wr[b].d) * quant_common::fp16_to_fp32(xr[b].d));
                }
                y[t * n_out + o] = sum;
            }
        }
    });
}

const char* matmul_implementation() {
    return "scalar";
}

}  // namespace troupe::q8
