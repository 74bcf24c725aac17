// The panel kernels (q8_panels.h has the layout) at the AVX2 level, quantized activations only: compiled with AVX2
// flags and -ffp-contract=off (kernels/CMakeLists.txt), called only where cpu_features says AVX2 exists.
//
// A ymm holds half a panel: lane r of a quad's 32 bytes (rows 8h .. 8h + 7) is row 8h + r's 4 bytes, so each lane's
// int32 sum is one output and no horizontal reduction is needed (the row kernels in matmul_avx2.cpp reduce every
// output horizontally and convert, scale and add per row and block). Per block and token:
//   Q4_0: vpmaddubsw of the unsigned nibbles with the token's 4 activation bytes broadcast, the eight products of a
//         block summed in int16 (|sum| <= 8 * 2 * 15 * 128 = 30720, no overflow), one vpmaddwd to int32, plus the
//         correction -8 * sum(x_block);
//   Q8_0: the weights multiplied as |w| with sign(x, w) (pairs <= 2 * 128 * 127; w + 128 would saturate vpmaddubsw),
//         each product widened to int32 by vpmaddwd; the correction is not used. Panels packed at this level hold
//         w itself; ones packed at AVX-512 VNNI (w + 128) are restored with an xor first.
// then y += float(sum) * (d_w * d_x) with the 8 rows' scales: rounded apart for Q8_0, one FMA for Q4_0, so every
// output equals ref::matmul bit for bit at every token count (a token's result never depends on its neighbours).
//
// Why: on a Zen 1 EPYC vpmaddubsw and vpmaddwd share one pipe (2 cycles per ymm each) and the row kernels' float
// work per row and block competes for the rest; here Q4_0 spends 2.25 of those cycles per row, block and token
// (8 vpmaddubsw + 1 vpmaddwd per 8 rows) where the row kernel spent 4 plus its reductions.
#include "kernels/cpu/q8_panels_kernels.h"

#if defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)

#include <immintrin.h>

#include <cstring>

#include "kernels/cpu/q8_panels_tiles.h"

namespace troupe::cpu::detail {
namespace {

constexpr int k_max_tile = 4;  // tokens per micro-tile at most (16 ymm: M int sums + M float sums + the quad's)
constexpr int k_half_rows = 8;

inline __m256i broadcast_4_bytes(const int8_t* p) {
    int32_t v;
    std::memcpy(&v, p, sizeof v);
    return _mm256_set1_epi32(v);
}

template <class V, int H, int M>
__attribute__((always_inline)) inline void fill(V (&v)[H][M], V value) {
#pragma GCC unroll 2
    for (int h = 0; h < H; ++h) {
#pragma GCC unroll 4
        for (int m = 0; m < M; ++m) v[h][m] = value;
    }
}

// The int32 sums of one block for H halves (from `half` on) and M tokens; quads: the block's first quad. Plus128:
// Q8_0 codes stored + 128 (panel_codes::plus_128).
template <int Q, bool Plus128, int H, int M>
__attribute__((always_inline)) inline void block_sums(const uint8_t* quads, int half, const q8_act_block* xb,
                                                      __m256i (&s)[H][M]) {
    const __m256i ones16 = _mm256_set1_epi16(1);
    if constexpr (Q == 8) {
        const __m256i flip = _mm256_set1_epi8(static_cast<char>(0x80));
        fill(s, _mm256_setzero_si256());
#pragma GCC unroll 8
        for (int q = 0; q < 8; ++q) {
#pragma GCC unroll 2
            for (int h = 0; h < H; ++h) {
                __m256i w = _mm256_load_si256(reinterpret_cast<const __m256i*>(quads + 64 * q + 32 * (half + h)));
                if constexpr (Plus128) w = _mm256_xor_si256(w, flip);
                const __m256i u = _mm256_abs_epi8(w);
#pragma GCC unroll 4
                for (int m = 0; m < M; ++m) {
                    const __m256i p = _mm256_maddubs_epi16(u, _mm256_sign_epi8(broadcast_4_bytes(xb[m].qs + 4 * q), w));
                    s[h][m] = _mm256_add_epi32(s[h][m], _mm256_madd_epi16(p, ones16));
                }
            }
        }
    } else {
        const __m256i low4 = _mm256_set1_epi8(0x0f);
        __m256i s16[H][M];
        fill(s16, _mm256_setzero_si256());
#pragma GCC unroll 4
        for (int q = 0; q < 4; ++q) {
#pragma GCC unroll 2
            for (int h = 0; h < H; ++h) {
                const __m256i v = _mm256_load_si256(reinterpret_cast<const __m256i*>(quads + 64 * q + 32 * (half + h)));
                const __m256i lo = _mm256_and_si256(v, low4);                        // elements 4q .. 4q + 3
                const __m256i hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), low4);  // elements 16 + 4q ..
#pragma GCC unroll 4
                for (int m = 0; m < M; ++m) {
                    s16[h][m] =
                        _mm256_add_epi16(s16[h][m], _mm256_maddubs_epi16(lo, broadcast_4_bytes(xb[m].qs + 4 * q)));
                    s16[h][m] =
                        _mm256_add_epi16(s16[h][m], _mm256_maddubs_epi16(hi, broadcast_4_bytes(xb[m].qs + 16 + 4 * q)));
                }
            }
        }
#pragma GCC unroll 2
        for (int h = 0; h < H; ++h) {
#pragma GCC unroll 4
            for (int m = 0; m < M; ++m)
                s[h][m] = _mm256_add_epi32(_mm256_madd_epi16(s16[h][m], ones16), _mm256_set1_epi32(xb[m].neg_corr));
        }
    }
}

// y[m * ldy + 8 (half + h) + r] for m < M, h < H and the panel's real rows (n_rows of 16): halves [half, half + H)
// of the panel (nb blocks, groups of group_bytes) times the tokens' blocks x[b * x_stride + m].
template <int Q, bool Plus128, int H, int M>
void half_panel_tile(const uint8_t* panel, int64_t nb, size_t group_bytes, const q8_act_block* x, int64_t x_stride,
                     float* y, int64_t ldy, int half, int n_rows, bool prefetch) {
    __m256 acc[H][M];
    fill(acc, _mm256_setzero_ps());
    for (int64_t b = 0; b < nb; ++b) {
        const uint8_t* group = panel + static_cast<size_t>(b / 2) * group_bytes;
        if (prefetch && b % 2 == 0) prefetch_panel_ahead(group, group_bytes);
        const q8_act_block* xb = x + b * x_stride;
        __m256i s[H][M];
        block_sums<Q, Plus128, H, M>(group + 64 + (b % 2) * Q * 64, half, xb, s);
#pragma GCC unroll 2
        for (int h = 0; h < H; ++h) {
            const auto* scales = reinterpret_cast<const __m128i*>(group + 32 * (b % 2) + 16 * (half + h));
            const __m256 dw = _mm256_cvtph_ps(_mm_load_si128(scales));
#pragma GCC unroll 4
            for (int m = 0; m < M; ++m) {
                const __m256 scale = _mm256_mul_ps(dw, _mm256_set1_ps(xb[m].d));
                if constexpr (Q == 8) {
                    acc[h][m] = _mm256_add_ps(acc[h][m], _mm256_mul_ps(_mm256_cvtepi32_ps(s[h][m]), scale));
                } else {
                    acc[h][m] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s[h][m]), scale, acc[h][m]);
                }
            }
        }
    }
#pragma GCC unroll 2
    for (int h = 0; h < H; ++h) {
        const int rows = n_rows - k_half_rows * (half + h);  // real rows of this half (may be <= 0 or > 8)
        if (rows <= 0) break;
        const __m256i mask =
            _mm256_cmpgt_epi32(_mm256_set1_epi32(rows), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));  // lane < rows
#pragma GCC unroll 4
        for (int m = 0; m < M; ++m) {
            float* out = y + m * ldy + k_half_rows * (half + h);
            if (rows >= k_half_rows) {
                _mm256_storeu_ps(out, acc[h][m]);
            } else {
                _mm256_maskstore_ps(out, mask, acc[h][m]);
            }
        }
    }
}

// One panel x M tokens: one token reads both halves in one pass (two independent chains per block); more tokens
// take the halves one after the other (the registers hold M tokens of one half), the second from L1.
template <int Q, bool Plus128, int M>
void panel_tile(const uint8_t* panel, int64_t nb, size_t group_bytes, const q8_act_block* x, int64_t x_stride, float* y,
                int64_t ldy, int n_rows, bool prefetch) {
    if constexpr (M == 1) {
        half_panel_tile<Q, Plus128, 2, 1>(panel, nb, group_bytes, x, x_stride, y, ldy, 0, n_rows, prefetch);
    } else {
        half_panel_tile<Q, Plus128, 1, M>(panel, nb, group_bytes, x, x_stride, y, ldy, 0, n_rows, prefetch);
        if (n_rows > k_half_rows)
            half_panel_tile<Q, Plus128, 1, M>(panel, nb, group_bytes, x, x_stride, y, ldy, 1, n_rows, false);
    }
}

constexpr auto k_q8_tiles = tile_table<k_max_tile>([]<int M>() { return &panel_tile<8, false, M>; });
constexpr auto k_q8_plus128_tiles = tile_table<k_max_tile>([]<int M>() { return &panel_tile<8, true, M>; });
constexpr auto k_q4_tiles = tile_table<k_max_tile>([]<int M>() { return &panel_tile<4, false, M>; });

}  // namespace

void q8_panels_product_avx2(const matmul_weight& w, const q8_act_block* x, int64_t n_tokens, float* y, int64_t ldy,
                            int64_t p0, int64_t p1) {
    panel_product(w, x, n_tokens, y, ldy, p0, p1, w.codes == panel_codes::as_is ? k_q8_tiles : k_q8_plus128_tiles,
                  k_q4_tiles);
}

}  // namespace troupe::cpu::detail

#else  // built without AVX2 flags (another architecture): q8_panels_supported is false there, never called

#include "core/result.h"

namespace troupe::cpu::detail {

void q8_panels_product_avx2(const matmul_weight&, const q8_act_block*, int64_t, float*, int64_t, int64_t, int64_t) {
    TROUPE_ASSERT(false, "q8 panels: built without AVX2");
}

}  // namespace troupe::cpu::detail

#endif
