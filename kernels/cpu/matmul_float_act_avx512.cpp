// The float-activation recipe at the AVX-512 level (decode): one weight row x up to 4 tokens per pass, the row
// streamed once. Each 16-element chunk of a weight block is widened in registers (bytes -> int32 -> float):
//   - Q6_K: 64 values at a time unpacked with 512-bit integer ops into a small stack buffer, each chunk of 16
//     scaled as the reference dequantizes it ((d sc) q), then multiplied with 16 float activations by FMA, four
//     accumulator chains per token;
//   - Q4_K, Q5_K: (d sc_j) (q_j . x_j) per sub-block, the mins (dmin m_j) against per-call sums of x per 32;
//   - Q2_K, Q3_K: each chunk of 16 scaled as the reference dequantizes it (its own scale, and Q2_K's min), then FMA;
//   - Q8_0 / Q4_0 / Q5_0 (one scale per 32): p = q . x per token first, then acc += d * p: one multiply per block
//   instead
//     of one per weight (equal to the dequantized product but for rounding). One core is bound by its vector
//     units here, not by memory (about 33 G weights/s per core on Zen 5 for Q8_0 from L2, 35 GB/s of rows), so
//     the multiplies saved are time saved.
// Weight bytes are prefetched ahead like the integer kernels (8 KiB).
#include "kernels/cpu/matmul_kernels.h"

#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__) && defined(__AVX512VNNI__)

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "kernels/cpu/aligned_buffer.h"
#include "kernels/cpu/matmul_float_act_blocks.h"

namespace troupe::cpu::detail {
namespace {

inline float fp16(uint16_t h) {
    return _cvtsh_ss(h);
}

constexpr int k_prefetch_distance = 8192;

// Prefetches the cache lines of block *p shifted by pf bytes (pf: k_prefetch_distance, read once per row).
template <class B>
inline void prefetch_block(const B* p, int pf) {
    if (pf == 0) return;
    const char* q = reinterpret_cast<const char*>(p) + pf;
    for (size_t i = 0; i < sizeof(B); i += 64) _mm_prefetch(q + i, _MM_HINT_T0);
}

inline __m512 widen(__m128i q) {
    return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(q));
}

// acc[t] += wv * x[t * xs + 0..15]
template <int T>
inline void fma16(__m512 (&acc)[T], __m512 wv, const float* x, int64_t xs) {
#pragma GCC unroll 4
    for (int t = 0; t < T; ++t) acc[t] = _mm512_fmadd_ps(wv, _mm512_loadu_ps(x + t * xs), acc[t]);
}

// Four accumulator chains per token (a0..a3: chunks of a pair of blocks, or of two sub-blocks of a k-quant) keep
// four FMAs in flight per token, so one token is bound by the dequantization, not by the FMA latency. (Separate
// named arrays, indexed by constants only, so the compiler keeps them all in registers.)
#define TROUPE_FA_CHAINS               \
    __m512 a0[T], a1[T], a2[T], a3[T]; \
    for (int t = 0; t < T; ++t) a0[t] = a1[t] = a2[t] = a3[t] = _mm512_setzero_ps()

template <int T>
inline void store4(const __m512 (&a0)[T], const __m512 (&a1)[T], const __m512 (&a2)[T], const __m512 (&a3)[T], float* y,
                   int64_t ldy) {
    for (int t = 0; t < T; ++t) {
        y[t * ldy] = _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(a0[t], a1[t]), _mm512_add_ps(a2[t], a3[t])));
    }
}

// One block, two chunks of 16: p = q0 . x0 + q1 . x1 per token, then acc += d * p (the block's scale once per block
// and token instead of once per weight: d * sum(q x) equals sum((d q) x) but for rounding).
template <int T>
inline void scaled_block(__m512 q0, __m512 q1, float d, const float* xb, int64_t xs, __m512 (&acc)[T]) {
    const __m512 dv = _mm512_set1_ps(d);
#pragma GCC unroll 4
    for (int t = 0; t < T; ++t) {
        const __m512 p =
            _mm512_fmadd_ps(q1, _mm512_loadu_ps(xb + t * xs + 16), _mm512_mul_ps(q0, _mm512_loadu_ps(xb + t * xs)));
        acc[t] = _mm512_fmadd_ps(dv, p, acc[t]);
    }
}

template <int T>
inline void one_scale_block(const block_q8_0& wb, const float* xb, int64_t xs, __m512 (&acc)[T]) {
    scaled_block<T>(widen(load16(wb.qs)), widen(load16(wb.qs + 16)), fp16(wb.d), xb, xs, acc);
}

template <int T>
inline void one_scale_block(const block_q4_0& wb, const float* xb, int64_t xs, __m512 (&acc)[T]) {
    scaled_block<T>(widen(q4_0_chunk(wb, 0)), widen(q4_0_chunk(wb, 1)), fp16(wb.d), xb, xs, acc);
}

// Q5_0: the block's 32 codes as q - 16 (-16..15: the nibble, 16 less where the fifth bit in qh is clear), two signed
// chunks of 16, then as Q4_0.
template <int T>
inline void one_scale_block(const block_q5_0& wb, const float* xb, int64_t xs, __m512 (&acc)[T]) {
    const __m128i packed = _mm_loadu_si128(reinterpret_cast<const __m128i*>(wb.qs));
    const __m128i nibble = _mm_set1_epi8(0x0f), sixteen = _mm_set1_epi8(16);
    const __m128i lo = _mm_and_si128(packed, nibble), hi = _mm_and_si128(_mm_srli_epi16(packed, 4), nibble);
    uint32_t qh;
    std::memcpy(&qh, wb.qh, sizeof qh);
    const auto clear_lo = static_cast<__mmask16>(~qh & 0xffffu), clear_hi = static_cast<__mmask16>(~qh >> 16);
    scaled_block<T>(widen(_mm_mask_sub_epi8(lo, clear_lo, lo, sixteen)),
                    widen(_mm_mask_sub_epi8(hi, clear_hi, hi, sixteen)), fp16(wb.d), xb, xs, acc);
}

// Sub-block j's elements 16 h .. 16 h + 15 as bytes: Q4_K's nibbles; Q5_K's plus 16 where the fifth bit is set (bit j
// of qh[16 h + i], as ggml's dequantize_row_q5_K reads it).
inline __m128i k_chunk(const block_q4_k& b, int j, int h) {
    return q4_k_chunk(b, j, h);
}
inline __m128i k_chunk(const block_q5_k& b, int j, int h) {
    const __m128i q = load16(b.qs + 32 * (j / 2) + 16 * h);
    const __m128i low = _mm_and_si128(j % 2 == 0 ? q : _mm_srli_epi16(q, 4), _mm_set1_epi8(0x0f));
    const __mmask16 fifth = _mm_test_epi8_mask(load16(b.qh + 16 * h), _mm_set1_epi8(static_cast<char>(1 << j)));
    return _mm_mask_add_epi8(low, fifth, low, _mm_set1_epi8(16));
}

// A row of blocks of 32 with one scale each (Q8_0, Q4_0, Q5_0: one_scale_block), two blocks per step into chains a0
// and a1 (a2, a3 unused).
template <class Block, int T>
void one_scale_row(const Block* w, const float* x, int64_t xs, int64_t nb, float* y, int64_t ldy) {
    static_assert(qk8_0 == 32 && qk4_0 == 32 && qk5_0 == 32);
    TROUPE_FA_CHAINS;
    const int pf = k_prefetch_distance;
    int64_t b = 0;
    for (; b + 2 <= nb; b += 2) {
        prefetch_block(w + b, pf);
        one_scale_block<T>(w[b], x + b * 32, xs, a0);
        one_scale_block<T>(w[b + 1], x + (b + 1) * 32, xs, a1);
    }
    if (b < nb) one_scale_block<T>(w[b], x + b * 32, xs, a0);
    store4<T>(a0, a1, a2, a3, y, ldy);
}

// Q4_K and Q5_K: w = (d sc_j) q - (dmin m_j) per sub-block j of 32, so w . x = sum_j (d sc_j) (q_j . x_j) - (dmin m_j)
// sum(x_j): the sums of x per 32 (xsum, [T][nb * 8], stride xss) are computed once per work item, the mins then cost
// one 8-wide FMA per block and token instead of a subtraction per weight.
template <class Block, int T>
void q4_k_row(const Block* w, const float* x, int64_t xs, const float* xsum, int64_t xss, int64_t nb, float* y,
              int64_t ldy) {
    TROUPE_FA_CHAINS;
    const int pf = k_prefetch_distance;
    __m256 mins[T];
    for (int t = 0; t < T; ++t) mins[t] = _mm256_setzero_ps();
    for (int64_t b = 0; b < nb; ++b) {
        prefetch_block(w + b, pf);
        const Block& wb = w[b];
        uint8_t sc[8], mn[8];
        q4_k_unpack_scales(wb, sc, mn);
        const float d = fp16(wb.d), dmin = fp16(wb.dmin);
        int64_t m8;
        std::memcpy(&m8, mn, 8);
        const __m256 mv =
            _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_cvtsi64_si128(m8))), _mm256_set1_ps(dmin));
#pragma GCC unroll 4
        for (int t = 0; t < T; ++t) mins[t] = _mm256_fmadd_ps(mv, _mm256_loadu_ps(xsum + t * xss + 8 * b), mins[t]);
        const float* xb = x + b * qk_k;
#pragma GCC unroll 2
        for (int c = 0; c < 4; c += 2) {  // sub-blocks 2c..2c+3 into chains a0..a3
            scaled_block<T>(widen(k_chunk(wb, 2 * c, 0)), widen(k_chunk(wb, 2 * c, 1)), d * sc[2 * c], xb + 64 * c, xs,
                            a0);
            scaled_block<T>(widen(k_chunk(wb, 2 * c + 1, 0)), widen(k_chunk(wb, 2 * c + 1, 1)), d * sc[2 * c + 1],
                            xb + 64 * c + 32, xs, a1);
            scaled_block<T>(widen(k_chunk(wb, 2 * c + 2, 0)), widen(k_chunk(wb, 2 * c + 2, 1)), d * sc[2 * c + 2],
                            xb + 64 * c + 64, xs, a2);
            scaled_block<T>(widen(k_chunk(wb, 2 * c + 3, 0)), widen(k_chunk(wb, 2 * c + 3, 1)), d * sc[2 * c + 3],
                            xb + 64 * c + 96, xs, a3);
        }
    }
    for (int t = 0; t < T; ++t) {
        const __m512 s = _mm512_add_ps(_mm512_add_ps(a0[t], a1[t]), _mm512_add_ps(a2[t], a3[t]));
        const __m128 m4 = _mm_add_ps(_mm256_castps256_ps128(mins[t]), _mm256_extractf128_ps(mins[t], 1));
        const __m128 m2 = _mm_add_ps(m4, _mm_movehl_ps(m4, m4));
        y[t * ldy] = _mm512_reduce_add_ps(s) - _mm_cvtss_f32(_mm_add_ss(m2, _mm_movehdup_ps(m2)));
    }
}

// Sums of each 32 activations of n_tokens rows of n: xsum[t * (n / 32) + g].
void sums_of_32(const float* x, int64_t n, int64_t n_tokens, float* xsum) {
    for (int64_t t = 0; t < n_tokens; ++t) {
        for (int64_t g = 0; g < n / 32; ++g) {
            const float* p = x + t * n + 32 * g;
            xsum[t * (n / 32) + g] = _mm512_reduce_add_ps(_mm512_add_ps(_mm512_loadu_ps(p), _mm512_loadu_ps(p + 16)));
        }
    }
}

// The 128 values of half `half` of a Q6_K block minus 32, in element order, unpacked 64 at a time:
// bytes 0..63 of ql hold the low nibbles of elements 0..63 and the high nibbles of 64..127; qh (32 bytes, used
// twice) the two high bits, at shifts 0, 2 (elements 0..31, 32..63) and 4, 6 (64..95, 96..127).
inline void q6_k_half_values(const block_q6_k& wb, int half, int8_t* q) {
    const __m512i low4 = _mm512_set1_epi8(0x0f), bits45 = _mm512_set1_epi8(0x30), k32 = _mm512_set1_epi8(32);
    const __m512i l = _mm512_loadu_si512(wb.ql + 64 * half);
    const __m512i h = _mm512_broadcast_i64x4(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(wb.qh + 32 * half)));
    const __m512i ha =
        _mm512_and_si512(_mm512_mask_blend_epi64(0xf0, _mm512_slli_epi16(h, 4), _mm512_slli_epi16(h, 2)), bits45);
    const __m512i hb = _mm512_and_si512(_mm512_mask_blend_epi64(0xf0, h, _mm512_srli_epi16(h, 2)), bits45);
    _mm512_store_si512(q, _mm512_sub_epi8(_mm512_or_si512(_mm512_and_si512(l, low4), ha), k32));
    _mm512_store_si512(q + 64,
                       _mm512_sub_epi8(_mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(l, 4), low4), hb), k32));
}

template <int T>
void q6_k_row(const block_q6_k* w, const float* x, int64_t xs, int64_t nb, float* y, int64_t ldy) {
    TROUPE_FA_CHAINS;
    const int pf = k_prefetch_distance;
    alignas(64) int8_t q[128];  // one half block's values - 32
    for (int64_t b = 0; b < nb; ++b) {
        prefetch_block(w + b, pf);
        const block_q6_k& wb = w[b];
        const float d = fp16(wb.d);
#pragma GCC unroll 2
        for (int half = 0; half < 2; ++half) {
            q6_k_half_values(wb, half, q);
            const float* xh = x + b * qk_k + 128 * half;
            const int8_t* sc = wb.scales + 8 * half;
#pragma GCC unroll 2
            for (int c = 0; c < 8; c += 4) {  // chunks of 16 (each its own scale) into chains a0..a3
                fma16<T>(a0, _mm512_mul_ps(widen(load16(q + 16 * c)), _mm512_set1_ps(d * sc[c])), xh + 16 * c, xs);
                fma16<T>(a1, _mm512_mul_ps(widen(load16(q + 16 * c + 16)), _mm512_set1_ps(d * sc[c + 1])),
                         xh + 16 * c + 16, xs);
                fma16<T>(a2, _mm512_mul_ps(widen(load16(q + 16 * c + 32)), _mm512_set1_ps(d * sc[c + 2])),
                         xh + 16 * c + 32, xs);
                fma16<T>(a3, _mm512_mul_ps(widen(load16(q + 16 * c + 48)), _mm512_set1_ps(d * sc[c + 3])),
                         xh + 16 * c + 48, xs);
            }
        }
    }
    store4<T>(a0, a1, a2, a3, y, ldy);
}

// Q2_K and Q3_K: 16 chunks of 16 per block, each with its own scale (and Q2_K's min), scaled as the reference
// dequantizes them (dl q - ml; dl q), then multiplied with 16 activations by FMA, chunks rotating over chains a0..a3.
// A block's scales are read once (the struct), its chunks then one by one.
struct q2_k_chunks {
    const block_q2_k& b;
    float d, dmin;
    explicit q2_k_chunks(const block_q2_k& wb) : b(wb), d(fp16(wb.d)), dmin(fp16(wb.dmin)) {}
    __m512 operator()(int c) const {
        const __m512 dl = _mm512_set1_ps(d * static_cast<float>(b.scales[c] & 0x0f));
        const __m512 ml = _mm512_set1_ps(dmin * static_cast<float>(b.scales[c] >> 4));
        return _mm512_sub_ps(_mm512_mul_ps(dl, widen(q2_k_chunk(b, c))), ml);
    }
};

struct q3_k_chunks {
    const block_q3_k& b;
    float d;
    int sc[16];
    explicit q3_k_chunks(const block_q3_k& wb) : b(wb), d(fp16(wb.d)) { q3_k_unpack_scales(wb, sc); }
    __m512 operator()(int c) const {
        return _mm512_mul_ps(_mm512_set1_ps(d * static_cast<float>(sc[c])), widen(q3_k_chunk(b, c)));
    }
};

template <class Chunks, class Block, int T>
void sixteen_chunk_row(const Block* w, const float* x, int64_t xs, int64_t nb, float* y, int64_t ldy) {
    TROUPE_FA_CHAINS;
    const int pf = k_prefetch_distance;
    for (int64_t b = 0; b < nb; ++b) {
        prefetch_block(w + b, pf);
        const Chunks chunk(w[b]);
        const float* xb = x + b * qk_k;
#pragma GCC unroll 4
        for (int c = 0; c < 16; c += 4) {
            fma16<T>(a0, chunk(c), xb + 16 * c, xs);
            fma16<T>(a1, chunk(c + 1), xb + 16 * c + 16, xs);
            fma16<T>(a2, chunk(c + 2), xb + 16 * c + 32, xs);
            fma16<T>(a3, chunk(c + 3), xb + 16 * c + 48, xs);
        }
    }
    store4<T>(a0, a1, a2, a3, y, ldy);
}

#undef TROUPE_FA_CHAINS

template <int T>
void row_tile(const matmul_weight& w, const float* x, const float* xsum, float* y, int64_t ldy, int64_t r) {
    const auto* wr = static_cast<const uint8_t*>(w.data) + static_cast<size_t>(r) * w.row_stride;
    const int64_t n = w.n_in;
    switch (w.type) {
        case ggml_type::q8_0:
            one_scale_row<block_q8_0, T>(reinterpret_cast<const block_q8_0*>(wr), x, n, n / qk8_0, y, ldy);
            break;
        case ggml_type::q4_0:
            one_scale_row<block_q4_0, T>(reinterpret_cast<const block_q4_0*>(wr), x, n, n / qk4_0, y, ldy);
            break;
        case ggml_type::q5_0:
            one_scale_row<block_q5_0, T>(reinterpret_cast<const block_q5_0*>(wr), x, n, n / qk5_0, y, ldy);
            break;
        case ggml_type::q4_k:
            q4_k_row<block_q4_k, T>(reinterpret_cast<const block_q4_k*>(wr), x, n, xsum, n / 32, n / qk_k, y, ldy);
            break;
        case ggml_type::q5_k:
            q4_k_row<block_q5_k, T>(reinterpret_cast<const block_q5_k*>(wr), x, n, xsum, n / 32, n / qk_k, y, ldy);
            break;
        case ggml_type::q6_k:
            q6_k_row<T>(reinterpret_cast<const block_q6_k*>(wr), x, n, n / qk_k, y, ldy);
            break;
        case ggml_type::q2_k:
            sixteen_chunk_row<q2_k_chunks, block_q2_k, T>(reinterpret_cast<const block_q2_k*>(wr), x, n, n / qk_k, y,
                                                          ldy);
            break;
        case ggml_type::q3_k:
            sixteen_chunk_row<q3_k_chunks, block_q3_k, T>(reinterpret_cast<const block_q3_k*>(wr), x, n, n / qk_k, y,
                                                          ldy);
            break;
        default:  // float weights take the float dot kernels (matmul.cpp)
            rows_float_act_scalar(w, x, y - r, ldy, T, r, r + 1);
            break;
    }
}

}  // namespace

void rows_float_act_avx512(const matmul_weight& w, const float* x, float* y, int64_t ldy, int64_t n_tokens, int64_t r0,
                           int64_t r1) {
    const int64_t n = w.n_in;
    static thread_local aligned_buffer xsum_buf;
    float* xsum = nullptr;  // [n_tokens, n / 32] sums of activations, for Q4_K's and Q5_K's mins
    if (w.type == ggml_type::q4_k || w.type == ggml_type::q5_k) {
        xsum = xsum_buf.as<float>(static_cast<size_t>(n_tokens * (n / 32)));
        sums_of_32(x, n, n_tokens, xsum);
    }
    // Past 4 tokens, a block of rows (about 16 KiB) is streamed once and reused from cache by every tile
    // of tokens, so each tile's activations are reused across the block instead of refetched per row.
    const int64_t block =
        n_tokens <= 4 ? 1 : std::max<int64_t>(1, (int64_t{16} << 10) / static_cast<int64_t>(w.row_stride));
    for (int64_t rb = r0; rb < r1; rb += block) {
        const int64_t re = std::min(r1, rb + block);
        for (int64_t t0 = 0; t0 < n_tokens; t0 += 4) {
            for (int64_t r = rb; r < re; ++r) {
                const float* xt = x + t0 * n;
                const float* st = xsum != nullptr ? xsum + t0 * (n / 32) : nullptr;
                float* yt = y + t0 * ldy + r;
                switch (std::min<int64_t>(4, n_tokens - t0)) {
                    case 1:
                        row_tile<1>(w, xt, st, yt, ldy, r);
                        break;
                    case 2:
                        row_tile<2>(w, xt, st, yt, ldy, r);
                        break;
                    case 3:
                        row_tile<3>(w, xt, st, yt, ldy, r);
                        break;
                    default:
                        row_tile<4>(w, xt, st, yt, ldy, r);
                        break;
                }
            }
        }
    }
}

}  // namespace troupe::cpu::detail

#endif
