// The CPU kernels of quant/w4a16: y[n_tokens, n_out] = x[n_tokens, n_in] * W^T with 4-bit group weights
// (w4a16_format.h) dequantized exactly and float32 activations, in three builds of the same recipe: scalar (the
// twin every other is tested against), AVX2 (+FMA, F16C) and AVX-512 (F, BW, VL), chosen at run time.
//
// Two paths, split by token count:
//   - decode (n_tokens <= k_decode_max_tokens, bandwidth bound): each weight row is streamed from memory once and
//     dequantized in registers; up to 4 tokens share each dequantized vector (more tokens: further passes over the
//     row, which is then in L1; on AVX-512, tokens whose activations overflow L1 sweep the rows in chunks of 1024
//     columns). On AVX-512 a group's 16 possible values d * q + m are one register, and a weight vector is one
//     shift and one permute of it by the codes (w4a16_format.h's layout).
//   - prefill (FMA bound): x is transposed once per product to xt [n_in, n_pad] (tokens padded with zeros to a
//     multiple of 32); a work item dequantizes blocks of rows into a float buffer, chunk of k by chunk of k, and a
//     register tile of rows x tokens accumulates acc += w[r][k] * xt[k][t0..] by FMA in k order, so its sums are
//     bit for bit the scalar twin's (sequential fmaf over k).
//
// Decode with bf16 activations (the plugin's default) is w4a16_bf16.h: the AVX-512 BF16 kernel there, or these
// decode kernels run on activations rounded to bf16 first.
//
// Every function here is infallible: the plugin checks shapes before calling.
#pragma once

#include <cstdint>

#include "w4a16_format.h"

namespace troupe::w4a16 {

constexpr int64_t k_decode_max_tokens = 16;
constexpr int64_t k_prefill_token_pad = 32;

struct kernel_set {
    const char* name;  // "scalar", "avx2", "avx512"
    // y rows [r0, r1) of every token: y[t, r] = sum_k w[r, k] x[t, k].   x: [n_tokens, n_in], y: [n_tokens, n_out]
    void (*decode)(const matrix& w, const float* x, int64_t n_tokens, float* y, int64_t r0, int64_t r1);
    // The same from xt: [n_in, n_pad] (x transposed, tokens n_tokens..n_pad zero).   y: [n_tokens, n_out]
    void (*prefill)(const matrix& w, const float* xt, int64_t n_pad, int64_t n_tokens, float* y, int64_t r0,
                    int64_t r1);
    int64_t prefill_rows;  // rows per prefill work item (the row block of one dequantized buffer)
};

const kernel_set& scalar_kernels();
// Null where the plugin was built without the ISA (a non-x86 build); whether the CPU runs it is the caller's check.
const kernel_set* avx2_kernels();
const kernel_set* avx512_kernels();

// dst [n_in, n_pad] = x [n_tokens, n_in] transposed for k in [k0, k1), tokens n_tokens..n_pad zero.
void transpose_activations(const float* x, int64_t n_tokens, int64_t n_in, int64_t n_pad, float* dst, int64_t k0,
                           int64_t k1);

}  // namespace troupe::w4a16
