// Q8_0 / Q4_0 weights pre-packed into row panels at load, for integer products (AVX-512 VNNI, or AVX2 on half a panel
// per ymm: q8_panels_avx2.cpp) against Q8_0 activations that are fast at every token count.
//
// Why: the row-streaming dot kernels (decode) reduce each output horizontally and pay a convert + multiply per
// row, token and pair of blocks, so a 16-token step costs ~5x a 1-token step; the integer GEMM (prefill)
// packs its panels with gathers on every call. Packing once at load gives one kernel for all token counts:
// 16 rows' int32 sums in one zmm, no horizontal reductions, and the weights stream contiguously.
//
// Layout. Panels of 16 rows (the last one padded with zero rows), one after another, all the same size. A
// panel holds its n_in / 32 blocks in groups of two, each group starting on a cache line:
//
//   panel p (rows 16p .. 16p + 15):
//   +--------------------+-----------------------------------+-----------------------------------+
//   | scales: 64 B       | quads of block 2g: Q x 64 B       | quads of block 2g + 1: Q x 64 B   |  group g
//   | fp16 [2][16 rows]  | zmm q = [16 rows][4 bytes]        |                                   |
//   +--------------------+-----------------------------------+-----------------------------------+
//   ... (an odd last block: a group with one block, the second half of its scales zero)
//
//   Q8_0 (Q = 8): quad q of a block, lane r = the 4 bytes qs[4q .. 4q + 3] of row r; packed at AVX-512 VNNI
//                 stored + 128 (unsigned) so vpdpbusd(u8 weights, s8 activations) applies, the extra
//                 128 * sum(x) of each block removed by starting the int32 sum at -128 * sum(x_block); packed at
//                 AVX2 stored as they are (panel_codes, ref/ops.h). Every kernel reads both forms.
//   Q4_0 (Q = 4): quad q, lane r = the 4 bytes qs[4q .. 4q + 3] of row r as stored: low nibbles are the
//                 elements 4q .. 4q + 3, high nibbles 16 + 4q .. 16 + 4q + 3 (unsigned 0..15, correction
//                 -8 * sum(x_block)).
//
// Bytes: 17 cache lines per 2 blocks of 16 rows for Q8_0 (34 B per row-block, as Q8_0 itself), 9 for Q4_0
// (18 B, as Q4_0): decode reads no more than from the original rows. The scales stay fp16 (converted in
// registers) for that reason.
//
// Products with panels, for every token count: quantized recipe bit-identical to ref::matmul (same int sums, and
// per block sum += float(sumi) * (d_w * d_x) in block order, fused for Q4_0); float-activation recipe (W8A16,
// q8_panels_float_act_avx512.cpp: each weight dequantized exactly in registers and FMA'd with the float
// activations) equal to ref::matmul_float_act within float rounding, and faster than the row kernels from one
// token on. cpu::matmul uses the panels when matmul_weight::panels is set and the active level has the kernels
// (q8_panels_supported); otherwise it reads matmul_weight::data as before. So a loader may drop the rows (data
// null) only while q8_panels_supported holds for the weight's type and recipe.
#pragma once

#include <cstddef>
#include <cstdint>

#include "kernels/cpu/matmul.h"
#include "kernels/cpu/thread_pool.h"
#include "kernels/ggml_types.h"
#include "kernels/ref/ops.h"

namespace troupe::cpu {

// Rows per panel (one zmm of int32 sums).
constexpr int64_t q8_panel_rows = 16;

// Whether panels of this weight type are used with this recipe at the active dispatch level (Q8_0 / Q4_0: either
// recipe at AVX-512 VNNI, the quantized recipe at AVX2).
bool q8_panels_supported(ggml_type type, activation_recipe recipe);

// Bytes of the panel form of w (Q8_0 or Q4_0; a multiple of 64).
size_t q8_panels_bytes(const matmul_weight& w);

// Writes the panel form of w to dst (q8_panels_bytes(w) bytes, 64-byte aligned), Q8_0 codes in the form the active
// level's kernels read fastest; returns that form, for matmul_weight::codes. Panels are split over pool when it is
// not null.
[[nodiscard]] panel_codes pack_q8_panels(const matmul_weight& w, void* dst, thread_pool* pool);
// The same in a form of the caller's choice (tests: every kernel reads both).
void pack_q8_panels(const matmul_weight& w, void* dst, thread_pool* pool, panel_codes codes);

}  // namespace troupe::cpu
