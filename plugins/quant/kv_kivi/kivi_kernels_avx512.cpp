// kv/kivi AVX-512 kernels (built with -mavx512f -mavx512bw -mavx512vl; called only when the CPU has them). With
// head_dim a multiple of 64 and value_group a multiple of 16 (the interleaved packing of kivi_format.h), 16 bytes
// of a row widen to 16 lanes and four shifts give its 64 codes; other shapes use the scalar decoders.
#include <immintrin.h>

#include "kivi_format.h"
#include "plugins/quant/kv_common/kv_kernels.h"

namespace troupe::kv {
namespace {

// x[c] = code(c) for a row in the interleaved packing.
inline void unpack(const uint8_t* row, int32_t head_dim, float* x) {
    const __m512i three = _mm512_set1_epi32(3);
    for (int32_t c = 0; c < head_dim; c += 64) {
        const __m512i bytes = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(row + c / 4)));
        for (int32_t j = 0; j < 4; ++j) {
            const __m512i codes = _mm512_and_si512(_mm512_srli_epi32(bytes, 2 * j), three);
            _mm512_storeu_ps(x + c + 16 * j, _mm512_cvtepi32_ps(codes));
        }
    }
}

struct kivi_decoder_avx512 : kivi_decoder_base<isa_avx512> {
    // The block's (scale, min) halves of 16 channels at a time: F16C conversions, then even / odd lanes apart.
    static void key_channels(const kivi_format& f, const uint8_t* block, int32_t h, float* mul, float* add) {
        const uint16_t* kp = f.k_params(block, h);
        const __m512i even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
        const __m512i odd = _mm512_add_epi32(even, _mm512_set1_epi32(1));
        for (int32_t c = 0; c < f.geometry.head_dim; c += 16) {
            const __m512 lo = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(kp + 2 * c)));
            const __m512 hi = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(kp + 2 * c + 16)));
            _mm512_storeu_ps(mul + c, _mm512_permutex2var_ps(lo, even, hi));
            _mm512_storeu_ps(add + c, _mm512_permutex2var_ps(lo, odd, hi));
        }
    }
    static __m512 key16(const kivi_format& f, const uint8_t* block, int32_t h, int32_t r, int32_t c) {
        return codes16(f.k_codes(block, h, r), c);
    }
    static __m512 value16(const kivi_format& f, const uint8_t* block, int32_t h, int32_t r, int32_t c) {
        const uint16_t* vp = f.v_params(block, h, r) + 2 * (c / f.value_group);
        return _mm512_fmadd_ps(codes16(f.v_codes(block, h, r), c), _mm512_set1_ps(_cvtsh_ss(vp[0])),
                               _mm512_set1_ps(_cvtsh_ss(vp[1])));
    }
    // Codes of channels c..c+15 (interleaved packing: the 16 bytes of c's 64-channel group, shifted).
    static __m512 codes16(const uint8_t* row, int32_t c) {
        const __m512i bytes =
            _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(row + c / 4 - (c % 64) / 4)));
        const __m512i codes =
            _mm512_and_si512(_mm512_srlv_epi32(bytes, _mm512_set1_epi32(2 * ((c % 64) / 16))), _mm512_set1_epi32(3));
        return _mm512_cvtepi32_ps(codes);
    }

    static void key_row(const kivi_format& f, const uint8_t* block, int32_t h, int32_t r, float* x) {
        unpack(f.k_codes(block, h, r), f.geometry.head_dim, x);
    }
    static void value_row(const kivi_format& f, const uint8_t* block, int32_t h, int32_t r, float* x) {
        const int32_t hd = f.geometry.head_dim;
        unpack(f.v_codes(block, h, r), hd, x);
        const uint16_t* vp = f.v_params(block, h, r);
        for (int32_t c = 0; c < hd; c += 16) {
            const int32_t j = c / f.value_group;
            const __m512 scale = _mm512_set1_ps(fp16_to_fp32(vp[2 * j]));
            const __m512 mn = _mm512_set1_ps(fp16_to_fp32(vp[2 * j + 1]));
            _mm512_storeu_ps(x + c, _mm512_fmadd_ps(_mm512_loadu_ps(x + c), scale, mn));
        }
    }
};

using kivi_decoder_scalar_rows = kivi_decoder_base<isa_avx512>;

}  // namespace

// The unpacking needs the interleaved packing and whole 16-lane groups; the dot products and sums are vectors
// either way.
block_kernels kivi_kernels_avx512_for(const kivi_format& f) {
    if (f.interleaved() && f.value_group % 16 == 0) return fused_kernels_of<kivi_decoder_avx512>();
    return kernels_of<kivi_decoder_scalar_rows>();
}

}  // namespace troupe::kv
