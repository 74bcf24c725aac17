// AVX2 tile kernel of quant/fp8 (fp8_panels.h): one 16-row panel at a time times up to 6 tokens, the panel's sums
// in two ymm per token. Each k: one 16-byte load, widened to 16 halves (e5m2: zero-extend and shift the code into the
// high byte; e4m3: sign-extend, shift by 7, clear bit 14), two vcvtph2ps to 2 x 8 floats, then two FMAs per token
// with the token's activation broadcast. Few tokens leave few independent sums, so k is unrolled into KU partial
// sums (FMA latency).
#include <immintrin.h>

#include "fp8_panels.h"

namespace troupe::fp8_panels {
namespace {

template <bool e4m3>
inline void decode16(const uint8_t* p, __m256& lo, __m256& hi) {
    const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
    __m256i h;
    if constexpr (e4m3) {
        h = _mm256_and_si256(_mm256_slli_epi16(_mm256_cvtepi8_epi16(b), 7), _mm256_set1_epi16(int16_t(0xbfff)));
    } else {
        h = _mm256_slli_epi16(_mm256_cvtepu8_epi16(b), 8);
    }
    lo = _mm256_cvtph_ps(_mm256_castsi256_si128(h));
    hi = _mm256_cvtph_ps(_mm256_extracti128_si256(h, 1));
}

// Lanes [0, n) of a ymm as a maskload / maskstore mask.
inline __m256i first_lanes(int64_t n) {
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(n)), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

template <bool e4m3, int nt>
void tile_panel(const tile_call& c, int64_t panel) {
    constexpr int ku = nt == 1 ? 4 : nt == 2 ? 2 : 1;
    const matrix& m = *c.m;
    const uint8_t* w = m.codes + panel * m.n_in * panel_rows;
    __m256 acc[2][nt][ku];
#pragma GCC unroll 2
    for (int h = 0; h < 2; ++h)
#pragma GCC unroll 16
        for (int t = 0; t < nt; ++t)
#pragma GCC unroll 8
            for (int u = 0; u < ku; ++u) acc[h][t][u] = _mm256_setzero_ps();

    auto step = [&](int64_t k, int u) __attribute__((always_inline)) {
        const float* xk = c.xt + k * nt;
        __m256 lo, hi;
        decode16<e4m3>(w + k * panel_rows, lo, hi);
#pragma GCC unroll 16
        for (int t = 0; t < nt; ++t) {
            const __m256 x = _mm256_broadcast_ss(xk + t);
            acc[0][t][u] = _mm256_fmadd_ps(lo, x, acc[0][t][u]);
            acc[1][t][u] = _mm256_fmadd_ps(hi, x, acc[1][t][u]);
        }
    };
    int64_t k = c.k0;
    for (; k + ku <= c.k1; k += ku) {
#pragma GCC unroll 8
        for (int u = 0; u < ku; ++u) step(k + u, u);
    }
    for (; k < c.k1; ++k) step(k, 0);

    const int64_t row0 = panel * panel_rows;
    const int64_t rows = m.n_out - row0 < panel_rows ? m.n_out - row0 : panel_rows;
#pragma GCC unroll 2
    for (int h = 0; h < 2; ++h) {
        const int64_t r0 = row0 + 8 * h;
        const int64_t n = rows - 8 * h;
        if (n <= 0) break;
        const __m256i mask = first_lanes(n);
        const __m256 scale = _mm256_loadu_ps(m.kernel_scales + r0);
#pragma GCC unroll 16
        for (int t = 0; t < nt; ++t) {
            __m256 s = acc[h][t][0];
#pragma GCC unroll 8
            for (int u = 1; u < ku; ++u) s = _mm256_add_ps(s, acc[h][t][u]);
            float* yt = c.y + t * m.n_out + r0;
            if (!c.first) s = _mm256_add_ps(s, _mm256_maskload_ps(yt, mask));
            if (c.last) s = _mm256_mul_ps(s, scale);
            _mm256_maskstore_ps(yt, mask, s);
        }
    }
}

template <bool e4m3>
void dispatch_tokens(const tile_call& c, int64_t panel) {
    switch (c.nt) {
        case 1:
            return tile_panel<e4m3, 1>(c, panel);
        case 2:
            return tile_panel<e4m3, 2>(c, panel);
        case 3:
            return tile_panel<e4m3, 3>(c, panel);
        case 4:
            return tile_panel<e4m3, 4>(c, panel);
        case 5:
            return tile_panel<e4m3, 5>(c, panel);
        case 6:
            return tile_panel<e4m3, 6>(c, panel);
        default: {  // not reached: tiles hold at most max_tile(avx2) tokens
            tile_call one = c;
            one.panel = panel;
            one.n_panels = 1;
            return tile_scalar(one);
        }
    }
}

}  // namespace

void tile_avx2(const tile_call& c) {
    for (int64_t p = c.panel; p < c.panel + c.n_panels; ++p) {
        c.m->format == fp8::format::e4m3 ? dispatch_tokens<true>(c, p) : dispatch_tokens<false>(c, p);
    }
}

}  // namespace troupe::fp8_panels
