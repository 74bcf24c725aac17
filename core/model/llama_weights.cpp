#include "core/model/llama_weights.h"

#include <string>

namespace troupe {
namespace {

weight_view view_of(const gguf::tensor_info& t) {
    const int64_t n_in = t.dims[0];
    const int64_t n_out = t.dims.size() > 1 ? t.dims[1] : 1;
    return weight_view{t.type, t.data, n_in, n_out, row_bytes(t.type, n_in)};
}

class binder {
public:
    explicit binder(const gguf::gguf_file& f) : f_(f) {}

    // A matrix of n_out rows of n_in elements (GGUF dims [n_in, n_out]) of a type troupe computes with.
    weight_view matrix(const std::string& name, int64_t n_in, int64_t n_out) {
        const int64_t dims[2] = {n_in, n_out};
        return bind(name, std::span<const int64_t>(dims, 2), false);
    }
    // A norm vector, which must be F32 (as llama.cpp's converters write them).
    weight_view vector(const std::string& name, int64_t n) {
        const int64_t dims[1] = {n};
        return bind(name, std::span<const int64_t>(dims, 1), true);
    }
    const std::string& errors() const { return errors_; }

private:
    weight_view bind(const std::string& name, std::span<const int64_t> dims, bool must_be_f32) {
        auto t = f_.tensor(name, dims);
        if (!t.ok()) {
            errors_ += "\n  " + t.message();
            return {};
        }
        const gguf::tensor_info& info = **t;
        if (!traits(info.type).computable) {
            errors_ += "\n  " + f_.path() + ": tensor " + name + " has type " + std::string(traits(info.type).name) +
                       ", which troupe cannot compute with (supported: F32, F16, BF16, Q8_0, Q4_0, Q4_K, Q6_K)";
            return {};
        }
        if (must_be_f32 && info.type != ggml_type::f32) {
            errors_ += "\n  " + f_.path() + ": tensor " + name + " has type " + std::string(traits(info.type).name) +
                       ", expected F32";
            return {};
        }
        return view_of(info);
    }

    const gguf::gguf_file& f_;
    std::string errors_;
};

}  // namespace

result<llama_weights> bind_llama_weights(std::shared_ptr<const gguf::gguf_file> file) {
    auto hp = read_llama_hparams(*file);
    if (!hp.ok()) return make_error(hp.message());
    llama_weights w;
    w.file = file;
    w.hp = *hp;
    const auto& h = w.hp;
    binder b(*file);
    w.token_embd = b.matrix("token_embd.weight", h.dim, h.n_vocab);
    w.output_norm = b.vector("output_norm.weight", h.dim);
    if (file->find_tensor("output.weight")) {
        w.output = b.matrix("output.weight", h.dim, h.n_vocab);
    } else {
        w.output = w.token_embd;
        w.tied_output = true;
    }
    for (int32_t l = 0; l < h.n_layers; ++l) {
        const std::string p = "blk." + std::to_string(l) + ".";
        llama_layer_weights lw;
        lw.attn_norm = b.vector(p + "attn_norm.weight", h.dim);
        lw.wq = b.matrix(p + "attn_q.weight", h.dim, h.q_width());
        lw.wk = b.matrix(p + "attn_k.weight", h.dim, h.kv_width());
        lw.wv = b.matrix(p + "attn_v.weight", h.dim, h.kv_width());
        lw.wo = b.matrix(p + "attn_output.weight", h.q_width(), h.dim);
        lw.ffn_norm = b.vector(p + "ffn_norm.weight", h.dim);
        lw.w_gate = b.matrix(p + "ffn_gate.weight", h.dim, h.ffn_dim);
        lw.w_up = b.matrix(p + "ffn_up.weight", h.dim, h.ffn_dim);
        lw.w_down = b.matrix(p + "ffn_down.weight", h.ffn_dim, h.dim);
        w.layers.push_back(lw);
    }
    if (!b.errors().empty()) return make_error(file->path() + ": the model's tensors do not fit llama:" + b.errors());
    return w;
}

}  // namespace troupe
