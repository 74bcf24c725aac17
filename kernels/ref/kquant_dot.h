// k-quant weights (Q2_K, Q3_K, Q4_K, Q5_K, Q6_K) dotted with Q8_K activations in ggml's x86 recipe, bit for bit: the
// arithmetic of ggml_vec_dot_q{2,3,4,5,6}_K_q8_K in their AVX2 form, which llama.cpp's
// CPU path runs for every token count on x86 (AVX2 and AVX-512 machines alike), so the golden's reference and troupe
// agree exactly.
//
// Per super-block of 256 (d = d_x * d_w, a float product):
//   lane k (0..7) = exact integer sum, over the 32-element chunks c of the block, of scale(c, k) * the dot of
//                   elements 32c + 4k .. 32c + 4k + 3 (Q4_K: chunks pair as low / high nibbles of qs; Q6_K: q - 32;
//                   Q3_K: values -4..3, a scale per 16 elements as Q6_K)
//   acc[k] = fma(d, float(lane k), acc[k])                 (float accumulation over super-blocks, per lane)
//   Q4_K only: acc_m[p] = fma(-d_x * dmin, float(m[2p] * bsum32[2p] + m[2p + 1] * bsum32[2p + 1]), acc_m[p]),
//              p = 0..3, bsum32[j] = bsums[2j] + bsums[2j + 1]
//   Q2_K only: codes 0..3 with a scale per 16 elements (as Q3_K's lanes), and before them each super-block's mins in
//              the same 8 lanes: acc[k] = fma(-d_x * dmin, float(m[2k] * bsums[2k] + m[2k + 1] * bsums[2k + 1]),
//              acc[k])
//   Q5_K only: the lanes as Q4_K's with codes 0..31; the mins in one scalar instead of acc_m:
//              summs = fma(-d_x * dmin, float(sum_j m[j] * bsum32[j]), summs)
// result = hsum_8(acc) (+ (acc_m[0] + acc_m[2]) + (acc_m[1] + acc_m[3]) for Q4_K, + summs for Q5_K), with
//   hsum_8(a) = (r0 + r2) + (r1 + r3), r_k = a[k + 4] + a[k].
// Every optimized Q2_K / Q3_K / Q4_K / Q5_K / Q6_K kernel of the quantized recipe computes exactly this
// (tests/ops/test_kquant_recipe).
#pragma once

#include <cstdint>

#include "kernels/ggml_types.h"

namespace troupe::ref {

// w: [nb] blocks of one weight row; x: [nb] blocks of one activation row (quantize_row_q8_k).
float dot_q2_k_q8_k(const block_q2_k* w, const block_q8_k* x, int64_t nb);
float dot_q3_k_q8_k(const block_q3_k* w, const block_q8_k* x, int64_t nb);
float dot_q4_k_q8_k(const block_q4_k* w, const block_q8_k* x, int64_t nb);
float dot_q5_k_q8_k(const block_q5_k* w, const block_q8_k* x, int64_t nb);
float dot_q6_k_q8_k(const block_q6_k* w, const block_q8_k* x, int64_t nb);

// ggml's hsum_float_8 of 8 float lanes a: (r0 + r2) + (r1 + r3), r_k = a[k + 4] + a[k] (also ref::dot_q5_0's).
float hsum_8_lanes(const float* a);

}  // namespace troupe::ref
