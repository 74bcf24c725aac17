// llama_view_of: a llama_weights_view of core/model's loaded weights (header-only: reads fields, links nothing).
#pragma once

#include <filesystem>

#include "core/backend/llama_weights_view.h"
#include "core/model/llama_weights.h"

namespace troupe {

inline llama_weights_view llama_view_of(const llama_weights& w) {
    llama_weights_view v;
    v.name = w.file ? std::filesystem::path(w.file->path()).filename().string() : std::string("model");
    const llama_hparams& hp = w.hp;
    v.beyond_llama = beyond_llama_graph(hp);  // the CUDA graph is llama's
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
