// kv/int8 AVX-512 kernels (built with -mavx512f -mavx512bw -mavx512vl; called only when the CPU has them): int8
// codes widen to floats in registers, 16 channels per step, masked tails for any head_dim.
#include <immintrin.h>

#include "int8_format.h"
#include "plugins/quant/kv_common/kv_kernels.h"

namespace troupe::kv {
namespace {

// x[c] = scale * codes[c], c in [0, n)
inline void widen(const int8_t* codes, float scale, float* x, int32_t n) {
    const __m512 s = _mm512_set1_ps(scale);
    for (int32_t c = 0; c < n; c += 16) {
        const __mmask16 m = lanes_mask(n - c);
        const __m512i w = _mm512_cvtepi8_epi32(_mm_maskz_loadu_epi8(m, codes + c));
        _mm512_mask_storeu_ps(x + c, m, _mm512_mul_ps(s, _mm512_cvtepi32_ps(w)));
    }
}

struct int8_decoder_avx512 : int8_decoder_base<isa_avx512> {
    static void key_row(const int8_format& f, const uint8_t* block, int32_t h, int32_t r, float* x) {
        widen(f.k_codes(block, h, r), 1.0f, x, f.geometry.head_dim);
    }
    static void value_row(const int8_format& f, const uint8_t* block, int32_t h, int32_t r, float* x) {
        widen(f.v_codes(block, h, r), f.v_scales(block, h)[r], x, f.geometry.head_dim);
    }
    static __m512 key16(const int8_format& f, const uint8_t* block, int32_t h, int32_t r, int32_t c) {
        return codes16(f.k_codes(block, h, r) + c);
    }
    static __m512 value16(const int8_format& f, const uint8_t* block, int32_t h, int32_t r, int32_t c) {
        return _mm512_mul_ps(_mm512_set1_ps(f.v_scales(block, h)[r]), codes16(f.v_codes(block, h, r) + c));
    }

private:
    static __m512 codes16(const int8_t* codes) {
        return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(codes))));
    }
};

}  // namespace

block_kernels int8_kernels_avx512() {
    return fused_kernels_of<int8_decoder_avx512>();
}

}  // namespace troupe::kv
