// The integer GEMM of the AVX2 level for Q4_K / Q6_K weights against Q8_K activations (prefill): per output exactly
// ggml's x86 recipe (kernels/ref/kquant_dot.h), as the AVX2 dot kernels of matmul_avx2.cpp compute it, with each
// unpacked weight vector used by a tile of tokens. Compiled with the AVX2 flags only (kernels/CMakeLists.txt).
//
// A ymm holds one 32-element chunk of one row, so vpmaddubsw then vpmaddwd with the chunk's scale words give ggml's 8
// lanes directly. Micro-tile: 2 rows x up to 4 tokens (8 int32 accumulators). As in the AVX-512 GEMM, Q6_K takes the
// activations as x + 128 against the weights q - 32 and starts each lane at -128 * sum(scale * (q - 32)), a property
// of the row, instead of ggml's per-token 32 * x correction: the same exact integer lanes, two operations fewer per
// chunk and token. Loop order: a chunk of tokens whose activations fit in L2, pairs of rows (their super-blocks
// unpacked once), super-blocks, tiles; the float accumulators of the chunk in a per-thread buffer.
#include "kernels/cpu/matmul_kernels.h"

#if defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)

#include <immintrin.h>

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <utility>

#include "kernels/cpu/aligned_buffer.h"

namespace troupe::cpu::detail {
namespace {

constexpr int k_rows = 2;                    // rows per micro-tile
constexpr int k_max_tile = 4;                // tokens per micro-tile at most
constexpr size_t k_chunk_bytes = 192 << 10;  // activations per token chunk (an L2 share)

// One super-block of one row, unpacked.
struct row_block {
    __m256i w[8];   // chunk c's 32 elements (Q4_K: 0..15; Q6_K: q - 32)
    __m256i sc[8];  // chunk c's scale words (Q4_K: 16 x sc(c); Q6_K: 8 x s(2c), 8 x s(2c + 1))
    __m256i start;  // lanes' starting sums (Q6_K: -128 * sum(scale * (q - 32)); Q4_K: zero)
    __m128i mins;   // Q4_K: m0..m7 as words
    float dw, dminw;
};

inline float fp16(uint16_t h) {
    return _cvtsh_ss(h);
}

void unpack_q4_k(const block_q4_k& wb, row_block& rb) {
    uint32_t s[3];
    std::memcpy(s, wb.scales, 12);
    const uint32_t words[4] = {s[0] & 0x3f3f3f3fu, (s[2] & 0x0f0f0f0fu) | ((s[0] >> 2) & 0x30303030u),
                               s[1] & 0x3f3f3f3fu, ((s[2] >> 4) & 0x0f0f0f0fu) | ((s[1] >> 2) & 0x30303030u)};
    uint8_t sm[16];  // sc0..sc7, m0..m7
    std::memcpy(sm, words, 16);
    const __m256i low4 = _mm256_set1_epi8(0x0f);
    for (int j = 0; j < 4; ++j) {
        const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(wb.qs + 32 * j));
        rb.w[2 * j] = _mm256_and_si256(v, low4);
        rb.w[2 * j + 1] = _mm256_and_si256(_mm256_srli_epi16(v, 4), low4);
    }
    for (int c = 0; c < 8; ++c) rb.sc[c] = _mm256_set1_epi16(sm[c]);
    rb.start = _mm256_setzero_si256();
    rb.mins = _mm_cvtepu8_epi16(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(sm + 8)));
    rb.dw = fp16(wb.d);
    rb.dminw = fp16(wb.dmin);
}

void unpack_q6_k(const block_q6_k& wb, row_block& rb) {
    const __m256i low4 = _mm256_set1_epi8(0x0f), bits45 = _mm256_set1_epi8(0x30), k32 = _mm256_set1_epi8(32);
    const __m256i k128 = _mm256_set1_epi8(static_cast<char>(0x80));
    __m256i corr = _mm256_setzero_si256();
    for (int half = 0; half < 2; ++half) {
        const __m256i l0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(wb.ql + 64 * half));
        const __m256i l1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(wb.ql + 64 * half + 32));
        const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(wb.qh + 32 * half));
        // Elements 128 half + 32 k + l, k = 0..3.
        const __m256i q[4] = {
            _mm256_or_si256(_mm256_and_si256(l0, low4), _mm256_and_si256(_mm256_slli_epi16(h, 4), bits45)),
            _mm256_or_si256(_mm256_and_si256(l1, low4), _mm256_and_si256(_mm256_slli_epi16(h, 2), bits45)),
            _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l0, 4), low4), _mm256_and_si256(h, bits45)),
            _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l1, 4), low4),
                            _mm256_and_si256(_mm256_srli_epi16(h, 2), bits45))};
        for (int k = 0; k < 4; ++k) {
            const int c = 4 * half + k;
            rb.w[c] = _mm256_sub_epi8(q[k], k32);
            rb.sc[c] = _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_set1_epi16(wb.scales[2 * c])),
                                               _mm_set1_epi16(wb.scales[2 * c + 1]), 1);
            corr = _mm256_add_epi32(corr, _mm256_madd_epi16(_mm256_maddubs_epi16(k128, rb.w[c]), rb.sc[c]));
        }
    }
    rb.start = _mm256_sub_epi32(_mm256_setzero_si256(), corr);
    rb.mins = _mm_setzero_si128();
    rb.dw = fp16(wb.d);
    rb.dminw = 0.0f;
}

// The integer lane sums of one super-block for T tokens and both rows, then the float steps. xq: token t's 256
// activation bytes at xq + t * xqs (Q4_K: signed; Q6_K: + 128); its d_x at dx + t * dxs bytes; Q4_K's bsum pairs
// at bs + t * bss words. facc: [T][k_rows] ymm; macc: [T][k_rows] xmm.
template <bool Q4, int T>
void super_block_tile(const row_block* rb, const uint8_t* xq, size_t xqs, const uint8_t* dx, size_t dxs,
                      const int16_t* bs, size_t bss, float* facc_f, float* macc_f) {
    auto* facc = reinterpret_cast<__m256*>(facc_f);
    auto* macc = reinterpret_cast<__m128*>(macc_f);
    __m256i acc[T][k_rows];
#pragma GCC unroll 4
    for (int t = 0; t < T; ++t) {
        acc[t][0] = rb[0].start;
        acc[t][1] = rb[1].start;
    }
#pragma GCC unroll 8
    for (int c = 0; c < 8; ++c) {
        const __m256i w0 = _mm256_load_si256(&rb[0].w[c]), w1 = _mm256_load_si256(&rb[1].w[c]);
        const __m256i s0 = _mm256_load_si256(&rb[0].sc[c]), s1 = _mm256_load_si256(&rb[1].sc[c]);
#pragma GCC unroll 4
        for (int t = 0; t < T; ++t) {
            const __m256i xv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xq + t * xqs + 32 * c));
            const __m256i p0 = Q4 ? _mm256_maddubs_epi16(w0, xv) : _mm256_maddubs_epi16(xv, w0);
            const __m256i p1 = Q4 ? _mm256_maddubs_epi16(w1, xv) : _mm256_maddubs_epi16(xv, w1);
            acc[t][0] = _mm256_add_epi32(acc[t][0], _mm256_madd_epi16(p0, s0));
            acc[t][1] = _mm256_add_epi32(acc[t][1], _mm256_madd_epi16(p1, s1));
        }
    }
#pragma GCC unroll 4
    for (int t = 0; t < T; ++t) {
        const float d_x = *reinterpret_cast<const float*>(dx + t * dxs);
#pragma GCC unroll 2
        for (int r = 0; r < k_rows; ++r) {
            __m256& f = facc[t * k_rows + r];
            f = _mm256_fmadd_ps(_mm256_set1_ps(d_x * rb[r].dw), _mm256_cvtepi32_ps(acc[t][r]), f);
            if constexpr (Q4) {
                const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(bs + t * bss));
                __m128& m = macc[t * k_rows + r];
                m = _mm_fmadd_ps(_mm_set1_ps(-d_x * rb[r].dminw), _mm_cvtepi32_ps(_mm_madd_epi16(rb[r].mins, b)), m);
            }
        }
    }
}

using tile_fn = void (*)(const row_block*, const uint8_t*, size_t, const uint8_t*, size_t, const int16_t*, size_t,
                         float*, float*);

template <bool Q4, size_t... I>
constexpr std::array<tile_fn, sizeof...(I)> tile_table(std::index_sequence<I...>) {
    return {&super_block_tile<Q4, static_cast<int>(I) + 1>...};
}

constexpr auto k_q4_tiles = tile_table<true>(std::make_index_sequence<k_max_tile>());
constexpr auto k_q6_tiles = tile_table<false>(std::make_index_sequence<k_max_tile>());

// ggml's hsum_float_8: r_k = a[k + 4] + a[k], then (r0 + r2) + (r1 + r3); and (m0 + m2) + (m1 + m3).
inline float hsum8(__m256 v) {
    const __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    const __m128 s2 = _mm_add_ps(s, _mm_movehl_ps(s, s));
    return _mm_cvtss_f32(_mm_add_ss(s2, _mm_movehdup_ps(s2)));
}

inline float hsum4(__m128 v) {
    const __m128 s = _mm_add_ps(v, _mm_movehl_ps(v, v));
    return _mm_cvtss_f32(_mm_add_ss(s, _mm_movehdup_ps(s)));
}

}  // namespace

void gemm_kquant_avx2(const matmul_weight& w, prepared_x x, float* y, int64_t ldy, int64_t n_tokens, int64_t r0,
                      int64_t r1) {
    static thread_local aligned_buffer xq_buf, bs_buf, acc_buf, row_buf;
    const bool q4 = w.type == ggml_type::q4_k;
    const int64_t n = w.n_in, nb = n / qk_k;
    const auto* xb = static_cast<const uint8_t*>(x.data);
    // Q6_K: the activations as unsigned bytes x + 128 ([n_tokens][n]); Q4_K: the bsum pairs ([n_tokens][nb][8]).
    const uint8_t* xq = xb + offsetof(block_q8_k, qs);
    size_t xqs = x.stride, xbs = sizeof(block_q8_k);
    int16_t* bs = nullptr;
    if (q4) {
        bs = bs_buf.as<int16_t>(static_cast<size_t>(n_tokens * nb * 8));
        for (int64_t t = 0; t < n_tokens; ++t) {
            const auto* blocks = reinterpret_cast<const block_q8_k*>(xb + t * x.stride);
            for (int64_t b = 0; b < nb; ++b) {
                const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blocks[b].bsums));
                _mm_storeu_si128(reinterpret_cast<__m128i*>(bs + (t * nb + b) * 8),
                                 _mm_hadd_epi16(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1)));
            }
        }
    } else {
        auto* u = xq_buf.as<uint8_t>(static_cast<size_t>(n_tokens * n));
        const __m256i k128 = _mm256_set1_epi8(static_cast<char>(0x80));
        for (int64_t t = 0; t < n_tokens; ++t) {
            const auto* blocks = reinterpret_cast<const block_q8_k*>(xb + t * x.stride);
            for (int64_t b = 0; b < nb; ++b) {
                for (int i = 0; i < qk_k; i += 32) {
                    const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blocks[b].qs + i));
                    _mm256_storeu_si256(reinterpret_cast<__m256i*>(u + t * n + b * qk_k + i),
                                        _mm256_xor_si256(v, k128));
                }
            }
        }
        xq = u;
        xqs = static_cast<size_t>(n);
        xbs = qk_k;
    }

    const int64_t chunk = std::max<int64_t>(k_max_tile, static_cast<int64_t>(k_chunk_bytes / static_cast<size_t>(n)));
    auto* facc = acc_buf.as<__m256>(static_cast<size_t>(chunk * k_rows) * 3 / 2 + 1);
    auto* macc = reinterpret_cast<__m128*>(facc + chunk * k_rows);
    auto* rb = row_buf.as<row_block>(static_cast<size_t>(nb * k_rows));  // [nb][k_rows]
    const auto& tiles = q4 ? k_q4_tiles : k_q6_tiles;
    for (int64_t c0 = 0; c0 < n_tokens; c0 += chunk) {
        const int64_t nc = std::min(chunk, n_tokens - c0);
        const int64_t n_tiles = (nc + k_max_tile - 1) / k_max_tile;
        const int64_t base = nc / n_tiles, n_longer = nc % n_tiles;
        for (int64_t g = r0; g < r1; g += k_rows) {
            for (int i = 0; i < k_rows; ++i) {  // a row past r1 repeats the last row (read, never stored)
                const auto* row = static_cast<const uint8_t*>(w.data) + std::min(g + i, r1 - 1) * w.row_stride;
                for (int64_t b = 0; b < nb; ++b) {
                    if (q4) {
                        unpack_q4_k(reinterpret_cast<const block_q4_k*>(row)[b], rb[b * k_rows + i]);
                    } else {
                        unpack_q6_k(reinterpret_cast<const block_q6_k*>(row)[b], rb[b * k_rows + i]);
                    }
                }
            }
            for (int64_t i = 0; i < nc * k_rows; ++i) facc[i] = _mm256_setzero_ps();
            for (int64_t i = 0; i < nc * k_rows; ++i) macc[i] = _mm_setzero_ps();
            for (int64_t b = 0; b < nb; ++b) {
                int64_t t0 = c0;
                for (int64_t i = 0; i < n_tiles; ++i) {
                    const int64_t m = base + (i < n_longer ? 1 : 0);
                    tiles[m - 1](rb + b * k_rows, xq + static_cast<size_t>(t0) * xqs + static_cast<size_t>(b) * xbs,
                                 xqs,
                                 xb + static_cast<size_t>(t0) * x.stride + static_cast<size_t>(b) * sizeof(block_q8_k),
                                 x.stride, bs + (q4 ? (t0 * nb + b) * 8 : 0), static_cast<size_t>(nb * 8),
                                 reinterpret_cast<float*>(facc + (t0 - c0) * k_rows),
                                 reinterpret_cast<float*>(macc + (t0 - c0) * k_rows));
                    t0 += m;
                }
            }
            for (int64_t t = 0; t < nc; ++t) {
                for (int i = 0; i < k_rows && g + i < r1; ++i) {
                    float v = hsum8(facc[t * k_rows + i]);
                    if (q4) v += hsum4(macc[t * k_rows + i]);
                    y[(c0 + t) * ldy + g + i] = v;
                }
            }
        }
    }
}

}  // namespace troupe::cpu::detail

#endif
