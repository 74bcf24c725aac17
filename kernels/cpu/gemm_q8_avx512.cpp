// The integer GEMM of the AVX-512 level for Q8_0 / Q4_0 weights against Q8_0 activations (prefill).
// Compiled with the AVX-512 flags only (kernels/CMakeLists.txt).
#include "kernels/cpu/gemm_avx512.h"

#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__) && defined(__AVX512VNNI__)

#include <immintrin.h>

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <utility>

#include "kernels/cpu/aligned_buffer.h"
#include "kernels/cpu/matmul_avx512_blocks.h"

namespace troupe::cpu::detail {
namespace {

using namespace avx512;

// Integer GEMM for Q8_0 / Q4_0 weights (many tokens): C tile of 8 tokens x 16 rows. Per block of 32, the 16
// rows' unsigned weight bytes are packed as 8 vectors of [16 rows][4 bytes] (one k quad each), so
// vpdpbusd with the token's 4 activation bytes broadcast adds 4 products per row and lane; the block's int
// sums (minus offset * sum of the block's activations) are scaled by d_w (per lane) * d_x into float.
// A whole panel of 16 rows x n_in fits in L1 (576 bytes per block).

constexpr int k_q8_rows = k_avx512_gemm_q8_rows;
constexpr int k_q8_tokens = 8;  // tokens per micro-tile

struct q8_panel_block {
    __m512i quads[8];  // [k quad][row][4 unsigned bytes]
    __m512 d;          // [row] weight scales
};

// Packs blocks of rows [p0, p0 + nr) (nr <= 16; missing rows read as zero) into panel[nb].
template <class B>
void pack_q8_panel(const matmul_weight& w, int64_t p0, int nr, int64_t nb, q8_panel_block* panel) {
    const __mmask16 rows = static_cast<__mmask16>(nr >= 16 ? 0xffff : (1u << nr) - 1);
    const __m512i row_offsets =
        _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                           _mm512_set1_epi32(static_cast<int>(w.row_stride)));
    const uint8_t* base = row_ptr(w, p0);
    for (int64_t b = 0; b < nb; ++b) {
        const uint8_t* blk = base + b * sizeof(B);
        q8_panel_block& pb = panel[b];
        const __m512i d32 = _mm512_mask_i32gather_epi32(_mm512_setzero_si512(), rows, row_offsets, blk, 1);
        pb.d = _mm512_maskz_mov_ps(rows, _mm512_cvtph_ps(_mm512_cvtepi32_epi16(d32)));
        if constexpr (std::is_same_v<B, block_q8_0>) {
            for (int q = 0; q < 8; ++q) {
                const __m512i g = _mm512_mask_i32gather_epi32(_mm512_setzero_si512(), rows, row_offsets,
                                                              blk + offsetof(block_q8_0, qs) + 4 * q, 1);
                pb.quads[q] = _mm512_maskz_xor_epi32(rows, g, _mm512_set1_epi8(static_cast<char>(0x80)));
            }
        } else {
            for (int q = 0; q < 4; ++q) {
                const __m512i g = _mm512_mask_i32gather_epi32(_mm512_setzero_si512(), rows, row_offsets,
                                                              blk + offsetof(block_q4_0, qs) + 4 * q, 1);
                pb.quads[q] = _mm512_and_si512(g, _mm512_set1_epi8(0x0f));
                pb.quads[q + 4] = _mm512_and_si512(_mm512_srli_epi32(g, 4), _mm512_set1_epi8(0x0f));
            }
        }
    }
}

// y[t0 + m, p0 .. p0 + 16) for m < M: tokens' Q8_0 blocks at x (stride xs bytes), their scales and offset
// corrections in dx / corr ([n_tokens][nb]).
template <int M>
void q8_micro(const q8_panel_block* panel, int64_t nb, const uint8_t* x, size_t xs, const float* dx,
              const int32_t* corr, float* y, int64_t ldy, __mmask16 store_mask) {
    __m512 facc[M];
#pragma GCC unroll 8
    for (int m = 0; m < M; ++m) facc[m] = _mm512_setzero_ps();
    for (int64_t b = 0; b < nb; ++b) {
        const q8_panel_block& pb = panel[b];
        __m512i iacc[M];
#pragma GCC unroll 8
        for (int m = 0; m < M; ++m) iacc[m] = _mm512_set1_epi32(-corr[m * nb + b]);
#pragma GCC unroll 8
        for (int q = 0; q < 8; ++q) {
            const __m512i wq = _mm512_load_si512(&pb.quads[q]);
#pragma GCC unroll 8
            for (int m = 0; m < M; ++m) {
                int32_t xq;
                std::memcpy(&xq, reinterpret_cast<const block_q8_0*>(x + m * xs)[b].qs + 4 * q, 4);
                iacc[m] = _mm512_dpbusd_epi32(iacc[m], wq, _mm512_set1_epi32(xq));
            }
        }
#pragma GCC unroll 8
        for (int m = 0; m < M; ++m) {
            facc[m] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(iacc[m]), _mm512_mul_ps(pb.d, _mm512_set1_ps(dx[m * nb + b])),
                                      facc[m]);
        }
    }
#pragma GCC unroll 8
    for (int m = 0; m < M; ++m) _mm512_mask_storeu_ps(y + m * ldy, store_mask, facc[m]);
}

using q8_micro_fn = void (*)(const q8_panel_block*, int64_t, const uint8_t*, size_t, const float*, const int32_t*,
                             float*, int64_t, __mmask16);

template <size_t... I>
constexpr std::array<q8_micro_fn, sizeof...(I)> q8_micro_table(std::index_sequence<I...>) {
    return {&q8_micro<static_cast<int>(I) + 1>...};
}

constexpr auto k_q8_micro = q8_micro_table(std::make_index_sequence<k_q8_tokens>());

}  // namespace

void gemm_q8_avx512(const matmul_weight& w, prepared_x x, float* y, int64_t ldy, int64_t n_tokens, int64_t r0,
                    int64_t r1) {
    static thread_local aligned_buffer panel_buf, aux_buf;
    const bool q8 = w.type == ggml_type::q8_0;
    const int64_t nb = w.n_in / qk8_0;
    auto* panel = panel_buf.as<q8_panel_block>(static_cast<size_t>(nb));
    // Per token and block: d_x, and offset * (sum of the block's activations) (offset 128 for Q8_0's
    // w + 128 bytes, 8 for Q4_0's unsigned nibbles).
    auto* dx = aux_buf.as<float>(static_cast<size_t>(2 * n_tokens * nb));
    auto* corr = reinterpret_cast<int32_t*>(dx + n_tokens * nb);
    const auto* xb = static_cast<const uint8_t*>(x.data);
    for (int64_t t = 0; t < n_tokens; ++t) {
        const auto* blocks = reinterpret_cast<const block_q8_0*>(xb + t * x.stride);
        for (int64_t b = 0; b < nb; ++b) {
            const __m256i v = _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(blocks[b].qs)));
            const __m256i v2 =
                _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(blocks[b].qs + 16)));
            const __m256i s = _mm256_madd_epi16(_mm256_add_epi16(v, v2), _mm256_set1_epi16(1));
            const __m128i s4 = _mm_add_epi32(_mm256_castsi256_si128(s), _mm256_extracti128_si256(s, 1));
            const __m128i s2 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, _MM_SHUFFLE(1, 0, 3, 2)));
            const int32_t sum = _mm_cvtsi128_si32(_mm_add_epi32(s2, _mm_shuffle_epi32(s2, _MM_SHUFFLE(2, 3, 0, 1))));
            dx[t * nb + b] = fp16(blocks[b].d);
            corr[t * nb + b] = (q8 ? 128 : 8) * sum;
        }
    }
    for (int64_t p0 = r0; p0 < r1; p0 += k_q8_rows) {
        const int nr = static_cast<int>(std::min<int64_t>(k_q8_rows, r1 - p0));
        if (q8) {
            pack_q8_panel<block_q8_0>(w, p0, nr, nb, panel);
        } else {
            pack_q8_panel<block_q4_0>(w, p0, nr, nb, panel);
        }
        const __mmask16 store_mask = static_cast<__mmask16>(nr >= 16 ? 0xffff : (1u << nr) - 1);
        for (int64_t t0 = 0; t0 < n_tokens; t0 += k_q8_tokens) {
            const int m = static_cast<int>(std::min<int64_t>(k_q8_tokens, n_tokens - t0));
            k_q8_micro[m - 1](panel, nb, xb + t0 * x.stride, x.stride, dx + t0 * nb, corr + t0 * nb, y + t0 * ldy + p0,
                              ldy, store_mask);
        }
    }
}

}  // namespace troupe::cpu::detail

#endif
