// Matrix products with weights as stored in GGUF files: y[n_tokens, n_out] = x[n_tokens, n_in] * W^T.
//
// The activation recipe is llama.cpp's CPU path (kernels/ref/ops.h has the table; ref::matmul is the
// scalar twin). Two shapes of kernel, chosen by n_tokens (gemm_min_tokens):
//   - few tokens (decode): each weight row is streamed once and dotted with every token of the step
//     (integer dot products for Q8_0/Q4_0 against Q8_0 activations, Q4_K/Q6_K against Q8_K, VNNI on
//     AVX-512);
//   - many tokens (prefill): a register-blocked GEMM. Q8_0 / Q4_0 on AVX-512: an integer GEMM (VNNI) on
//     panels of 16 rows' bytes against the Q8_0 activations. Float types: weights unpacked into float
//     panels of 32 rows, activations rounded as the recipe says. Q4_K / Q6_K keep the dot kernels (ggml's
//     k-quant arithmetic bit for bit, kernels/ref/kquant_dot.h), blocks of rows reused from cache by every
//     tile of tokens.
// The float-activation recipe (activation_recipe::float32, ref::matmul_float_act the scalar twin) leaves the
// activations in float32 and dequantizes the weights exactly: decode dequantizes each weight block in
// registers and multiplies it with the float activations by FMA (matmul_float_act_avx512.cpp / _avx2.cpp);
// prefill is the float GEMM on dequantized panels with the activations packed unchanged.
// Work is split over output rows; each output is computed by one thread with a fixed order of operations,
// so the result does not depend on the number of threads.
#pragma once

#include <cstdint>

#include "kernels/cpu/thread_pool.h"
#include "kernels/ref/ops.h"

namespace troupe::cpu {

// What the activations become before they meet the weights (F32 weights: the same in both).
enum class activation_recipe {
    quantized,  // llama.cpp's CPU path: Q8_0 / Q8_K blocks, F16 / BF16 rounding (ref::matmul)
    float32,    // float32 activations, weights dequantized exactly (ref::matmul_float_act)
};

// y: [n_tokens, w.n_out]; x: [n_tokens, w.n_in]; y must not overlap x. matmul_supports(w.type) must hold and
// w.n_in must be a multiple of the type's block size (asserted). Reentrant: scratch is per thread.
void matmul(const matmul_weight& w, const float* x, float* y, int64_t n_tokens, thread_pool& pool,
            activation_recipe recipe = activation_recipe::quantized);

// y = x · wᵀ for core/train (F32 weights, float32 arithmetic): the level's packed float GEMM where it has one (AVX-512:
// micro-tiles of 14 tokens x 32 rows, k in blocks of 256; 2-2.5x the tiles of matmul at the trainer's sizes), else
// matmul's float path. Unlike matmul, a token's sums depend on the tokens beside it (how they fall into tiles),
// which training does not mind and inference cannot accept (a verified draft must equal a decode bit for bit).
void matmul_for_training(const matmul_weight& w, const float* x, float* y, int64_t n_tokens, thread_pool& pool);

// The same, splitting the work over a caller's parallel_for (the host's pool, for plugins).
void matmul(const matmul_weight& w, const float* x, float* y, int64_t n_tokens, const parallel_for_fn& parallel_for,
            activation_recipe recipe = activation_recipe::quantized);

// The same with the caller's parallel_ranges too (a plugin's host pool): decode-sized steps give each thread one
// contiguous share of the rows (panels), as matmul on a pool does.
void matmul(const matmul_weight& w, const float* x, float* y, int64_t n_tokens, const parallel_for_fn& parallel_for,
            const parallel_ranges_fn& parallel_ranges, activation_recipe recipe);

// Below this many tokens the dot-product kernels run, from here on the GEMM (at the active level, for
// weights of this type). Measured crossovers on Zen 5: float weights 6, Q8_0/Q4_0 24; with float activations
// (recipe float32) quantized weights 5. Q4_K / Q6_K in the quantized recipe: the level's integer GEMM from its
// gemm_min_tokens_q4_k / _q6_k (AVX-512: 5), never (INT64_MAX) where it has none.
int64_t gemm_min_tokens(ggml_type type, activation_recipe recipe = activation_recipe::quantized);

}  // namespace troupe::cpu
