#include "core/model/mla_params.h"

#include <algorithm>
#include <cmath>
#include <numbers>

namespace troupe {
namespace {

// "<key>" as a positive integer (at most 2^20); absent: fallback (0: required, an error).
int32_t size_key(const gguf::gguf_file& f, const std::string& key, int32_t fallback, std::string& errors) {
    if (!f.find(key)) {
        if (fallback == 0) errors += "\n  " + f.path() + ": " + key + " is missing";
        return fallback;
    }
    auto v = f.get_uint(key);
    if (!v.ok()) {
        errors += "\n  " + v.message();
        return 0;
    }
    if (*v == 0 || *v > (1u << 20)) {
        errors += "\n  " + f.path() + ": " + key + " = " + std::to_string(*v) + " is out of range (1 to 2^20)";
        return 0;
    }
    return static_cast<int32_t>(*v);
}

// A positive finite number; absent: fallback.
float number_key(const gguf::gguf_file& f, const std::string& key, double fallback, std::string& errors) {
    const double v = f.float_or(key, fallback);
    if (!std::isfinite(v) || v <= 0.0) {
        errors += "\n  " + f.path() + ": " + key + " = " + std::to_string(v) + " must be a positive number";
        return static_cast<float>(fallback);
    }
    return static_cast<float>(v);
}

weight_view bind(const gguf::gguf_file& f, const std::string& name, std::initializer_list<int64_t> dims,
                 bool must_be_f32, std::string& errors) {
    auto t = f.tensor(name, std::span<const int64_t>(dims.begin(), dims.size()));
    if (!t.ok()) {
        errors += "\n  " + t.message();
        return {};
    }
    const gguf::tensor_info& info = **t;
    if (!traits(info.type).computable || (must_be_f32 && info.type != ggml_type::f32)) {
        errors += "\n  " + f.path() + ": tensor " + name + " has type " + std::string(traits(info.type).name) +
                  (must_be_f32 ? ", expected F32"
                               : ", which troupe cannot compute with (supported: " + computable_type_names() + ")");
        return {};
    }
    const int64_t n_rows = info.dims.size() > 1 ? info.dims[1] : 1;
    return weight_view{info.type, info.data, info.dims[0], n_rows, row_bytes(info.type, info.dims[0])};
}

}  // namespace

float mla_params::attention_scale() const {
    float scale = 1.0f / std::sqrt(static_cast<float>(head_dim()));
    if (yarn && yarn->factor > 1.0f) {
        const float mscale = 1.0f + yarn->log_multiplier * std::log(yarn->factor);
        scale *= mscale * mscale;
    }
    return scale;
}

float mla_params::rope_freq(int32_t i) const {
    return std::pow(rope_base, -2.0f * static_cast<float>(i) / static_cast<float>(rope_dim));
}

float mla_params::rope_ramp(int32_t i) const {
    if (!yarn || yarn->factor == 1.0f) return 1.0f;
    const auto corr = [&](float beta) {
        return static_cast<float>(rope_dim) *
               std::log(static_cast<float>(yarn->original_context) / (beta * 2.0f * std::numbers::pi_v<float>)) /
               (2.0f * std::log(rope_base));
    };
    const float low = std::max(0.0f, std::floor(corr(yarn->beta_fast)));
    const float high = std::min(static_cast<float>(rope_dim - 1), std::ceil(corr(yarn->beta_slow)));
    const float y = (static_cast<float>(i) - low) / std::max(0.001f, high - low);
    return 1.0f - std::clamp(y, 0.0f, 1.0f);
}

float mla_params::rope_angle(int32_t p, int32_t i) const {
    const float theta_extrap = static_cast<float>(p) * rope_freq(i);
    if (!yarn || yarn->factor == 1.0f) return theta_extrap;
    const float ramp = rope_ramp(i);
    const float theta_interp = theta_extrap / yarn->factor;
    return theta_interp * (1.0f - ramp) + theta_extrap * ramp;
}

result<std::optional<mla_params>> read_mla_params(const gguf::gguf_file& f, const std::string& arch) {
    const std::string a = arch + ".";
    if (!f.find(a + "attention.kv_lora_rank")) return std::optional<mla_params>{};
    std::string errors;
    mla_params p;
    p.kv_lora_rank = size_key(f, a + "attention.kv_lora_rank", 0, errors);
    p.n_heads = size_key(f, a + "attention.head_count", 0, errors);
    // A q_lora_rank of 0 (some converters write it for V2-Lite) means no query LoRA, as its absence does.
    if (f.find(a + "attention.q_lora_rank") && f.uint_or(a + "attention.q_lora_rank", 0) != 0) {
        p.q_lora_rank = size_key(f, a + "attention.q_lora_rank", 0, errors);
    }
    const int32_t key_length = size_key(f, a + "attention.key_length", 0, errors);
    p.v_dim = size_key(f, a + "attention.value_length", 0, errors);
    p.rope_dim = size_key(f, a + "rope.dimension_count", 0, errors);
    p.rope_base = number_key(f, a + "rope.freq_base", 10000.0, errors);
    p.rms_eps = number_key(f, a + "attention.layer_norm_rms_epsilon", 1e-6, errors);
    if (errors.empty() && (key_length <= p.rope_dim || p.rope_dim % 2 != 0)) {
        errors += "\n  " + f.path() + ": " + a + "attention.key_length = " + std::to_string(key_length) +
                  " must exceed the even " + a + "rope.dimension_count = " + std::to_string(p.rope_dim) +
                  " (a q/k head is its no-RoPE dims, then its RoPE dims)";
    }
    p.qk_nope = key_length - p.rope_dim;
    const std::string scaling = f.string_or(a + "rope.scaling.type", "none");
    if (scaling == "yarn") {
        mla_yarn y;
        y.factor = number_key(f, a + "rope.scaling.factor", 1.0, errors);
        y.original_context = size_key(f, a + "rope.scaling.original_context_length", 0, errors);
        y.log_multiplier = static_cast<float>(f.float_or(a + "rope.scaling.yarn_log_multiplier", 0.0));
        y.beta_fast = number_key(f, a + "rope.scaling.yarn_beta_fast", 32.0, errors);
        y.beta_slow = number_key(f, a + "rope.scaling.yarn_beta_slow", 1.0, errors);
        if (!std::isfinite(y.log_multiplier) || y.log_multiplier < 0.0f) {
            errors += "\n  " + f.path() + ": " + a + "rope.scaling.yarn_log_multiplier must be a number >= 0";
        }
        p.yarn = y;
    } else if (scaling != "none") {
        errors += "\n  " + f.path() + ": " + a + "rope.scaling.type '" + scaling +
                  "' is not supported with multi-head latent attention (supported: none, yarn)";
    }
    if (!errors.empty()) return make_error(f.path() + ": bad MLA metadata:" + errors);
    return std::optional<mla_params>{p};
}

mla_layer_weights bind_mla_layer(const gguf::gguf_file& f, const mla_params& p, int32_t layer, int32_t dim,
                                 std::string& errors) {
    const std::string b = "blk." + std::to_string(layer) + ".";
    mla_layer_weights w{};
    if (p.q_lora_rank > 0) {
        w.wq_a = bind(f, b + "attn_q_a.weight", {dim, p.q_lora_rank}, false, errors);
        w.q_a_norm = bind(f, b + "attn_q_a_norm.weight", {p.q_lora_rank}, true, errors);
        w.wq_b = bind(f, b + "attn_q_b.weight", {p.q_lora_rank, p.q_width()}, false, errors);
    } else {
        w.wq = bind(f, b + "attn_q.weight", {dim, p.q_width()}, false, errors);
    }
    w.wkv_a = bind(f, b + "attn_kv_a_mqa.weight", {dim, p.latent_width()}, false, errors);
    w.kv_a_norm = bind(f, b + "attn_kv_a_norm.weight", {p.kv_lora_rank}, true, errors);
    w.wkv_b =
        bind(f, b + "attn_kv_b.weight", {p.kv_lora_rank, int64_t{p.n_heads} * (p.qk_nope + p.v_dim)}, false, errors);
    return w;
}

}  // namespace troupe
