// The element-wise and row operations of the Llama graph on the CPU, over the kernels library
// (kernels/cpu, picked at run time by CPU features). Row-major buffers of n rows.
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/model/llama_hparams.h"
#include "core/model/ops.h"

namespace troupe {

// out[i, :] = dequantized row ids[i] of emb (any computable type).   out: [n, emb.n_in]
void embed_rows(const weight_view& emb, const int32_t* ids, size_t n, float* out);
// y[i, :] = x[i, :] / rms(x[i, :]) * w.   x, y: [n, dim]
void rmsnorm_rows(const float* x, const float* w, float* y, size_t n, int32_t dim, float eps);
// The RoPE rotations of n tokens at positions, as the hyper-parameters say: cs [n, rope_dims / 2, (cos, sin)].
// Computed once per step, for every layer's q and k.
void rope_angles_rows(const int32_t* positions, size_t n, const llama_hparams& hp, float* cs);
// RoPE in place on x: [n, n_heads, head_dim] with the rotations rope_angles_rows computed.
void rope_rows(float* x, const float* cs, size_t n, int32_t n_heads, const llama_hparams& hp);
// The same two steps with llama.cpp's arithmetic (cpu::rope_ggml_angles, cpu::rope_ggml_apply), for the recipe that
// follows it: cs [n, rope_dims / 2, (cos, sin)] once per step, then every layer's q and k.
void rope_angles_rows_ggml(const int32_t* positions, size_t n, const llama_hparams& hp, float* cs);
void rope_rows_ggml(float* x, const float* cs, size_t n, int32_t n_heads, const llama_hparams& hp);
// gate[i] = silu(gate[i]) * up[i]
void swiglu_rows(float* gate, const float* up, size_t n);
// gate[i] = gelu_tanh(half(gate[i])) * up[i]: GELU (tanh approximation) on the gate rounded to F16, as llama.cpp's
// CPU GELU (a table over halves) and the golden reference evaluate it, in both activation recipes.
void geglu_rows(float* gate, const float* up, size_t n);
// The gated activation of a dense FFN: swiglu_rows or geglu_rows.
void gated_rows(ffn_activation act, float* gate, const float* up, size_t n);
// x[t, i] += b[i]   x: [n, width], b: [width]
void add_bias_rows(float* x, const float* b, size_t n, size_t width);
// x[i] *= s
void scale_rows(float* x, float s, size_t n);
// x[i] = cap * tanh(x[i] / cap)
void softcap_rows(float* x, float cap, size_t n);
// x[i] += y[i]
void add_rows(float* x, const float* y, size_t n);

}  // namespace troupe
