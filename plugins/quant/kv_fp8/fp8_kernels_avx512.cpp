// kv/fp8 AVX-512 kernels (built with -mavx512f -mavx512bw -mavx512vl; called only when the CPU has them): 16 codes
// widen to lanes and gather their values from the format's 256-entry table, masked tails for any head_dim.
#include <immintrin.h>

#include "fp8_format.h"
#include "plugins/quant/kv_common/kv_kernels.h"

namespace troupe::kv {
namespace {

inline void decode(const fp8_format& f, const uint8_t* codes, float scale, float* x) {
    const __m512 s = _mm512_set1_ps(scale);
    const int32_t n = f.geometry.head_dim;
    for (int32_t c = 0; c < n; c += 16) {
        const __mmask16 m = lanes_mask(n - c);
        const __m512i idx = _mm512_cvtepu8_epi32(_mm_maskz_loadu_epi8(m, codes + c));
        const __m512 v = _mm512_mask_i32gather_ps(_mm512_setzero_ps(), m, idx, f.lut, 4);
        _mm512_mask_storeu_ps(x + c, m, _mm512_mul_ps(s, v));
    }
}

struct fp8_decoder_avx512 : fp8_decoder_base<isa_avx512> {
    static void key_row(const fp8_format& f, const uint8_t* block, int32_t h, int32_t r, float* x) {
        decode(f, f.k_codes(block, h, r), f.scale(block, false, h, r), x);
    }
    static void value_row(const fp8_format& f, const uint8_t* block, int32_t h, int32_t r, float* x) {
        decode(f, f.v_codes(block, h, r), f.scale(block, true, h, r), x);
    }
};

}  // namespace

block_kernels fp8_kernels_avx512() {
    return kernels_of<fp8_decoder_avx512>();
}

}  // namespace troupe::kv
