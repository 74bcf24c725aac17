// The panel kernels (q8_panels.h has the layout), AVX-512 VNNI: compiled with those flags only
// (kernels/CMakeLists.txt, plus -ffp-contract=off so the per-block multiply and add stay two roundings, as in
// ref::matmul) and called only where cpu_features says they exist.
//
// Micro-tile: one panel (16 rows) x M tokens. Per block, per token: an int32 zmm starts at the token's
// correction -offset * sum(x_block), takes 8 vpdpbusd (weight quad in a register, the token's 4 activation
// bytes broadcast), then y += float(sum) * (d_w * d_x) with d_w the 16 rows' scales (Q8_0: the product rounded, then
// the sum; Q4_0: one FMA, as llama.cpp's repacked Q4_0 kernels). No horizontal reductions; each lane is one output,
// summed over blocks in order, so the result equals ref::matmul bit for bit.
// Registers: M int sums + M float sums + a weight quad (+ its two nibble halves for Q4_0), so M <= 12.
//
// What bounds the speed once tokens are many is the vector pipes' share of vpdpbusd, the broadcasts and the two
// multiplies per block (measured on Zen 5: about 4.3-5 vpdpbusd/ns on one core vs 8 for vpdpbusd alone; dropping
// the multiplies or the broadcasts alone gains 2-20%). Tiles of two panels (one broadcast for two vpdpbusd)
// gained 5% with L2-resident weights but lost 30% with weights streamed from memory, so tiles are one panel.
//
// The walk over panels and tiles of tokens: q8_panels_tiles.h.
#include "kernels/cpu/q8_panels_kernels.h"

#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__) && defined(__AVX512VNNI__)

#include <immintrin.h>

#include <algorithm>

#include "kernels/cpu/q8_panels_tiles.h"

namespace troupe::cpu::detail {
namespace {

constexpr int k_max_tile = 12;  // tokens per micro-tile at most

// s += vpdpbusd(w, the 4 activation bytes at x broadcast to every lane), the broadcast folded into the instruction
// ({1to16}): from _mm512_set1_epi32(load) GCC emits a separate vpbroadcastd, one more instruction per product (216
// vpbroadcastd beside 192 vpdpbusd in a 12-token tile's group). Zen 4, old and new binaries alternated: prefill
// faster in 11 of 14 rounds (1B Q8_0 pp128 medians 254.6 -> 276.8 tokens/s), decode no slower.
inline __m512i dpbusd_bcast(__m512i s, __m512i w, const int8_t* x) {
    asm("vpdpbusd %[x]%{1to16%}, %[w], %[s]" : [s] "+v"(s) : [w] "v"(w), [x] "m"(*reinterpret_cast<const int32_t*>(x)));
    return s;
}

// Adds float(sum) * (d_w * d_x) of one block to acc, for the M tokens at xb (adjacent blocks): rounded apart for Q8_0,
// fused for Q4_0 (ref::dot_q8_0, ref::dot_q4_0). AsIs: Q8_0 codes stored as they are (panels packed at AVX2), + 128
// here before the products.
template <int Q, bool AsIs, int M>
__attribute__((always_inline)) inline void block_step(const uint8_t* quads, __m512 dw, const q8_act_block* xb,
                                                      __m512 (&acc)[M]) {
    __m512i s[M];
#pragma GCC unroll 12
    for (int m = 0; m < M; ++m) s[m] = _mm512_set1_epi32(xb[m].neg_corr);
    if constexpr (Q == 8) {
#pragma GCC unroll 8
        for (int q = 0; q < 8; ++q) {
            __m512i wq = _mm512_load_si512(quads + 64 * q);
            if constexpr (AsIs) wq = _mm512_xor_si512(wq, _mm512_set1_epi8(static_cast<char>(0x80)));
#pragma GCC unroll 12
            for (int m = 0; m < M; ++m) s[m] = dpbusd_bcast(s[m], wq, xb[m].qs + 4 * q);
        }
    } else {
        const __m512i low4 = _mm512_set1_epi8(0x0f);
#pragma GCC unroll 4
        for (int q = 0; q < 4; ++q) {
            const __m512i v = _mm512_load_si512(quads + 64 * q);
            const __m512i lo = _mm512_and_si512(v, low4);                        // elements 4q .. 4q + 3
            const __m512i hi = _mm512_and_si512(_mm512_srli_epi16(v, 4), low4);  // elements 16 + 4q ..
#pragma GCC unroll 12
            for (int m = 0; m < M; ++m) {
                s[m] = dpbusd_bcast(s[m], lo, xb[m].qs + 4 * q);
                s[m] = dpbusd_bcast(s[m], hi, xb[m].qs + 16 + 4 * q);
            }
        }
    }
#pragma GCC unroll 12
    for (int m = 0; m < M; ++m) {
        const __m512 scale = _mm512_mul_ps(dw, _mm512_set1_ps(xb[m].d));
        if constexpr (Q == 8) {
            acc[m] = _mm512_add_ps(acc[m], _mm512_mul_ps(_mm512_cvtepi32_ps(s[m]), scale));
        } else {
            acc[m] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s[m]), scale, acc[m]);
        }
    }
}

// y[m * ldy + r] for m < M, lanes r in `rows`: panel (nb blocks, groups of group_bytes) times the tokens'
// blocks x[b * x_stride + m].
template <int Q, bool AsIs, int M>
void panel_tile(const uint8_t* panel, int64_t nb, size_t group_bytes, const q8_act_block* x, int64_t x_stride, float* y,
                int64_t ldy, int n_rows, bool prefetch) {
    const __mmask16 rows = panel_row_mask(n_rows);
    __m512 acc[M];
#pragma GCC unroll 12
    for (int m = 0; m < M; ++m) acc[m] = _mm512_setzero_ps();
    int64_t b = 0;
    for (const uint8_t* group = panel; b < nb; b += 2, group += group_bytes) {
        if (prefetch) prefetch_panel_ahead(group, group_bytes);
        const __m512 scales = _mm512_cvtph_ps(_mm256_load_si256(reinterpret_cast<const __m256i*>(group)));
        block_step<Q, AsIs, M>(group + 64, scales, x + b * x_stride, acc);
        if (b + 1 < nb) {
            const __m512 scales1 = _mm512_cvtph_ps(_mm256_load_si256(reinterpret_cast<const __m256i*>(group) + 1));
            block_step<Q, AsIs, M>(group + 64 + Q * 64, scales1, x + (b + 1) * x_stride, acc);
        }
    }
#pragma GCC unroll 12
    for (int m = 0; m < M; ++m) _mm512_mask_storeu_ps(y + m * ldy, rows, acc[m]);
}

constexpr auto k_q8_tiles = tile_table<k_max_tile>([]<int M>() { return &panel_tile<8, false, M>; });
constexpr auto k_q8_as_is_tiles = tile_table<k_max_tile>([]<int M>() { return &panel_tile<8, true, M>; });
constexpr auto k_q4_tiles = tile_table<k_max_tile>([]<int M>() { return &panel_tile<4, false, M>; });

}  // namespace

void q8_panels_product_avx512(const matmul_weight& w, const q8_act_block* x, int64_t n_tokens, float* y, int64_t ldy,
                              int64_t p0, int64_t p1) {
    panel_product(w, x, n_tokens, y, ldy, p0, p1, w.codes == panel_codes::plus_128 ? k_q8_tiles : k_q8_as_is_tiles,
                  k_q4_tiles);
}

}  // namespace troupe::cpu::detail

#else  // built without AVX-512 flags (another architecture): q8_panels_supported is false, never called

#include "core/result.h"

namespace troupe::cpu::detail {

void q8_panels_product_avx512(const matmul_weight&, const q8_act_block*, int64_t, float*, int64_t, int64_t, int64_t) {
    TROUPE_ASSERT(false, "q8 panels: built without AVX-512");
}

}  // namespace troupe::cpu::detail

#endif
