// Multi-head latent attention (DeepSeek-V2) on the device: the absorbed form of core/model/mla_block.h and
// plugins/attention/mla, as host-callable launchers (defined in cuda_mla.cu). H heads, R = kv_lora_rank, the cache row
// of a token is its latent [c (R) | k_pe (rope_dim)], and attn_kv_b holds per head h the qk_nope rows of W_UK_h, then
// the v_dim rows of W_UV_h (rows of R):
//
//   prepare   c = rms_norm(c) * kv_a_norm; RoPE on k_pe and on each head's last rope_dim dims of q; the row stored
//   absorb    q_lat[t, h] = [W_UK_h^T q_nope[t, h] (R) | q_pe[t, h] (rope_dim)]
//   attend    o_lat[t, h] = softmax_j(scale * q_lat[t, h] . row_j) . c_j   over the rows token t sees (causal or tree)
//   expand    out[t, h] = W_UV_h o_lat[t, h]                                 (v_dim)
//
// The naive form (expanding every row into per-head keys and values) computes the same sums in another order; decode
// reads only the latent rows either way. Every launcher enqueues on `stream`; the caller checks cudaGetLastError.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "kernels/cuda/cuda_kernels.h"

namespace troupe::cuda {

inline constexpr int32_t mla_max_latent = 1024;  // R + rope_dim (TROUPE_CUDA_MLA_MAX_LATENT)

struct mla_dims {
    int32_t n_heads;
    int32_t kv_lora_rank;  // R
    int32_t qk_nope;
    int32_t rope_dim;
    int32_t v_dim;  // a latent row: kv_lora_rank + rope_dim elements
};

// RoPE of pair i at position p (mla_params::rope_angle): theta = p * freq[i]; with yarn_factor != 1,
// (theta / yarn_factor) * (1 - ramp[i]) + theta * ramp[i]. freq, ramp: device [rope_dim / 2].
struct mla_rope {
    const float* freq;
    const float* ramp;
    float yarn_factor;
};

// q [n_tokens, H, qk_nope + rope_dim] rotated in place; latent [n_tokens, R + rope_dim] normed and rotated in place,
// then stored at each token's row (its position, or tables.rows[t]) of `pool` ([n_blocks, block_size, R + rope_dim],
// float or half when kv_f16). A block per token.
void launch_mla_prepare(float* q, float* latent, int32_t n_tokens, const mla_dims& d, const float* kv_a_norm, float eps,
                        const mla_rope& rope, const kv_tables& tables, bool kv_f16, void* pool, cudaStream_t stream);

// q_lat [n_tokens, H, R + rope_dim] from q [n_tokens, H, qk_nope + rope_dim] and attn_kv_b ([H (qk_nope + v_dim), R]
// of wkv_b_type).
void launch_mla_absorb(const float* q, dtype wkv_b_type, const void* wkv_b, int32_t n_tokens, const mla_dims& d,
                       float* q_lat, cudaStream_t stream);

// o_lat [n_tokens, H, R] = the softmax over the rows each token sees of scale * q_lat . row, times the rows' c. A warp
// per (token, head), or with split_scratch (mla_split_scratch_bytes, device memory) and few items, as decode has, up
// to mla_max_splits warps per (token, head), each over a contiguous share of its rows, then a merge (flash-decoding).
// The split count depends on the token and head counts alone (mla_attend_splits), so a step graph keeps it.
inline constexpr int32_t mla_max_splits = 32;
inline constexpr int32_t mla_max_split_records = 4096;  // (token, head, split) records at most
inline constexpr size_t mla_split_scratch_bytes = size_t{mla_max_split_records} * (mla_max_latent + 2) * sizeof(float);
int32_t mla_attend_splits(int32_t n_tokens, int32_t n_heads);
void launch_mla_attend(const float* q_lat, float* o_lat, int32_t n_tokens, const mla_dims& d, float scale,
                       const kv_tables& tables, bool kv_f16, const void* pool, float* split_scratch,
                       cudaStream_t stream);

// out [n_tokens, H * v_dim] = W_UV_h o_lat[t, h] per head. A warp per output.
void launch_mla_expand(const float* o_lat, dtype wkv_b_type, const void* wkv_b, int32_t n_tokens, const mla_dims& d,
                       float* out, cudaStream_t stream);

}  // namespace troupe::cuda
