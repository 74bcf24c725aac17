// Reference (scalar, obvious) model ops: the twins that kernels/cpu is tested against.
//
// Matrix products follow llama.cpp's CPU recipe, which the golden outputs use:
//
//   weight  | activations become            | dot product
//   --------+-------------------------------+----------------------------------------------------
//   F32     | F32                           | float
//   F16     | rounded to F16                | float products of the rounded values, float sums
//   BF16    | rounded to BF16               | same
//   Q8_0    | Q8_0 blocks (per 32, fp16 d)  | sum += float(int dot per block) * (d_w * d_x)
//   Q4_0    | Q8_0 blocks                   | sum = fma(float(int dot of (q - 8) per block), d_w * d_x, sum)
//   Q5_0    | Q8_0 blocks                   | 8 lanes of 4-element int dots of (q - 16), FMA per lane (dot_q5_0)
//   Q2_K    | Q8_K blocks (per 256, f32 d)  | codes 0..3, a scale and a min per 16, mins first (kquant_dot.h)
//   Q3_K    | Q8_K blocks                   | as Q6_K with values -4..3 (kquant_dot.h)
//   Q4_K    | Q8_K blocks                   | d_x * (d * sum_j sc_j * int dot_j - dmin * sum_j m_j * bsum_j)
//   Q5_K    | Q8_K blocks                   | as Q4_K with 5-bit codes, the mins in one scalar (kquant_dot.h)
//   Q6_K    | Q8_K blocks                   | d_x * d * sum_j scale_j * int dot_j of (q - 32)
//
// matmul_float_act is the other recipe: weights dequantized exactly, activations left in float (the twin of
// cpu::matmul with cpu::activation_recipe::float32; config kernels.activations: float).
#pragma once

#include <cstddef>
#include <cstdint>

#include "kernels/ggml_types.h"

namespace troupe {

// A weight matrix as stored: n_out rows of n_in elements of `type` (n_in a multiple of its block size).
// Rows [row_begin, the next piece's row_begin or n_out) of a weight stored on their own (see matmul_weight::pieces).
struct weight_piece {
    int64_t row_begin;
    const void* data;    // the piece's rows, row_stride apart (or null where only its panels are kept)
    const void* panels;  // the piece's q8 panels (its first row starts a panel), or null
};

// How q8 panels (cpu::pack_q8_panels) hold Q8_0 codes: plus 128, the unsigned operand of AVX-512 VNNI's products
// (a block's extra 128 * sum(x) removed once per block); or as they are, for AVX2, whose products take |w| and
// sign(x, w) (codes + 128 would cost an xor per 32 bytes there, ~14% of a decode step on a Zen 1). Q4_0 panels
// are the same in both.
enum class panel_codes : uint8_t { plus_128, as_is };

struct matmul_weight {
    ggml_type type;
    const void* data;  // [n_out] rows of row_stride bytes
    int64_t n_in;
    int64_t n_out;
    size_t row_stride;                          // bytes between rows, >= row_bytes(type, n_in)
    const void* panels = nullptr;               // the q8 panel form (cpu::pack_q8_panels) or null; data stays valid too
    panel_codes codes = panel_codes::plus_128;  // of the panels (and every piece's): what pack_q8_panels returned
    // Rows stored in several places instead of at data / panels (kernels.weights: copy lays each thread's share
    // of every weight out in that thread's own region; fused q/k/v read from the file): pieces[0 .. n_pieces),
    // ascending, pieces[0].row_begin == 0, each with panels exactly when `panels` would be set. Only cpu::matmul
    // reads pieces.
    const weight_piece* pieces = nullptr;
    int32_t n_pieces = 0;
};

// Whether matmul / embedding support this weight type.
bool matmul_supports(ggml_type type);

// RoPE settings (llama.cpp's rope with ext_factor 0 and attn_factor 1).
struct rope_params {
    int32_t head_dim;           // elements per head
    int32_t n_rot;              // leading dims rotated (even, <= head_dim); the rest pass through
    bool neox;                  // false: pairs (2i, 2i + 1) ("normal"); true: pairs (i, i + n_rot / 2)
    float freq_base;            // theta_i = pos * freq_scale * freq_base^(-2i / n_rot) / freq_factors[i]
    float freq_scale;           // linear position scaling (1 = none)
    const float* freq_factors;  // [n_rot / 2] or null
};

namespace ref {

// One row's product with Q8_0 activation blocks (nb blocks), as the table above: the scalar twins of the kernels.
float dot_q8_0(const block_q8_0* w, const block_q8_0* x, int64_t nb);
float dot_q4_0(const block_q4_0* w, const block_q8_0* x, int64_t nb);
// Q5_0 in ggml's x86 recipe (ggml_vec_dot_q5_0_q8_0's AVX2 form, which llama.cpp runs on AVX2 and AVX-512 CPUs alike):
// 8 int32 lanes per block, lane k the dot of elements 4k .. 4k + 3; acc[k] = fma(d_w * d_x, float(lane k), acc[k]);
// result = hsum_8(acc) as kernels/ref/kquant_dot.h.
float dot_q5_0(const block_q5_0* w, const block_q8_0* x, int64_t nb);

// y[n_tokens, n_out] = x[n_tokens, n_in] * W^T with the activation recipe of the table above.
void matmul(const matmul_weight& w, const float* x, float* y, int64_t n_tokens);

// The float-activation recipe: each weight row dequantized exactly, dotted with x in float.
void matmul_float_act(const matmul_weight& w, const float* x, float* y, int64_t n_tokens);

// y[r] = x[r] / sqrt(mean(x[r]^2) + eps) * weight, per row of n; weight may be null (no scaling).
// y may equal x.
void rmsnorm(const float* x, const float* weight, float* y, int64_t n_rows, int64_t n, float eps);

// In place on x[n_tokens, n_heads, head_dim]; positions[n_tokens].
void rope(float* x, int64_t n_tokens, int64_t n_heads, const int32_t* positions, const rope_params& p);

// In place, each row of n: x = exp(x - max) / sum.
void softmax(float* x, int64_t n_rows, int64_t n);

// out = silu(gate) * up = gate / (1 + exp(-gate)) * up; out may equal gate or up.
void swiglu(const float* gate, const float* up, float* out, int64_t n);

// out = a + b; out may equal a or b.
void add(const float* a, const float* b, float* out, int64_t n);

// out[i] = dequantized row ids[i] of table (out: [n_ids, table.n_in]).
void embedding(const matmul_weight& table, const int32_t* ids, int64_t n_ids, float* out);

// Index of the largest element (the first one on ties; NaNs are never the largest). n > 0.
int64_t argmax(const float* x, int64_t n);

}  // namespace ref
}  // namespace troupe
