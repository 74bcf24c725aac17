#include "core/quantize/quantize_model.h"

#include <algorithm>
#include <cmath>

#include "core/gguf/gguf_writer.h"
#include "kernels/ref/quants.h"

namespace troupe {
namespace {

// Divides what produces the group's input by s: the norm weight, or row i of the preceding linear by s[i].
status fold_scales(f32_model& model, const planned_group& g, const std::vector<float>& s, const std::string& method) {
    for (int64_t i = 0; i < g.n_in; ++i) {
        if (!std::isfinite(s[i]) || s[i] <= 0) {
            return make_error("method " + method + " wrote input scale " + std::to_string(s[i]) + " for channel " +
                              std::to_string(i) + " of " + g.weights[0] + " (scales must be finite and positive)");
        }
    }
    float* dst = model.tensor(g.fold_into);
    if (dst == nullptr) return make_error("no tensor " + g.fold_into + " to fold input scales into");
    // A norm is [n_in]; a preceding linear [n_in rows, its n_in].
    const int64_t row = g.fold == fold_kind::norm ? 1 : model.file().find_tensor(g.fold_into)->dims[0];
    for (int64_t i = 0; i < g.n_in; ++i) {
        if (s[i] == 1.0f) continue;
        const float inv = 1.0f / s[i];
        for (int64_t j = 0; j < row; ++j) dst[i * row + j] *= inv;
    }
    return {};
}

}  // namespace

std::vector<int32_t> plan_layers(const quantize_plan& plan) {
    std::vector<int32_t> layers;
    for (const planned_group& g : plan.groups) {
        if (std::find(layers.begin(), layers.end(), g.layer) == layers.end()) layers.push_back(g.layer);
    }
    return layers;
}

status quantize_layer(f32_model& model, const quantize_plan& plan, int32_t layer, quantize_method& method,
                      const parallel_for_fn& parallel_for, quantized_tensors& out, const group_progress_fn& progress,
                      int32_t& done) {
    const int32_t n_groups = static_cast<int32_t>(plan.groups.size());
    for (const planned_group& g : plan.groups) {
        if (g.layer != layer || !g.by_method) continue;  // F16 groups below, after the layer's folds
        linear_group group{g.layer, g.input, g.n_in, {}, nullptr};
        const size_t row = row_bytes(g.type, g.n_in);
        for (size_t i = 0; i < g.weights.size(); ++i) {
            std::vector<uint8_t>& bytes = out[g.weights[i]];
            bytes.assign(row * static_cast<size_t>(g.n_out[i]), 0);
            group.weights.push_back(
                quantize_weight{g.weights[i], model.tensor(g.weights[i]), g.n_out[i], g.type, bytes.data()});
        }
        std::vector<float> scales;
        if (g.fold != fold_kind::none) {
            scales.assign(static_cast<size_t>(g.n_in), 1.0f);
            group.input_scales = scales.data();
        }
        if (status st = method.quantize_group(group, parallel_for); !st.ok()) return st;
        if (!scales.empty()) {
            if (status st = fold_scales(model, g, scales, method.name()); !st.ok()) return st;
        }
        if (progress) progress(++done, n_groups, g);
    }
    for (const planned_group& g : plan.groups) {
        if (g.layer != layer || g.by_method) continue;
        const size_t row = row_bytes(g.type, g.n_in);
        for (size_t i = 0; i < g.weights.size(); ++i) {
            std::vector<uint8_t>& bytes = out[g.weights[i]];
            bytes.resize(row * static_cast<size_t>(g.n_out[i]));
            const float* w = model.tensor(g.weights[i]);
            for (int64_t r = 0; r < g.n_out[i]; ++r) {
                ref::quantize_row(g.type, w + r * g.n_in, bytes.data() + r * row, g.n_in);
            }
        }
        if (progress) progress(++done, n_groups, g);
    }
    return {};
}

void use_quantized_weights(f32_model& model, const quantize_plan& plan, int32_t layer, const quantized_tensors& q) {
    for (const planned_group& g : plan.groups) {
        if (g.layer != layer) continue;
        const size_t row = row_bytes(g.type, g.n_in);
        for (size_t i = 0; i < g.weights.size(); ++i) {
            const std::vector<uint8_t>& bytes = q.at(g.weights[i]);
            float* w = model.tensor(g.weights[i]);
            for (int64_t r = 0; r < g.n_out[i]; ++r)
                ref::dequantize_row(g.type, bytes.data() + r * row, w + r * g.n_in, g.n_in);
        }
    }
}

result<quantized_tensors> quantize_groups(f32_model& model, const quantize_plan& plan, quantize_method& method,
                                          const parallel_for_fn& parallel_for, const group_progress_fn& progress) {
    quantized_tensors out;
    int32_t done = 0;
    for (int32_t layer : plan_layers(plan)) {
        if (status st = quantize_layer(model, plan, layer, method, parallel_for, out, progress, done); !st.ok()) {
            return st.err();
        }
    }
    return out;
}

uint32_t gguf_file_type(ggml_type type) {
    switch (type) {  // llama.cpp's llama_ftype (LLAMA_FTYPE_MOSTLY_*)
        case ggml_type::f32:
            return 0;
        case ggml_type::f16:
            return 1;
        case ggml_type::q4_0:
            return 2;
        case ggml_type::q4_1:
            return 3;
        case ggml_type::q8_0:
            return 7;
        case ggml_type::q4_k:
            return 15;  // Q4_K_M: llama.cpp's name for a file mostly of Q4_K
        default:
            return static_cast<uint32_t>(type);
    }
}

status write_quantized_gguf(const f32_model& model, const quantize_plan& plan, const quantized_tensors& tensors,
                            const std::string& method, const std::string& path) {
    const gguf::gguf_file& in = model.file();
    gguf::gguf_writer w;
    w.copy_metadata(in);
    w.set_u32("general.quantization_version", 2);
    w.set_u32("general.file_type", gguf_file_type(plan.target));
    w.set_string("troupe.quantize.method", method);
    w.set_string("troupe.quantize.type", std::string(traits(plan.target).name));
    for (const gguf::tensor_info& t : in.tensors()) {
        if (auto q = tensors.find(t.name); q != tensors.end()) {
            const planned_group* g = plan.group_of(t.name);
            w.add_tensor(t.name, g->type, t.dims, std::span<const uint8_t>(q->second));
        } else if (t.dims.size() == 1 && model.has(t.name)) {  // a norm, with scales folded in
            w.add_tensor_f32(t.name, t.dims, std::span<const float>(model.tensor(t.name), t.dims[0]));
        } else {
            w.add_tensor(t.name, t.type, t.dims, std::span<const uint8_t>(t.data, t.n_bytes));
        }
    }
    return w.write(path);
}

}  // namespace troupe
