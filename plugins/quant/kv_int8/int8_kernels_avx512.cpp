// kv/int8 AVX-512F/BW kernels (built with -mavx512f -mavx512bw -mavx512vl; called only when the CPU has them and
// lacks VNNI): vpdpbusd emulated exactly, the even and odd bytes widened to 16 bits and multiplied-and-paired by
// vpmaddwd (no saturation: a product is at most 255 * 127).
#include "int8_kernels_avx512.h"

namespace troupe::kv {
namespace {

struct dot_bw {
    static __m512i dp(__m512i acc, __m512i a, __m512i b) {
        const __m512i a_even = _mm512_and_si512(a, _mm512_set1_epi16(0x00ff));
        const __m512i a_odd = _mm512_srli_epi16(a, 8);
        const __m512i b_even = _mm512_srai_epi16(_mm512_slli_epi16(b, 8), 8);
        const __m512i b_odd = _mm512_srai_epi16(b, 8);
        return _mm512_add_epi32(acc,
                                _mm512_add_epi32(_mm512_madd_epi16(a_even, b_even), _mm512_madd_epi16(a_odd, b_odd)));
    }
};

}  // namespace

block_kernels int8_kernels_avx512() {
    return int8_kernels_with<dot_bw>();
}

}  // namespace troupe::kv
