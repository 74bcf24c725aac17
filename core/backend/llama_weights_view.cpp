#include "core/backend/llama_weights_view.h"

#include <tuple>

namespace troupe {
namespace {

std::string shape_text(int64_t rows, int64_t cols) {
    return "[" + std::to_string(rows) + ", " + std::to_string(cols) + "]";
}

status check_weight(const weight_view& w, const std::string& what, int64_t n_in, int64_t n_out) {
    if (!w.data) return make_error(what + " is missing");
    if (w.n_in != n_in || w.n_out != n_out) {
        return make_error(what + " has shape " + shape_text(w.n_out, w.n_in) + " (rows, row length), expected " +
                          shape_text(n_out, n_in));
    }
    const auto tr = type_traits(static_cast<uint32_t>(w.type));
    if (!tr) return make_error(what + " has unknown type " + std::to_string(static_cast<uint32_t>(w.type)));
    if (n_in % tr->block_size != 0) {
        return make_error(what + " is " + std::string(tr->name) + " with rows of " + std::to_string(n_in) +
                          ", not a multiple of its block of " + std::to_string(tr->block_size));
    }
    if (w.row_stride < row_bytes(w.type, n_in)) {
        return make_error(what + " has a row stride of " + std::to_string(w.row_stride) + " bytes, its rows take " +
                          std::to_string(row_bytes(w.type, n_in)));
    }
    return {};
}

// An optional vector (a bias or a post norm): absent is fine, present must have its shape.
status check_optional(const weight_view& w, const std::string& what, int64_t width) {
    if (!w.data) return {};
    return check_weight(w, what, width, 1);
}

// A MoE layer's tensors against the model's expert shape (moe_params.h).
status check_moe_layer(const moe_layer_weights& m, const moe_params& p, const std::string& lp, int64_t dim) {
    const int64_t e = p.n_experts, f = p.expert_ffn, sh = p.shared_ffn();
    const struct {
        const weight_view& w;
        const char* name;
        int64_t n_in, n_out;
    } table[] = {
        {m.router, "ffn_gate_inp (router)", dim, e},
        {m.gate_exps, "ffn_gate_exps", dim, e * f},
        {m.up_exps, "ffn_up_exps", dim, e * f},
        {m.down_exps, "ffn_down_exps", f, e * dim},
    };
    for (const auto& t : table) {
        if (status s = check_weight(t.w, lp + t.name, t.n_in, t.n_out); !s.ok()) return s;
    }
    if (sh > 0) {
        for (const auto& t : {std::make_tuple(&m.gate_shexp, "ffn_gate_shexp", dim, sh),
                              std::make_tuple(&m.up_shexp, "ffn_up_shexp", dim, sh),
                              std::make_tuple(&m.down_shexp, "ffn_down_shexp", sh, dim)}) {
            if (status s = check_weight(*std::get<0>(t), lp + std::get<1>(t), std::get<2>(t), std::get<3>(t)); !s.ok())
                return s;
        }
    }
    return {};
}

// A latent-attention layer's tensors against the model's MLA shape (mla_params.h).
status check_mla_layer(const mla_layer_weights& m, const mla_params& p, const std::string& lp, int64_t dim) {
    const int64_t q_rows = static_cast<int64_t>(p.n_heads) * p.head_dim();
    const int64_t kv_b_rows = static_cast<int64_t>(p.n_heads) * (p.qk_nope + p.v_dim);
    if (p.q_lora_rank > 0) {
        if (status s = check_weight(m.wq_a, lp + "attn_q_a", dim, p.q_lora_rank); !s.ok()) return s;
        if (status s = check_weight(m.q_a_norm, lp + "attn_q_a_norm", p.q_lora_rank, 1); !s.ok()) return s;
        if (status s = check_weight(m.wq_b, lp + "attn_q_b", p.q_lora_rank, q_rows); !s.ok()) return s;
    } else if (status s = check_weight(m.wq, lp + "attn_q", dim, q_rows); !s.ok()) {
        return s;
    }
    if (status s = check_weight(m.wkv_a, lp + "attn_kv_a_mqa", dim, p.latent_width()); !s.ok()) return s;
    if (status s = check_weight(m.kv_a_norm, lp + "attn_kv_a_norm", p.kv_lora_rank, 1); !s.ok()) return s;
    return check_weight(m.wkv_b, lp + "attn_kv_b", p.kv_lora_rank, kv_b_rows);
}

}  // namespace

bool needs_arch_features(const llama_weights_view& v) {
    const llama_view_hparams& hp = v.hp;
    if (hp.gelu || hp.embed_scale != 1.0f || hp.attn_scale > 0.0f || hp.attn_softcap > 0.0f ||
        hp.final_softcap > 0.0f || hp.moe || hp.mla)
        return true;
    for (const llama_layer_view& l : v.layers) {
        if (l.bq.data || l.bk.data || l.bv.data || l.post_attn_norm.data || l.post_ffn_norm.data || l.window != 0)
            return true;
    }
    return false;
}

status check_llama_view(const llama_weights_view& v) {
    if (!v.beyond_cuda_graph.empty()) {
        return make_error(v.name +
                          ": the CUDA runner runs llama, mistral, mixtral, qwen2, phi3 and gemma2, and this "
                          "model needs " +
                          v.beyond_cuda_graph + ", which only the CPU graph runs; run it on the CPU (device: cpu)");
    }
    const llama_view_hparams& hp = v.hp;
    if (hp.n_vocab <= 0 || hp.dim <= 0 || hp.n_layers <= 0 || hp.n_heads <= 0 || hp.n_kv_heads <= 0 ||
        hp.head_dim <= 0 || hp.ffn_dim <= 0 || hp.n_ctx <= 0) {
        return make_error(v.name + ": hyper-parameters must be positive (n_vocab " + std::to_string(hp.n_vocab) +
                          ", dim " + std::to_string(hp.dim) + ", n_layers " + std::to_string(hp.n_layers) +
                          ", n_heads " + std::to_string(hp.n_heads) + ", n_kv_heads " + std::to_string(hp.n_kv_heads) +
                          ", head_dim " + std::to_string(hp.head_dim) + ", ffn_dim " + std::to_string(hp.ffn_dim) +
                          ", n_ctx " + std::to_string(hp.n_ctx) + ")");
    }
    if (hp.n_heads % hp.n_kv_heads != 0) {
        return make_error(v.name + ": n_heads " + std::to_string(hp.n_heads) + " is not a multiple of n_kv_heads " +
                          std::to_string(hp.n_kv_heads));
    }
    const int32_t rot = hp.rope_dims == 0 ? hp.head_dim : hp.rope_dims;
    if (rot % 2 != 0 || rot > hp.head_dim) {
        return make_error(v.name + ": rope_dims " + std::to_string(rot) + " must be even and at most head_dim " +
                          std::to_string(hp.head_dim));
    }
    if (static_cast<int32_t>(v.layers.size()) != hp.n_layers) {
        return make_error(v.name + ": " + std::to_string(v.layers.size()) + " layers of weights for n_layers " +
                          std::to_string(hp.n_layers));
    }
    const int64_t q_width = static_cast<int64_t>(hp.n_heads) * hp.head_dim;
    const int64_t kv_width = static_cast<int64_t>(hp.n_kv_heads) * hp.head_dim;
    const std::string p = v.name + ": ";
    if (hp.moe) {
        const moe_params& m = *hp.moe;
        if (m.n_experts < 1 || m.n_experts > 256 || m.n_used < 1 || m.n_used > 16 || m.n_used > m.n_experts ||
            m.expert_ffn < 1 || m.n_shared < 0 ||
            (m.gating != moe_gating::softmax && m.gating != moe_gating::sigmoid)) {
            return make_error(p + "experts the CUDA graph cannot route: " + std::to_string(m.n_experts) +
                              " experts (1 to 256), " + std::to_string(m.n_used) +
                              " used per token (1 to 16, at most the experts), expert FFN " +
                              std::to_string(m.expert_ffn) + ", gating " +
                              std::to_string(static_cast<uint32_t>(m.gating)) + " (1 softmax, 2 sigmoid)");
        }
    }
    if (status s = check_weight(v.token_embd, p + "token_embd", hp.dim, hp.n_vocab); !s.ok()) return s;
    if (status s = check_weight(v.output_norm, p + "output_norm", hp.dim, 1); !s.ok()) return s;
    if (status s = check_weight(v.output, p + "output", hp.dim, hp.n_vocab); !s.ok()) return s;
    if (hp.mla) {
        const mla_params& m = *hp.mla;
        if (m.n_heads != hp.n_heads || m.kv_lora_rank < 1 || m.rope_dim < 2 || m.rope_dim % 2 != 0 || m.qk_nope < 0 ||
            m.v_dim < 1 || m.latent_width() > 1024) {
            return make_error(p + "latent attention the CUDA graph cannot run: " + std::to_string(m.n_heads) +
                              " heads (the model's " + std::to_string(hp.n_heads) + "), kv_lora_rank " +
                              std::to_string(m.kv_lora_rank) + " + rope_dim " + std::to_string(m.rope_dim) +
                              " (even, at most 1024 together), qk_nope " + std::to_string(m.qk_nope) + ", v_dim " +
                              std::to_string(m.v_dim));
        }
    }
    for (int32_t il = 0; il < hp.n_layers; ++il) {
        const llama_layer_view& l = v.layers[il];
        const std::string lp = p + "layer " + std::to_string(il) + " ";
        if (l.moe && !hp.moe) return make_error(lp + "has experts, and the model no expert parameters");
        if (l.mla.has_value() != hp.mla.has_value()) {
            return make_error(lp + (hp.mla ? "has no latent attention tensors, and the model latent attention"
                                           : "has latent attention tensors, and the model no latent attention"));
        }
        if (l.mla) {
            if (status s = check_mla_layer(*l.mla, *hp.mla, lp, hp.dim); !s.ok()) return s;
        }
        const int64_t o_width = l.mla ? static_cast<int64_t>(hp.mla->n_heads) * hp.mla->v_dim : q_width;
        if (l.moe) {
            if (status s = check_moe_layer(*l.moe, *hp.moe, lp, hp.dim); !s.ok()) return s;
        }
        const bool dense = !l.moe;  // a MoE layer's w_gate, w_up, w_down are unused
        const struct {
            const weight_view& w;
            const char* name;
            int64_t n_in, n_out;
        } table[] = {
            {l.attn_norm, "attn_norm", hp.dim, 1},
            {l.wq, "wq", hp.dim, q_width},
            {l.wk, "wk", hp.dim, kv_width},
            {l.wv, "wv", hp.dim, kv_width},
            {l.wo, "wo", q_width, hp.dim},
            {l.ffn_norm, "ffn_norm", hp.dim, 1},
            {l.w_gate, "w_gate", hp.dim, hp.ffn_dim},
            {l.w_up, "w_up", hp.dim, hp.ffn_dim},
            {l.w_down, "w_down", hp.ffn_dim, hp.dim},
        };
        for (const auto& e : table) {
            if (!dense && (&e.w == &l.w_gate || &e.w == &l.w_up || &e.w == &l.w_down)) continue;
            if (l.mla && (&e.w == &l.wq || &e.w == &l.wk || &e.w == &l.wv)) continue;  // the latent block's instead
            if (status s = check_weight(e.w, lp + e.name, &e.w == &l.wo ? o_width : e.n_in, e.n_out); !s.ok()) return s;
        }
        if ((l.bq.data != nullptr) != (l.bk.data != nullptr) || (l.bq.data != nullptr) != (l.bv.data != nullptr)) {
            return make_error(lp + "has biases for only some of q, k and v: the graph adds all three or none");
        }
        const struct {
            const weight_view& w;
            const char* name;
            int64_t width;
        } optional[] = {{l.bq, "bq", q_width},
                        {l.bk, "bk", kv_width},
                        {l.bv, "bv", kv_width},
                        {l.post_attn_norm, "post_attn_norm", hp.dim},
                        {l.post_ffn_norm, "post_ffn_norm", hp.dim}};
        for (const auto& e : optional) {
            if (status s = check_optional(e.w, lp + e.name, e.width); !s.ok()) return s;
        }
        if (l.window < 0) return make_error(lp + "has window " + std::to_string(l.window) + ", expected >= 0");
    }
    return {};
}

}  // namespace troupe
