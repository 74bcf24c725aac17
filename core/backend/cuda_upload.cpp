#include "core/backend/cuda_upload.h"

#include <cstring>
#include <string>

#include "kernels/fp16.h"
#include "kernels/ref/quants.h"

namespace troupe {
namespace {

// The backend's call into a quant plugin's product (cuda_backend_abi.h troupe_cuda_external_matrix).
const char* external_matmul(void* ctx, const float* x, float* y, int32_t n_tokens, void* stream) {
    auto* e = static_cast<cuda_external_weight*>(ctx);
    const status s = e->op->matmul_on_stream(*e->weight, x, y, n_tokens, stream);
    if (s.ok()) return nullptr;
    e->error = e->what + " (" + e->op->name() + "): " + s.message();
    return e->error.c_str();
}

class preparer {
public:
    preparer(cuda_upload& up, cuda_weight_type to, const std::vector<std::shared_ptr<quant_op>>& quant)
        : up_(up), to_(to), quant_(quant) {}

    // A product matrix: to the first quant plugin (loaded for cuda) that claims its type, as on the CPU; else the
    // backend's own types.
    result<troupe_cuda_matrix> matrix(const weight_view& w, const std::string& what) {
        for (const auto& op : quant_) {
            if (op && op->claims(w.type)) return external(w, op, what);
        }
        if (!cuda_takes_weight_type(w.type)) return unsupported(w, what);
        if (w.type == ggml_type::f32 || w.type == ggml_type::f16 || w.type == ggml_type::bf16) {
            return troupe_cuda_matrix{static_cast<uint32_t>(w.type), w.data, w.n_in, w.n_out, w.row_stride};
        }
        return dequantized(w, to_ == cuda_weight_type::f32);
    }

    // Norm weights: F32 as is, any other type converted to F32.
    result<troupe_cuda_matrix> vector(const weight_view& w, const std::string& what) {
        if (!cuda_takes_weight_type(w.type)) return unsupported(w, what);
        if (w.type == ggml_type::f32) return troupe_cuda_matrix{TROUPE_CUDA_F32, w.data, w.n_in, w.n_out, w.row_stride};
        return dequantized(w, true);
    }

    // A matrix the graph reads rows of (the token embedding): the backend's own types only.
    result<troupe_cuda_matrix> rows(const weight_view& w, const std::string& what) {
        if (!cuda_takes_weight_type(w.type)) return unsupported(w, what);
        if (w.type == ggml_type::f32 || w.type == ggml_type::f16 || w.type == ggml_type::bf16) {
            return troupe_cuda_matrix{static_cast<uint32_t>(w.type), w.data, w.n_in, w.n_out, w.row_stride};
        }
        return dequantized(w, to_ == cuda_weight_type::f32);
    }

private:
    error unsupported(const weight_view& w, const std::string& what) const {
        std::string plugins;
        for (const auto& op : quant_) plugins += (plugins.empty() ? "" : ", ") + (op ? op->name() : "?");
        return make_error(
            what + " is " + std::string(traits(w.type).name) +
            ": the CUDA backend takes F32, F16, BF16, Q8_0, Q4_0, Q5_0, Q2_K, Q3_K, Q4_K, Q5_K and Q6_K weights" +
            (plugins.empty() ? std::string(", and no quant plugin was loaded for cuda")
                             : ", and no quant plugin loaded for cuda (" + plugins + ") claims it"));
    }
    result<troupe_cuda_matrix> external(const weight_view& w, const std::shared_ptr<quant_op>& op,
                                        const std::string& what) {
        auto prepared = op->prepare(w);
        if (!prepared.ok()) return make_error(what + " (" + op->name() + " on cuda): " + prepared.message());
        auto e = std::make_unique<cuda_external_weight>();
        e->op = op;
        e->weight = std::move(*prepared);
        e->what = what;
        e->c.struct_size = sizeof e->c;
        e->c.matmul = external_matmul;
        e->c.ctx = e.get();
        e->c.device_bytes = e->weight->n_bytes();
        up_.externals.push_back(std::move(e));
        return troupe_cuda_matrix{TROUPE_CUDA_EXTERNAL, &up_.externals.back()->c, w.n_in, w.n_out, 0};
    }
    troupe_cuda_matrix dequantized(const weight_view& w, bool to_f32) {
        const size_t elem = to_f32 ? 4 : 2;
        auto& buf = up_.storage.emplace_back(static_cast<size_t>(w.n_in) * w.n_out * elem);
        std::vector<float> row(w.n_in);
        for (int64_t r = 0; r < w.n_out; ++r) {
            const auto* src = static_cast<const uint8_t*>(w.data) + static_cast<size_t>(r) * w.row_stride;
            ref::dequantize_row(w.type, src, row.data(), w.n_in);
            uint8_t* dst = buf.data() + static_cast<size_t>(r) * w.n_in * elem;
            if (to_f32) {
                std::memcpy(dst, row.data(), row.size() * 4);
            } else {
                auto* h = reinterpret_cast<uint16_t*>(dst);
                for (int64_t i = 0; i < w.n_in; ++i) h[i] = fp32_to_fp16(row[i]);
            }
        }
        return troupe_cuda_matrix{to_f32 ? TROUPE_CUDA_F32 : TROUPE_CUDA_F16, buf.data(), w.n_in, w.n_out,
                                  static_cast<size_t>(w.n_in) * elem};
    }

    cuda_upload& up_;
    cuda_weight_type to_;
    const std::vector<std::shared_ptr<quant_op>>& quant_;
};

}  // namespace

bool cuda_takes_weight_type(ggml_type type) {
    static_assert(TROUPE_CUDA_F32 == static_cast<uint32_t>(ggml_type::f32) &&
                  TROUPE_CUDA_F16 == static_cast<uint32_t>(ggml_type::f16) &&
                  TROUPE_CUDA_BF16 == static_cast<uint32_t>(ggml_type::bf16));
    return type == ggml_type::f32 || type == ggml_type::f16 || type == ggml_type::bf16 || type == ggml_type::q8_0 ||
           type == ggml_type::q4_0 || type == ggml_type::q5_0 || type == ggml_type::q2_k || type == ggml_type::q3_k ||
           type == ggml_type::q4_k || type == ggml_type::q5_k || type == ggml_type::q6_k;
}

uint64_t unrouted_expert_bytes(const troupe_cuda_model_desc& d) {
    if (d.moe_layers == nullptr || d.moe_n_experts <= 0) return 0;
    uint64_t experts = 0;  // as the backend stores them: rows packed, F32 or a 16-bit type
    for (int32_t il = 0; il < d.n_layers; ++il) {
        const troupe_cuda_moe_layer& l = d.moe_layers[il];
        for (const troupe_cuda_matrix* m : {&l.gate_exps, &l.up_exps, &l.down_exps}) {
            if (m->data) experts += static_cast<uint64_t>(m->n_in) * m->n_out * (m->type == TROUPE_CUDA_F32 ? 4 : 2);
        }
    }
    return experts / d.moe_n_experts * (d.moe_n_experts - d.moe_n_used);
}

result<std::unique_ptr<cuda_upload>> prepare_cuda_upload(const llama_weights_view& view,
                                                         const cuda_runner_params& params) {
    if (status s = check_llama_view(view); !s.ok()) return s.err();
    const llama_view_hparams& hp = view.hp;
    auto up = std::make_unique<cuda_upload>();
    preparer prep(*up, params.dequantize_to, params.quant);
    troupe_cuda_model_desc& d = up->desc;
    d.struct_size = sizeof d;
    d.n_vocab = hp.n_vocab;
    d.dim = hp.dim;
    d.n_layers = hp.n_layers;
    d.n_heads = hp.n_heads;
    d.n_kv_heads = hp.n_kv_heads;
    d.head_dim = hp.head_dim;
    d.ffn_dim = hp.ffn_dim;
    d.n_ctx = hp.n_ctx;
    d.rms_eps = hp.rms_eps;
    d.rope_base = hp.rope_base;
    d.rope_freq_scale = hp.rope_scale;
    d.rope_n_rot = hp.rope_dims == 0 ? hp.head_dim : hp.rope_dims;
    d.rope_neox = hp.rope_neox ? 1 : 0;
    d.kv_type = params.kv_f16 ? TROUPE_CUDA_F16 : TROUPE_CUDA_F32;
    d.block_size = params.block_size;
    d.n_blocks = params.n_blocks;
    d.max_kv_tokens = params.max_kv_tokens > 0 ? params.max_kv_tokens : int64_t{32} * hp.n_ctx;
    d.kv_memory_fraction = params.kv_memory_fraction;

    const std::string p = view.name + ": ";
    const auto put = [](result<troupe_cuda_matrix> r, troupe_cuda_matrix& dst) -> status {
        if (!r.ok()) return r.err();
        dst = r.value();
        return {};
    };
    up->layers.resize(hp.n_layers);
    for (int32_t il = 0; il < hp.n_layers; ++il) {
        const llama_layer_view& l = view.layers[il];
        troupe_cuda_layer& o = up->layers[il];
        const std::string lp = p + "layer " + std::to_string(il) + " ";
        for (status s :
             {put(prep.vector(l.attn_norm, lp + "attn_norm"), o.attn_norm), put(prep.matrix(l.wo, lp + "wo"), o.wo),
              put(prep.vector(l.ffn_norm, lp + "ffn_norm"), o.ffn_norm)}) {
            if (!s.ok()) return s.err();
        }
        if (!l.mla) {  // a latent layer's queries and keys are its MLA block's (below)
            for (status s : {put(prep.matrix(l.wq, lp + "wq"), o.wq), put(prep.matrix(l.wk, lp + "wk"), o.wk),
                             put(prep.matrix(l.wv, lp + "wv"), o.wv)}) {
                if (!s.ok()) return s.err();
            }
        }
        if (l.moe) continue;  // its FFN is the experts' (below)
        for (status s :
             {put(prep.matrix(l.w_gate, lp + "w_gate"), o.w_gate), put(prep.matrix(l.w_up, lp + "w_up"), o.w_up),
              put(prep.matrix(l.w_down, lp + "w_down"), o.w_down)}) {
            if (!s.ok()) return s.err();
        }
    }
    d.layers = up->layers.data();
    if (hp.moe) {
        // The experts' matrices stay the backend's own types (dequantized where stored quantized): its expert kernels
        // index rows of the stacked tensors, which a plugin's prepared weight does not offer.
        const moe_params& mp = *hp.moe;
        up->moe_layers.resize(hp.n_layers);
        for (int32_t il = 0; il < hp.n_layers; ++il) {
            const llama_layer_view& l = view.layers[il];
            if (!l.moe) continue;
            const moe_layer_weights& m = *l.moe;
            troupe_cuda_moe_layer& o = up->moe_layers[il];
            const std::string lp = p + "layer " + std::to_string(il) + " ";
            for (status s : {put(prep.rows(m.router, lp + "ffn_gate_inp"), o.router),
                             put(prep.rows(m.gate_exps, lp + "ffn_gate_exps"), o.gate_exps),
                             put(prep.rows(m.up_exps, lp + "ffn_up_exps"), o.up_exps),
                             put(prep.rows(m.down_exps, lp + "ffn_down_exps"), o.down_exps)}) {
                if (!s.ok()) return s.err();
            }
            if (m.probs_bias)
                o.probs_bias = troupe_cuda_matrix{TROUPE_CUDA_F32, m.probs_bias, mp.n_experts, 1,
                                                  static_cast<size_t>(mp.n_experts) * sizeof(float)};
            if (mp.shared_ffn() > 0) {
                for (status s : {put(prep.matrix(m.gate_shexp, lp + "ffn_gate_shexp"), o.gate_shexp),
                                 put(prep.matrix(m.up_shexp, lp + "ffn_up_shexp"), o.up_shexp),
                                 put(prep.matrix(m.down_shexp, lp + "ffn_down_shexp"), o.down_shexp)}) {
                    if (!s.ok()) return s.err();
                }
            }
        }
        d.moe_layers = up->moe_layers.data();
        d.moe_n_experts = mp.n_experts;
        d.moe_n_used = mp.n_used;
        d.moe_expert_ffn = mp.expert_ffn;
        d.moe_shared_ffn = mp.shared_ffn();
        d.moe_gating = static_cast<int32_t>(mp.gating);
        d.moe_norm_weights = mp.norm_weights ? 1 : 0;
        d.moe_weights_scale = mp.weights_scale;
    }
    if (hp.mla) {
        const mla_params& mp = *hp.mla;
        up->mla_layers.resize(hp.n_layers);
        for (int32_t il = 0; il < hp.n_layers; ++il) {
            const mla_layer_weights& m = *view.layers[il].mla;
            troupe_cuda_mla_layer& o = up->mla_layers[il];
            const std::string lp = p + "layer " + std::to_string(il) + " ";
            if (mp.q_lora_rank > 0) {
                for (status s : {put(prep.matrix(m.wq_a, lp + "attn_q_a"), o.wq_a),
                                 put(prep.vector(m.q_a_norm, lp + "attn_q_a_norm"), o.q_a_norm),
                                 put(prep.matrix(m.wq_b, lp + "attn_q_b"), o.wq_b)}) {
                    if (!s.ok()) return s.err();
                }
            } else if (status s = put(prep.matrix(m.wq, lp + "attn_q"), o.wq); !s.ok()) {
                return s.err();
            }
            // attn_kv_b's rows are read by the latent kernels (W_UK, W_UV per head): the backend's own types.
            for (status s : {put(prep.matrix(m.wkv_a, lp + "attn_kv_a_mqa"), o.wkv_a),
                             put(prep.vector(m.kv_a_norm, lp + "attn_kv_a_norm"), o.kv_a_norm),
                             put(prep.rows(m.wkv_b, lp + "attn_kv_b"), o.wkv_b)}) {
                if (!s.ok()) return s.err();
            }
        }
        // RoPE as mla_params::rope_angle turns pair i at position p: p * freq[i], blended by ramp[i] under YaRN.
        for (int32_t i = 0; i < mp.rope_dim / 2; ++i) {
            up->mla_rope_freq.push_back(mp.rope_freq(i));
            up->mla_rope_ramp.push_back(mp.rope_ramp(i));
        }
        d.mla_yarn_factor = mp.yarn ? mp.yarn->factor : 1.0f;
        d.mla_layers = up->mla_layers.data();
        d.mla_q_lora_rank = mp.q_lora_rank;
        d.mla_kv_lora_rank = mp.kv_lora_rank;
        d.mla_qk_nope = mp.qk_nope;
        d.mla_rope_dim = mp.rope_dim;
        d.mla_v_dim = mp.v_dim;
        d.mla_rope_freq = up->mla_rope_freq.data();
        d.mla_rope_ramp = up->mla_rope_ramp.data();
    }
    d.ffn_activation = hp.gelu ? TROUPE_CUDA_ACT_GELU_TANH : TROUPE_CUDA_ACT_SILU;
    d.embed_scale = hp.embed_scale;
    d.attn_scale = hp.mla ? hp.mla->attention_scale() : hp.attn_scale;
    d.attn_softcap = hp.attn_softcap;
    d.final_softcap = hp.final_softcap;
    if (needs_arch_features(view)) {
        up->layer_features.resize(hp.n_layers);
        for (int32_t il = 0; il < hp.n_layers; ++il) {
            const llama_layer_view& l = view.layers[il];
            troupe_cuda_layer_features& o = up->layer_features[il];
            const std::string lp = p + "layer " + std::to_string(il) + " ";
            const struct {
                const weight_view& w;
                const char* name;
                troupe_cuda_matrix& dst;
            } vectors[] = {{l.bq, "bq", o.bq},
                           {l.bk, "bk", o.bk},
                           {l.bv, "bv", o.bv},
                           {l.post_attn_norm, "post_attn_norm", o.post_attn_norm},
                           {l.post_ffn_norm, "post_ffn_norm", o.post_ffn_norm}};
            for (const auto& e : vectors) {
                if (!e.w.data) continue;  // absent: data stays null
                if (status s = put(prep.vector(e.w, lp + e.name), e.dst); !s.ok()) return s.err();
            }
            o.window = l.window;
        }
        d.layer_features = up->layer_features.data();
    }
    if (status s = put(prep.rows(view.token_embd, p + "token_embd"), d.token_embd); !s.ok()) return s.err();
    if (status s = put(prep.vector(view.output_norm, p + "output_norm"), d.output_norm); !s.ok()) return s.err();
    if (view.output.data == view.token_embd.data && view.output.type == view.token_embd.type) {
        d.output = d.token_embd;  // tied: the backend uploads it once
    } else if (status s = put(prep.matrix(view.output, p + "output"), d.output); !s.ok()) {
        return s.err();
    }
    return up;
}

}  // namespace troupe
