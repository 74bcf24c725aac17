// AVX-512 tile kernel of quant/fp8 (fp8_panels.h): a 32-row panel times up to 12 tokens, 16 rows' sums in one zmm
// per half panel and token. Each k: one 16-byte load per half turned into 16 floats, then one FMA per token with the
// token's activation broadcast from the k-major tile, which the driver packs times 2^64 for this kernel
// (x_prescale). Few tokens leave few independent sums, so k is unrolled into KU partial sums (FMA latency).
//
// The conversions (one token, weights in L2, Zen 5):
//   float bits (the default): sign-extend to 32 bits, shift and keep the sign, exponent and mantissa bits in place:
//         e4m3 s 0000 eeee mmm 0..0 is the float value * 2^-120, e5m2 s 000 eeeee mm 0..0 value * 2^-112. No
//         rebias: the products with x * 2^64 are the true ones times 2^-56 / 2^-48, normal floats for any sensible
//         activation, and the epilogue multiplies by 2^48 (e4m3's kernel scale holds the other 2^8). e4m3: 60 GB/s
//         (with a multiply by 2^112 per weight vector instead: 47). fp8 subnormals become float subnormals on the
//         way, which the CPU reads as zero when the thread's MXCSR has DAZ set: then (checked every call)
//   via halves: e4m3 sign-extend to 16 bits, shift by 7, clear bit 14 (s 0 eeee mmm 0000000, the half of
//         value * 2^-8); e5m2 zero-extend and shift by 8 (the code is the high byte of the half with its value);
//         vcvtph2ps: 40 / 45 GB/s; the epilogue multiplies by 2^-64.
//   A 256-entry table gather (vgatherdps): 3.7 GB/s.
#include <immintrin.h>

#include "fp8_panels.h"
#include "plugins/common/prefetch.h"

namespace troupe::fp8_panels {
namespace {

enum class decode { e5m2_half, e4m3_half, e5m2_float, e4m3_float };

// What the sums are multiplied by, besides the kernel scales, to undo the decode's and x_prescale's powers of two.
template <decode d>
constexpr float epilogue_factor = d == decode::e4m3_float || d == decode::e5m2_float ? 0x1p48f : 0x1p-64f;

template <decode d>
inline __m512 decode16(const uint8_t* p) {
    const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
    if constexpr (d == decode::e4m3_float) {
        return _mm512_castsi512_ps(_mm512_and_si512(_mm512_slli_epi32(_mm512_cvtepi8_epi32(b), 20),
                                                    _mm512_set1_epi32(static_cast<int32_t>(0x87f00000u))));
    } else if constexpr (d == decode::e5m2_float) {
        return _mm512_castsi512_ps(_mm512_and_si512(_mm512_slli_epi32(_mm512_cvtepi8_epi32(b), 21),
                                                    _mm512_set1_epi32(static_cast<int32_t>(0x8fe00000u))));
    } else if constexpr (d == decode::e4m3_half) {
        return _mm512_cvtph_ps(
            _mm256_and_si256(_mm256_slli_epi16(_mm256_cvtepi8_epi16(b), 7), _mm256_set1_epi16(int16_t(0xbfff))));
    } else {
        return _mm512_cvtph_ps(_mm256_slli_epi16(_mm256_cvtepu8_epi16(b), 8));
    }
}

// np: the panel's 16-row halves that hold rows (1 for a last panel of at most 16 rows).
template <decode d, int nt, int np>
void tile(const tile_call& c) {
    constexpr int ku = nt == 1 ? 4 : nt == 2 ? 2 : 1;
    const matrix& m = *c.m;
    const uint8_t* w = m.panel_codes(c.panel);
    __m512 acc[np][nt][ku];
#pragma GCC unroll 2
    for (int h = 0; h < np; ++h)
#pragma GCC unroll 16
        for (int t = 0; t < nt; ++t)
#pragma GCC unroll 8
            for (int u = 0; u < ku; ++u) acc[h][t][u] = _mm512_setzero_ps();

    // Both halves' weights first, then per token one broadcast used by both FMAs: 2 * nt sums + 2 weights + 1
    // broadcast stay within the 32 registers.
    auto step = [&](int64_t k, int u) __attribute__((always_inline)) {
        const float* xk = c.xt + k * nt;
        const __m512 a = decode16<d>(w + k * panel_rows);
        const __m512 b = np == 2 ? decode16<d>(w + k * panel_rows + half_rows) : a;
#pragma GCC unroll 16
        for (int t = 0; t < nt; ++t) {
            const __m512 x = _mm512_set1_ps(xk[t]);
            acc[0][t][u] = _mm512_fmadd_ps(a, x, acc[0][t][u]);
            if constexpr (np == 2) acc[np - 1][t][u] = _mm512_fmadd_ps(b, x, acc[np - 1][t][u]);
        }
    };
    const int64_t n_in = m.n_in;
    int64_t k = 0;
    for (; k + ku <= n_in; k += ku) {
        // The hardware prefetchers fall behind a stream consumed at ~10 bytes a cycle: the plugins' stream prefetch,
        // into L1 8 KiB ahead (256 steps; 128, 256 and 512 measured alike on Zen 5) and into L2 32 KiB ahead, past
        // this panel's end into the next one, which this thread reads next (prefetches never fault). The L2 one
        // keeps more of the stream in flight (1B F16 as E4M3, two threads, alternated six rounds with the L1 one
        // alone: the decode's share of a plain read of its bytes between the steps 70.7-82.4% -> 76.7-85.3%,
        // median 22.7 -> 25.3 tokens/s).
        plugin_support::prefetch_stream(w + k * panel_rows);
        if constexpr (ku == 4) plugin_support::prefetch_stream(w + k * panel_rows + 64);
#pragma GCC unroll 8
        for (int u = 0; u < ku; ++u) step(k + u, u);
    }
    for (; k < n_in; ++k) step(k, 0);

#pragma GCC unroll 2
    for (int h = 0; h < np; ++h) {
        const int64_t row0 = c.panel * panel_rows + h * half_rows;
        const int64_t rows = m.n_out - row0 < half_rows ? m.n_out - row0 : half_rows;
        const __mmask16 mask = rows == half_rows ? __mmask16(0xffff) : __mmask16((1u << rows) - 1);
        const __m512 scale =
            _mm512_mul_ps(_mm512_loadu_ps(m.row_kernel_scales(row0)), _mm512_set1_ps(epilogue_factor<d>));
#pragma GCC unroll 16
        for (int t = 0; t < nt; ++t) {
            __m512 s = acc[h][t][0];
#pragma GCC unroll 8
            for (int u = 1; u < ku; ++u) s = _mm512_add_ps(s, acc[h][t][u]);
            float* yt = c.y + t * m.n_out + row0;
            s = _mm512_mul_ps(s, scale);
            if (rows == half_rows) {
                _mm512_storeu_ps(yt, s);  // masked stores to lines not in cache cost far more
            } else {
                _mm512_mask_storeu_ps(yt, mask, s);
            }
        }
    }
}

template <decode d, int np>
void dispatch_tokens(const tile_call& c) {
    switch (c.nt) {
        case 1:
            return tile<d, 1, np>(c);
        case 2:
            return tile<d, 2, np>(c);
        case 3:
            return tile<d, 3, np>(c);
        case 4:
            return tile<d, 4, np>(c);
        case 5:
            return tile<d, 5, np>(c);
        case 6:
            return tile<d, 6, np>(c);
        case 7:
            return tile<d, 7, np>(c);
        case 8:
            return tile<d, 8, np>(c);
        case 9:
            return tile<d, 9, np>(c);
        case 10:
            return tile<d, 10, np>(c);
        case 11:
            return tile<d, 11, np>(c);
        case 12:
            return tile<d, 12, np>(c);
        default:
            return tile_scalar(c);  // not reached: tiles hold at most max_tile(avx512) tokens
    }
}

}  // namespace

void tile_avx512(const tile_call& c) {
    const bool two_halves = c.m->n_out - c.panel * panel_rows > half_rows;
    const bool e4m3 = c.m->format == fp8::format::e4m3;
    if ((_mm_getcsr() & 0x0040) != 0) {  // DAZ: float subnormals read as zero
        if (e4m3)
            return two_halves ? dispatch_tokens<decode::e4m3_half, 2>(c) : dispatch_tokens<decode::e4m3_half, 1>(c);
        return two_halves ? dispatch_tokens<decode::e5m2_half, 2>(c) : dispatch_tokens<decode::e5m2_half, 1>(c);
    }
    if (e4m3) return two_halves ? dispatch_tokens<decode::e4m3_float, 2>(c) : dispatch_tokens<decode::e4m3_float, 1>(c);
    return two_halves ? dispatch_tokens<decode::e5m2_float, 2>(c) : dispatch_tokens<decode::e5m2_float, 1>(c);
}

}  // namespace troupe::fp8_panels
