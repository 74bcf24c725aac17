// AVX2 tile kernel of quant/fp8 (fp8_panels.h): the whole 32-row panel in one pass for 1-2 tokens, else one 16-row
// half at a time for up to 6 tokens, 8 rows' sums per ymm. Each k, per 16 rows: the 16 codes turned into 2 x 8
// floats, then two FMAs per token with the token's activation broadcast (packed times 2^64 by the driver, x_prescale).
// Few tokens leave few independent sums, so k is unrolled into KU partial sums (FMA latency).
//
// The conversions, as the AVX-512 kernel's (fp8_kernels_avx512.cpp):
//   float bits (the default): sign-extend each code to 32 bits, shift it into the float's exponent and mantissa and
//         keep the sign: the float value * 2^-120 (e4m3) or * 2^-112 (e5m2); the epilogue multiplies by 2^48. Two
//         loads, two sign extensions, two shifts and two ands per 16 codes. Zen 1, 1B shape, e4m3, two threads:
//         decode 36.2% -> 40.9% of the bandwidth bound, prefill 58% -> 68% of the FMA peak against the half path
//         (whose two vcvtph2ps per 16 codes bound it); Zen 1's vector shifts and sign extensions (one pipe each)
//         bound this one.
//   via halves (where the thread's MXCSR has DAZ set, which would read the float path's subnormals as zero): e4m3
//         sign-extend to 16 bits, shift by 7, clear bit 14; e5m2 zero-extend and shift by 8; two vcvtph2ps; the
//         epilogue multiplies by 2^-64.
#include <immintrin.h>

#include "fp8_panels.h"

namespace troupe::fp8_panels {
namespace {

// k steps (32 bytes each) the weights are prefetched ahead: 8 KB.
constexpr int64_t prefetch_k = 256;

enum class decode { e5m2_half, e4m3_half, e5m2_float, e4m3_float };

// What the sums are multiplied by, besides the kernel scales, to undo the decode's and x_prescale's powers of two.
template <decode d>
constexpr float epilogue_factor = d == decode::e4m3_float || d == decode::e5m2_float ? 0x1p48f : 0x1p-64f;

template <decode d>
inline void decode16(const uint8_t* p, __m256& lo, __m256& hi) {
    if constexpr (d == decode::e4m3_float || d == decode::e5m2_float) {
        constexpr int shift = d == decode::e4m3_float ? 20 : 21;
        const __m256i keep =
            _mm256_set1_epi32(static_cast<int32_t>(d == decode::e4m3_float ? 0x87f00000u : 0x8fe00000u));
        const __m256i a = _mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)));
        const __m256i b = _mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p + 8)));
        lo = _mm256_castsi256_ps(_mm256_and_si256(_mm256_slli_epi32(a, shift), keep));
        hi = _mm256_castsi256_ps(_mm256_and_si256(_mm256_slli_epi32(b, shift), keep));
    } else {
        const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
        __m256i h;
        if constexpr (d == decode::e4m3_half) {
            h = _mm256_and_si256(_mm256_slli_epi16(_mm256_cvtepi8_epi16(b), 7), _mm256_set1_epi16(int16_t(0xbfff)));
        } else {
            h = _mm256_slli_epi16(_mm256_cvtepu8_epi16(b), 8);
        }
        lo = _mm256_cvtph_ps(_mm256_castsi256_si128(h));
        hi = _mm256_cvtph_ps(_mm256_extracti128_si256(h, 1));
    }
}

// Lanes [0, n) of a ymm as a maskload / maskstore mask.
inline __m256i first_lanes(int64_t n) {
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(n)), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

// Rows [16 * half0, 16 * (half0 + nh)) of the panel: nh = 2 streams the whole panel in one pass (up to 2 tokens: 4
// ymm of weights and 8 sums fit the 16 registers), nh = 1 one half (up to 6 tokens; the second half's pass reads the
// panel from L2).
template <decode d, int nt, int nh>
void tile_rows(const tile_call& c, int64_t half0) {
    constexpr int ku = nh == 2 ? (nt == 1 ? 2 : 1) : (nt == 1 ? 4 : nt == 2 ? 2 : 1);
    const matrix& m = *c.m;
    const uint8_t* w = m.panel_codes(c.panel) + half0 * half_rows;
    __m256 acc[2 * nh][nt][ku];  // [8-row group][token][partial sum]
#pragma GCC unroll 4
    for (int g = 0; g < 2 * nh; ++g)
#pragma GCC unroll 16
        for (int t = 0; t < nt; ++t)
#pragma GCC unroll 8
            for (int u = 0; u < ku; ++u) acc[g][t][u] = _mm256_setzero_ps();

    auto step = [&](int64_t k, int u) __attribute__((always_inline)) {
        const float* xk = c.xt + k * nt;
        __m256 wv[2 * nh];
#pragma GCC unroll 2
        for (int h = 0; h < nh; ++h) decode16<d>(w + k * panel_rows + h * half_rows, wv[2 * h], wv[2 * h + 1]);
#pragma GCC unroll 16
        for (int t = 0; t < nt; ++t) {
            const __m256 x = _mm256_broadcast_ss(xk + t);
#pragma GCC unroll 4
            for (int g = 0; g < 2 * nh; ++g) acc[g][t][u] = _mm256_fmadd_ps(wv[g], x, acc[g][t][u]);
        }
    };
    const int64_t n_in = m.n_in;
    int64_t k = 0;
    for (; k + ku <= n_in; k += ku) {
        // As in the AVX-512 kernel: the hardware prefetchers alone fall behind.
        _mm_prefetch(reinterpret_cast<const char*>(w + (k + prefetch_k) * panel_rows), _MM_HINT_T0);
        if constexpr (ku == 4) {
            _mm_prefetch(reinterpret_cast<const char*>(w + (k + prefetch_k) * panel_rows + 64), _MM_HINT_T0);
        }
#pragma GCC unroll 8
        for (int u = 0; u < ku; ++u) step(k + u, u);
    }
    for (; k < n_in; ++k) step(k, 0);

    const int64_t row0 = c.panel * panel_rows + half0 * half_rows;
#pragma GCC unroll 4
    for (int g = 0; g < 2 * nh; ++g) {
        const int64_t r0 = row0 + 8 * g;
        const int64_t n = m.n_out - r0;
        if (n <= 0) break;
        const __m256i mask = first_lanes(n);
        const __m256 scale =
            _mm256_mul_ps(_mm256_loadu_ps(m.row_kernel_scales(r0)), _mm256_set1_ps(epilogue_factor<d>));
#pragma GCC unroll 16
        for (int t = 0; t < nt; ++t) {
            __m256 s = acc[g][t][0];
#pragma GCC unroll 8
            for (int u = 1; u < ku; ++u) s = _mm256_add_ps(s, acc[g][t][u]);
            s = _mm256_mul_ps(s, scale);
            float* yt = c.y + t * m.n_out + r0;
            if (n >= 8) {
                _mm256_storeu_ps(yt, s);
            } else {
                _mm256_maskstore_ps(yt, mask, s);
            }
        }
    }
}

template <decode d>
void dispatch_tokens(const tile_call& c) {
    const bool two_halves = c.m->n_out - c.panel * panel_rows > half_rows;
    switch (c.nt) {
        case 1:
            return two_halves ? tile_rows<d, 1, 2>(c, 0) : tile_rows<d, 1, 1>(c, 0);
        case 2:
            return two_halves ? tile_rows<d, 2, 2>(c, 0) : tile_rows<d, 2, 1>(c, 0);
        default:
            break;
    }
    for (int64_t half = 0; half < (two_halves ? 2 : 1); ++half) {
        switch (c.nt) {
            case 3:
                tile_rows<d, 3, 1>(c, half);
                break;
            case 4:
                tile_rows<d, 4, 1>(c, half);
                break;
            case 5:
                tile_rows<d, 5, 1>(c, half);
                break;
            case 6:
                tile_rows<d, 6, 1>(c, half);
                break;
            default:
                return tile_scalar(c);  // not reached: tiles hold 1 .. max_tile(avx2) tokens
        }
    }
}

}  // namespace

void tile_avx2(const tile_call& c) {
    const bool e4m3 = c.m->format == fp8::format::e4m3;
    if ((_mm_getcsr() & 0x0040) != 0) {  // DAZ: float subnormals read as zero
        return e4m3 ? dispatch_tokens<decode::e4m3_half>(c) : dispatch_tokens<decode::e5m2_half>(c);
    }
    return e4m3 ? dispatch_tokens<decode::e4m3_float>(c) : dispatch_tokens<decode::e5m2_float>(c);
}

}  // namespace troupe::fp8_panels
