// Internal: the AVX-512 weight loaders, prefetch and lane folding shared by the dot-product kernels
// (matmul_avx512.cpp, kquant_rows_avx512.cpp) and the GEMMs (gemm_avx512.cpp, gemm_q8_avx512.cpp,
// gemm_kquant_avx512.cpp). Include only from files compiled with the AVX-512 flags (kernels/CMakeLists.txt).
#pragma once

#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "kernels/cpu/matmul_kernels.h"

namespace troupe::cpu::detail::avx512 {

inline const uint8_t* row_ptr(const matmul_weight& w, int64_t r) {
    return static_cast<const uint8_t*>(w.data) + static_cast<size_t>(r) * w.row_stride;
}

inline float fp16(uint16_t h) {
    return _cvtsh_ss(h);
}

// Software prefetch of the weights this far ahead of the loads (tried 4-64 KiB: no difference on Zen 5 or Zen 4;
// without it a thread streams well below what the memory delivers). Prefetching past the end of the matrix is
// harmless (prefetches do not fault).
constexpr int k_prefetch_distance = 8192;

// Prefetches the cache lines of [p, p + n_bytes) shifted by the prefetch distance, into L2 (T1), not L1: on Zen 4
// the L1 prefetches held the k-quant row kernels to ~20-25 GB/s from memory on two cores against ~33-40 with T1
// (troupe_kernels_bench, same minutes; 110M Q4_K decode 301-330 -> 512-620 tokens/s, Q6_K 197-211 -> 377-411), the
// rows then reach L1 by the hardware prefetcher; the q8 panels measured the same with either hint.
//
// Far (the decode kernels: one token per row read): the same lines again four times as far ahead, so more of the
// stream is in flight from memory (the near prefetch then finds most lines in L2). Alternated with the near-only
// binary on Zen 4, two threads (`troupe bench --n-gen 32`, six rounds, the share of a plain read of the same bytes
// between the steps): 1B F16 decode faster in 6 of 6 rounds (median 13.8 -> 16.7 tokens/s), 1B Q4_K 6 of 6 (45.7
// -> 48.9), 110M F32 and 1B Q6_K within the noise; the share of the plain read higher in 19 of 24 model-rounds.
// The float tiles of several tokens (prefill) keep the near prefetch alone: there the weights are reused from cache.
template <bool Far = true>
inline void prefetch_ahead(const void* p, int n_bytes) {
    const char* q = static_cast<const char*>(p) + k_prefetch_distance;
    for (int i = 0; i < n_bytes; i += 64) {
        _mm_prefetch(q + i, _MM_HINT_T1);
        if constexpr (Far) _mm_prefetch(q + 3 * k_prefetch_distance + i, _MM_HINT_T1);
    }
}

// The 16 int32 lanes of a 64-element step folded to ggml's 8 (lane k + lane k + 8: elements 4k..4k+3 of both
// 32-element chunks), exactly.
inline __m256i fold_lanes(__m512i v) {
    return _mm256_add_epi32(_mm512_castsi512_si256(v), _mm512_extracti64x4_epi64(v, 1));
}

struct load_f32 {
    static constexpr int bytes = 4;
    static __m512 full(const uint8_t* p, int64_t k) { return _mm512_loadu_ps(reinterpret_cast<const float*>(p) + k); }
    static __m512 part(const uint8_t* p, int64_t k, __mmask16 m) {
        return _mm512_maskz_loadu_ps(m, reinterpret_cast<const float*>(p) + k);
    }
};

struct load_f16 {
    static constexpr int bytes = 2;
    static __m512 full(const uint8_t* p, int64_t k) {
        return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 2 * k)));
    }
    static __m512 part(const uint8_t* p, int64_t k, __mmask16 m) {
        return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, p + 2 * k));
    }
};

struct load_bf16 {
    static constexpr int bytes = 2;
    static __m512 full(const uint8_t* p, int64_t k) {
        const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 2 * k));
        return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
    }
    static __m512 part(const uint8_t* p, int64_t k, __mmask16 m) {
        const __m256i h = _mm256_maskz_loadu_epi16(m, p + 2 * k);
        return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
    }
};

// The 6-bit scales and mins of a Q4_K block: 32-bit words of the packed bytes, shifted into place.
inline void q4_k_scale_words(const block_q4_k& wb, uint32_t& sc03, uint32_t& sc47, uint32_t& m03, uint32_t& m47) {
    uint32_t s[3];
    std::memcpy(s, wb.scales, 12);
    sc03 = s[0] & 0x3f3f3f3fu;
    m03 = s[1] & 0x3f3f3f3fu;
    sc47 = (s[2] & 0x0f0f0f0fu) | ((s[0] >> 2) & 0x30303030u);
    m47 = ((s[2] >> 4) & 0x0f0f0f0fu) | ((s[1] >> 2) & 0x30303030u);
}

inline void q4_k_scales(const block_q4_k& wb, uint8_t* sc, uint8_t* mn) {
    uint32_t sc03, sc47, m03, m47;
    q4_k_scale_words(wb, sc03, sc47, m03, m47);
    std::memcpy(sc, &sc03, 4);
    std::memcpy(sc + 4, &sc47, 4);
    std::memcpy(mn, &m03, 4);
    std::memcpy(mn + 4, &m47, 4);
}

// The 6-bit values (0..63) of half h of a Q6_K block in element order: qa = elements 128 h + 0..63,
// qb = 128 h + 64..127.
inline void q6_k_values(const block_q6_k& wb, int half, __m512i& qa, __m512i& qb) {
    const __m512i low4 = _mm512_set1_epi8(0x0f);
    const __m512i bits45 = _mm512_set1_epi8(0x30);
    // qh's bits 2k, 2k + 1 to bits 4, 5 of each byte: k = 0 (shift left 4) and 1 (left 2) for qa's two halves, 2 (none)
    // and 3 (right 2) for qb's. Per-word variable shifts do both halves in one operation each; bits that cross into
    // the neighbouring byte are masked off with everything else outside bits 4, 5.
    const __m512i shift_a =
        _mm512_set_epi64(0x0002000200020002, 0x0002000200020002, 0x0002000200020002, 0x0002000200020002,
                         0x0004000400040004, 0x0004000400040004, 0x0004000400040004, 0x0004000400040004);
    const __m512i shift_b =
        _mm512_set_epi64(0x0002000200020002, 0x0002000200020002, 0x0002000200020002, 0x0002000200020002, 0, 0, 0, 0);
    const __m512i l = _mm512_loadu_si512(wb.ql + 64 * half);
    const __m512i h = _mm512_broadcast_i64x4(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(wb.qh + 32 * half)));
    const __m512i ha = _mm512_and_si512(_mm512_sllv_epi16(h, shift_a), bits45);
    const __m512i hb = _mm512_and_si512(_mm512_srlv_epi16(h, shift_b), bits45);
    qa = _mm512_ternarylogic_epi32(l, low4, ha, 0xea);  // (l & low4) | ha
    qb = _mm512_ternarylogic_epi32(_mm512_srli_epi16(l, 4), low4, hb, 0xea);
}

// q[256] = the block's values minus 32, in element order.
inline void q6_k_unpack(const block_q6_k& wb, int8_t* q) {
    const __m512i k32 = _mm512_set1_epi8(32);
    for (int half = 0; half < 2; ++half) {
        __m512i qa, qb;
        q6_k_values(wb, half, qa, qb);
        _mm512_storeu_si512(q + 128 * half, _mm512_sub_epi8(qa, k32));
        _mm512_storeu_si512(q + 128 * half + 64, _mm512_sub_epi8(qb, k32));
    }
}

}  // namespace troupe::cpu::detail::avx512
