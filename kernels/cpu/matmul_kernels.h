// Internal: the table of matmul kernels one dispatch level provides (matmul_scalar.cpp,
// matmul_avx2.cpp, matmul_avx512.cpp), and the panel-packing GEMM driver they share.
#pragma once

#include <cstddef>
#include <cstdint>

#include "kernels/ggml_types.h"
#include "kernels/ref/ops.h"

namespace troupe::cpu::detail {

// Activations of one call, prepared for the weight type:
//   F32: the input rows; F16 / BF16: floats rounded to F16 / BF16;
//   Q8_0 / Q4_0: block_q8_0 rows; Q4_K / Q6_K: block_q8_k rows (dot-product path);
//   GEMM path: always floats (the values of the quantized or rounded activations).
struct prepared_x {
    const void* data;  // [n_tokens] rows
    size_t stride;     // bytes between token rows
};

struct matmul_kernels {
    // y[t * ldy + r] for t < n_tokens, r0 <= r < r1: dot-product formulation.
    void (*rows)(const matmul_weight& w, prepared_x x, float* y, int64_t ldy, int64_t n_tokens, int64_t r0, int64_t r1);
    // Same through packed weight panels, with float activations packed by gemm_pack_token; null where the
    // level has none.
    void (*gemm)(const matmul_weight& w, const float* xp, float* y, int64_t ldy, int64_t n_tokens, int64_t r0,
                 int64_t r1);
    // Use gemm from this many tokens on, for float weights / Q8_0-Q4_0: below, the dot kernels stream each row
    // once for all tokens and (for the quantized types) skip the dequantization to panels. Q4_K / Q6_K in the
    // quantized recipe never take this float GEMM (it is not ggml's arithmetic): gemm_kquant below, or the dot kernels.
    int64_t gemm_min_tokens_float;
    int64_t gemm_min_tokens_q8;
    int64_t gemm_rows;  // row granularity of gemm work items (of gemm and gemm_unordered)
    int gemm_mr;        // tokens per micro-tile
    int gemm_kc;        // k block
    // The level's packed float GEMM even where `gemm` is null because its sums depend on the tile shapes (a token's
    // outputs on the tokens beside it): for matmul_for_training only, which does not need batch invariance. Same
    // signature and packing as gemm; null where the level has none.
    void (*gemm_unordered)(const matmul_weight& w, const float* xp, float* y, int64_t ldy, int64_t n_tokens, int64_t r0,
                           int64_t r1);
    // Integer GEMM for Q8_0 / Q4_0 weights against Q8_0 activation rows (prepared as for `rows`), used from
    // gemm_min_tokens_q8 on instead of `gemm`; null where the level has none. Row granularity gemm_q8_rows.
    // The float-activation recipe for quantized weights (Q8_0, Q4_0, Q4_K, Q6_K): y[t * ldy + r] for
    // t < n_tokens, r0 <= r < r1, x: [n_tokens, n_in] floats as given; each weight block dequantized exactly
    // and multiplied with x in float. Float weights take `rows` with the unrounded activations instead.
    void (*rows_float_act)(const matmul_weight& w, const float* x, float* y, int64_t ldy, int64_t n_tokens, int64_t r0,
                           int64_t r1);
    // GEMM from this many tokens on for quantized weights with float activations (measured on Zen 5 at the AVX-512
    // level, Q8_0/Q4_K/Q6_K [2048, 768]: rows 193-248 us at 5 tokens vs the GEMM's ~200, 262-296 at 7 vs 241-259
    // at 8; the AVX2 level takes its float-weight crossover).
    int64_t gemm_min_tokens_float_act;
    void (*gemm_q8)(const matmul_weight& w, prepared_x x, float* y, int64_t ldy, int64_t n_tokens, int64_t r0,
                    int64_t r1);
    int64_t gemm_q8_rows;
    void (*quantize_q8_0)(const float* x, block_q8_0* y, int64_t n);
    void (*quantize_q8_k)(const float* x, block_q8_k* y, int64_t n);
    void (*round_f16)(const float* x, float* y, int64_t n);   // y = float(half(x))
    void (*round_bf16)(const float* x, float* y, int64_t n);  // y = float(bfloat16(x))
    // y = the values of x quantized to Q8_0 / Q8_K (d * q), for the GEMM path.
    void (*q8_0_values)(const float* x, float* y, int64_t n);
    void (*q8_k_values)(const float* x, float* y, int64_t n);
    // Integer GEMM for Q4_K / Q6_K weights against Q8_K activation rows (prepared as for `rows`), equal to `rows` bit
    // for bit (ggml's recipe, kernels/ref/kquant_dot.h), used from gemm_min_tokens_q4_k / _q6_k on (INT64_MAX: never,
    // where the level's dot kernels are as fast); null where the level has none. Row granularity gemm_kquant_rows.
    void (*gemm_kquant)(const matmul_weight& w, prepared_x x, float* y, int64_t ldy, int64_t n_tokens, int64_t r0,
                        int64_t r1);
    int64_t gemm_min_tokens_q4_k;
    int64_t gemm_min_tokens_q6_k;
    int64_t gemm_kquant_rows;
};

const matmul_kernels& scalar_kernels();
const matmul_kernels& avx2_kernels();
const matmul_kernels& avx512_kernels();
// The table of the active dispatch level (cpu::active_level()); matmul.cpp.
const matmul_kernels& active_kernels();

// Scalar building blocks other levels fall back to.
void rows_scalar(const matmul_weight& w, prepared_x x, float* y, int64_t ldy, int64_t n_tokens, int64_t r0, int64_t r1);
void rows_float_act_scalar(const matmul_weight& w, const float* x, float* y, int64_t ldy, int64_t n_tokens, int64_t r0,
                           int64_t r1);
void gemm_kquant_avx2(const matmul_weight& w, prepared_x x, float* y, int64_t ldy, int64_t n_tokens, int64_t r0,
                      int64_t r1);
void rows_float_act_avx2(const matmul_weight& w, const float* x, float* y, int64_t ldy, int64_t n_tokens, int64_t r0,
                         int64_t r1);
void rows_float_act_avx512(const matmul_weight& w, const float* x, float* y, int64_t ldy, int64_t n_tokens, int64_t r0,
                           int64_t r1);
void round_f16_scalar(const float* x, float* y, int64_t n);
void round_bf16_scalar(const float* x, float* y, int64_t n);
void q8_0_values_scalar(const float* x, float* y, int64_t n);
void q8_k_values_scalar(const float* x, float* y, int64_t n);

// Packed GEMM activations: for each k block of kc = min(gemm_kc, n - k0) elements, for each tile of gemm_mr
// tokens, [kc][gemm_mr] floats:
//
//   xp[n_tiles * mr * k0 + tile * kc * mr + (k - k0) * mr + t % mr] = x[t, k],  tile = t / mr
inline size_t gemm_packed_floats(int64_t n_tokens, int64_t n, int mr) {
    return static_cast<size_t>((n_tokens + mr - 1) / mr * mr * n);
}

inline void gemm_pack_token(const float* row, int64_t t, int64_t n_tokens, int64_t n, int mr, int kc_max, float* xp) {
    const int64_t n_tiles = (n_tokens + mr - 1) / mr;
    const int64_t tile = t / mr, m = t % mr;
    for (int64_t k0 = 0; k0 < n; k0 += kc_max) {
        const int64_t kc = n - k0 < kc_max ? n - k0 : kc_max;
        float* dst = xp + n_tiles * mr * k0 + tile * kc * mr + m;
        for (int64_t k = 0; k < kc; ++k) dst[k * mr] = row[k0 + k];
    }
}

// Dequantizes elements [k0, k0 + n) of weight row r into out (k0, n multiples of the block size).
void dequantize_range(const matmul_weight& w, int64_t r, int64_t k0, int64_t n, float* out);

}  // namespace troupe::cpu::detail
