// AVX-512 tile kernel of quant/fp8 (fp8_panels.h): a 32-row panel times up to 12 tokens, 16 rows' sums in one zmm
// per half panel and token. Each k: one 16-byte load per half, turned into 16 floats equal to the fp8 values times
// 2^-8 (e4m3) or 1 (e5m2), matching the kernel scales, then one FMA per token with the token's activation broadcast
// from the k-major tile. Few tokens leave few independent sums, so k is unrolled into KU partial sums (FMA latency).
//
// The conversions (one token, weights in L2, Zen 5; a 256-entry table gather: 3.7 GB/s):
//   e4m3, float bits: sign-extend to 32 bits, shift by 20 and keep s 0000 eeee mmm: the float of value * 2^-120,
//         times 2^112 (exact): 48 GB/s. e4m3 subnormals become float subnormals on the way, which the CPU reads as
//         zero when the caller's MXCSR has DAZ set: then (checked every call)
//   e4m3, via halves: sign-extend to 16 bits, shift by 7, clear bit 14 (s 0 eeee mmm 0000000, the half of
//         value * 2^-8), vcvtph2ps: 40 GB/s;
//   e5m2, via halves: zero-extend to 16 bits, shift by 8 (an e5m2 code is the high byte of the half with its
//         value), vcvtph2ps: 45 GB/s (through float bits: 47, not worth a second DAZ case).
#include <immintrin.h>

#include "fp8_panels.h"

namespace troupe::fp8_panels {
namespace {

// k steps (32 bytes each) the weights are prefetched ahead: 8 KB; measured best of 128, 256 and 512 on Zen 5.
constexpr int64_t prefetch_k = 256;

enum class decode { e5m2_half, e4m3_half, e4m3_float };

template <decode d>
inline __m512 decode16(const uint8_t* p) {
    const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
    if constexpr (d == decode::e4m3_float) {
        const __m512i f = _mm512_and_si512(_mm512_slli_epi32(_mm512_cvtepi8_epi32(b), 20),
                                           _mm512_set1_epi32(static_cast<int32_t>(0x87f00000u)));
        return _mm512_mul_ps(_mm512_castsi512_ps(f), _mm512_set1_ps(0x1p112f));
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
    const uint8_t* w = m.codes + c.panel * m.n_in * panel_rows;
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
        // The hardware prefetchers fall behind a stream consumed at ~10 bytes a cycle: fetch prefetch_k steps ahead
        // (into the next panel at the end of this one, which this thread reads next; prefetches never fault).
        _mm_prefetch(reinterpret_cast<const char*>(w + (k + prefetch_k) * panel_rows), _MM_HINT_T0);
        if constexpr (ku == 4) {
            _mm_prefetch(reinterpret_cast<const char*>(w + (k + prefetch_k) * panel_rows + 64), _MM_HINT_T0);
        }
#pragma GCC unroll 8
        for (int u = 0; u < ku; ++u) step(k + u, u);
    }
    for (; k < n_in; ++k) step(k, 0);

#pragma GCC unroll 2
    for (int h = 0; h < np; ++h) {
        const int64_t row0 = c.panel * panel_rows + h * half_rows;
        const int64_t rows = m.n_out - row0 < half_rows ? m.n_out - row0 : half_rows;
        const __mmask16 mask = rows == half_rows ? __mmask16(0xffff) : __mmask16((1u << rows) - 1);
        const __m512 scale = _mm512_loadu_ps(m.kernel_scales + row0);
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
    if (c.m->format == fp8::format::e5m2) {
        return two_halves ? dispatch_tokens<decode::e5m2_half, 2>(c) : dispatch_tokens<decode::e5m2_half, 1>(c);
    }
    if ((_mm_getcsr() & 0x0040) != 0) {  // DAZ: float subnormals read as zero
        return two_halves ? dispatch_tokens<decode::e4m3_half, 2>(c) : dispatch_tokens<decode::e4m3_half, 1>(c);
    }
    return two_halves ? dispatch_tokens<decode::e4m3_float, 2>(c) : dispatch_tokens<decode::e4m3_float, 1>(c);
}

}  // namespace troupe::fp8_panels
