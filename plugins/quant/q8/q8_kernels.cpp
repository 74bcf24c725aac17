// Q8_0 quantization of float rows at load (both builds of the plugin): SDK types only.
#include "q8_kernels.h"

#include <cmath>
#include <cstring>
#include <vector>

#include "plugins/common/half.h"

namespace troupe::q8 {
namespace {

float bf16_to_fp32(uint16_t h) {
    return quant_common::fp32_from_bits(static_cast<uint32_t>(h) << 16);
}

}  // namespace

void quantize_row_q8_0(const float* x, block_q8_0* y, int64_t n) {
    for (int64_t b = 0; b < n / qk8_0; ++b) {
        const float* xb = x + b * qk8_0;
        float amax = 0.0f;
        for (int i = 0; i < qk8_0; ++i) amax = std::fmax(amax, std::fabs(xb[i]));
        const float d = amax / 127.0f;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        y[b].d = quant_common::fp32_to_fp16(d);
        for (int i = 0; i < qk8_0; ++i) y[b].qs[i] = static_cast<int8_t>(std::round(xb[i] * id));
    }
}

void quantize_rows(uint32_t type, const void* src, size_t row_stride, int64_t n_in, int64_t n_in_padded,
                   block_q8_0* dst, int64_t begin, int64_t end) {
    std::vector<float> row(static_cast<size_t>(n_in_padded), 0.0f);  // zeros past n_in
    const int64_t n_blocks = n_in_padded / qk8_0;
    for (int64_t r = begin; r < end; ++r) {
        const auto* bytes = static_cast<const uint8_t*>(src) + static_cast<size_t>(r) * row_stride;
        if (type == TROUPE_TYPE_F16 || type == TROUPE_TYPE_BF16) {
            for (int64_t i = 0; i < n_in; ++i) {
                uint16_t h;
                std::memcpy(&h, bytes + 2 * i, 2);
                row[i] = type == TROUPE_TYPE_F16 ? quant_common::fp16_to_fp32(h) : bf16_to_fp32(h);
            }
        } else {  // f32, checked by the caller
            std::memcpy(row.data(), bytes, static_cast<size_t>(n_in) * sizeof(float));
        }
        quantize_row_q8_0(row.data(), dst + r * n_blocks, n_in_padded);
    }
}

}  // namespace troupe::q8
