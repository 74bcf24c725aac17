// The step's activations in one device buffer (troupe_cuda_model.scratch): where each lies for `capacity` tokens.
// Pure host arithmetic on the model's description, without CUDA, so that tests on any machine check it.
//
//   x, xn [T, dim]; q, att [T, n_heads * head_dim]; k, v [T, n_kv_heads * head_dim];
//   gate, up [T, max(ffn_dim, moe_shared_ffn)]; logits [T, n_vocab]; with experts (k of E, F units each):
//   moe_logits [T, E], moe_experts (int32) and moe_weights [T, k], moe_hidden [T k, F], moe_out [T k, dim],
//   moe_y [T, dim], and for prefill's grouped products moe_up [T k, F] and moe_rows (int32) [T, 2 k]; with latent
//   attention (H heads, R = kv_lora_rank): mla_qa [T, q_lora_rank], mla_kv [T, R + rope_dim], mla_q [T, H (R +
//   rope_dim)], mla_o [T, H R], and q, att at least [T, H (qk_nope + rope_dim)] and [T, H v_dim] (every element 4
//   bytes; regions 256-byte aligned)
//
// The expert counts decide the experts' regions, never the moe_layers pointer: the model's copy of its description
// keeps the counts and clears the pointers (model_create; the first run on a GPU sized them 0 when it read the
// pointer). A model without experts has the counts 0 and those regions empty.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "kernels/cuda/cuda_backend_abi.h"

namespace troupe::cuda {

struct scratch_region {
    size_t offset = 0;
    size_t bytes = 0;
};

struct scratch_layout {
    scratch_region x, xn, q, k, v, att, gate, up, logits, moe_logits, moe_experts, moe_weights, moe_hidden, moe_out,
        moe_y, moe_up, moe_rows, mla_qa, mla_kv, mla_q, mla_o;
    size_t total = 0;
};

inline scratch_layout layout_for(const troupe_cuda_model_desc& hp, int32_t capacity) {
    const size_t t = static_cast<size_t>(capacity) * sizeof(float);
    scratch_layout l{};
    size_t at = 0;
    const auto take = [&](size_t width) {
        const scratch_region r{at, t * width};
        at += (r.bytes + 255) & ~size_t{255};
        return r;
    };
    l.x = take(hp.dim);
    l.xn = take(hp.dim);
    // Latent attention's widths where the model has it (the counts, kept by model_create, not the layers' pointer).
    const bool mla = hp.mla_kv_lora_rank > 0;
    const size_t heads = static_cast<size_t>(hp.n_heads);
    const size_t latent = mla ? static_cast<size_t>(hp.mla_kv_lora_rank) + hp.mla_rope_dim : 0;
    l.q = take(heads * std::max<size_t>(hp.head_dim, mla ? hp.mla_qk_nope + hp.mla_rope_dim : 0));
    l.k = take(static_cast<size_t>(hp.n_kv_heads) * hp.head_dim);
    l.v = take(static_cast<size_t>(hp.n_kv_heads) * hp.head_dim);
    l.att = take(heads * std::max<size_t>(hp.head_dim, mla ? hp.mla_v_dim : 0));
    const bool moe = hp.moe_n_used > 0;
    const size_t ffn = std::max<size_t>(hp.ffn_dim, moe ? hp.moe_shared_ffn : 0);
    l.gate = take(ffn);
    l.up = take(ffn);
    l.logits = take(hp.n_vocab);
    const size_t k = moe ? hp.moe_n_used : 0;
    l.moe_logits = take(moe ? hp.moe_n_experts : 0);
    l.moe_experts = take(k);
    l.moe_weights = take(k);
    l.moe_hidden = take(k * (moe ? hp.moe_expert_ffn : 0));
    l.moe_out = take(k * hp.dim);
    l.moe_y = take(moe ? hp.dim : 0);
    l.moe_up = take(k * (moe ? hp.moe_expert_ffn : 0));
    l.moe_rows = take(2 * k);
    l.mla_qa = take(mla ? hp.mla_q_lora_rank : 0);
    l.mla_kv = take(latent);
    l.mla_q = take(heads * latent);
    l.mla_o = take(mla ? heads * hp.mla_kv_lora_rank : 0);
    l.total = at;
    return l;
}

}  // namespace troupe::cuda
