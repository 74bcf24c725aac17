// Element-wise and per-row ops of the model (the optimized twins of kernels/ref/ops.h, same signatures
// and semantics). They dispatch on the active level: AVX-512 has its own rmsnorm, softmax, swiglu, add
// and argmax (with a polynomial exp); rope caches each token's rotation angles across heads at every
// level; the other levels and ops run portable C++.
#pragma once

#include <cstdint>

#include "kernels/ref/ops.h"

namespace troupe::cpu {

void rmsnorm(const float* x, const float* weight, float* y, int64_t n_rows, int64_t n, float eps);
void rope(float* x, int64_t n_tokens, int64_t n_heads, const int32_t* positions, const rope_params& p);
// rope in two steps, for a model that rotates q and k of every layer at the same positions: the rotations of the
// tokens (cs: [n_tokens][n_rot / 2][cos, sin], rope_angles), computed once per step, then applied (rope_apply).
// rope(x, ...) is both; the results are identical.
void rope_angles(const int32_t* positions, int64_t n_tokens, const rope_params& p, float* cs);
void rope_apply(float* x, int64_t n_tokens, int64_t n_heads, const float* cs, const rope_params& p);
// rope as llama.cpp's CPU backend computes it (ggml_compute_forward_rope_f32, its x86 build), for the recipe that
// follows llama.cpp's arithmetic: per token the angles p * b^(-2i/n_rot) by repeated float multiplication
// (theta = p; theta *= powf(base, -2.0f / n_rot) per pair; / freq_factors[i], * freq_scale), cosf / sinf of them,
// and the rotation with its compiler's contractions: x0' = fma(x0, cos, -(x1 * sin)), x1' = fma(x0, sin, x1 * cos).
// In two steps like rope_angles / rope_apply (cs: [n_tokens][n_rot / 2][cos, sin]), so a step computes its cosf /
// sinf once for every layer; rope_ggml is both, with the same results.
void rope_ggml(float* x, int64_t n_tokens, int64_t n_heads, const int32_t* positions, const rope_params& p);
void rope_ggml_angles(const int32_t* positions, int64_t n_tokens, const rope_params& p, float* cs);
void rope_ggml_apply(float* x, int64_t n_tokens, int64_t n_heads, const float* cs, const rope_params& p);
void softmax(float* x, int64_t n_rows, int64_t n);
void swiglu(const float* gate, const float* up, float* out, int64_t n);
void add(const float* a, const float* b, float* out, int64_t n);
void embedding(const matmul_weight& table, const int32_t* ids, int64_t n_ids, float* out);
int64_t argmax(const float* x, int64_t n);

}  // namespace troupe::cpu
