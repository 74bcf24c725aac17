#include "core/quantize/f32_model.h"

#include "kernels/ref/quants.h"

namespace troupe {

result<f32_model> f32_model::load(std::shared_ptr<const gguf::gguf_file> file) {
    auto bound = bind_llama_weights(file);
    if (!bound.ok()) return bound.err();
    f32_model m;
    m.weights_ = std::move(*bound);
    auto copy = [&m](const std::string& name, weight_view& w) {
        std::vector<float>& dst = m.tensors_[name];  // [n_out, n_in]
        dst.resize(static_cast<size_t>(w.n_out * w.n_in));
        for (int64_t r = 0; r < w.n_out; ++r) {
            ref::dequantize_row(w.type, static_cast<const uint8_t*>(w.data) + r * w.row_stride, dst.data() + r * w.n_in,
                                w.n_in);
        }
        w = weight_view{ggml_type::f32, dst.data(), w.n_in, w.n_out, static_cast<size_t>(w.n_in) * sizeof(float)};
    };
    // A fused tensor (phi3's attn_qkv, its ffn_up of gate then up rows) is copied whole under its own name; its parts
    // (row views of it, in order) then view the copy's rows.
    auto copy_fused = [&copy](const std::string& name, std::initializer_list<weight_view*> parts) {
        weight_view whole = *parts.begin()[0];
        for (size_t i = 1; i < parts.size(); ++i) whole.n_out += parts.begin()[i]->n_out;
        copy(name, whole);
        int64_t r0 = 0;
        for (weight_view* part : parts) {
            *part = weight_rows(whole, r0, r0 + part->n_out);
            r0 += part->n_out;
        }
    };
    llama_weights& w = m.weights_;
    const arch_description& d = *w.hp.arch;
    for (size_t l = 0; l < w.layers.size(); ++l) {
        const std::string p = "blk." + std::to_string(l) + ".";
        llama_layer_weights& lw = w.layers[l];
        copy(p + "attn_norm.weight", lw.attn_norm);
        if (d.fused_qkv) {
            copy_fused(p + "attn_qkv.weight", {&lw.wq, &lw.wk, &lw.wv});
        } else {
            copy(p + "attn_q.weight", lw.wq);
            copy(p + "attn_k.weight", lw.wk);
            copy(p + "attn_v.weight", lw.wv);
        }
        copy(p + "attn_output.weight", lw.wo);
        copy(p + "ffn_norm.weight", lw.ffn_norm);
        if (d.fused_gate_up) {
            copy_fused(p + "ffn_up.weight", {&lw.w_gate, &lw.w_up});
        } else {
            copy(p + "ffn_gate.weight", lw.w_gate);
            copy(p + "ffn_up.weight", lw.w_up);
        }
        copy(p + "ffn_down.weight", lw.w_down);
    }
    copy("output_norm.weight", w.output_norm);
    if (!w.tied_output) copy("output.weight", w.output);
    return m;
}

float* f32_model::tensor(const std::string& name) {
    auto it = tensors_.find(name);
    return it == tensors_.end() ? nullptr : it->second.data();
}

const float* f32_model::tensor(const std::string& name) const {
    auto it = tensors_.find(name);
    return it == tensors_.end() ? nullptr : it->second.data();
}

}  // namespace troupe
