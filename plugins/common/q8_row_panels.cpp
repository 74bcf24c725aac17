#include "plugins/common/q8_row_panels.h"

#include <immintrin.h>

#include "plugins/common/prefetch.h"

// GCC 12 reports the AVX-512 intrinsics' own _mm512_undefined_ps() operands as uninitialized in functions built with a
// target attribute (a false positive in its headers, not in this code).
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

namespace troupe::spec_common::q8_row_panels {
namespace {

// T tokens (1..4) against one panel: each token's float sums of the 16 rows in one register.
template <int T>
__attribute__((target("avx512f,avx512bw,avx512vnni"))) void panel_tokens(const uint8_t* panel, int64_t n_cols,
                                                                         const int8_t* xq, const float* xs,
                                                                         __m512* sums) {
    const int64_t nb = n_cols / 32;
    __m512 acc[T];
    for (int t = 0; t < T; ++t) acc[t] = _mm512_setzero_ps();
    for (int64_t b = 0; b < nb; ++b) {
        const uint8_t* block = panel + b * 512;
        __m512i s[T];
        for (int t = 0; t < T; ++t) s[t] = _mm512_setzero_si512();
#pragma GCC unroll 8
        for (int q = 0; q < 8; ++q) {
            plugin_support::prefetch_stream(block + 64 * q);
            const __m512i w = _mm512_load_si512(block + 64 * q);
#pragma GCC unroll 4
            for (int t = 0; t < T; ++t) {
                int32_t four;
                __builtin_memcpy(&four, xq + t * n_cols + 32 * b + 4 * q, 4);
                s[t] = _mm512_dpbusd_epi32(s[t], w, _mm512_set1_epi32(four));
            }
        }
#pragma GCC unroll 4
        for (int t = 0; t < T; ++t)
            acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s[t]), _mm512_set1_ps(xs[t * nb + b]), acc[t]);
    }
    for (int t = 0; t < T; ++t) sums[t] = acc[t];
}

__attribute__((target("avx512f,avx512bw,avx512vnni"))) void finish(const __m512* sums, int n, const float* offset,
                                                                   const float* scales, const float* bias, int n_valid,
                                                                   float* y, int64_t ldy) {
    const auto mask = static_cast<__mmask16>(n_valid >= 16 ? 0xffff : (1u << n_valid) - 1);
    const __m512 sc = _mm512_maskz_loadu_ps(mask, scales);
    const __m512 bi = bias != nullptr ? _mm512_maskz_loadu_ps(mask, bias) : _mm512_setzero_ps();
    for (int t = 0; t < n; ++t) {
        __m512 v = _mm512_mul_ps(_mm512_sub_ps(sums[t], _mm512_set1_ps(offset[t])), sc);
        if (bias != nullptr) v = _mm512_add_ps(v, bi);
        _mm512_mask_storeu_ps(y + t * ldy, mask, v);
    }
}

}  // namespace

void pack(const int8_t* codes, int64_t n_rows, int64_t n_cols, uint8_t* dst) {
    const int64_t np = n_panels(n_rows);
    for (int64_t p = 0; p < np; ++p) {
        uint8_t* panel = dst + static_cast<size_t>(p) * panel_bytes(n_cols);
        for (int64_t b = 0; b < n_cols / 32; ++b) {
            for (int q = 0; q < 8; ++q) {
                for (int64_t l = 0; l < k_rows; ++l) {
                    const int64_t r = p * k_rows + l;
                    for (int j = 0; j < 4; ++j) {
                        const int8_t c = r < n_rows ? codes[r * n_cols + 32 * b + 4 * q + j] : int8_t{-128};
                        panel[b * 512 + 64 * q + 4 * l + j] = static_cast<uint8_t>(c + 128);
                    }
                }
            }
        }
    }
}

int code(const uint8_t* panels, int64_t n_cols, int64_t r, int64_t i) {
    const int64_t p = r / k_rows, l = r % k_rows, b = i / 32, q = (i % 32) / 4, j = i % 4;
    return static_cast<int>(panels[static_cast<size_t>(p) * panel_bytes(n_cols) + b * 512 + 64 * q + 4 * l + j]) - 128;
}

__attribute__((target("avx512f,avx512bw,avx512vnni"))) void product(const uint8_t* panels, int64_t n_cols, int64_t p,
                                                                    int n_valid, const int8_t* xq, const float* xs,
                                                                    const float* offset, int64_t n_tok,
                                                                    const float* row_scales, const float* bias,
                                                                    float* y, int64_t ldy) {
    const uint8_t* panel = panels + static_cast<size_t>(p) * panel_bytes(n_cols);
    const int64_t nb = n_cols / 32, r0 = p * k_rows;
    for (int64_t t = 0; t < n_tok; t += 4) {
        const int n = static_cast<int>(n_tok - t < 4 ? n_tok - t : 4);
        __m512 sums[4];
        const int8_t* x = xq + t * n_cols;
        const float* s = xs + t * nb;
        switch (n) {
            case 1:
                panel_tokens<1>(panel, n_cols, x, s, sums);
                break;
            case 2:
                panel_tokens<2>(panel, n_cols, x, s, sums);
                break;
            case 3:
                panel_tokens<3>(panel, n_cols, x, s, sums);
                break;
            default:
                panel_tokens<4>(panel, n_cols, x, s, sums);
                break;
        }
        finish(sums, n, offset + t, row_scales + r0, bias != nullptr ? bias + r0 : nullptr, n_valid, y + t * ldy, ldy);
    }
}

}  // namespace troupe::spec_common::q8_row_panels
