// moe_params: the Mixture-of-Experts shape of a model, read from its architecture's GGUF keys, and the tensors of
// one MoE layer bound by name.
//
// Keys ("<arch>." prefixed; llama.cpp's names and numbering):
//   expert_count                 routed experts (absent or 0: the model has no MoE layers)
//   expert_used_count            experts each token runs (top k)
//   expert_shared_count          always-on shared experts, run as one FFN of expert_ffn * n_shared units (default 0)
//   expert_feed_forward_length   units of one expert's FFN (default feed_forward_length, as Mixtral files omit it)
//   leading_dense_block_count    the first layers keep a dense FFN (default 0)
//   expert_gating_func           1 softmax, 2 sigmoid (absent or 0: softmax)
//   expert_weights_norm          the top k weights renormalised to sum 1 (default: true for llama-family files,
//                                Mixtral's rule, which llama.cpp applies whatever the key says; false otherwise)
//   expert_weights_scale         the weights multiplied by this (default 1)
//
// Tensors of MoE layer N (ggml dims, row length first; E experts of F units, shared FFN of S = F * n_shared):
//   blk.N.ffn_gate_inp.weight [dim, E]            the router
//   blk.N.ffn_gate_exps.weight [dim, F, E]        3-D: expert e is rows [e F, (e + 1) F) of the [E F, dim] matrix
//   blk.N.ffn_up_exps.weight [dim, F, E]
//   blk.N.ffn_down_exps.weight [F, dim, E]        expert e is rows [e dim, (e + 1) dim)
//   blk.N.exp_probs_b.bias [E] F32                optional: added to the scores for choosing experts only
//   blk.N.ffn_{gate,up}_shexp.weight [dim, S], blk.N.ffn_down_shexp.weight [S, dim]   with shared experts
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "core/gguf/gguf_file.h"
#include "core/model/ops.h"
#include "core/result.h"

namespace troupe {

// How router logits become expert scores (llama.cpp's LLAMA_EXPERT_GATING_FUNC_TYPE numbering).
enum class moe_gating : uint32_t {
    softmax = 1,  // over all experts
    sigmoid = 2,  // each expert on its own (DeepSeek-V3)
};

struct moe_params {
    int32_t n_experts = 0;        // routed experts
    int32_t n_used = 0;           // top k per token
    int32_t n_shared = 0;         // shared experts (one FFN of expert_ffn * n_shared units)
    int32_t expert_ffn = 0;       // units of one routed expert
    int32_t n_leading_dense = 0;  // layers [0, n_leading_dense) have a dense FFN
    moe_gating gating = moe_gating::softmax;
    bool norm_weights = false;  // the selected weights divided by their sum
    float weights_scale = 1.0f;

    int32_t shared_ffn() const { return expert_ffn * n_shared; }
    bool is_moe_layer(int32_t layer) const { return layer >= n_leading_dense; }
};

// The model's MoE parameters, or nullopt where "<arch>.expert_count" is absent or 0. ffn_dim is the dense FFN's
// feed_forward_length (the expert size where the file gives none). Errors name the file and the key.
result<std::optional<moe_params>> read_moe_params(const gguf::gguf_file& f, const std::string& arch, int32_t n_layers,
                                                  int32_t ffn_dim);

struct moe_layer_weights {
    weight_view router;       // [n_experts rows, dim]
    weight_view gate_exps;    // [n_experts * expert_ffn rows, dim]
    weight_view up_exps;      // [n_experts * expert_ffn rows, dim]
    weight_view down_exps;    // [n_experts * dim rows, expert_ffn]
    const float* probs_bias;  // [n_experts] or null
    weight_view gate_shexp;   // [shared_ffn rows, dim]; data null without shared experts
    weight_view up_shexp;     // [shared_ffn rows, dim]
    weight_view down_shexp;   // [dim rows, shared_ffn]
};

// Binds layer `layer`'s MoE tensors, checked for shape and type; every problem is appended to `errors` as a line
// ("\n  <file>: tensor <name> ...") and the layer is returned with those views empty.
moe_layer_weights bind_moe_layer(const gguf::gguf_file& f, const moe_params& p, int32_t layer, int32_t dim,
                                 std::string& errors);

// Expert e of a 3-D expert tensor (its n_experts matrices stacked as rows) as a matrix of its own.
weight_view expert_matrix(const weight_view& stacked, int32_t n_experts, int32_t e);

}  // namespace troupe
