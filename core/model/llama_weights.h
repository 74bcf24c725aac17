// llama_weights: the model's tensors, bound by name and checked for shape and type against the
// hyper-parameters. Views into the memory-mapped GGUF file; nothing is copied here.
#pragma once

#include <memory>
#include <vector>

#include "core/gguf/gguf_file.h"
#include "core/model/llama_hparams.h"
#include "core/model/ops.h"

namespace troupe {

struct llama_layer_weights {
    weight_view attn_norm;  // [dim] F32
    weight_view wq;         // [n_heads * head_dim rows, dim]
    weight_view wk;         // [n_kv_heads * head_dim rows, dim]
    weight_view wv;         // [n_kv_heads * head_dim rows, dim]
    weight_view wo;         // [dim rows, n_heads * head_dim]
    weight_view ffn_norm;   // [dim] F32
    weight_view w_gate;     // [ffn_dim rows, dim]
    weight_view w_up;       // [ffn_dim rows, dim]
    weight_view w_down;     // [dim rows, ffn_dim]
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

// Binds every tensor; errors name the file, the tensor and the expected shape or type.
result<llama_weights> bind_llama_weights(std::shared_ptr<const gguf::gguf_file> file);

}  // namespace troupe
