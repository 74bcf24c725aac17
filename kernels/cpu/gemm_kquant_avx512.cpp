// The integer GEMM of the AVX-512 level for Q4_K / Q6_K weights against Q8_K activations (prefill), computing per
// output exactly ggml's x86 recipe (kernels/ref/kquant_dot.h) as the dot kernels of matmul_avx512.cpp do: the same
// integer lane sums per super-block, and per (row, token) the same float operations in the same order. Compiled
// with the AVX-512 flags only (kernels/CMakeLists.txt).
//
// Register blocking: a micro-tile is 2 pairs of rows x T tokens. One zmm holds 32 elements (one chunk) of two rows,
// row a in the low 256 bits and row b in the high ones, so vpmaddubsw against the token's chunk broadcast to both
// halves, then vpdpwssd with the sub-block scales, leaves ggml's 8 lanes of (a, t) in the low half and of (b, t) in
// the high half: no folding, and each loaded weight vector serves T tokens. Per super-block the two outputs'
// lanes are converted and accumulated by one FMA with d = [d_w(a) x 8, d_w(b) x 8] * d_x(t) (the same float
// product per lane as ggml's d_x * d_w).
//
// Q4_K: nibbles 0..15 against the signed activations; the mins in a 4-lane chain per output (vpmaddwd of the
//       mins with the pair sums of bsums), as ggml.
// Q6_K: ggml forms (q - 32) * x pairwise in 16 bits; here the activations are made unsigned (x + 128) and the
//       weights signed (q - 32), so one vpmaddubsw gives (x + 128)(q - 32) pairs (within 16 bits: |.| <= 16320),
//       and the extra 128 * sum(scale * (q - 32)) of each lane, a property of the weights alone, starts the lane's
//       sum negated. Integer sums are exact, so the lanes equal ggml's.
//
// Loop order: a chunk of tokens whose activations fit in L2, then groups of 4 rows, then super-blocks: each
// super-block of the 4 rows is unpacked once into the 2-row form (values, scale words, d_w) and used by every token
// of the chunk, tile by tile; the float accumulators of the chunk live in a small per-thread buffer.
#include "kernels/cpu/gemm_avx512.h"

#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__) && defined(__AVX512VNNI__)

#include <immintrin.h>

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <utility>

#include "core/result.h"
#include "kernels/cpu/aligned_buffer.h"
#include "kernels/cpu/kquant_panels.h"
#include "kernels/cpu/matmul_avx512_blocks.h"

namespace troupe::cpu::detail {
namespace {

using namespace avx512;

constexpr int k_pairs = 2;                   // pairs of rows per micro-tile
constexpr int k_group_rows = 2 * k_pairs;    // rows per group
constexpr size_t k_chunk_bytes = 192 << 10;  // activations per token chunk (an L2 share)

// One super-block of a pair of rows (a, b) in the 2-row form.
struct pair_block {
    __m512i w[8];   // chunk c: [a's 32 elements | b's 32 elements] (Q4_K: 0..15; Q6_K: q - 32)
    __m512i sc[8];  // chunk c: scale words of those elements, [a x 16 | b x 16] (Q6_K: 8 + 8 per row)
    __m512 dw;      // [d_w(a) x 8 | d_w(b) x 8]
    __m512i start;  // the lanes' starting sums (Q6_K: -128 * sum(scale * (q - 32)); Q4_K: zero)
    __m256i mins;   // Q4_K: [a's m0..m7 | b's m0..m7] as words
    __m256 dminw;   // Q4_K: [dmin_w(a) x 4 | dmin_w(b) x 4]
};

// 32 bytes at p in the low half and 32 at q in the high half.
inline __m512i load_halves(const uint8_t* p, const uint8_t* q) {
    return _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p))),
                              _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q)), 1);
}

inline __m512 floats_of(float a, float b) {
    return _mm512_castpd_ps(_mm512_insertf64x4(_mm512_castpd256_pd512(_mm256_castps_pd(_mm256_set1_ps(a))),
                                               _mm256_castps_pd(_mm256_set1_ps(b)), 1));
}

// Word indexes into [a's 16 words | b's 16 words]: chunk c's scale words.
struct scale_indexes {
    __m512i chunk[8];
    __m512i mins;  // Q4_K: [a's m0..m7 | b's m0..m7] in the low 256 bits
};

scale_indexes make_indexes(bool q4) {
    scale_indexes idx;
    alignas(64) int16_t v[32];
    for (int c = 0; c < 8; ++c) {
        for (int i = 0; i < 32; ++i) {
            const int row = i / 16 * 16, word = i % 16;
            // Q4_K: words 0..7 are the scales of the 8 sub-blocks of 32; Q6_K: the 16 scales of sub-blocks of 16.
            v[i] = static_cast<int16_t>(row + (q4 ? c : 2 * c + word / 8));
        }
        idx.chunk[c] = _mm512_load_si512(v);
    }
    for (int i = 0; i < 32; ++i) v[i] = static_cast<int16_t>(i < 16 ? (i / 8) * 16 + 8 + i % 8 : 0);
    idx.mins = _mm512_load_si512(v);
    return idx;
}

// A Q4_K block's 6-bit scales and mins as 16 words sc0..sc7, m0..m7 (as q4_k_scale_words): dwords
// [s0 & 3f, (s2 & 0f) | (s0 >> 2 & 30), s1 & 3f, (s2 >> 4 & 0f) | (s1 >> 2 & 30)] widened. The 16-byte load reads
// 4 bytes of qs past the 12 scale bytes, inside the block.
inline __m256i q4_k_words(const block_q4_k& wb) {
    const __m128i s = _mm_loadu_si128(reinterpret_cast<const __m128i*>(wb.scales));
    const __m128i p = _mm_shuffle_epi32(s, _MM_SHUFFLE(2, 1, 2, 0));
    const __m128i q = _mm_shuffle_epi32(s, _MM_SHUFFLE(1, 1, 0, 0));
    const __m128i lo = _mm_and_si128(_mm_srlv_epi32(p, _mm_setr_epi32(0, 0, 0, 4)),
                                     _mm_setr_epi32(0x3f3f3f3f, 0x0f0f0f0f, 0x3f3f3f3f, 0x0f0f0f0f));
    const __m128i hi = _mm_and_si128(_mm_srli_epi32(q, 2), _mm_setr_epi32(0, 0x30303030, 0, 0x30303030));
    return _mm256_cvtepu8_epi16(_mm_or_si128(lo, hi));
}

void unpack_q4_k(const block_q4_k& a, const block_q4_k& b, const scale_indexes& idx, pair_block& pb) {
    const __m512i low4 = _mm512_set1_epi8(0x0f);
    for (int j = 0; j < 4; ++j) {
        const __m512i v = load_halves(a.qs + 32 * j, b.qs + 32 * j);
        pb.w[2 * j] = _mm512_and_si512(v, low4);
        pb.w[2 * j + 1] = _mm512_and_si512(_mm512_srli_epi16(v, 4), low4);
    }
    const __m512i words = _mm512_inserti64x4(_mm512_castsi256_si512(q4_k_words(a)), q4_k_words(b), 1);
    for (int c = 0; c < 8; ++c) pb.sc[c] = _mm512_permutexvar_epi16(idx.chunk[c], words);
    pb.mins = _mm512_castsi512_si256(_mm512_permutexvar_epi16(idx.mins, words));
    pb.dw = floats_of(fp16(a.d), fp16(b.d));
    pb.start = _mm512_setzero_si512();
    pb.dminw = _mm256_insertf128_ps(_mm256_set1_ps(fp16(a.dmin)), _mm_set1_ps(fp16(b.dmin)), 1);
}

void unpack_q6_k(const block_q6_k& a, const block_q6_k& b, const scale_indexes& idx, pair_block& pb) {
    const __m512i low4 = _mm512_set1_epi8(0x0f), bits45 = _mm512_set1_epi8(0x30), k32 = _mm512_set1_epi8(32);
    const __m512i k128 = _mm512_set1_epi8(static_cast<char>(0x80));
    const __m512i words = _mm512_cvtepi8_epi16(
        _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(a.scales))),
                                _mm_loadu_si128(reinterpret_cast<const __m128i*>(b.scales)), 1));
    __m512i corr = _mm512_setzero_si512();  // sum(scale * 128 * (q - 32)) per lane
    for (int half = 0; half < 2; ++half) {
        // Elements 128 half + 32 cc + l: low bits from ql[64 half + l (+ 32 for cc odd)] (low nibble for cc < 2),
        // high bits from qh[32 half + l], bits 2 cc .. 2 cc + 1.
        const __m512i l0 = load_halves(a.ql + 64 * half, b.ql + 64 * half);
        const __m512i l1 = load_halves(a.ql + 64 * half + 32, b.ql + 64 * half + 32);
        const __m512i h = load_halves(a.qh + 32 * half, b.qh + 32 * half);
        const __m512i q[4] = {
            _mm512_or_si512(_mm512_and_si512(l0, low4), _mm512_and_si512(_mm512_slli_epi16(h, 4), bits45)),
            _mm512_or_si512(_mm512_and_si512(l1, low4), _mm512_and_si512(_mm512_slli_epi16(h, 2), bits45)),
            _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(l0, 4), low4), _mm512_and_si512(h, bits45)),
            _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(l1, 4), low4),
                            _mm512_and_si512(_mm512_srli_epi16(h, 2), bits45)),
        };
        for (int cc = 0; cc < 4; ++cc) {
            const int c = 4 * half + cc;
            pb.w[c] = _mm512_sub_epi8(q[cc], k32);
            pb.sc[c] = _mm512_permutexvar_epi16(idx.chunk[c], words);
            corr = _mm512_dpwssd_epi32(corr, _mm512_maddubs_epi16(k128, pb.w[c]), pb.sc[c]);
        }
    }
    pb.dw = floats_of(fp16(a.d), fp16(b.d));
    pb.start = _mm512_sub_epi32(_mm512_setzero_si512(), corr);
    pb.mins = _mm256_setzero_si256();
    pb.dminw = _mm256_setzero_ps();
}

// Per-call activation data of one token and super-block beside its Q8_K block.
struct token_aux {
    int16_t bsum32[8];  // Q4_K: bsums[2j] + bsums[2j + 1]
};

// Group outputs of T tokens x 4 rows over all nb super-blocks, the float accumulators in registers, then ggml's
// horizontal sums and the store of y[t * ldy + (0..3)] (n_rows < 4: the first n_rows).
// xq: token t's activation bytes of super-block b at xq + t * xqs + b * xbs (Q4_K: signed; Q6_K: + 128, unsigned);
// d_x at dx + t * dxs + b * dbs bytes; aux (Q4_K) at aux + t * nb + b.
template <bool Q4, int T>
void group_tile(const pair_block* pb, int64_t nb, const uint8_t* xq, size_t xqs, size_t xbs, const uint8_t* dx,
                size_t dxs, size_t dbs, const token_aux* aux, float* y, int64_t ldy, int n_rows) {
    __m512 facc[T][k_pairs];
    __m512 macc[T];  // Q4_K: [pair 0: a 4 lanes, b 4 lanes | pair 1: a, b]
#pragma GCC unroll 8
    for (int t = 0; t < T; ++t) {
        facc[t][0] = facc[t][1] = macc[t] = _mm512_setzero_ps();
    }
    for (int64_t b = 0; b < nb; ++b, pb += k_pairs, xq += xbs, dx += dbs) {
        __m512i acc[T][k_pairs];
#pragma GCC unroll 8
        for (int t = 0; t < T; ++t) {
            acc[t][0] = pb[0].start;
            acc[t][1] = pb[1].start;
        }
#pragma GCC unroll 8
        for (int c = 0; c < 8; ++c) {
            __m512i w0 = _mm512_load_si512(&pb[0].w[c]), w1 = _mm512_load_si512(&pb[1].w[c]);
            __m512i s0 = _mm512_load_si512(&pb[0].sc[c]), s1 = _mm512_load_si512(&pb[1].sc[c]);
            // Loaded once for the T tokens: without the barrier GCC folds these loads into every token's
            // vpmaddubsw / vpdpwssd at T = 3 (4 loads per token and chunk for Q6_K, 2 for Q4_K). The same instructions
            // otherwise, so the same sums.
            if constexpr (T > 1) asm("" : "+v"(w0), "+v"(w1), "+v"(s0), "+v"(s1));
#pragma GCC unroll 8
            for (int t = 0; t < T; ++t) {
                const __m512i xv =
                    _mm512_broadcast_i64x4(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(xq + t * xqs + 32 * c)));
                if constexpr (Q4) {
                    acc[t][0] = _mm512_dpwssd_epi32(acc[t][0], _mm512_maddubs_epi16(w0, xv), s0);
                    acc[t][1] = _mm512_dpwssd_epi32(acc[t][1], _mm512_maddubs_epi16(w1, xv), s1);
                } else {
                    acc[t][0] = _mm512_dpwssd_epi32(acc[t][0], _mm512_maddubs_epi16(xv, w0), s0);
                    acc[t][1] = _mm512_dpwssd_epi32(acc[t][1], _mm512_maddubs_epi16(xv, w1), s1);
                }
            }
        }
        const __m512 dw0 = _mm512_load_ps(&pb[0].dw), dw1 = _mm512_load_ps(&pb[1].dw);
        __m512i mins = _mm512_setzero_si512();
        __m512 dminw = _mm512_setzero_ps();
        if constexpr (Q4) {
            mins = _mm512_inserti64x4(_mm512_castsi256_si512(pb[0].mins), pb[1].mins, 1);
            dminw = _mm512_castpd_ps(_mm512_insertf64x4(_mm512_castpd256_pd512(_mm256_castps_pd(pb[0].dminw)),
                                                        _mm256_castps_pd(pb[1].dminw), 1));
        }
#pragma GCC unroll 8
        for (int t = 0; t < T; ++t) {
            const float d_x = *reinterpret_cast<const float*>(dx + t * dxs);
            const __m512 dxv = _mm512_set1_ps(d_x);
            facc[t][0] = _mm512_fmadd_ps(_mm512_mul_ps(dw0, dxv), _mm512_cvtepi32_ps(acc[t][0]), facc[t][0]);
            facc[t][1] = _mm512_fmadd_ps(_mm512_mul_ps(dw1, dxv), _mm512_cvtepi32_ps(acc[t][1]), facc[t][1]);
            if constexpr (Q4) {
                const __m512i bs =
                    _mm512_broadcast_i32x4(_mm_loadu_si128(reinterpret_cast<const __m128i*>(aux[t * nb + b].bsum32)));
                macc[t] = _mm512_fmadd_ps(_mm512_mul_ps(dminw, _mm512_set1_ps(-d_x)),
                                          _mm512_cvtepi32_ps(_mm512_madd_epi16(mins, bs)), macc[t]);
            }
        }
    }
    // ggml's sums: hsum_float_8 (r_k = a[k + 4] + a[k], then (r0 + r2) + (r1 + r3)) of each output's 8 lanes, plus
    // for Q4_K (m0 + m2) + (m1 + m3) of its 4 min lanes. Outputs land in lanes 0 and 8 (mins: 0, 4, 8, 12).
    const __m512i pick = _mm512_setr_epi32(0, 8, 16, 24, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0);
    const __m512i pick_m = _mm512_setr_epi32(0, 4, 8, 12, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0);
    const auto store = static_cast<__mmask8>((1u << n_rows) - 1);
#pragma GCC unroll 8
    for (int t = 0; t < T; ++t) {
        __m512 s[k_pairs];
        for (int p = 0; p < k_pairs; ++p) {
            const __m512 f = facc[t][p];
            const __m512 r = _mm512_add_ps(_mm512_shuffle_f32x4(f, f, _MM_SHUFFLE(2, 3, 0, 1)), f);
            const __m512 r2 = _mm512_add_ps(r, _mm512_permute_ps(r, _MM_SHUFFLE(1, 0, 3, 2)));
            s[p] = _mm512_add_ps(r2, _mm512_permute_ps(r2, _MM_SHUFFLE(2, 3, 0, 1)));
        }
        __m128 out = _mm512_castps512_ps128(_mm512_permutex2var_ps(s[0], pick, s[1]));
        if constexpr (Q4) {
            const __m512 m = macc[t];
            const __m512 m2 = _mm512_add_ps(m, _mm512_permute_ps(m, _MM_SHUFFLE(1, 0, 3, 2)));
            const __m512 m3 = _mm512_add_ps(m2, _mm512_permute_ps(m2, _MM_SHUFFLE(2, 3, 0, 1)));
            out = _mm_add_ps(out, _mm512_castps512_ps128(_mm512_permutexvar_ps(pick_m, m3)));
        }
        _mm_mask_storeu_ps(y + t * ldy, store, out);
    }
}

using tile_fn = void (*)(const pair_block*, int64_t, const uint8_t*, size_t, size_t, const uint8_t*, size_t, size_t,
                         const token_aux*, float*, int64_t, int);

template <bool Q4, size_t... I>
constexpr std::array<tile_fn, sizeof...(I)> tile_table(std::index_sequence<I...>) {
    return {&group_tile<Q4, static_cast<int>(I) + 1>...};
}

constexpr int k_q4_max_tile = 4;  // 8 int32 + 8 float + 4 min accumulators
constexpr int k_q6_max_tile = 5;  // 12 int32 + 12 float accumulators
constexpr auto k_q4_tiles = tile_table<true>(std::make_index_sequence<k_q4_max_tile>());
constexpr auto k_q6_tiles = tile_table<false>(std::make_index_sequence<k_q6_max_tile>());

}  // namespace

void gemm_kquant_avx512(const matmul_weight& w, prepared_x x, float* y, int64_t ldy, int64_t n_tokens, int64_t r0,
                        int64_t r1) {
    static thread_local aligned_buffer xq_buf, aux_buf, pair_buf;
    const bool q4 = w.type == ggml_type::q4_k;
    const int64_t n = w.n_in, nb = n / qk_k;
    const auto* xb = static_cast<const uint8_t*>(x.data);

    // Q6_K: the activations as unsigned bytes x + 128 ([n_tokens][n]); Q4_K: the pair sums of bsums
    // ([n_tokens][nb]).
    const uint8_t* xq = nullptr;
    size_t xqs = 0;
    token_aux* aux = nullptr;
    if (q4) {
        aux = aux_buf.as<token_aux>(static_cast<size_t>(n_tokens * nb));
        for (int64_t t = 0; t < n_tokens; ++t) {
            const auto* blocks = reinterpret_cast<const block_q8_k*>(xb + t * x.stride);
            for (int64_t b = 0; b < nb; ++b) {
                const __m256i bs = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blocks[b].bsums));
                _mm_storeu_si128(reinterpret_cast<__m128i*>(aux[t * nb + b].bsum32),
                                 _mm_hadd_epi16(_mm256_castsi256_si128(bs), _mm256_extracti128_si256(bs, 1)));
            }
        }
        xq = xb + offsetof(block_q8_k, qs);
        xqs = x.stride;
    } else {
        auto* u = xq_buf.as<uint8_t>(static_cast<size_t>(n_tokens * n));
        const __m512i k128 = _mm512_set1_epi8(static_cast<char>(0x80));
        for (int64_t t = 0; t < n_tokens; ++t) {
            const auto* blocks = reinterpret_cast<const block_q8_k*>(xb + t * x.stride);
            for (int64_t b = 0; b < nb; ++b) {
                for (int i = 0; i < qk_k; i += 64) {
                    _mm512_storeu_si512(u + t * n + b * qk_k + i,
                                        _mm512_xor_si512(_mm512_loadu_si512(blocks[b].qs + i), k128));
                }
            }
        }
        xq = u;
        xqs = static_cast<size_t>(n);
    }

    const int max_tile = q4 ? k_q4_max_tile : k_q6_max_tile;
    const tile_fn* tiles = q4 ? k_q4_tiles.data() : k_q6_tiles.data();
    const int64_t chunk = std::max<int64_t>(max_tile, static_cast<int64_t>(k_chunk_bytes / static_cast<size_t>(n)));
    auto* pb = pair_buf.as<pair_block>(static_cast<size_t>(nb * k_pairs));  // [nb][k_pairs]
    static const scale_indexes q4_idx = make_indexes(true), q6_idx = make_indexes(false);
    const kquant_rows_view kv = kquant_view(w);  // rows, or k-quant panels (groups start at multiples of 4)
    TROUPE_ASSERT(!kv.panels() || r0 % k_group_rows == 0, "gemm_kquant: panel rows must start a group");
    const size_t row_bytes_used = static_cast<size_t>(nb) * (q4 ? sizeof(block_q4_k) : sizeof(block_q6_k));
    const size_t xbs = q4 ? sizeof(block_q8_k) : qk_k;
    for (int64_t c0 = 0; c0 < n_tokens; c0 += chunk) {
        const int64_t nc = std::min(chunk, n_tokens - c0);
        const int64_t n_tiles = (nc + max_tile - 1) / max_tile;
        const int64_t base = nc / n_tiles, n_longer = nc % n_tiles;
        for (int64_t g = r0; g < r1; g += k_group_rows) {
            // Rows past r1 repeat the last row (read, never stored).
            const uint8_t* rows[k_group_rows];
            for (int i = 0; i < k_group_rows; ++i) rows[i] = kv.row(std::min(g + i, r1 - 1));
            for (int64_t b = 0; b < nb; ++b) {
                const size_t at = static_cast<size_t>(b) * kv.block_step;
                for (int p = 0; p < k_pairs; ++p) {
                    if (q4) {
                        unpack_q4_k(*reinterpret_cast<const block_q4_k*>(rows[2 * p] + at),
                                    *reinterpret_cast<const block_q4_k*>(rows[2 * p + 1] + at), q4_idx,
                                    pb[b * k_pairs + p]);
                    } else {
                        unpack_q6_k(*reinterpret_cast<const block_q6_k*>(rows[2 * p] + at),
                                    *reinterpret_cast<const block_q6_k*>(rows[2 * p + 1] + at), q6_idx,
                                    pb[b * k_pairs + p]);
                    }
                }
            }
            // The next group's rows, while this one computes (in the panels: one stretch of four rows' bytes).
            if (kv.panels()) {
                const int64_t next_g = g + k_group_rows;
                const auto* next = reinterpret_cast<const char*>(kv.row(next_g));
                const size_t n_next =
                    static_cast<size_t>(std::min<int64_t>(k_group_rows, r1 - next_g)) * row_bytes_used;
                for (size_t o = 0; next_g < r1 && o < n_next; o += 64) _mm_prefetch(next + o, _MM_HINT_T0);
            } else {
                for (int i = 0; i < k_group_rows && g + k_group_rows + i < r1; ++i) {
                    const auto* next = reinterpret_cast<const char*>(kv.row(g + k_group_rows + i));
                    for (size_t o = 0; o < row_bytes_used; o += 64) _mm_prefetch(next + o, _MM_HINT_T0);
                }
            }
            const int n_rows = static_cast<int>(std::min<int64_t>(k_group_rows, r1 - g));
            int64_t t0 = c0;
            for (int64_t i = 0; i < n_tiles; ++i) {
                const int64_t m = base + (i < n_longer ? 1 : 0);
                tiles[m - 1](pb, nb, xq + static_cast<size_t>(t0) * xqs, xqs, xbs,
                             xb + static_cast<size_t>(t0) * x.stride, x.stride, sizeof(block_q8_k),
                             aux + (q4 ? t0 * nb : 0), y + t0 * ldy + g, ldy, n_rows);
                t0 += m;
            }
        }
    }
}

}  // namespace troupe::cpu::detail

#endif
