// mla_block: one layer's multi-head latent attention (DeepSeek-V2, V2-Lite) on the host side, from the normed input
// to the attention output the graph multiplies by attn_output:
//
//   q  = x · Wqᵀ                                   without q LoRA        [n, H, qk_nope + rope_dim]
//      = rmsnorm(x · Wq_aᵀ) · q_a_norm · Wq_bᵀ      with q LoRA
//   kv = x · Wkv_aᵀ                                [n, R + rope_dim]: the latent, then the shared RoPE key
//   kv[:, 0..R) = rmsnorm(kv[:, 0..R)) · kv_a_norm
//   RoPE (adjacent pairs, YaRN where the model has it) on each head's last rope_dim dims of q and on kv's RoPE key
//   out = attention(q, kv) through the attention op with an MLA call (ops.h): the op writes kv into its latent cache
//         and expands keys and values with attn_kv_b                 [n, H, v_dim]
//
// The block owns its layer's linears (made by the graph's callback, so quant plugins and both activation recipes
// apply); scratch lives in an mla_workspace every layer shares, with the step's RoPE rotations computed once per
// step (begin_step).
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/model/compute_context.h"
#include "core/model/kv_layout.h"
#include "core/model/linear.h"
#include "core/model/mla_params.h"

namespace troupe {

// Makes the linear of weight w (named for errors), as the graph makes its own (the same type as moe_ffn.h's).
using make_linear_fn = std::function<status(const weight_view& w, const std::string& name, linear& out)>;

struct mla_workspace {
    std::vector<float> q;        // [n, n_heads * head_dim]
    std::vector<float> q_a;      // [n, q_lora_rank]
    std::vector<float> latent;   // [n, kv_lora_rank + rope_dim]
    std::vector<float> rope_cs;  // [n, rope_dim / 2, (cos, sin)] the step's rotations

    // The step's RoPE rotations at each token's position (call once per step, before the layers).
    void begin_step(const mla_params& p, const int32_t* positions, size_t n);
};

class mla_block {
public:
    mla_block() = default;
    // Layer `layer`'s block (name: its tensors' prefix, "blk.3.", for errors). workspace: shared by the model's layers.
    static result<mla_block> make(const mla_params& p, const mla_layer_weights& w, int32_t layer,
                                  const std::string& name, const make_linear_fn& make_linear,
                                  std::shared_ptr<mla_workspace> workspace);

    // out = the attention of the normed input x's n tokens. `step` carries the step's fields of the attention call
    // (positions, seq_of, block tables, block size, this layer's latent pool in k_pool, kv_type, tree rows and masks);
    // the block fills the rest. x: [n, dim], out: [n, n_heads * v_dim].
    status forward(const float* x, size_t n, attention_call step, attention_op& op, const compute_context& ctx,
                   float* out);

    // Every weight in the order a step multiplies them (what kernels.weights: copy places).
    std::vector<linear*> weights_in_step_order();
    size_t weight_bytes() const;  // bytes of the block's weights one step reads
    int64_t macs_per_token() const;
    const mla_params& params() const { return p_; }

private:
    mla_params p_;
    int32_t layer_ = 0;
    linear wq_, wq_a_, wq_b_, wkv_a_;   // wq_ without q LoRA, wq_a_ and wq_b_ with
    const float* q_a_norm_ = nullptr;   // [q_lora_rank]
    const float* kv_a_norm_ = nullptr;  // [kv_lora_rank]
    std::shared_ptr<mla_workspace> ws_;
};

// The attention plugin's latent cache for MLA: one row of kv_lora_rank + rope_dim elements of kv.dtype per token and
// layer, no V pool.
kv_layout mla_kv_layout(const mla_params& p, kv_dtype type);

}  // namespace troupe
