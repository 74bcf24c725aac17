#include "core/model/llama_hparams.h"

#include <cmath>

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

}  // namespace

result<llama_hparams> read_llama_hparams(const gguf::gguf_file& f) {
    llama_hparams hp;
    auto arch = f.get_string("general.architecture");
    if (!arch.ok()) return make_error(arch.message());
    hp.architecture = *arch;
    if (hp.architecture != "llama" && hp.architecture != "mistral") {
        return make_error(f.path() + ": general.architecture is '" + hp.architecture +
                          "', which troupe does not run (supported: " + supported_architectures + ")");
    }
    const std::string a = hp.architecture + ".";
    std::string errors;
    hp.dim = positive_int(f, a + "embedding_length", errors);
    hp.n_layers = positive_int(f, a + "block_count", errors);
    hp.n_heads = positive_int(f, a + "attention.head_count", errors);
    hp.ffn_dim = positive_int(f, a + "feed_forward_length", errors);
    hp.n_ctx = positive_int(f, a + "context_length", errors);
    hp.n_kv_heads =
        f.find(a + "attention.head_count_kv") ? positive_int(f, a + "attention.head_count_kv", errors) : hp.n_heads;
    if (!errors.empty()) return make_error(f.path() + ": missing or bad model metadata:" + errors);

    if (hp.dim % hp.n_heads != 0) {
        return make_error(f.path() + ": " + a + "embedding_length " + std::to_string(hp.dim) +
                          " is not a multiple of " + a + "attention.head_count " + std::to_string(hp.n_heads));
    }
    if (hp.n_heads % hp.n_kv_heads != 0) {
        return make_error(f.path() + ": " + a + "attention.head_count " + std::to_string(hp.n_heads) +
                          " is not a multiple of " + a + "attention.head_count_kv " + std::to_string(hp.n_kv_heads));
    }
    hp.head_dim = hp.dim / hp.n_heads;
    if (f.find(a + "attention.key_length")) {
        auto kl = f.get_uint(a + "attention.key_length");
        if (!kl.ok() || *kl != static_cast<uint64_t>(hp.head_dim)) {
            return make_error(f.path() + ": " + a +
                              "attention.key_length differs from embedding_length / head_count (" +
                              std::to_string(hp.head_dim) + "), which troupe does not support");
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
    } else if (scaling != "none") {
        return make_error(f.path() + ": " + a + "rope.scaling.type '" + scaling +
                          "' is not supported (supported: none, linear)");
    }
    if (!std::isfinite(hp.rope_base) || hp.rope_base <= 0.0f) {
        return make_error(f.path() + ": " + a + "rope.freq_base must be a positive number");
    }
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
