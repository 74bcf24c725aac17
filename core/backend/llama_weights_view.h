// llama_weights_view: what a backend needs of a loaded model of the llama graph and its dense families (qwen2,
// phi3, gemma2, mistral: core/model/arch/arch_description.h): its hyper-parameters and views of
// its weight matrices as stored (GGUF types, host memory, usually the memory-mapped file). The model
// loader fills it (core/backend/llama_view_of.h does so from core/model's llama_weights); the backend
// copies what it needs at creation, so the views need only outlive make_cuda_runner().
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/model/mla_params.h"
#include "core/model/moe_params.h"
#include "core/model/ops.h"
#include "core/result.h"

namespace troupe {

struct llama_view_hparams {
    int32_t n_vocab = 0;
    int32_t dim = 0;
    int32_t n_layers = 0;
    int32_t n_heads = 0;
    int32_t n_kv_heads = 0;
    int32_t head_dim = 0;
    int32_t ffn_dim = 0;
    float rms_eps = 1e-5f;
    float rope_base = 10000.0f;
    float rope_scale = 1.0f;  // positions are multiplied by this (linear scaling: 1 / factor), as llama_hparams
    int32_t rope_dims = 0;    // leading dimensions of each head that rotate; 0: head_dim
    bool rope_neox = false;   // false: rotate adjacent pairs (llama.cpp's normal mode); true: halves
    int32_t n_ctx = 0;        // training context
    // The architecture's features (core/model/llama_hparams.h); the defaults are llama's.
    std::string architecture = "llama";  // general.architecture, for descriptions
    bool gelu = false;                   // GeGLU FFN (gelu_tanh on the gate), else SwiGLU
    float embed_scale = 1.0f;            // embeddings are multiplied by this
    float attn_scale = 0.0f;             // scores are q.k times this; 0: 1 / sqrt(head_dim)
    float attn_softcap = 0.0f;           // scores s -> c tanh(s / c); 0: none
    float final_softcap = 0.0f;          // logits x -> c tanh(x / c); 0: none
    std::optional<moe_params> moe;       // the experts (core/model/moe_params.h) where the model has MoE layers
    std::optional<mla_params> mla;       // multi-head latent attention's shape where every layer has it (deepseek2)
};

struct llama_layer_view {
    weight_view attn_norm;  // [dim]
    weight_view wq;         // [n_heads * head_dim rows, dim]
    weight_view wk;         // [n_kv_heads * head_dim rows, dim]
    weight_view wv;         // [n_kv_heads * head_dim rows, dim]
    weight_view wo;         // [dim rows, n_heads * head_dim]
    weight_view ffn_norm;   // [dim]
    weight_view w_gate;     // [ffn_dim rows, dim]
    weight_view w_up;       // [ffn_dim rows, dim]
    weight_view w_down;     // [dim rows, ffn_dim]
    // Features; data null where the layer has none. Fused q/k/v or gate/up arrive as row views of the fused tensor.
    weight_view bq{}, bk{}, bv{};  // [q_width], [kv_width], [kv_width] (one row each), added after the products
    weight_view post_attn_norm{};  // [dim]
    weight_view post_ffn_norm{};   // [dim]
    int32_t window = 0;            // attends to positions > p - window; 0: the whole causal past
    // A mixture-of-experts FFN (hp.moe's layers past the leading dense ones) in place of w_gate, w_up, w_down.
    std::optional<moe_layer_weights> moe{};
    // Multi-head latent attention (hp.mla) in place of wq, wk, wv; wo is then [dim rows, n_heads * v_dim].
    std::optional<mla_layer_weights> mla{};
};

struct llama_weights_view {
    std::string name;  // for description(): the model file's name
    // What the model needs beyond the graph the CUDA runner implements (its architecture and the blocks only the CPU
    // graph runs); empty for every family troupe knows (llama, mistral, mixtral, qwen2, phi3, gemma2, deepseek2). The
    // runner refuses a model that needs any (check_llama_view).
    std::string beyond_cuda_graph;
    llama_view_hparams hp;
    weight_view token_embd;                // [n_vocab rows, dim]
    weight_view output_norm;               // [dim]
    weight_view output;                    // [n_vocab rows, dim]; token_embd itself when tied
    std::vector<llama_layer_view> layers;  // [n_layers]
};

// Whether any layer has a feature beyond llama's or the model does (biases, post norms, windows, GeGLU, scales,
// soft-capping): a backend that predates them must refuse such a model.
bool needs_arch_features(const llama_weights_view& view);

// Checks the hyper-parameters and every weight's shape; errors name the weight:
// "layer 3 wq has shape [60, 64] (rows, row length), expected [64, 64]".
status check_llama_view(const llama_weights_view& view);

}  // namespace troupe
