// The float-panel GEMM of the AVX-512 level (prefill): C tile of 14 tokens x 32 rows in 28 zmm accumulators;
// weights packed as float panels [kc][32] (dequantized), activations packed as [kc][14]; k blocked by 256 so a
// panel stays in L1 and the packed activations in L2. Compiled with the AVX-512 flags only (kernels/CMakeLists.txt).
#include "kernels/cpu/gemm_avx512.h"

#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__) && defined(__AVX512VNNI__)

#include <immintrin.h>

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <utility>

#include "kernels/cpu/aligned_buffer.h"
#include "kernels/cpu/matmul_avx512_blocks.h"

namespace troupe::cpu::detail {
namespace {

using namespace avx512;

constexpr int k_nr = k_avx512_gemm_rows;
constexpr int k_mr = k_avx512_gemm_mr;
constexpr int k_kc = k_avx512_gemm_kc;

// c[M tokens, 32 rows] (+)= xp[kc][k_mr] * panel[kc][32]^T, stored to y rows (masked to the panel's rows).
template <int M>
void micro_kernel(const float* panel, const float* xp, int64_t kc, float* y, int64_t ldy, __mmask16 m0, __mmask16 m1,
                  bool accumulate) {
    __m512 c0[M], c1[M];
#pragma GCC unroll 14
    for (int m = 0; m < M; ++m) {
        c0[m] = _mm512_setzero_ps();
        c1[m] = _mm512_setzero_ps();
    }
    for (int64_t k = 0; k < kc; ++k) {
        const __m512 b0 = _mm512_load_ps(panel + k * k_nr);
        const __m512 b1 = _mm512_load_ps(panel + k * k_nr + 16);
        const float* a = xp + k * k_mr;
#pragma GCC unroll 14
        for (int m = 0; m < M; ++m) {
            const __m512 av = _mm512_set1_ps(a[m]);
            c0[m] = _mm512_fmadd_ps(av, b0, c0[m]);
            c1[m] = _mm512_fmadd_ps(av, b1, c1[m]);
        }
    }
#pragma GCC unroll 14
    for (int m = 0; m < M; ++m) {
        float* yr = y + m * ldy;
        if (accumulate) {
            c0[m] = _mm512_add_ps(c0[m], _mm512_maskz_loadu_ps(m0, yr));
            c1[m] = _mm512_add_ps(c1[m], _mm512_maskz_loadu_ps(m1, yr + 16));
        }
        _mm512_mask_storeu_ps(yr, m0, c0[m]);
        _mm512_mask_storeu_ps(yr + 16, m1, c1[m]);
    }
}

using micro_fn = void (*)(const float*, const float*, int64_t, float*, int64_t, __mmask16, __mmask16, bool);

template <size_t... I>
constexpr std::array<micro_fn, sizeof...(I)> micro_table(std::index_sequence<I...>) {
    return {&micro_kernel<static_cast<int>(I) + 1>...};
}

constexpr auto k_micro = micro_table(std::make_index_sequence<k_mr>());

// Elements [k0, k0 + kc) of row r as floats: a pointer into the weights for F32, else converted into tmp.
const float* row_floats(const matmul_weight& w, int64_t r, int64_t k0, int64_t kc, float* tmp) {
    const uint8_t* row = row_ptr(w, r);
    switch (w.type) {
        case ggml_type::f32:
            return reinterpret_cast<const float*>(row) + k0;
        case ggml_type::f16:
        case ggml_type::bf16: {
            const bool f16 = w.type == ggml_type::f16;
            for (int64_t k = 0; k < kc; k += 16) {
                const int64_t left = kc - k;
                const __mmask16 m = static_cast<__mmask16>(left >= 16 ? 0xffff : (1u << left) - 1);
                const __m512 v = f16 ? load_f16::part(row, k0 + k, m) : load_bf16::part(row, k0 + k, m);
                _mm512_store_ps(tmp + k, v);
            }
            return tmp;
        }
        case ggml_type::q8_0: {
            const auto* blocks = reinterpret_cast<const block_q8_0*>(row) + k0 / qk8_0;
            for (int64_t b = 0; b < kc / qk8_0; ++b) {
                const __m512 d = _mm512_set1_ps(fp16(blocks[b].d));
                for (int h = 0; h < 2; ++h) {
                    const __m128i q = _mm_loadu_si128(reinterpret_cast<const __m128i*>(blocks[b].qs + 16 * h));
                    _mm512_store_ps(tmp + b * qk8_0 + 16 * h,
                                    _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(q)), d));
                }
            }
            return tmp;
        }
        case ggml_type::q4_0: {
            const auto* blocks = reinterpret_cast<const block_q4_0*>(row) + k0 / qk4_0;
            const __m512i eight = _mm512_set1_epi32(8);
            for (int64_t b = 0; b < kc / qk4_0; ++b) {
                const __m512 d = _mm512_set1_ps(fp16(blocks[b].d));
                const __m128i q = _mm_loadu_si128(reinterpret_cast<const __m128i*>(blocks[b].qs));
                const __m128i lo = _mm_and_si128(q, _mm_set1_epi8(0x0f));
                const __m128i hi = _mm_and_si128(_mm_srli_epi16(q, 4), _mm_set1_epi8(0x0f));
                _mm512_store_ps(
                    tmp + b * qk4_0,
                    _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_sub_epi32(_mm512_cvtepu8_epi32(lo), eight)), d));
                _mm512_store_ps(
                    tmp + b * qk4_0 + 16,
                    _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_sub_epi32(_mm512_cvtepu8_epi32(hi), eight)), d));
            }
            return tmp;
        }
        case ggml_type::q4_k: {
            const auto* blocks = reinterpret_cast<const block_q4_k*>(row) + k0 / qk_k;
            for (int64_t b = 0; b < kc / qk_k; ++b) {
                const block_q4_k& wb = blocks[b];
                uint8_t sc[8], mn[8];
                q4_k_scales(wb, sc, mn);
                const float d = fp16(wb.d), dmin = fp16(wb.dmin);
                for (int j = 0; j < 8; ++j) {
                    const __m512 scale = _mm512_set1_ps(d * sc[j]), min = _mm512_set1_ps(dmin * mn[j]);
                    const uint8_t* q = wb.qs + 32 * (j / 2);
                    for (int h = 0; h < 2; ++h) {
                        __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(q + 16 * h));
                        if (j % 2) v = _mm_srli_epi16(v, 4);
                        v = _mm_and_si128(v, _mm_set1_epi8(0x0f));
                        const __m512 qf = _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(v));
                        _mm512_store_ps(tmp + b * qk_k + 32 * j + 16 * h, _mm512_sub_ps(_mm512_mul_ps(qf, scale), min));
                    }
                }
            }
            return tmp;
        }
        case ggml_type::q6_k: {
            const auto* blocks = reinterpret_cast<const block_q6_k*>(row) + k0 / qk_k;
            for (int64_t b = 0; b < kc / qk_k; ++b) {
                const block_q6_k& wb = blocks[b];
                alignas(64) int8_t q[qk_k];  // [256] q - 32 in element order
                q6_k_unpack(wb, q);
                const float d = fp16(wb.d);
                for (int j = 0; j < qk_k / 16; ++j) {
                    const __m512i v =
                        _mm512_cvtepi8_epi32(_mm_load_si128(reinterpret_cast<const __m128i*>(q + 16 * j)));
                    _mm512_store_ps(tmp + b * qk_k + 16 * j,
                                    _mm512_mul_ps(_mm512_cvtepi32_ps(v), _mm512_set1_ps(d * wb.scales[j])));
                }
            }
            return tmp;
        }
        default:
            dequantize_range(w, r, k0, kc, tmp);
            return tmp;
    }
}

// In-register transpose: r[i][j] -> r[j][i] for a 16 x 16 block of floats.
inline void transpose16(__m512* r) {
    __m512 t[16], u[16];
    for (int i = 0; i < 16; i += 2) {
        t[i] = _mm512_unpacklo_ps(r[i], r[i + 1]);
        t[i + 1] = _mm512_unpackhi_ps(r[i], r[i + 1]);
    }
    // u[4g + j], 128-bit lane L: rows 4g..4g+3 of column 4L + j.
    for (int g = 0; g < 16; g += 4) {
        const __m512d a = _mm512_castps_pd(t[g]), b = _mm512_castps_pd(t[g + 1]);
        const __m512d c = _mm512_castps_pd(t[g + 2]), d = _mm512_castps_pd(t[g + 3]);
        u[g] = _mm512_castpd_ps(_mm512_unpacklo_pd(a, c));
        u[g + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(a, c));
        u[g + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(b, d));
        u[g + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(b, d));
    }
    for (int j = 0; j < 4; ++j) {
        const __m512 v0 = _mm512_shuffle_f32x4(u[j], u[4 + j], 0x88),
                     w0 = _mm512_shuffle_f32x4(u[8 + j], u[12 + j], 0x88);
        const __m512 v1 = _mm512_shuffle_f32x4(u[j], u[4 + j], 0xdd),
                     w1 = _mm512_shuffle_f32x4(u[8 + j], u[12 + j], 0xdd);
        r[j] = _mm512_shuffle_f32x4(v0, w0, 0x88);
        r[8 + j] = _mm512_shuffle_f32x4(v0, w0, 0xdd);
        r[4 + j] = _mm512_shuffle_f32x4(v1, w1, 0x88);
        r[12 + j] = _mm512_shuffle_f32x4(v1, w1, 0xdd);
    }
}

// panel[k][32] = W[p0 + i, k0 + k] for i < nr, zero for the rows past the end. tmp: [32][k_kc] floats.
void pack_panel(const matmul_weight& w, int64_t p0, int nr, int64_t k0, int64_t kc, float* panel, float* tmp) {
    const float* src[k_nr];
    for (int i = 0; i < nr; ++i) src[i] = row_floats(w, p0 + i, k0, kc, tmp + i * k_kc);
    int64_t k = 0;
    for (; k + 16 <= kc; k += 16) {
        for (int h = 0; h < k_nr; h += 16) {
            __m512 r[16];
            for (int i = 0; i < 16; ++i) r[i] = h + i < nr ? _mm512_loadu_ps(src[h + i] + k) : _mm512_setzero_ps();
            transpose16(r);
            for (int j = 0; j < 16; ++j) _mm512_store_ps(panel + (k + j) * k_nr + h, r[j]);
        }
    }
    for (; k < kc; ++k) {
        for (int i = 0; i < k_nr; ++i) panel[k * k_nr + i] = i < nr ? src[i][k] : 0.0f;
    }
}

}  // namespace

void gemm_avx512(const matmul_weight& w, const float* xp, float* y, int64_t ldy, int64_t n_tokens, int64_t r0,
                 int64_t r1) {
    static thread_local aligned_buffer panel_buf, tmp_buf;
    const int64_t n = w.n_in;
    const int64_t n_tiles = (n_tokens + k_mr - 1) / k_mr;
    float* panel = panel_buf.as<float>(k_kc * k_nr);
    float* tmp = tmp_buf.as<float>(k_kc * k_nr);
    for (int64_t k0 = 0; k0 < n; k0 += k_kc) {
        const int64_t kc = std::min<int64_t>(k_kc, n - k0);
        const float* xk = xp + n_tiles * k_mr * k0;  // this k block's packed activations
        for (int64_t p0 = r0; p0 < r1; p0 += k_nr) {
            const int nr = static_cast<int>(std::min<int64_t>(k_nr, r1 - p0));
            pack_panel(w, p0, nr, k0, kc, panel, tmp);
            const __mmask16 m0 = static_cast<__mmask16>(nr >= 16 ? 0xffff : (1u << nr) - 1);
            const __mmask16 m1 = static_cast<__mmask16>(nr >= 32 ? 0xffff : nr > 16 ? (1u << (nr - 16)) - 1 : 0);
            for (int64_t t0 = 0; t0 < n_tokens; t0 += k_mr) {
                const int mr = static_cast<int>(std::min<int64_t>(k_mr, n_tokens - t0));
                k_micro[mr - 1](panel, xk + (t0 / k_mr) * kc * k_mr, kc, y + t0 * ldy + p0, ldy, m0, m1, k0 > 0);
            }
        }
    }
}

}  // namespace troupe::cpu::detail

#endif
