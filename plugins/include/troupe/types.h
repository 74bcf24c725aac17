/*
 * troupe plugin SDK: the tensor element types a plugin may meet and their block layouts.
 *
 * Type ids follow GGUF's (ggml's) numbering, so a plugin can compare a file's tensor type with them directly;
 * troupe's own formats (the W4A16 group formats) use ids far above ggml's. A quantized row of n elements is
 * n / block_size blocks of type_size bytes; the structs below are byte-exact (GGUF fixes them).
 *
 * Half floats travel as their IEEE binary16 bits (troupe_f16), bfloat16 as its bits (troupe_bf16).
 */
#ifndef TROUPE_TYPES_H
#define TROUPE_TYPES_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef uint16_t troupe_f16;  /* IEEE 754 binary16 bits */
typedef uint16_t troupe_bf16; /* the upper 16 bits of a binary32 */

typedef enum troupe_type {
    TROUPE_TYPE_F32 = 0,
    TROUPE_TYPE_F16 = 1,
    TROUPE_TYPE_Q4_0 = 2,
    TROUPE_TYPE_Q4_1 = 3,
    TROUPE_TYPE_Q5_0 = 6,
    TROUPE_TYPE_Q5_1 = 7,
    TROUPE_TYPE_Q8_0 = 8,
    TROUPE_TYPE_Q8_1 = 9,
    TROUPE_TYPE_Q2_K = 10,
    TROUPE_TYPE_Q3_K = 11,
    TROUPE_TYPE_Q4_K = 12,
    TROUPE_TYPE_Q5_K = 13,
    TROUPE_TYPE_Q6_K = 14,
    TROUPE_TYPE_Q8_K = 15,
    TROUPE_TYPE_BF16 = 30,
    /* troupe's own: 4-bit groups of 64 / 128 weights with a scale and a minimum (zero point), the format of
     * GPTQ / AWQ checkpoints; Q4_1 is the same format with groups of 32. Run by quant/w4a16. */
    TROUPE_TYPE_W4_G64 = 1064,
    TROUPE_TYPE_W4_G128 = 1128
} troupe_type;

/* ---- block layouts ------------------------------------------------------------------------------
 * Nibble packing of the 4-bit formats (Q4_0, Q4_1, W4_G*) with a group of G weights: weight j < G/2 is the low
 * nibble of qs[j], weight j + G/2 the high nibble of qs[j]. */

#define TROUPE_QK4_0 32
typedef struct troupe_block_q4_0 {
    troupe_f16 d; /* weight = d * (q - 8) */
    uint8_t qs[16];
} troupe_block_q4_0;

#define TROUPE_QK4_1 32
typedef struct troupe_block_q4_1 {
    troupe_f16 d; /* weight = d * q + m, q in 0..15 */
    troupe_f16 m;
    uint8_t qs[16];
} troupe_block_q4_1;

#define TROUPE_QK8_0 32
typedef struct troupe_block_q8_0 {
    troupe_f16 d; /* weight = d * q */
    int8_t qs[32];
} troupe_block_q8_0;

#define TROUPE_QK_K 256
#define TROUPE_K_SCALE_SIZE 12
/* 8 sub-blocks of 32: weight = d * sc[i] * q - dmin * mn[i], with 6-bit sc/mn packed in `scales` as llama.cpp's
 * get_scale_min_k4; qs holds 4-bit q, 64 weights per 32 bytes (the low nibbles the first 32 of them). */
typedef struct troupe_block_q4_k {
    troupe_f16 d;
    troupe_f16 dmin;
    uint8_t scales[TROUPE_K_SCALE_SIZE];
    uint8_t qs[TROUPE_QK_K / 2];
} troupe_block_q4_k;

/* 16 sub-blocks of 16: weight = d * scales[i] * (q - 32), q 6 bits: 4 low bits in ql, 2 high in qh. */
typedef struct troupe_block_q6_k {
    uint8_t ql[TROUPE_QK_K / 2];
    uint8_t qh[TROUPE_QK_K / 4];
    int8_t scales[TROUPE_QK_K / 16];
    troupe_f16 d;
} troupe_block_q6_k;

/* The activations' block for k-quant dot products: value = d * q; bsums are the sums of 16 q each. */
typedef struct troupe_block_q8_k {
    float d;
    int8_t qs[TROUPE_QK_K];
    int16_t bsums[TROUPE_QK_K / 16];
} troupe_block_q8_k;

typedef struct troupe_block_w4_g64 {
    troupe_f16 d; /* weight = d * q + m, q in 0..15 */
    troupe_f16 m;
    uint8_t qs[32];
} troupe_block_w4_g64;

typedef struct troupe_block_w4_g128 {
    troupe_f16 d; /* weight = d * q + m, q in 0..15 */
    troupe_f16 m;
    uint8_t qs[64];
} troupe_block_w4_g128;

/* ---- layout queries ---------------------------------------------------------------------------- */

typedef struct troupe_type_layout {
    const char* name;   /* as llama.cpp prints it: "Q4_K"; troupe's own: "W4_G128" */
    int64_t block_size; /* weights per block */
    size_t type_size;   /* bytes per block */
} troupe_type_layout;

/* The layout of `type`; name null (and sizes 0) for an id this header does not describe. */
static inline troupe_type_layout troupe_type_layout_of(uint32_t type) {
    troupe_type_layout l = {0, 0, 0};
    switch (type) {
        case TROUPE_TYPE_F32:
            l.name = "F32", l.block_size = 1, l.type_size = 4;
            break;
        case TROUPE_TYPE_F16:
            l.name = "F16", l.block_size = 1, l.type_size = 2;
            break;
        case TROUPE_TYPE_BF16:
            l.name = "BF16", l.block_size = 1, l.type_size = 2;
            break;
        case TROUPE_TYPE_Q4_0:
            l.name = "Q4_0", l.block_size = 32, l.type_size = sizeof(troupe_block_q4_0);
            break;
        case TROUPE_TYPE_Q4_1:
            l.name = "Q4_1", l.block_size = 32, l.type_size = sizeof(troupe_block_q4_1);
            break;
        case TROUPE_TYPE_Q5_0:
            l.name = "Q5_0", l.block_size = 32, l.type_size = 22;
            break;
        case TROUPE_TYPE_Q5_1:
            l.name = "Q5_1", l.block_size = 32, l.type_size = 24;
            break;
        case TROUPE_TYPE_Q8_0:
            l.name = "Q8_0", l.block_size = 32, l.type_size = sizeof(troupe_block_q8_0);
            break;
        case TROUPE_TYPE_Q8_1:
            l.name = "Q8_1", l.block_size = 32, l.type_size = 36;
            break;
        case TROUPE_TYPE_Q2_K:
            l.name = "Q2_K", l.block_size = 256, l.type_size = 84;
            break;
        case TROUPE_TYPE_Q3_K:
            l.name = "Q3_K", l.block_size = 256, l.type_size = 110;
            break;
        case TROUPE_TYPE_Q4_K:
            l.name = "Q4_K", l.block_size = 256, l.type_size = sizeof(troupe_block_q4_k);
            break;
        case TROUPE_TYPE_Q5_K:
            l.name = "Q5_K", l.block_size = 256, l.type_size = 176;
            break;
        case TROUPE_TYPE_Q6_K:
            l.name = "Q6_K", l.block_size = 256, l.type_size = sizeof(troupe_block_q6_k);
            break;
        case TROUPE_TYPE_Q8_K:
            l.name = "Q8_K", l.block_size = 256, l.type_size = sizeof(troupe_block_q8_k);
            break;
        case TROUPE_TYPE_W4_G64:
            l.name = "W4_G64", l.block_size = 64, l.type_size = sizeof(troupe_block_w4_g64);
            break;
        case TROUPE_TYPE_W4_G128:
            l.name = "W4_G128", l.block_size = 128, l.type_size = sizeof(troupe_block_w4_g128);
            break;
        default:
            break;
    }
    return l;
}

/* Bytes of a row of n weights of `type`; 0 when n is not a whole number of blocks or the type is unknown. */
static inline size_t troupe_row_bytes(uint32_t type, int64_t n) {
    troupe_type_layout l = troupe_type_layout_of(type);
    if (l.block_size == 0 || n < 0 || n % l.block_size != 0) return 0;
    return (size_t)(n / l.block_size) * l.type_size;
}

#ifdef __cplusplus
}
#endif

#endif /* TROUPE_TYPES_H */
