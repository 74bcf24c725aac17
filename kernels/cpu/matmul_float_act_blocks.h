// Internal: quantized weight blocks as 16-byte chunks of small signed integers and their float scale, for the
// float-activation kernels (matmul_float_act_avx512.cpp, matmul_float_act_avx2.cpp). Chunk c of a block holds
// 16 consecutive elements; the element's value is float(q) * scale (- min for Q4_K), computed in the same
// order as the reference dequantization (kernels/ref/quants.cpp), so the weights are exactly the reference's:
//
//   type  | chunks per block | chunk c: elements   | q                         | scale           | min
//   ------+------------------+---------------------+---------------------------+-----------------+-----------
//   Q8_0  | 2                | 16 c ..             | qs                        | d               |
//   Q4_0  | 2                | 16 c ..             | nibble (low: c 0) - 8     | d               |
//   Q5_0  | 2                | 16 c ..             | nibble + 16 fifth bit - 16 | d              |
//   Q4_K  | 16               | 16 c ..             | nibble of sub-block c / 2 | d * sc[c / 2]   | dmin * m[c / 2]
//   Q5_K  | 16               | 16 c ..             | Q4_K's + 16 fifth bit     | as Q4_K         | as Q4_K
//   Q6_K  | 16               | 16 c ..             | 6-bit value - 32          | d * scales[c]   |
//   Q2_K  | 16               | 16 c ..             | 2-bit value               | d * (sc[c] & 15)| dmin * (sc[c] >> 4)
//   Q3_K  | 16               | 16 c ..             | 2-bit value - 4 (high bit clear) | d * (6-bit sc[c] - 32) |
//
// Only SSE2/SSSE3 intrinsics (every x86-64 level). Included by one ISA-specific file each; everything here has
// internal linkage so no inline copy compiled with one file's flags can be used by another.
#pragma once

#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "kernels/ggml_types.h"

namespace troupe::cpu::detail {
namespace {

// The 6-bit scales sc[8] and mins m[8] of a Q4_K block.
template <class Block>  // block_q4_k or block_q5_k: the same 12 bytes of scales and mins
inline void q4_k_unpack_scales(const Block& b, uint8_t* sc, uint8_t* m) {
    uint32_t s[3];
    std::memcpy(s, b.scales, 12);
    const uint32_t words[4] = {s[0] & 0x3f3f3f3fu, (s[2] & 0x0f0f0f0fu) | ((s[0] >> 2) & 0x30303030u),
                               s[1] & 0x3f3f3f3fu, ((s[2] >> 4) & 0x0f0f0f0fu) | ((s[1] >> 2) & 0x30303030u)};
    std::memcpy(sc, words, 8);
    std::memcpy(m, words + 2, 8);
}

inline __m128i load16(const void* p) {
    return _mm_loadu_si128(static_cast<const __m128i*>(p));
}

// Q4_0 chunk c: the low (c = 0) or high (c = 1) nibbles of the 16 bytes, minus 8.
inline __m128i q4_0_chunk(const block_q4_0& b, int c) {
    const __m128i q = load16(b.qs);
    const __m128i v = _mm_and_si128(c == 0 ? q : _mm_srli_epi16(q, 4), _mm_set1_epi8(0x0f));
    return _mm_sub_epi8(v, _mm_set1_epi8(8));
}

// Q4_K sub-block j (32 elements), half h: nibbles 0..15 of bytes 32 (j / 2) + 16 h (low nibbles for even j).
inline __m128i q4_k_chunk(const block_q4_k& b, int j, int h) {
    const __m128i q = load16(b.qs + 32 * (j / 2) + 16 * h);
    return _mm_and_si128(j % 2 == 0 ? q : _mm_srli_epi16(q, 4), _mm_set1_epi8(0x0f));
}

// Q6_K half `half`, group k (0..3, elements 128 half + 32 k ..), chunk i (0, 1): the 6-bit values minus 32.
inline __m128i q6_k_chunk(const block_q6_k& b, int half, int k, int i) {
    const __m128i l = load16(b.ql + 64 * half + 32 * (k % 2) + 16 * i);
    const __m128i h = load16(b.qh + 32 * half + 16 * i);
    const __m128i low = _mm_and_si128(k < 2 ? l : _mm_srli_epi16(l, 4), _mm_set1_epi8(0x0f));
    const __m128i hs = k == 0   ? _mm_slli_epi16(h, 4)
                       : k == 1 ? _mm_slli_epi16(h, 2)
                       : k == 2 ? h
                                : _mm_srli_epi16(h, 2);
    const __m128i high = _mm_and_si128(hs, _mm_set1_epi8(0x30));
    return _mm_sub_epi8(_mm_or_si128(low, high), _mm_set1_epi8(32));
}

// 0xff in byte i where bit i % 8 of byte i / 8 of `two` (two bytes in its low 16 bits) is set, else 0.
inline __m128i bits_as_bytes(uint32_t two) {
    const __m128i spread = _mm_shuffle_epi8(_mm_cvtsi32_si128(static_cast<int>(two)),
                                            _mm_set_epi8(1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0));
    const __m128i bit = _mm_set_epi8(-128, 64, 32, 16, 8, 4, 2, 1, -128, 64, 32, 16, 8, 4, 2, 1);
    return _mm_cmpeq_epi8(_mm_and_si128(spread, bit), bit);
}

// Q5_0 chunk h: the low (h = 0) or high nibbles of the 16 bytes plus 16 where the element's fifth bit (bit 16 h + i of
// qh) is set, minus 16 (-16..15).
inline __m128i q5_0_chunk(const block_q5_0& b, int h) {
    uint32_t qh;
    std::memcpy(&qh, b.qh, sizeof qh);
    const __m128i q = load16(b.qs);
    const __m128i nibble = _mm_and_si128(h == 0 ? q : _mm_srli_epi16(q, 4), _mm_set1_epi8(0x0f));
    const __m128i fifth = _mm_and_si128(bits_as_bytes(qh >> (16 * h)), _mm_set1_epi8(16));
    return _mm_sub_epi8(_mm_or_si128(nibble, fifth), _mm_set1_epi8(16));
}

// Q5_K sub-block j, half h: Q4_K's nibbles plus 16 where the fifth bit is set (bit j of qh[16 h + i], as ggml's
// dequantize_row_q5_K reads it).
inline __m128i q5_k_chunk(const block_q5_k& b, int j, int h) {
    const __m128i q = load16(b.qs + 32 * (j / 2) + 16 * h);
    const __m128i low = _mm_and_si128(j % 2 == 0 ? q : _mm_srli_epi16(q, 4), _mm_set1_epi8(0x0f));
    const __m128i bit = _mm_set1_epi8(static_cast<char>(1 << j));
    const __m128i set = _mm_cmpeq_epi8(_mm_and_si128(load16(b.qh + 16 * h), bit), bit);
    return _mm_or_si128(low, _mm_and_si128(set, _mm_set1_epi8(16)));
}

// The low two bits of chunk c (elements 16 c ..) of a Q2_K or Q3_K block: element e's bits
// (qs[32 (e / 128) + e % 32] >> 2 ((e % 128) / 32)) & 3, for the chunk's 16 elements at once.
inline __m128i k2_bits(const uint8_t* qs, int c) {
    const __m128i q = load16(qs + 32 * (c / 8) + 16 * (c % 2));
    return _mm_and_si128(_mm_srl_epi16(q, _mm_cvtsi32_si128(2 * ((c % 8) / 2))), _mm_set1_epi8(3));
}

// Q2_K chunk c: its 2-bit values (0..3).
inline __m128i q2_k_chunk(const block_q2_k& b, int c) {
    return k2_bits(b.qs, c);
}

// Q3_K chunk c: its values -4..3, the low two bits minus 4 where the high bit (bit e / 32 of hmask[e % 32]) is clear.
inline __m128i q3_k_chunk(const block_q3_k& b, int c) {
    const __m128i bit = _mm_set1_epi8(static_cast<char>(1 << (c / 2)));
    const __m128i clear = _mm_cmpeq_epi8(_mm_and_si128(load16(b.hmask + 16 * (c % 2)), bit), _mm_setzero_si128());
    return _mm_sub_epi8(k2_bits(b.qs, c), _mm_and_si128(clear, _mm_set1_epi8(4)));
}

// Q3_K's 16 sub-block scales (6 bits each, minus 32).
inline void q3_k_unpack_scales(const block_q3_k& b, int* sc) {
    for (int j = 0; j < 16; ++j) {
        const int low = j < 8 ? (b.scales[j] & 0x0f) : (b.scales[j - 8] >> 4);
        const int high = (b.scales[8 + j % 4] >> (2 * (j / 4))) & 3;
        sc[j] = (low | high << 4) - 32;
    }
}

}  // namespace
}  // namespace troupe::cpu::detail
