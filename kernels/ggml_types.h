// The tensor element types of GGUF files (ggml's numbering) and the block layouts troupe computes with.
//
// A quantized row of n elements is n / block_size blocks of type_size bytes each. Block layouts are
// fixed by the GGUF format and must match byte for byte (static_asserts below).
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace troupe {

enum class ggml_type : uint32_t {
    f32 = 0,
    f16 = 1,
    q4_0 = 2,
    q4_1 = 3,
    q5_0 = 6,
    q5_1 = 7,
    q8_0 = 8,
    q8_1 = 9,
    q2_k = 10,
    q3_k = 11,
    q4_k = 12,
    q5_k = 13,
    q6_k = 14,
    q8_k = 15,
    iq2_xxs = 16,
    iq2_xs = 17,
    iq3_xxs = 18,
    iq1_s = 19,
    iq4_nl = 20,
    iq3_s = 21,
    iq2_s = 22,
    iq4_xs = 23,
    i8 = 24,
    i16 = 25,
    i32 = 26,
    i64 = 27,
    f64 = 28,
    iq1_m = 29,
    bf16 = 30,
    tq1_0 = 34,
    tq2_0 = 35,
    // troupe's own 4-bit group formats with zero points (GPTQ/AWQ checkpoints), numbered clear of ggml's.
    w4_g64 = 1064,
    w4_g128 = 1128,
};

struct ggml_type_traits {
    std::string_view name;  // as llama.cpp prints it: "F32", "Q4_K", ...
    int64_t block_size;     // elements per block
    size_t type_size;       // bytes per block
    bool computable;        // troupe can compute with it (builtin kernels, or a quant plugin: Q4_1, W4_G*)
};

// Traits of a known type; nullopt for a number that is no ggml type.
constexpr std::optional<ggml_type_traits> type_traits(uint32_t t) {
    // clang-format off
    switch (t) {
        case 0: return ggml_type_traits{"F32", 1, 4, true};
        case 1: return ggml_type_traits{"F16", 1, 2, true};
        case 2: return ggml_type_traits{"Q4_0", 32, 18, true};
        case 3: return ggml_type_traits{"Q4_1", 32, 20, true};
        case 6: return ggml_type_traits{"Q5_0", 32, 22, true};
        case 7: return ggml_type_traits{"Q5_1", 32, 24, false};
        case 8: return ggml_type_traits{"Q8_0", 32, 34, true};
        case 9: return ggml_type_traits{"Q8_1", 32, 36, false};
        case 10: return ggml_type_traits{"Q2_K", 256, 84, true};
        case 11: return ggml_type_traits{"Q3_K", 256, 110, true};
        case 12: return ggml_type_traits{"Q4_K", 256, 144, true};
        case 13: return ggml_type_traits{"Q5_K", 256, 176, true};
        case 14: return ggml_type_traits{"Q6_K", 256, 210, true};
        case 15: return ggml_type_traits{"Q8_K", 256, 292, false};
        case 16: return ggml_type_traits{"IQ2_XXS", 256, 66, false};
        case 17: return ggml_type_traits{"IQ2_XS", 256, 74, false};
        case 18: return ggml_type_traits{"IQ3_XXS", 256, 98, false};
        case 19: return ggml_type_traits{"IQ1_S", 256, 50, false};
        case 20: return ggml_type_traits{"IQ4_NL", 32, 18, false};
        case 21: return ggml_type_traits{"IQ3_S", 256, 110, false};
        case 22: return ggml_type_traits{"IQ2_S", 256, 82, false};
        case 23: return ggml_type_traits{"IQ4_XS", 256, 136, false};
        case 24: return ggml_type_traits{"I8", 1, 1, false};
        case 25: return ggml_type_traits{"I16", 1, 2, false};
        case 26: return ggml_type_traits{"I32", 1, 4, false};
        case 27: return ggml_type_traits{"I64", 1, 8, false};
        case 28: return ggml_type_traits{"F64", 1, 8, false};
        case 29: return ggml_type_traits{"IQ1_M", 256, 56, false};
        case 30: return ggml_type_traits{"BF16", 1, 2, true};
        case 34: return ggml_type_traits{"TQ1_0", 256, 54, false};
        case 35: return ggml_type_traits{"TQ2_0", 256, 66, false};
        case 1064: return ggml_type_traits{"W4_G64", 64, 36, true};
        case 1128: return ggml_type_traits{"W4_G128", 128, 68, true};
        default: return std::nullopt;
    }
    // clang-format on
}

constexpr ggml_type_traits traits(ggml_type t) {
    return *type_traits(static_cast<uint32_t>(t));
}

// The names of the types troupe computes with, comma-separated in id order (for errors).
inline std::string computable_type_names() {
    std::string names;
    for (uint32_t t = 0; t <= static_cast<uint32_t>(ggml_type::w4_g128); ++t) {
        if (const auto tr = type_traits(t); tr && tr->computable)
            names += (names.empty() ? "" : ", ") + std::string(tr->name);
    }
    return names;
}

// The k-quant weight formats troupe computes with (super-blocks of 256: Q2_K .. Q6_K; not Q8_K, an activation format).
constexpr bool is_k_quant(ggml_type t) {
    return t == ggml_type::q2_k || t == ggml_type::q3_k || t == ggml_type::q4_k || t == ggml_type::q5_k ||
           t == ggml_type::q6_k;
}

// Bytes of one row of n elements (n must be a multiple of the block size).
constexpr size_t row_bytes(ggml_type t, int64_t n) {
    const auto tr = traits(t);
    return static_cast<size_t>(n / tr.block_size) * tr.type_size;
}

constexpr int qk4_0 = 32;
constexpr int qk4_1 = 32;
constexpr int qk5_0 = 32;
constexpr int qk8_0 = 32;
constexpr int qk_k = 256;
constexpr int k_scale_size = 12;

// x = d * q, q in [-128, 127]
struct block_q8_0 {
    uint16_t d;  // fp16 scale
    int8_t qs[qk8_0];
};

// x = d * (q - 8); element j < 16 is the low nibble of qs[j], element j + 16 the high nibble.
struct block_q4_0 {
    uint16_t d;  // fp16 scale
    uint8_t qs[qk4_0 / 2];
};

// x = d * (q - 16), q 5 bits: element j < 16 is the low nibble of qs[j], element j + 16 the high nibble; bit j of
// qh (little-endian uint32) is bit 4 of element j. llama.cpp writes it for rows that are not whole blocks of 256 in
// a Q4_K file (Qwen2's 896-wide inputs in Q4_K_M).
struct block_q5_0 {
    uint16_t d;  // fp16 scale
    uint8_t qh[4];
    uint8_t qs[qk5_0 / 2];
};

// The 4-bit group formats with a scale and a min (zero point): x = d * q + m, q in 0..15, over groups of G.
// Element j < G / 2 is the low nibble of qs[j], element j + G / 2 the high nibble. G = 32 is GGUF's Q4_1;
// G = 64 and 128 are troupe's W4_G64 and W4_G128 (GPTQ/AWQ's w = s (q - z) stored as d = s, m = -s z).
template <int G>
struct block_w4 {
    uint16_t d;  // fp16 scale
    uint16_t m;  // fp16 min
    uint8_t qs[G / 2];
};
using block_q4_1 = block_w4<32>;
using block_w4_g64 = block_w4<64>;
using block_w4_g128 = block_w4<128>;

// 8 sub-blocks of 32: x = d * sc[j] * q - dmin * m[j], 6-bit sc/m packed in scales[12].
struct block_q4_k {
    uint16_t d;     // fp16 super-block scale for the sub-block scales
    uint16_t dmin;  // fp16 super-block scale for the sub-block mins
    uint8_t scales[k_scale_size];
    uint8_t qs[qk_k / 2];
};

// 16 sub-blocks of 16: x = d * sc[j] * q - dmin * m[j], q in 0..3 at bits 2 ((e % 128) / 32) of qs[32 (e / 128) + e %
// 32] (Q3_K's low bits); scales[j] = sc[j] | m[j] << 4.
struct block_q2_k {
    uint8_t scales[qk_k / 16];
    uint8_t qs[qk_k / 4];
    uint16_t d;     // fp16 super-block scale for the sub-block scales
    uint16_t dmin;  // fp16 super-block scale for the sub-block mins
};

// 16 sub-blocks of 16: x = d * (sc[j] - 32) * q, q in -4..3 = its low 2 bits minus 4 where its high bit is clear.
// Element e: low bits (qs[32 (e / 128) + e % 32] >> 2 ((e % 128) / 32)) & 3, high bit bit e / 32 of hmask[e % 32];
// the 6-bit sc[j] packed in scales[12] (low 4 bits: scales[j % 8], nibble j / 8; high 2: scales[8 + j % 4] at 2 (j /
// 4)).
struct block_q3_k {
    uint8_t hmask[qk_k / 8];
    uint8_t qs[qk_k / 4];
    uint8_t scales[12];
    uint16_t d;  // fp16 super-block scale
};

// Q4_K with a fifth bit: x = d * sc[j] * q - dmin * m[j], q in 0..31; scales as Q4_K's; qs as Q4_K's (the low 4 bits);
// bit 4 of element 64c + l (l < 32) is bit 2c of qh[l], of element 64c + 32 + l bit 2c + 1 of qh[l].
struct block_q5_k {
    uint16_t d;     // fp16 super-block scale for the sub-block scales
    uint16_t dmin;  // fp16 super-block scale for the sub-block mins
    uint8_t scales[k_scale_size];
    uint8_t qh[qk_k / 8];
    uint8_t qs[qk_k / 2];
};

// 16 sub-blocks of 16: x = d * scales[j] * (q - 32), q 6 bits = 4 low bits in ql, 2 high bits in qh.
struct block_q6_k {
    uint8_t ql[qk_k / 2];
    uint8_t qh[qk_k / 4];
    int8_t scales[qk_k / 16];
    uint16_t d;  // fp16
};

// Activation blocks for k-quant dot products: x = d * q; bsums[j] = sum of qs[16 j .. 16 j + 15].
struct block_q8_k {
    float d;
    int8_t qs[qk_k];
    int16_t bsums[qk_k / 16];
};

static_assert(sizeof(block_q8_0) == 34);
static_assert(sizeof(block_q4_0) == 18);
static_assert(sizeof(block_q4_1) == 20);
static_assert(sizeof(block_q5_0) == 22);
static_assert(sizeof(block_w4_g64) == 36);
static_assert(sizeof(block_w4_g128) == 68);
static_assert(sizeof(block_q4_k) == 144);
static_assert(sizeof(block_q2_k) == 84);
static_assert(sizeof(block_q3_k) == 110);
static_assert(sizeof(block_q5_k) == 176);
static_assert(sizeof(block_q6_k) == 210);
static_assert(sizeof(block_q8_k) == 292);

}  // namespace troupe
