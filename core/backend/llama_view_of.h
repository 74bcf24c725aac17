// llama_view_of: a llama_weights_view of core/model's loaded weights (header-only: reads fields, links nothing).
#pragma once

#include <filesystem>

#include "core/backend/llama_weights_view.h"
#include "core/model/llama_weights.h"

namespace troupe {

// The blocks of the model that only the CPU graph runs, as the error names them; empty when none. The CUDA graph
// runs multi-head latent attention where every layer has it (deepseek2), not a model mixing it with standard layers.
inline std::string beyond_cuda_graph(const llama_hparams& hp) {
    int32_t latent = 0;
    for (int32_t il = 0; il < hp.n_layers; ++il) latent += hp.attention_of(il) == attention_block::mla ? 1 : 0;
    if (latent > 0 && latent < hp.n_layers) {
        return "architecture " + hp.architecture + " (multi-head latent attention in " + std::to_string(latent) +
               " of " + std::to_string(hp.n_layers) + " layers)";
    }
    return {};
}

inline llama_weights_view llama_view_of(const llama_weights& w) {
    llama_weights_view v;
    v.name = w.file ? std::filesystem::path(w.file->path()).filename().string() : std::string("model");
    const llama_hparams& hp = w.hp;
    v.beyond_cuda_graph = beyond_cuda_graph(hp);
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
    v.hp.architecture = hp.architecture;
    v.hp.gelu = hp.arch->activation == ffn_activation::gelu_tanh;
    v.hp.embed_scale = hp.embed_scale;
    v.hp.attn_scale = hp.query_scale;
    v.hp.attn_softcap = hp.attn_softcap;
    v.hp.final_softcap = hp.final_softcap;
    v.hp.moe = hp.moe;
    v.hp.mla = hp.mla;
    v.token_embd = w.token_embd;
    v.output_norm = w.output_norm;
    v.output = w.output;
    for (size_t il = 0; il < w.layers.size(); ++il) {
        const llama_layer_weights& l = w.layers[il];
        llama_layer_view& o = v.layers.emplace_back();
        o = {l.attn_norm, l.wq, l.wk, l.wv, l.wo, l.ffn_norm, l.w_gate, l.w_up, l.w_down};
        o.bq = l.bq;
        o.bk = l.bk;
        o.bv = l.bv;
        o.post_attn_norm = l.post_attn_norm;
        o.post_ffn_norm = l.post_ffn_norm;
        o.window = hp.window_of(static_cast<int32_t>(il));
        if (hp.ffn_of(static_cast<int32_t>(il)) == ffn_block::moe) o.moe = l.moe;
        if (hp.attention_of(static_cast<int32_t>(il)) == attention_block::mla) o.mla = l.mla;
    }
    return v;
}

}  // namespace troupe
