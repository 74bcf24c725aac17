// cpu_llama's layer: the attention block (standard, or MLA through mla_block) and the FFN block (dense SwiGLU /
// GeGLU, or MoE through moe_ffn) as the architecture description chooses per layer, with the norms and residual
// adds around them. The rest of the graph (create, the step's bookkeeping, the output head) is in cpu_llama.cpp.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/model/cpu_llama.h"
#include "core/model/cpu_ops.h"

namespace troupe {

status cpu_llama::project_qkv(const layer& l, size_t n, float*& q, float*& k, float*& v) {
    const size_t qw = w_.hp.q_width(), kvw = w_.hp.kv_width();
    if (!l.w_qkv || n > k_max_fused_tokens) {
        q = s_.q.data(), k = s_.k.data(), v = s_.v.data();
        if (status st = l.wq.forward(s_.h.data(), q, n, ctx_); !st.ok()) return st;
        if (status st = l.wk.forward(s_.h.data(), k, n, ctx_); !st.ok()) return st;
        if (status st = l.wv.forward(s_.h.data(), v, n, ctx_); !st.ok()) return st;
    } else if (float* qkv = s_.qkv.data(); n == 1) {  // [1, qw + 2 kvw]: the layout of three separate products
        if (status st = l.w_qkv->forward(s_.h.data(), qkv, n, ctx_); !st.ok()) return st;
        q = qkv, k = qkv + qw, v = qkv + qw + kvw;
    } else {  // [n, qw + 2 kvw]
        if (status st = l.w_qkv->forward(s_.h.data(), qkv, n, ctx_); !st.ok()) return st;
        q = s_.q.data(), k = s_.k.data(), v = s_.v.data();
        for (size_t t = 0; t < n; ++t) {
            const float* row = qkv + t * (qw + 2 * kvw);
            std::copy_n(row, qw, q + t * qw);
            std::copy_n(row + qw, kvw, k + t * kvw);
            std::copy_n(row + qw + kvw, kvw, v + t * kvw);
        }
    }
    if (l.bq != nullptr) {
        add_bias_rows(q, l.bq, n, qw);
        add_bias_rows(k, l.bk, n, kvw);
        add_bias_rows(v, l.bv, n, kvw);
    }
    return {};
}

status cpu_llama::ffn_hidden(const layer& l, size_t n, const float*& hidden) {
    const size_t f = w_.hp.ffn_dim;
    if (!l.w_gate_up || n > k_max_fused_tokens) {
        if (status st = l.w_gate.forward(s_.h.data(), s_.gate.data(), n, ctx_); !st.ok()) return st;
        if (status st = l.w_up.forward(s_.h.data(), s_.up.data(), n, ctx_); !st.ok()) return st;
        gated_rows(w_.hp.arch->activation, s_.gate.data(), s_.up.data(), n * f);
        hidden = s_.gate.data();
        return {};
    }
    float* gate_up = s_.gate_up.data();  // [n, 2 f]: each token's gate row, then its up row
    if (status st = l.w_gate_up->forward(s_.h.data(), gate_up, n, ctx_); !st.ok()) return st;
    for (size_t t = 0; t < n; ++t) gated_rows(w_.hp.arch->activation, gate_up + t * 2 * f, gate_up + t * 2 * f + f, f);
    if (n == 1) {
        hidden = gate_up;
        return {};
    }
    for (size_t t = 0; t < n; ++t) std::copy_n(gate_up + t * 2 * f, f, s_.gate.data() + t * f);
    hidden = s_.gate.data();
    return {};
}

namespace {

// The fields attention_call and kv_cache_call share: the step's tokens, heads and block tables.
template <class call_type>
call_type step_attention_call(const llama_hparams& hp, size_t n, const float* q, const float* k, const float* v,
                              float* out, const int32_t* positions, const int32_t* seq_of,
                              const std::vector<const int32_t*>& tables, int32_t block_size) {
    call_type call{};
    call.n_tokens = static_cast<int32_t>(n);
    call.n_heads = hp.n_heads;
    call.n_kv_heads = hp.n_kv_heads;
    call.head_dim = hp.head_dim;
    call.scale = hp.attention_scale();
    call.q = q;
    call.k = k;
    call.v = v;
    call.out = out;
    call.positions = positions;
    call.seq_of = seq_of;
    call.n_seqs = static_cast<int32_t>(tables.size());
    call.block_tables = tables.data();
    call.block_size = block_size;
    return call;
}

}  // namespace

status cpu_llama::attend(int32_t il, size_t n, const float* q, const float* k, const float* v,
                         const std::vector<const int32_t*>& tables) {
    const layer& l = layers_[il];
    if (params_.kv_cache) {
        auto call = step_attention_call<kv_cache_call>(w_.hp, n, q, k, v, s_.attn.data(), s_.positions.data(),
                                                       s_.seq_of.data(), tables, kv_.block_size);
        call.layer = il;
        call.pool = l.kv_blocks;
        call.block_bytes = kv_layout_.block_bytes(kv_.block_size);
        call.window = l.kv_window;
        call.window_slot = l.kv_window ? step_slots_.data() : nullptr;
        return params_.kv_cache->forward(call, ctx_.parallel_for);
    }
    auto call = step_attention_call<attention_call>(w_.hp, n, q, k, v, s_.attn.data(), s_.positions.data(),
                                                    s_.seq_of.data(), tables, kv_.block_size);
    call.kv_type = params_.kv_type;
    call.layer = il;
    call.softcap = w_.hp.attn_softcap;
    call.window = l.window;
    call.k_pool = l.k_pool;
    call.v_pool = l.v_pool;
    if (s_.tree) {
        call.rows = s_.kv_rows.data();
        call.mask_base = s_.mask_base.data();
        call.mask = s_.mask.data();
        call.mask_words = s_.mask_words;
    }
    return params_.attention->forward(call, ctx_.parallel_for);
}

uint32_t cpu_llama::needed_attention_features() const {
    return (w_.hp.attn_softcap > 0.0f ? attention_softcap : 0u) | (w_.hp.any_window() ? attention_window : 0u) |
           (w_.hp.mla ? attention_mla : 0u);
}

void cpu_llama::add_branch(const float* post_norm, size_t n) {
    const int32_t dim = w_.hp.dim;
    if (post_norm != nullptr) {
        rmsnorm_rows(s_.h.data(), post_norm, s_.rows_scratch.data(), n, dim, w_.hp.rms_eps);
        add_rows(s_.x.data(), s_.rows_scratch.data(), n * dim);
        return;
    }
    add_rows(s_.x.data(), s_.h.data(), n * dim);
}

status cpu_llama::standard_attention(int32_t il, size_t n, const std::vector<const int32_t*>& tables) {
    const llama_hparams& hp = w_.hp;
    const layer& l = layers_[il];
    float *q = nullptr, *k = nullptr, *v = nullptr;
    if (status st = project_qkv(l, n, q, k, v); !st.ok()) return st;
    if (status st = tap(tap_point::q, il, q, n, hp.q_width()); !st.ok()) return st;
    if (status st = tap(tap_point::k, il, k, n, hp.kv_width()); !st.ok()) return st;
    if (status st = tap(tap_point::v, il, v, n, hp.kv_width()); !st.ok()) return st;
    if (params_.activations == cpu::activation_recipe::quantized) {
        // llama.cpp's recipe: its rotations bit for bit (the q and k rows feed its attention arithmetic).
        rope_rows_ggml(q, s_.rope_cs.data(), n, hp.n_heads, hp);
        rope_rows_ggml(k, s_.rope_cs.data(), n, hp.n_kv_heads, hp);
    } else {
        rope_rows(q, s_.rope_cs.data(), n, hp.n_heads, hp);
        rope_rows(k, s_.rope_cs.data(), n, hp.n_kv_heads, hp);
    }

    if (status st = attend(il, n, q, k, v, tables); !st.ok()) return st;
    if (status st = tap(tap_point::attn_out, il, s_.attn.data(), n, hp.q_width()); !st.ok()) return st;
    return l.wo.forward(s_.attn.data(), s_.h.data(), n, ctx_);
}

status cpu_llama::mla_attention(int32_t il, size_t n, const std::vector<const int32_t*>& tables) {
    layer& l = layers_[il];
    attention_call step{};  // the step's fields; the block fills the MLA call's own
    step.positions = s_.positions.data();
    step.seq_of = s_.seq_of.data();
    step.n_seqs = static_cast<int32_t>(tables.size());
    step.block_tables = tables.data();
    step.block_size = kv_.block_size;
    step.k_pool = l.k_pool;
    step.kv_type = params_.kv_type;
    if (s_.tree) {
        step.rows = s_.kv_rows.data();
        step.mask_base = s_.mask_base.data();
        step.mask = s_.mask.data();
        step.mask_words = s_.mask_words;
    }
    if (status st = l.mla->forward(s_.h.data(), n, step, *params_.attention, ctx_, s_.attn.data()); !st.ok()) return st;
    if (status st = tap(tap_point::attn_out, il, s_.attn.data(), n, w_.hp.mla->out_width()); !st.ok()) return st;
    return l.wo.forward(s_.attn.data(), s_.h.data(), n, ctx_);
}

status cpu_llama::dense_ffn(int32_t il, size_t n) {
    const layer& l = layers_[il];
    const float* hidden = nullptr;
    if (status st = ffn_hidden(l, n, hidden); !st.ok()) return st;
    if (status st = tap(tap_point::ffn_hidden, il, hidden, n, w_.hp.ffn_dim); !st.ok()) return st;
    return l.w_down.forward(hidden, s_.h.data(), n, ctx_);
}

status cpu_llama::moe_block(int32_t il, size_t n) {
    float* f = s_.rows_scratch.data();  // [n, dim]: the experts read h until they are done
    if (status st = layers_[il].moe->forward(s_.h.data(), f, n, ctx_); !st.ok()) return st;
    std::copy_n(f, n * w_.hp.dim, s_.h.data());
    return {};
}

status cpu_llama::run_layer(int32_t il, size_t n, const std::vector<const int32_t*>& tables) {
    const llama_hparams& hp = w_.hp;
    const int32_t dim = hp.dim;
    const layer& l = layers_[il];
    rmsnorm_rows(s_.x.data(), l.attn_norm, s_.h.data(), n, dim, hp.rms_eps);
    if (status st = tap(tap_point::attn_norm, il, s_.h.data(), n, dim); !st.ok()) return st;
    switch (hp.attention_of(il)) {
        case attention_block::standard:
            if (status st = standard_attention(il, n, tables); !st.ok()) return st;
            break;
        case attention_block::mla:
            if (status st = mla_attention(il, n, tables); !st.ok()) return st;
            break;
    }
    add_branch(l.post_attn_norm, n);

    rmsnorm_rows(s_.x.data(), l.ffn_norm, s_.h.data(), n, dim, hp.rms_eps);
    if (status st = tap(tap_point::ffn_norm, il, s_.h.data(), n, dim); !st.ok()) return st;
    switch (hp.ffn_of(il)) {
        case ffn_block::dense:
            if (status st = dense_ffn(il, n); !st.ok()) return st;
            break;
        case ffn_block::moe:
            if (status st = moe_block(il, n); !st.ok()) return st;
            break;
    }
    add_branch(l.post_ffn_norm, n);
    if (status st = tap(tap_point::layer_out, il, s_.x.data(), n, dim); !st.ok()) return st;
    return {};
}

}  // namespace troupe
