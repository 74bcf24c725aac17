// The AVX2 side of test_kv_byte_dots.cpp (built with AVX2 flags; called only where the CPU has them): the query
// quantization of the integer KV kernels' AVX2 files (plugins/quant/kv_common/kv_query_avx2.h).
#include "plugins/quant/kv_common/kv_query_avx2.h"

namespace troupe::testing {

float kv_quantize_query_avx2(const float* q, const float* k_scales, int32_t n, float scale, int8_t* codes,
                             int32_t* sum) {
    int8_t buf[kv::max_head_dim + 8];
    const kv::quantized_query out = kv::quantize_query_avx2(q, k_scales, n, scale, buf);
    std::memcpy(codes, buf, static_cast<size_t>(n));
    *sum = out.sum;
    return out.scale;
}

}  // namespace troupe::testing
