// The AVX-512 side of test_kv_byte_dots.cpp (built with AVX-512 and VNNI flags; called only where the CPU has them):
// the integer KV kernels' byte dot products and query quantization (plugins/quant/kv_common/kv_dot_avx512.h) on
// one vector's worth of inputs.
#include "plugins/quant/kv_common/kv_dot_avx512.h"

namespace troupe::testing {

// out[lane] = acc[lane] + sum_i a[4 lane + i] * b[4 lane + i], by the named product.
void kv_dot_bytes(bool vnni, const uint8_t* a, const int8_t* b, const int32_t* acc, int32_t* out) {
    const __m512i va = _mm512_loadu_si512(a);
    const __m512i vb = _mm512_loadu_si512(b);
    const __m512i vacc = _mm512_loadu_si512(acc);
    const __m512i r = vnni ? kv::dot_vnni::dp(vacc, va, vb) : kv::dot_bw::dp(vacc, va, vb);
    _mm512_storeu_si512(out, r);
}

float kv_quantize_query_avx512(const float* q, const float* k_scales, int32_t n, float scale, int8_t* codes,
                               int32_t* sum) {
    alignas(64) int8_t buf[kv::max_head_dim];
    const kv::quantized_query out = kv::quantize_query(q, k_scales, n, scale, buf);
    std::memcpy(codes, buf, static_cast<size_t>(n));
    *sum = out.sum;
    return out.scale;
}

}  // namespace troupe::testing
