// Internal: the panel kernels of q8_panels.h (q8_panels_avx512.cpp, q8_panels_float_act_avx512.cpp,
// q8_panels_avx2.cpp) and the matmul driver that cpu::matmul calls for weights with panels (q8_panels.cpp).
#pragma once

#include <cstddef>
#include <cstdint>

#include "kernels/cpu/matmul.h"
#include "kernels/cpu/q8_panels.h"
#include "kernels/cpu/thread_pool.h"
#include "kernels/ggml_types.h"
#include "kernels/ref/ops.h"

namespace troupe::cpu::detail {

constexpr int k_panel_rows = static_cast<int>(q8_panel_rows);  // one zmm of int32 sums

// One token's Q8_0 activation block as the panel kernels read it: the codes, the scale as float and the
// offset correction -offset * sum(qs) (offset 128 against Q8_0 panels, 8 against Q4_0).
struct q8_act_block {
    int8_t qs[qk8_0];
    float d;
    int32_t neg_corr;
};
static_assert(sizeof(q8_act_block) == 40);

// Sizes of the panel form (q8_panels.h has the picture). Computed in q8_panels.cpp (built without ISA flags).
struct q8_panel_geometry {
    int quads;           // zmm of weight bytes per block: 8 (Q8_0) or 4 (Q4_0)
    size_t group_bytes;  // a full group: 64 B of scales + 2 blocks of quads
    size_t panel_bytes;  // multiple of 64
    int64_t n_blocks;    // blocks per row
    int64_t n_panels;
};
q8_panel_geometry q8_panel_geometry_of(ggml_type type, int64_t n_in, int64_t n_out);

// Whether cpu::matmul takes the panel path for w now (panels set, the active level has the kernels).
bool q8_panels_active(const matmul_weight& w, activation_recipe recipe);

// cpu::matmul's panel path: activations prepared once (quantized, or packed as floats), panels split over
// parallel_for.
// streamer (may be empty): decode-sized steps split the panels with parallel_ranges (streamed_rows.h).
struct row_streamer;
void matmul_q8_panels(const matmul_weight& w, const float* x, float* y, int64_t n_tokens, activation_recipe recipe,
                      const parallel_for_fn& parallel_for, const row_streamer& streamer);

// One token's activations x[n_in] -> blocks out[b * stride] for b < n_in / 32 (the driver lays them out
// [n_blocks][n_tokens], so the tokens of a tile are adjacent), quantized by the active level's quantizer (bit-exact
// with ref::quantize_activations_q8_0); `type` is the weight type (the correction). q8_panels.cpp.
void q8_panels_prepare(const float* x, int64_t n_in, ggml_type type, q8_act_block* out, int64_t stride);

// AVX-512 VNNI kernels (q8_panels_avx512.cpp; they assert where the build has no AVX-512).
//
// y[t * w.n_out + r] for t < n_tokens and the rows of panels [p0, p1); x: [n_blocks][n_tokens] blocks.
void q8_panels_product_avx512(const matmul_weight& w, const q8_act_block* x, int64_t n_tokens, float* y, int64_t ldy,
                              int64_t p0, int64_t p1);

// The float-activation recipe (q8_panels_float_act_avx512.cpp): y as above; x: [n_blocks][n_tokens][32] floats.
void q8_panels_float_act_avx512(const matmul_weight& w, const float* x, int64_t n_tokens, float* y, int64_t ldy,
                                int64_t p0, int64_t p1);

// AVX2 kernel (q8_panels_avx2.cpp), quantized activations only; the contract of q8_panels_product_avx512. Q8_0 does
// not read neg_corr there (its products are signed).
void q8_panels_product_avx2(const matmul_weight& w, const q8_act_block* x, int64_t n_tokens, float* y, int64_t ldy,
                            int64_t p0, int64_t p1);

}  // namespace troupe::cpu::detail
