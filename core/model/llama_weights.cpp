#include "core/model/llama_weights.h"

#include <string>

namespace troupe {
namespace {

weight_view view_of(const gguf::tensor_info& t) {
    const int64_t n_in = t.dims[0];
    const int64_t n_out = t.dims.size() > 1 ? t.dims[1] : 1;
    return weight_view{t.type, t.data, n_in, n_out, row_bytes(t.type, n_in)};
}

std::string shape_string(std::span<const int64_t> dims) {
    std::string s = "[";
    for (size_t i = 0; i < dims.size(); ++i) s += (i ? ", " : "") + std::to_string(dims[i]);
    return s + "]";
}

// Binds tensors by name and shape; remembers the first problem and counts the others, so a file that lacks a
// tensor in every layer gives one error.
class binder {
public:
    binder(const gguf::gguf_file& f, std::string arch) : f_(f), arch_(std::move(arch)) {}

    // A matrix of n_out rows of n_in elements (GGUF dims [n_in, n_out]) of a type troupe computes with.
    weight_view matrix(const std::string& name, int64_t n_in, int64_t n_out) {
        const int64_t dims[2] = {n_in, n_out};
        return bind(name, std::span<const int64_t>(dims, 2), false);
    }
    // A norm or bias vector, which must be F32 (as llama.cpp's converters write them).
    weight_view vector(const std::string& name, int64_t n) {
        const int64_t dims[1] = {n};
        return bind(name, std::span<const int64_t>(dims, 1), true);
    }
    // The error, or empty.
    std::string error() const {
        if (first_.empty()) return {};
        return first_ + (n_more_ > 0 ? " (and " + std::to_string(n_more_) + " more tensors missing or misfit)" : "");
    }

private:
    void fail(std::string message) {
        if (first_.empty()) {
            first_ = std::move(message);
        } else {
            ++n_more_;
        }
    }
    weight_view bind(const std::string& name, std::span<const int64_t> dims, bool must_be_f32) {
        const std::string expected = shape_string(dims) + (must_be_f32 ? " F32" : "");
        const gguf::tensor_info* t = f_.find_tensor(name);
        if (t == nullptr) {
            fail(f_.path() + ": tensor " + name + " is missing; " + arch_ + " expects it with shape " + expected);
            return {};
        }
        if (!std::equal(t->dims.begin(), t->dims.end(), dims.begin(), dims.end())) {
            fail(f_.path() + ": tensor " + name + " has shape " + shape_string(t->dims) + ", expected " + expected);
            return {};
        }
        if (!traits(t->type).computable) {
            fail(f_.path() + ": tensor " + name + " has type " + std::string(traits(t->type).name) +
                 ", which troupe cannot compute with (supported: " + computable_type_names() + ")");
            return {};
        }
        if (must_be_f32 && t->type != ggml_type::f32) {
            fail(f_.path() + ": tensor " + name + " has type " + std::string(traits(t->type).name) + ", expected F32");
            return {};
        }
        return view_of(*t);
    }

    const gguf::gguf_file& f_;
    std::string arch_;
    std::string first_;
    int n_more_ = 0;
};

// The attention block's tensors of layer p ("blk.N.") as the description says.
void bind_attention(binder& b, const llama_hparams& h, const std::string& p, llama_layer_weights& lw) {
    const arch_description& d = *h.arch;
    lw.attn_norm = b.vector(p + "attn_norm.weight", h.dim);
    if (d.fused_qkv) {
        const weight_view qkv = b.matrix(p + "attn_qkv.weight", h.dim, h.q_width() + 2 * h.kv_width());
        if (qkv.data != nullptr) {
            lw.wq = weight_rows(qkv, 0, h.q_width());
            lw.wk = weight_rows(qkv, h.q_width(), h.q_width() + h.kv_width());
            lw.wv = weight_rows(qkv, h.q_width() + h.kv_width(), h.q_width() + 2 * h.kv_width());
        }
    } else {
        lw.wq = b.matrix(p + "attn_q.weight", h.dim, h.q_width());
        lw.wk = b.matrix(p + "attn_k.weight", h.dim, h.kv_width());
        lw.wv = b.matrix(p + "attn_v.weight", h.dim, h.kv_width());
    }
    if (d.qkv_bias) {
        lw.bq = b.vector(p + "attn_q.bias", h.q_width());
        lw.bk = b.vector(p + "attn_k.bias", h.kv_width());
        lw.bv = b.vector(p + "attn_v.bias", h.kv_width());
    }
    lw.wo = b.matrix(p + "attn_output.weight", h.q_width(), h.dim);
    if (d.post_norms) lw.post_attn_norm = b.vector(p + "post_attention_norm.weight", h.dim);
}

// The dense FFN block's tensors of layer p.
void bind_dense_ffn(binder& b, const llama_hparams& h, const std::string& p, llama_layer_weights& lw) {
    const arch_description& d = *h.arch;
    lw.ffn_norm = b.vector(p + "ffn_norm.weight", h.dim);
    if (d.fused_gate_up) {
        const weight_view gate_up = b.matrix(p + "ffn_up.weight", h.dim, 2 * static_cast<int64_t>(h.ffn_dim));
        if (gate_up.data != nullptr) {
            lw.w_gate = weight_rows(gate_up, 0, h.ffn_dim);
            lw.w_up = weight_rows(gate_up, h.ffn_dim, 2 * static_cast<int64_t>(h.ffn_dim));
        }
    } else {
        lw.w_gate = b.matrix(p + "ffn_gate.weight", h.dim, h.ffn_dim);
        lw.w_up = b.matrix(p + "ffn_up.weight", h.dim, h.ffn_dim);
    }
    lw.w_down = b.matrix(p + "ffn_down.weight", h.ffn_dim, h.dim);
    if (d.post_norms) lw.post_ffn_norm = b.vector(p + "post_ffw_norm.weight", h.dim);
}

}  // namespace

weight_view weight_rows(const weight_view& w, int64_t r0, int64_t r1) {
    return weight_view{w.type, static_cast<const uint8_t*>(w.data) + static_cast<size_t>(r0) * w.row_stride, w.n_in,
                       r1 - r0, w.row_stride};
}

result<llama_weights> bind_llama_weights(std::shared_ptr<const gguf::gguf_file> file) {
    auto hp = read_llama_hparams(*file);
    if (!hp.ok()) return make_error(hp.message());
    llama_weights w;
    w.file = file;
    w.hp = *hp;
    const auto& h = w.hp;
    binder b(*file, h.architecture);
    w.token_embd = b.matrix("token_embd.weight", h.dim, h.n_vocab);
    w.output_norm = b.vector("output_norm.weight", h.dim);
    if (file->find_tensor("output.weight")) {
        w.output = b.matrix("output.weight", h.dim, h.n_vocab);
    } else {
        w.output = w.token_embd;
        w.tied_output = true;
    }
    std::string mla_errors;  // bind_mla_layer's lines
    std::string moe_errors;  // bind_moe_layer's lines
    for (int32_t l = 0; l < h.n_layers; ++l) {
        const std::string p = "blk." + std::to_string(l) + ".";
        llama_layer_weights lw{};
        switch (h.attention_of(l)) {
            case attention_block::standard:
                bind_attention(b, h, p, lw);
                break;
            case attention_block::mla:
                lw.attn_norm = b.vector(p + "attn_norm.weight", h.dim);
                lw.wo = b.matrix(p + "attn_output.weight", h.mla->out_width(), h.dim);
                lw.mla = bind_mla_layer(*file, *h.mla, l, h.dim, mla_errors);
                break;
        }
        switch (h.ffn_of(l)) {
            case ffn_block::dense:
                bind_dense_ffn(b, h, p, lw);
                break;
            case ffn_block::moe:
                lw.ffn_norm = b.vector(p + "ffn_norm.weight", h.dim);
                lw.moe = bind_moe_layer(*file, *h.moe, l, h.dim, moe_errors);
                if (h.arch->post_norms) lw.post_ffn_norm = b.vector(p + "post_ffw_norm.weight", h.dim);
                break;
        }
        w.layers.push_back(lw);
    }
    if (const std::string e = b.error(); !e.empty()) return make_error(e);
    if (!mla_errors.empty()) return make_error(file->path() + ": the model's MLA tensors do not fit:" + mla_errors);
    if (!moe_errors.empty()) return make_error(file->path() + ": the model's expert tensors do not fit:" + moe_errors);
    return w;
}

}  // namespace troupe
