#include "core/model/moe_params.h"

#include <cmath>

namespace troupe {
namespace {

// "<key>" as an unsigned integer where present, else fallback; a wrong type or a value above `max` is an error.
int32_t uint_key(const gguf::gguf_file& f, const std::string& key, uint64_t fallback, uint64_t max,
                 std::string& errors) {
    if (!f.find(key)) return static_cast<int32_t>(fallback);
    auto v = f.get_uint(key);
    if (!v.ok()) {
        errors += "\n  " + v.message();
        return 0;
    }
    if (*v > max) {
        errors += "\n  " + f.path() + ": " + key + " = " + std::to_string(*v) + " is out of range (at most " +
                  std::to_string(max) + ")";
        return 0;
    }
    return static_cast<int32_t>(*v);
}

}  // namespace

result<std::optional<moe_params>> read_moe_params(const gguf::gguf_file& f, const std::string& arch, int32_t n_layers,
                                                  int32_t ffn_dim) {
    const std::string a = arch + ".";
    std::string errors;
    moe_params p;
    p.n_experts = uint_key(f, a + "expert_count", 0, 1u << 16, errors);
    if (!errors.empty()) return make_error(f.path() + ": bad MoE metadata:" + errors);
    if (p.n_experts == 0) return std::optional<moe_params>{};

    if (!f.find(a + "expert_used_count")) {
        errors += "\n  " + f.path() + ": " + a + "expert_count is " + std::to_string(p.n_experts) + " but " + a +
                  "expert_used_count (experts per token) is missing";
    }
    p.n_used = uint_key(f, a + "expert_used_count", 0, 1u << 16, errors);
    p.n_shared = uint_key(f, a + "expert_shared_count", 0, 1u << 16, errors);
    p.expert_ffn = uint_key(f, a + "expert_feed_forward_length", static_cast<uint64_t>(ffn_dim), 1u << 30, errors);
    p.n_leading_dense = uint_key(f, a + "leading_dense_block_count", 0, static_cast<uint64_t>(n_layers), errors);
    const int32_t gating = uint_key(f, a + "expert_gating_func", 1, 1u << 16, errors);
    if (gating == 2) {
        p.gating = moe_gating::sigmoid;
    } else if (gating != 0 && gating != 1) {
        errors += "\n  " + f.path() + ": " + a + "expert_gating_func = " + std::to_string(gating) +
                  " is not supported (1: softmax, 2: sigmoid)";
    }
    // Mixtral-style files (the llama family with experts) renormalise the top k whatever the key says, as llama.cpp
    // does; the other architectures follow the key.
    const bool llama_family = arch == "llama" || arch == "mistral";
    p.norm_weights = llama_family;
    if (f.find(a + "expert_weights_norm") && !llama_family) {
        auto v = f.get_bool(a + "expert_weights_norm");
        if (v.ok()) {
            p.norm_weights = *v;
        } else {
            errors += "\n  " + v.message();
        }
    }
    p.weights_scale = static_cast<float>(f.float_or(a + "expert_weights_scale", 1.0));
    if (!std::isfinite(p.weights_scale) || p.weights_scale <= 0.0f) {
        errors += "\n  " + f.path() + ": " + a + "expert_weights_scale = " + std::to_string(p.weights_scale) +
                  " must be a positive number";
    }
    if (errors.empty()) {
        if (p.n_used < 1 || p.n_used > p.n_experts) {
            errors += "\n  " + f.path() + ": " + a + "expert_used_count = " + std::to_string(p.n_used) +
                      " must be from 1 to " + a + "expert_count (" + std::to_string(p.n_experts) + ")";
        }
        if (p.expert_ffn <= 0) {
            errors += "\n  " + f.path() + ": " + a + "expert_feed_forward_length (or feed_forward_length) must be > 0";
        }
    }
    if (!errors.empty()) return make_error(f.path() + ": bad MoE metadata:" + errors);
    return std::optional<moe_params>{p};
}

namespace {

// The tensor `name` with the given dims (ggml order) as n_rows rows of its first dim, or an error line.
weight_view bind(const gguf::gguf_file& f, const std::string& name, std::initializer_list<int64_t> dims,
                 bool must_be_f32, std::string& errors) {
    auto t = f.tensor(name, std::span<const int64_t>(dims.begin(), dims.size()));
    if (!t.ok()) {
        errors += "\n  " + t.message();
        return {};
    }
    const gguf::tensor_info& info = **t;
    if (!traits(info.type).computable) {
        errors += "\n  " + f.path() + ": tensor " + name + " has type " + std::string(traits(info.type).name) +
                  ", which troupe cannot compute with (supported: " + computable_type_names() + ")";
        return {};
    }
    if (must_be_f32 && info.type != ggml_type::f32) {
        errors += "\n  " + f.path() + ": tensor " + name + " has type " + std::string(traits(info.type).name) +
                  ", expected F32";
        return {};
    }
    int64_t n_rows = 1;
    for (size_t i = 1; i < info.dims.size(); ++i) n_rows *= info.dims[i];
    return weight_view{info.type, info.data, info.dims[0], n_rows, row_bytes(info.type, info.dims[0])};
}

}  // namespace

moe_layer_weights bind_moe_layer(const gguf::gguf_file& f, const moe_params& p, int32_t layer, int32_t dim,
                                 std::string& errors) {
    const std::string b = "blk." + std::to_string(layer) + ".";
    const int64_t e = p.n_experts, ff = p.expert_ffn;
    moe_layer_weights w{};
    w.router = bind(f, b + "ffn_gate_inp.weight", {dim, e}, false, errors);
    w.gate_exps = bind(f, b + "ffn_gate_exps.weight", {dim, ff, e}, false, errors);
    w.up_exps = bind(f, b + "ffn_up_exps.weight", {dim, ff, e}, false, errors);
    w.down_exps = bind(f, b + "ffn_down_exps.weight", {ff, dim, e}, false, errors);
    w.probs_bias = nullptr;
    if (f.find_tensor(b + "exp_probs_b.bias")) {
        w.probs_bias = static_cast<const float*>(bind(f, b + "exp_probs_b.bias", {e}, true, errors).data);
    }
    if (p.n_shared > 0) {
        const int64_t s = p.shared_ffn();
        w.gate_shexp = bind(f, b + "ffn_gate_shexp.weight", {dim, s}, false, errors);
        w.up_shexp = bind(f, b + "ffn_up_shexp.weight", {dim, s}, false, errors);
        w.down_shexp = bind(f, b + "ffn_down_shexp.weight", {s, dim}, false, errors);
    }
    return w;
}

weight_view expert_matrix(const weight_view& stacked, int32_t n_experts, int32_t e) {
    TROUPE_ASSERT(n_experts > 0 && stacked.n_out % n_experts == 0 && e >= 0 && e < n_experts, "expert_matrix");
    weight_view w = stacked;
    w.n_out = stacked.n_out / n_experts;
    w.data = static_cast<const uint8_t*>(stacked.data) + stacked.row_stride * static_cast<size_t>(w.n_out * e);
    return w;
}

}  // namespace troupe
