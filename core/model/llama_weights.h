// llama_weights: the model's tensors, bound by name and checked for shape and type against the hyper-parameters
// and the architecture's description (core/model/arch/arch_description.h). Views into the memory-mapped GGUF file;
// nothing is copied here. Fused tensors (phi3's attn_qkv, its ffn_up of gate and up rows) are bound whole and their
// parts are row views of them, so the graph sees q/k/v and gate/up alike for every architecture (and the backend
// may fuse them back: linear::concatenated).
#pragma once

#include <memory>
#include <vector>

#include "core/gguf/gguf_file.h"
#include "core/model/llama_hparams.h"
#include "core/model/ops.h"

namespace troupe {

struct llama_layer_weights {
    weight_view attn_norm;         // [dim] F32
    weight_view wq;                // [n_heads * head_dim rows, dim]
    weight_view wk;                // [n_kv_heads * head_dim rows, dim]
    weight_view wv;                // [n_kv_heads * head_dim rows, dim]
    weight_view bq{}, bk{}, bv{};  // [q_width], [kv_width], [kv_width] F32; data null without biases (qkv_bias)
    weight_view wo;                // [dim rows, n_heads * head_dim]
    weight_view post_attn_norm{};  // [dim] F32; data null without post norms
    weight_view ffn_norm;          // [dim] F32
    weight_view w_gate;            // [ffn_dim rows, dim]
    weight_view w_up;              // [ffn_dim rows, dim]
    weight_view w_down;            // [dim rows, ffn_dim]
    weight_view post_ffn_norm{};   // [dim] F32; data null without post norms
    mla_layer_weights mla{};       // attention_block::mla: the MLA block's tensors (wq, wk, wv unused)
    moe_layer_weights moe{};       // ffn_block::moe: the experts' tensors (w_gate, w_up, w_down unused)
};

struct llama_weights {
    std::shared_ptr<const gguf::gguf_file> file;  // keeps the mapping alive
    llama_hparams hp;
    weight_view token_embd;   // [n_vocab rows, dim]
    weight_view output_norm;  // [dim] F32
    weight_view output;       // [n_vocab rows, dim]; the embedding matrix when tied
    bool tied_output = false;
    std::vector<llama_layer_weights> layers;
};

// Rows [r0, r1) of a matrix as a matrix of its own (a view).
weight_view weight_rows(const weight_view& w, int64_t r0, int64_t r1);

// Binds every tensor; an error names the file, the tensor and its expected shape or type (the first such tensor,
// with a count of the others).
result<llama_weights> bind_llama_weights(std::shared_ptr<const gguf::gguf_file> file);

}  // namespace troupe
