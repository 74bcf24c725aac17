// llama_view_of: a llama_weights_view of core/model's loaded weights (header-only: reads fields, links nothing).
#pragma once

#include <filesystem>

#include "core/backend/llama_weights_view.h"
#include "core/model/llama_weights.h"

namespace troupe {

// What a model needs beyond the llama graph of the CUDA runner, for its refusal: "architecture qwen2 (q/k/v
// biases)", or empty.
inline std::string beyond_llama_graph(const llama_hparams& hp) {
    const arch_description& d = *hp.arch;
    std::string features;
    auto add = [&features](bool needed, const char* what) {
        if (needed) features += std::string(features.empty() ? "" : ", ") + what;
    };
    add(d.qkv_bias, "q/k/v biases");
    add(d.activation == ffn_activation::gelu_tanh, "a GeGLU FFN");
    add(d.post_norms, "post-attention and post-FFN norms");
    add(hp.embed_scale != 1.0f, "scaled embeddings");
    add(hp.attn_softcap > 0.0f, "attention soft-capping");
    add(hp.final_softcap > 0.0f, "final logit soft-capping");
    add(hp.any_window(), "sliding-window attention");
    add(hp.query_scale > 0.0f, "a query scale other than 1 / sqrt(head_dim)");
    add(d.attention == attention_block::mla, "multi-head latent attention");
    for (int32_t il = 0; il < hp.n_layers; ++il) {
        if (hp.ffn_of(il) == ffn_block::moe) {
            add(true, "mixture-of-experts layers");
            break;
        }
    }
    if (features.empty()) return {};
    return "architecture " + hp.architecture + " (" + features + ")";
}

inline llama_weights_view llama_view_of(const llama_weights& w) {
    llama_weights_view v;
    v.name = w.file ? std::filesystem::path(w.file->path()).filename().string() : std::string("model");
    const llama_hparams& hp = w.hp;
    v.beyond_llama = beyond_llama_graph(hp);
    v.hp.n_vocab = hp.n_vocab;
    v.hp.dim = hp.dim;
    v.hp.n_layers = hp.n_layers;
    v.hp.n_heads = hp.n_heads;
    v.hp.n_kv_heads = hp.n_kv_heads;
    v.hp.head_dim = hp.head_dim;
    v.hp.ffn_dim = hp.ffn_dim;
    v.hp.rms_eps = hp.rms_eps;
    v.hp.rope_base = hp.rope_base;
    v.hp.rope_scale = hp.rope_scale;
    v.hp.rope_dims = hp.rope_dims;
    v.hp.rope_neox = hp.rope == rope_mode::neox;
    v.hp.n_ctx = hp.n_ctx;
    v.token_embd = w.token_embd;
    v.output_norm = w.output_norm;
    v.output = w.output;
    for (const llama_layer_weights& l : w.layers) {
        v.layers.push_back({l.attn_norm, l.wq, l.wk, l.wv, l.wo, l.ffn_norm, l.w_gate, l.w_up, l.w_down});
    }
    return v;
}

}  // namespace troupe
