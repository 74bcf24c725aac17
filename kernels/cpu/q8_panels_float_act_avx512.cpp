// The float-activation recipe (W8A16: activations stay float32) on Q8_0 / Q4_0 panels (q8_panels.h has the
// layout), AVX-512: compiled with the level's flags, called only where cpu_features says they exist.
//
// Micro-tile: one panel (16 rows) x M tokens. Per weight element k of a block, the 16 rows' values are taken out
// of their quad vector (a byte shuffle for Q8_0, sign-extending shifts for Q4_0's nibbles), converted to float and
// scaled by the rows' d: w_k = float(q) * d, the reference's dequantized values exactly; then for each token
// acc = fma(w_k, x_t[k], acc) with x_t[k] broadcast from memory (an embedded broadcast, full FMA rate). The
// unpacking is shared by the M tokens of the tile; below 8 tokens each token has 2 or 4 accumulator chains, so
// the FMA latency does not bound decode (one chain per token measured 1.6x slower than the row kernels at one
// token; with 4 chains the panels are 1.7x faster, single thread, Q8_0 [32000, 768]). Against
// ref::matmul_float_act the result differs only by the FMA's single rounding and the order of the sums.
//
// Activations are packed once per call as [n_blocks][n_tokens][32] floats (q8_panels.cpp), so a tile's tokens
// are at fixed offsets from one pointer.
#include "kernels/cpu/q8_panels_kernels.h"

#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__) && defined(__AVX512VNNI__)

#include <immintrin.h>

#include "kernels/cpu/q8_panels_tiles.h"

namespace troupe::cpu::detail {
namespace {

constexpr int k_max_tile = 16;  // tokens per micro-tile at most

// The signed field of Bits bits at bit Lo of each int32 lane.
template <int Lo, int Bits>
inline __m512i signed_field(__m512i v) {
    if constexpr (Lo + Bits == 32) {
        return _mm512_srai_epi32(v, 32 - Bits);
    } else {
        return _mm512_srai_epi32(_mm512_slli_epi32(v, 32 - Lo - Bits), 32 - Bits);
    }
}

// Byte J of each int32 lane moved to the lane's top byte, the rest zero: the signed byte q as q * 2^24 (one
// shuffle instead of two shifts; the 2^-24 is folded into the scale, exactly).
template <int J>
inline __m512i byte_to_top(__m512i v) {
    constexpr char z = static_cast<char>(0x80);  // vpshufb: zero this byte
    const __m512i ctl = _mm512_set4_epi32(((12 + J) << 24) | (z & 0xff) << 16 | (z & 0xff) << 8 | (z & 0xff),
                                          ((8 + J) << 24) | (z & 0xff) << 16 | (z & 0xff) << 8 | (z & 0xff),
                                          ((4 + J) << 24) | (z & 0xff) << 16 | (z & 0xff) << 8 | (z & 0xff),
                                          (J << 24) | (z & 0xff) << 16 | (z & 0xff) << 8 | (z & 0xff));
    return _mm512_shuffle_epi8(v, ctl);
}

// Accumulator chains per token: an FMA waits ~4 cycles for the previous one on its chain and two issue per cycle,
// so few tokens need several chains each (summed at the end) to keep the FMA pipes busy.
constexpr int chains_for(int m) {
    return m >= 8 ? 1 : m >= 4 ? 2 : 4;
}

// acc[c][m] += w * x_m[k] for the M tokens of the tile (token m's block at xb + 32 m), on chain c.
template <int C, int M>
__attribute__((always_inline)) inline void fma_tokens(__m512 w, const float* xb, int k, int c, __m512 (&acc)[C][M]) {
#pragma GCC unroll 16
    for (int m = 0; m < M; ++m) acc[c][m] = _mm512_fmadd_ps(w, _mm512_set1_ps(xb[32 * m + k]), acc[c][m]);
}

// Element j of quad q (Q8_0: k = 4q + j) or its two nibbles (Q4_0: k = 4q + j and 16 + 4q + j) of one block; dw:
// the rows' scales (for Q8_0 times 2^-24, see byte_to_top).
template <int Q, int C, int M, int J>
__attribute__((always_inline)) inline void quad_element(__m512i v, __m512 dw, const float* xb, int q,
                                                        __m512 (&acc)[C][M]) {
    if constexpr (Q == 8) {
        fma_tokens<C, M>(_mm512_mul_ps(_mm512_cvtepi32_ps(byte_to_top<J>(v)), dw), xb, 4 * q + J, J % C, acc);
    } else {
        fma_tokens<C, M>(_mm512_mul_ps(_mm512_cvtepi32_ps(signed_field<8 * J, 4>(v)), dw), xb, 4 * q + J, 2 * J % C,
                         acc);
        fma_tokens<C, M>(_mm512_mul_ps(_mm512_cvtepi32_ps(signed_field<8 * J + 4, 4>(v)), dw), xb, 16 + 4 * q + J,
                         (2 * J + 1) % C, acc);
    }
}

// y[m * ldy + r] for m < M, lanes r in `rows`: panel (nb blocks, groups of group_bytes) times the tokens' float
// blocks x[(b * x_stride + m) * 32 ..].
template <int Q, panel_codes Codes, int M>
void float_tile(const uint8_t* panel, int64_t nb, size_t group_bytes, const float* x, int64_t x_stride, float* y,
                int64_t ldy, __mmask16 rows, bool prefetch) {
    constexpr int C = chains_for(M);
    // Stored bytes to signed values: Q8_0 q + 128 -> q (codes plus_128; as_is are q already); Q4_0 nibble n -> n ^ 8,
    // which read as a signed 4-bit field is n - 8.
    constexpr bool restore = Q == 4 || Codes == panel_codes::plus_128;
    const __m512i flip = _mm512_set1_epi8(static_cast<char>(Q == 8 ? 0x80 : 0x88));
    const __m512 unit = _mm512_set1_ps(Q == 8 ? 1.0f / 16777216.0f : 1.0f);  // 2^-24 for byte_to_top
    __m512 acc[C][M];
#pragma GCC unroll 4
    for (int c = 0; c < C; ++c) {
#pragma GCC unroll 16
        for (int m = 0; m < M; ++m) acc[c][m] = _mm512_setzero_ps();
    }
    for (int64_t b = 0; b < nb; ++b) {
        const uint8_t* group = panel + static_cast<size_t>(b / 2) * group_bytes;
        if (prefetch && b % 2 == 0) prefetch_panel_ahead(group, group_bytes);
        const __m512 dw =
            _mm512_mul_ps(_mm512_cvtph_ps(_mm256_load_si256(reinterpret_cast<const __m256i*>(group) + b % 2)), unit);
        const uint8_t* quads = group + 64 + (b % 2) * Q * 64;
        const float* xb = x + b * x_stride * 32;
        for (int q = 0; q < Q; ++q) {
            __m512i v = _mm512_load_si512(quads + 64 * q);
            if constexpr (restore) v = _mm512_xor_si512(v, flip);
            quad_element<Q, C, M, 0>(v, dw, xb, q, acc);
            quad_element<Q, C, M, 1>(v, dw, xb, q, acc);
            quad_element<Q, C, M, 2>(v, dw, xb, q, acc);
            quad_element<Q, C, M, 3>(v, dw, xb, q, acc);
        }
    }
#pragma GCC unroll 16
    for (int m = 0; m < M; ++m) {
        __m512 sum = acc[0][m];
#pragma GCC unroll 4
        for (int c = 1; c < C; ++c) sum = _mm512_add_ps(sum, acc[c][m]);
        _mm512_mask_storeu_ps(y + m * ldy, rows, sum);
    }
}

constexpr auto k_q8_float_tiles =
    tile_table<k_max_tile>([]<int M>() { return &float_tile<8, panel_codes::plus_128, M>; });
constexpr auto k_q8_as_is_float_tiles =
    tile_table<k_max_tile>([]<int M>() { return &float_tile<8, panel_codes::as_is, M>; });
constexpr auto k_q4_float_tiles = tile_table<k_max_tile>([]<int M>() { return &float_tile<4, panel_codes::as_is, M>; });

}  // namespace

void q8_panels_float_act_avx512(const matmul_weight& w, const float* x, int64_t n_tokens, float* y, int64_t ldy,
                                int64_t p0, int64_t p1) {
    const q8_panel_geometry g = q8_panel_geometry_of(w.type, w.n_in, w.n_out);
    const auto& tiles = w.type != ggml_type::q8_0          ? k_q4_float_tiles
                        : w.codes == panel_codes::plus_128 ? k_q8_float_tiles
                                                           : k_q8_as_is_float_tiles;
    for_each_panel_tile(w, g, n_tokens, p0, p1, k_max_tile, static_cast<size_t>(w.n_in) * sizeof(float),
                        [&](const uint8_t* panel, int n_rows, int64_t p, int64_t t0, int m, bool first) {
                            const auto rows = panel_row_mask(n_rows);
                            tiles[m - 1](panel, g.n_blocks, g.group_bytes, x + t0 * 32, n_tokens,
                                         y + t0 * ldy + p * k_panel_rows, ldy, rows, first);
                        });
}

}  // namespace troupe::cpu::detail

#else  // built without AVX-512 flags (another architecture): q8_panels_supported is false, never called

#include "core/result.h"

namespace troupe::cpu::detail {

void q8_panels_float_act_avx512(const matmul_weight&, const float*, int64_t, float*, int64_t, int64_t, int64_t) {
    TROUPE_ASSERT(false, "q8 panels: built without AVX-512");
}

}  // namespace troupe::cpu::detail

#endif
