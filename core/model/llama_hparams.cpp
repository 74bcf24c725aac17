#include "core/model/llama_hparams.h"

#include <cmath>

#include "core/model/arch/arch_registry.h"

namespace troupe {
namespace {

// Reads "<arch>.<key>" as a positive integer; collects an error otherwise.
int32_t positive_int(const gguf::gguf_file& f, const std::string& key, std::string& errors) {
    auto v = f.get_uint(key);
    if (!v.ok()) {
        errors += "\n  " + v.message();
        return 0;
    }
    if (*v == 0 || *v > (1u << 30)) {
        errors += "\n  " + f.path() + ": " + key + " = " + std::to_string(*v) + " is out of range";
        return 0;
    }
    return static_cast<int32_t>(*v);
}

// A soft-capping value: absent or 0 means none; otherwise positive and finite.
status read_softcap(const gguf::gguf_file& f, const std::string& key, float& out) {
    const double c = f.float_or(key, 0.0);
    if (!std::isfinite(c) || c < 0.0) return make_error(f.path() + ": " + key + " must be a positive number");
    out = static_cast<float>(c);
    return {};
}

// The architecture's own keys beyond llama's: head size, windows, soft-capping, scales.
status read_architecture_keys(const gguf::gguf_file& f, llama_hparams& hp) {
    const std::string a = hp.architecture + ".";
    const arch_description& d = *hp.arch;
    if (hp.arch->window != window_layers::none) {
        const uint64_t w = f.uint_or(a + "attention.sliding_window", 0);
        if (w > (1u << 30)) return make_error(f.path() + ": " + a + "attention.sliding_window is out of range");
        // A window that covers the training context never takes effect: the layers are plain causal ones.
        hp.sliding_window = w < static_cast<uint64_t>(hp.n_ctx) ? static_cast<int32_t>(w) : 0;
    }
    // LongRoPE (Phi-3 128k, Phi-3.5): per-frequency factors in tensors, which the rotations here do not apply.
    for (const char* factors : {"rope_factors_long.weight", "rope_factors_short.weight"}) {
        if (f.find_tensor(factors) != nullptr) {
            return make_error(f.path() + ": tensor " + factors + " asks for LongRoPE frequency factors (" +
                              hp.architecture + " with a long context), which troupe does not apply yet");
        }
    }
    if (status st = read_softcap(f, a + "attn_logit_softcapping", hp.attn_softcap); !st.ok()) return st;
    if (status st = read_softcap(f, a + "final_logit_softcapping", hp.final_softcap); !st.ok()) return st;
    if (d.embed_scale_sqrt_dim) hp.embed_scale = std::sqrt(static_cast<float>(hp.dim));
    // Gemma 2 27B (46 layers) scales queries by 1 / sqrt(dim / n_heads) (its query_pre_attn_scalar, 144), not by
    // the head size (128), as llama.cpp does; the other sizes use the head size.
    if (d.name == "gemma2" && hp.n_layers == 46) {
        hp.query_scale = 1.0f / std::sqrt(static_cast<float>(hp.dim / hp.n_heads));
    }
    // Block kinds whose code lives outside the dense graph (branch points: llama_hparams::attention_of, ffn_of).
    if (d.attention == attention_block::mla) {
        auto mla = read_mla_params(f, hp.architecture);
        if (!mla.ok()) return mla.err();
        if (!mla->has_value()) {
            return make_error(f.path() + ": " + hp.architecture + " uses multi-head latent attention, but " + a +
                              "attention.kv_lora_rank (the latent's width) is missing");
        }
        hp.mla = **mla;
    }
    auto moe = read_moe_params(f, hp.architecture, hp.n_layers, hp.ffn_dim);
    if (!moe.ok()) return moe.err();
    hp.moe = *moe;
    if (d.experts_required && !hp.moe) {
        return make_error(f.path() + ": " + hp.architecture + " has mixture-of-experts FFN layers, but " + a +
                          "expert_count is missing or 0");
    }
    return {};
}

}  // namespace

bool llama_hparams::any_window() const {
    for (int32_t il = 0; il < n_layers; ++il) {
        if (window_of(il) > 0) return true;
    }
    return false;
}

std::string beyond_llama_graph(const llama_hparams& hp) {
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
    bool mla = false, moe = false;
    for (int32_t il = 0; il < hp.n_layers; ++il) {
        mla = mla || hp.attention_of(il) == attention_block::mla;
        moe = moe || hp.ffn_of(il) == ffn_block::moe;
    }
    add(mla, "multi-head latent attention");
    add(moe, "mixture-of-experts layers");
    if (features.empty()) return {};
    return "architecture " + hp.architecture + " (" + features + ")";
}

result<llama_hparams> read_llama_hparams(const gguf::gguf_file& f) {
    llama_hparams hp;
    auto arch = architecture_of(f);
    if (!arch.ok()) return arch.err();
    hp.arch = *arch;
    hp.architecture = std::string(hp.arch->name);
    hp.rope = hp.arch->rope;
    const std::string a = hp.architecture + ".";
    std::string errors;
    hp.dim = positive_int(f, a + "embedding_length", errors);
    hp.n_layers = positive_int(f, a + "block_count", errors);
    hp.n_heads = positive_int(f, a + "attention.head_count", errors);
    hp.ffn_dim = positive_int(f, a + "feed_forward_length", errors);
    hp.n_ctx = positive_int(f, a + "context_length", errors);
    hp.n_kv_heads =
        f.find(a + "attention.head_count_kv") ? positive_int(f, a + "attention.head_count_kv", errors) : hp.n_heads;
    if (f.find(a + "attention.key_length")) hp.head_dim = positive_int(f, a + "attention.key_length", errors);
    if (!errors.empty()) return make_error(f.path() + ": missing or bad model metadata:" + errors);

    if (hp.head_dim == 0) {  // no key_length: the heads split the embedding
        if (hp.dim % hp.n_heads != 0) {
            return make_error(f.path() + ": " + a + "embedding_length " + std::to_string(hp.dim) +
                              " is not a multiple of " + a + "attention.head_count " + std::to_string(hp.n_heads) +
                              " (and no " + a + "attention.key_length gives the head size)");
        }
        hp.head_dim = hp.dim / hp.n_heads;
    }
    if (hp.n_heads % hp.n_kv_heads != 0) {
        return make_error(f.path() + ": " + a + "attention.head_count " + std::to_string(hp.n_heads) +
                          " is not a multiple of " + a + "attention.head_count_kv " + std::to_string(hp.n_kv_heads));
    }
    if (hp.arch->attention == attention_block::standard && f.find(a + "attention.value_length")) {
        const uint64_t vl = f.uint_or(a + "attention.value_length", 0);
        if (vl != static_cast<uint64_t>(hp.head_dim)) {
            return make_error(f.path() + ": " + a + "attention.value_length " + std::to_string(vl) +
                              " differs from the key length " + std::to_string(hp.head_dim) +
                              ", which standard attention does not support");
        }
    }
    hp.rms_eps = static_cast<float>(f.float_or(a + "attention.layer_norm_rms_epsilon", 1e-5));
    hp.rope_base = static_cast<float>(f.float_or(a + "rope.freq_base", 10000.0));
    hp.rope_dims = static_cast<int32_t>(f.uint_or(a + "rope.dimension_count", hp.head_dim));
    if (hp.rope_dims <= 0 || hp.rope_dims > hp.head_dim || hp.rope_dims % 2 != 0) {
        return make_error(f.path() + ": " + a + "rope.dimension_count = " + std::to_string(hp.rope_dims) +
                          " must be even and at most the head size " + std::to_string(hp.head_dim));
    }
    const std::string scaling = f.string_or(a + "rope.scaling.type", "none");
    if (scaling == "linear") {
        const double factor = f.float_or(a + "rope.scaling.factor", 1.0);
        if (!(factor > 0.0)) return make_error(f.path() + ": " + a + "rope.scaling.factor must be > 0");
        hp.rope_scale = static_cast<float>(1.0 / factor);
    } else if (scaling != "none" && !(scaling == "yarn" && hp.arch->attention == attention_block::mla)) {
        return make_error(f.path() + ": " + a + "rope.scaling.type '" + scaling +
                          "' is not supported (supported: none, linear; yarn with multi-head latent attention)");
    }
    if (!std::isfinite(hp.rope_base) || hp.rope_base <= 0.0f) {
        return make_error(f.path() + ": " + a + "rope.freq_base must be a positive number");
    }
    if (status st = read_architecture_keys(f, hp); !st.ok()) return st.err();
    // Vocabulary size: the tokenizer's token list, else the embedding matrix.
    if (auto tokens = f.find("tokenizer.ggml.tokens"); tokens) {
        hp.n_vocab = static_cast<int32_t>(tokens->elements.size());
    } else if (auto* emb = f.find_tensor("token_embd.weight"); emb && emb->dims.size() == 2) {
        hp.n_vocab = static_cast<int32_t>(emb->dims[1]);
    } else {
        return make_error(f.path() + ": no tokenizer.ggml.tokens and no token_embd.weight to size the vocabulary");
    }
    return hp;
}

}  // namespace troupe
