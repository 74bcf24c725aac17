// llama_hparams: the shape of a model of any architecture troupe runs, read from its GGUF metadata ("<arch>.*"
// keys) under its architecture's description (core/model/arch/arch_description.h).
#pragma once

#include <cmath>
#include <cstdint>
#include <optional>
#include <string>

#include "core/gguf/gguf_file.h"
#include "core/model/arch/arch_description.h"
#include "core/model/arch/arch_families.h"
#include "core/model/mla_params.h"
#include "core/model/moe_params.h"
#include "core/result.h"

namespace troupe {

struct llama_hparams {
    std::string architecture;                             // general.architecture: "llama", "qwen2", ...
    const arch_description* arch = &llama_description();  // never null
    int32_t n_vocab = 0;
    int32_t n_ctx = 0;  // training context
    int32_t dim = 0;
    int32_t n_layers = 0;
    int32_t n_heads = 0;
    int32_t n_kv_heads = 0;
    int32_t head_dim = 0;  // <arch>.attention.key_length, else dim / n_heads
    int32_t ffn_dim = 0;
    float rms_eps = 1e-5f;
    float rope_base = 10000.0f;
    float rope_scale = 1.0f;  // positions are multiplied by this (linear scaling: 1 / factor)
    int32_t rope_dims = 0;    // dimensions rotated per head (usually head_dim)
    rope_mode rope = rope_mode::normal;
    float query_scale = 0.0f;    // attention scores are q·k times this; 0: 1 / sqrt(head_dim)
    float attn_softcap = 0.0f;   // scores s -> c·tanh(s / c) before masking (<arch>.attn_logit_softcapping); 0: none
    float final_softcap = 0.0f;  // logits x -> c·tanh(x / c) (<arch>.final_logit_softcapping); 0: none
    float embed_scale = 1.0f;    // embeddings are multiplied by this (sqrt(dim) for Gemma)
    int32_t sliding_window = 0;  // <arch>.attention.sliding_window for the layers the description names; 0: none
    std::optional<mla_params> mla;  // multi-head latent attention's shape (attention_block::mla: deepseek2)
    std::optional<moe_params> moe;  // the mixture of experts ("<arch>.expert_count" > 0): Mixtral, DeepSeek-V2

    int32_t q_width() const { return n_heads * head_dim; }
    int32_t kv_width() const { return n_kv_heads * head_dim; }
    float attention_scale() const { return query_scale > 0.0f ? query_scale : 1.0f / std::sqrt(float(head_dim)); }
    // Tokens layer il attends to at most (its own included); 0: the whole causal past.
    int32_t window_of(int32_t il) const {
        switch (arch->window) {
            case window_layers::none:
                return 0;
            case window_layers::all:
                return sliding_window;
            case window_layers::even:
                return il % 2 == 0 ? sliding_window : 0;
        }
        return 0;
    }
    bool any_window() const;  // some layer attends within a window
    attention_block attention_of(int32_t /*il*/) const { return arch->attention; }
    ffn_block ffn_of(int32_t il) const { return moe && moe->is_moe_layer(il) ? ffn_block::moe : ffn_block::dense; }
};

// What a model needs beyond the plain llama graph (for graphs that implement only that one: the CUDA runner,
// distillation's float graph): "architecture qwen2 (q/k/v biases)", or empty for a llama or mistral model.
std::string beyond_llama_graph(const llama_hparams& hp);

// Reads and checks the hyper-parameters; errors name the file and the key. An architecture troupe does not know is
// one error naming it and the ones it knows.
result<llama_hparams> read_llama_hparams(const gguf::gguf_file& file);

}  // namespace troupe
